"""The Wan2.1 family (``model=infinitetalk|multitalk|wan_tiny``) as a render runs it: InfiniteTalk and MultiTalk on
Wan2.1-I2V-14B, loaded from the files as their users download them (docs/models.md); ``wan_tiny`` is the same code at
toy size."""

from __future__ import annotations

from avatargen.config.schema import Config
from avatargen.families.wan.build import model_parts, model_set, parallel_work, wan_precision, weight_files
from avatargen.families.wan.check import check_wan_weights
from avatargen.families.wan.chunks import WanChunks
from avatargen.families.wan.config import FAMILY, WanFraming
from avatargen.families.wan.framing import CoverCrop, cover_crop
from avatargen.families.wan.models.speakers import SPEAKERS
from avatargen.families.wan.models.specs import family_spec
from avatargen.pipeline.family import FamilyEngine


def wan_framing(config: Config, height: int, width: int) -> CoverCrop | None:
    """``FamilyEngine.framing``: the reference's aspect-ratio buckets (``model.wan.framing=bucket``), or None for the
    shared square of ``pipeline.image_fit``."""
    model = config.model
    if model.wan.framing != WanFraming.bucket:
        return None
    spec = family_spec(model.wan.spec)
    return cover_crop(height, width, model.image_size, spec.vae.spatial_stride * spec.dit.patch_size[1])


ENGINE = FamilyEngine(
    family=FAMILY,
    model_parts=model_parts,
    precision=wan_precision,
    model_set=model_set,
    chunk_steps=WanChunks,
    weight_files=weight_files,
    check_weights=check_wan_weights,
    parallel_work=parallel_work,  # its guidance passes, and its DiT's tokens (Ulysses)
    framing=wan_framing,  # the reference's aspect-ratio buckets (model.wan.framing)
    follows_video=True,  # InfiniteTalk's video-to-video (dubbing)
    speakers=SPEAKERS,  # MultiTalk's two-speaker routing
)
