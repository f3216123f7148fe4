"""The bundled family's stages: each a typed unit over one or more of its Modules."""

from avatargen.families.tiny.stages.a2v import A2VStage
from avatargen.families.tiny.stages.context import ContextGenStage, ReferenceContext
from avatargen.families.tiny.stages.decode import DecodeRegion, StreamingDecodeStage
from avatargen.families.tiny.stages.sr import SRStage

__all__ = ["A2VStage", "ContextGenStage", "DecodeRegion", "ReferenceContext", "SRStage", "StreamingDecodeStage"]
