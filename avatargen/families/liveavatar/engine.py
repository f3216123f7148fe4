"""LiveAvatar (``model=liveavatar|liveavatar_tiny``) as a render runs it: Alibaba-Quark's causal, 4-step Wan2.2-S2V
that streams block by block over a rolling KV cache, loaded from the files as its users download them
(docs/liveavatar.md)."""

from __future__ import annotations

from avatargen.families.liveavatar.build import liveavatar_precision, model_parts, model_set, parallel_work, weight_files
from avatargen.families.liveavatar.check import check_liveavatar_weights
from avatargen.families.liveavatar.chunks import LiveAvatarChunks
from avatargen.families.liveavatar.config import FAMILY
from avatargen.families.liveavatar.framing import liveavatar_framing
from avatargen.pipeline.family import FamilyEngine

ENGINE = FamilyEngine(
    family=FAMILY,
    model_parts=model_parts,
    precision=liveavatar_precision,
    model_set=model_set,
    chunk_steps=LiveAvatarChunks,
    weight_files=weight_files,
    check_weights=check_liveavatar_weights,
    parallel_work=parallel_work,  # its 4 steps, one KV ring each, spread over ranks (runtime.pipeline_parallel)
    framing=liveavatar_framing,  # the reference's: the picture's aspect within model.liveavatar.max_area
)
