"""LiveAvatar (``model=liveavatar|liveavatar_tiny``): Alibaba-Quark's causal, 4-step Wan2.2-S2V that streams block
by block over a rolling KV cache, loaded from the files as its users download them (docs/liveavatar.md)."""

from avatargen.config.families import Family
from avatargen.families.liveavatar.build import build_liveavatar_modules, parallel_work, weight_files
from avatargen.families.liveavatar.check import check_liveavatar_weights
from avatargen.families.liveavatar.chunks import LiveAvatarChunks
from avatargen.families.liveavatar.config import LiveAvatarConfig, validate_liveavatar
from avatargen.families.liveavatar.framing import liveavatar_framing

FAMILY = Family(
    name="liveavatar",
    model_config=LiveAvatarConfig,
    build_models=build_liveavatar_modules,
    chunk_steps=LiveAvatarChunks,
    weight_files=weight_files,
    validate=validate_liveavatar,
    check_weights=check_liveavatar_weights,
    parallel_work=parallel_work,  # its 4 steps, one KV ring each, spread over ranks (runtime.pipeline_parallel)
    interpolates=False,  # each block continues from the last through the KV rings
    composited=False,  # it renders the whole picture
    overlap=False,  # the decoder stream is the family's state, saved with the rings after each block
    framing=liveavatar_framing,  # the reference's: the picture's aspect within model.liveavatar.max_area
)
