"""The bundled family (``model=tiny``) as a render runs it: five small models trained by ``avatargen train`` on
synthetic avatars, shipped in the package (docs/model-card.md). Its frames are the framed face square, which the
compositor puts back into the reference picture."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from avatargen.families.tiny.config import FAMILY, SHIPPED_CHECKPOINTS
from avatargen.families.tiny.notes import reference_notes
from avatargen.families.tiny.plan import BUILD_THREADS, chunk_schedule, parallel_work, weight_files
from avatargen.pipeline.family import FamilyEngine, Imported

if TYPE_CHECKING:  # a type only: a render does not read the training recipe
    from avatargen.families.tiny.train.config import RecipeConfig


def train(recipe: RecipeConfig, out: Path) -> dict:
    """``avatargen train``: ``recipe`` (``FAMILY.recipe``: conf/train/tiny.yaml + overrides) run into ``out``; its
    summary."""
    from avatargen.families.tiny.train.recipe import run_recipe  # torch training code: only when asked

    return run_recipe(recipe, out)


ENGINE = FamilyEngine(
    family=FAMILY,
    # The models' code (torch) is imported when a render first builds them: a render that runs none never does.
    model_parts=Imported("avatargen.families.tiny.build:model_parts"),
    precision=Imported("avatargen.pipeline.build:resolve_precision"),  # runtime.dtype for the device (bf16: faster)
    model_set=Imported("avatargen.families.tiny.build:model_set"),
    chunk_steps=Imported("avatargen.families.tiny.chunks:TinyChunks"),
    schedule=chunk_schedule,  # also that of a render that runs no model (avatargen/pipeline/blank.py)
    weight_files=weight_files,
    shipped_checkpoints=SHIPPED_CHECKPOINTS,
    parallel_work=parallel_work,  # the A2V's tokens, on request only (docs/distributed.md, "The bundled model")
    train=train,
    reference_notes=reference_notes,  # cartoons only; no visible style for a prompt
    composited=True,
    build_threads=BUILD_THREADS,
)
