"""The bundled model family (``model=tiny``): five small models trained by ``avatargen train`` (its recipe:
``train/``) on synthetic avatars, shipped in the package (``checkpoint/``; docs/model-card.md). Its frames are the
framed face square, which the compositor puts back into the reference picture."""

from pathlib import Path

from avatargen.config.families import Family
from avatargen.families.tiny.build import build_modules, parallel_work, weight_files
from avatargen.families.tiny.chunks import TinyChunks
from avatargen.families.tiny.config import TinyModelConfig, validate_tiny
from avatargen.families.tiny.notes import reference_notes


def train(overrides: list[str], out: Path) -> dict:
    """``avatargen train``: the recipe (conf/train/tiny.yaml + ``overrides``) run into ``out``; its summary."""
    from avatargen.families.tiny.train.recipe import load_recipe, run_recipe  # torch training code: only when asked

    return run_recipe(load_recipe(overrides), out)


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
    parallel_work=parallel_work,  # the A2V's tokens, on request only (docs/distributed.md, "The bundled model")
    shipped_checkpoints={"tiny": Path(__file__).with_name("checkpoint")},
    train=train,
    reference_notes=reference_notes,  # cartoons only; no visible style for a prompt
)

