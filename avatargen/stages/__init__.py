"""Stages: typed units of execution, each coordinating one or more Modules for one step of a chunk."""

from avatargen.stages.a2v import A2VStage
from avatargen.stages.context import ContextGenStage, ReferenceContext
from avatargen.stages.decode_publish import DecodeAndPublishStage, FrameSink
from avatargen.stages.sr import SRStage

__all__ = ["A2VStage", "ContextGenStage", "DecodeAndPublishStage", "FrameSink", "ReferenceContext", "SRStage"]
