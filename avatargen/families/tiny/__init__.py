"""The bundled model family (``model=tiny``): five small models trained by ``avatargen train`` on synthetic
avatars, shipped in the package (docs/model-card.md). Its frames are the framed face square, which the compositor puts
back into the reference picture."""

from avatargen.config.families import Family
from avatargen.families.tiny.build import build_modules, weight_files
from avatargen.families.tiny.chunks import TinyChunks
from avatargen.families.tiny.config import TinyModelConfig, validate_tiny

FAMILY = Family(
    name="tiny",
    model_config=TinyModelConfig,
    build_models=build_modules,
    chunk_steps=TinyChunks,
    weight_files=weight_files,
    validate=validate_tiny,
    interpolates=True,
    composited=True,
    overlap=True,
)
