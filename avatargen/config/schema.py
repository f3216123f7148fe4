"""The typed schema of every configuration key.

OmegaConf checks values against these dataclasses as they are merged, so a wrong type or an unknown key fails
before any work starts. Model hyper-parameters reuse the architecture dataclasses of ``avatargen.models``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List, Optional

from avatargen.config.wan import WanModelConfig
from avatargen.models.a2v_dit import A2VDiTParams
from avatargen.models.audio_encoder import AudioEncoderParams
from avatargen.models.sr_dit import SRDiTParams
from avatargen.models.text_encoder import TextEncoderParams
from avatargen.models.vae import VAEParams


class WeightsSource(Enum):
    """Where model weights come from."""

    checkpoint = "checkpoint"  # safetensors at model.checkpoint (default: the shipped checkpoint)
    random = "random"  # seeded random init: for tests and benchmarks; the output says so


class ImageFit(Enum):
    """How a reference image of any aspect ratio is fitted to the model's square input."""

    face = "face"  # the square around the detected face, framed as in training (avatargen.face.framing)
    crop = "crop"
    pad = "pad"


class MouthMode(Enum):
    """How a composited frame gets its mouth (``pipeline.mouth``; docs/model-card.md, "Reference compositing")."""

    blend = "blend"  # the generated mouth and jaw blended in under a feathered ellipse (avatargen/compose/composite.py)
    warp = "warp"  # the reference's own lips and jaw moved by the generated opening; only the interior generated
    auto = "auto"  # warp; blend for a cartoon whose shut mouth its cue reads open, a dark beard (docs/model-card.md)


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Dtype(Enum):
    """What the stage forwards compute in (avatargen/runtime/precision.py)."""

    auto = "auto"  # bfloat16 where the device runs it natively and faster (CPU: flags + a timed probe), else float32
    float32 = "float32"
    bfloat16 = "bfloat16"


class Offload(Enum):
    """Where idle modules keep their weights (see docs/architecture.md)."""

    none = "none"  # every module resident on the device
    model = "model"  # a module's weights move to the device on stage entry and back on exit
    block = "block"  # weights stay in pinned host memory; the DiTs' blocks stream to the device just in time


class PublishFailure(Enum):
    """What a render does when a live output (``output.publish``) fails."""

    drop = "drop"  # report it, stop sending to it, keep rendering the other outputs
    stop = "stop"  # end the render (exit code 3); the MP4 so far is kept as OUT.partial.mp4 and can be resumed


class ShardMode(Enum):
    """How a render uses the ranks torchrun started (see docs/distributed.md)."""

    auto = "auto"  # fsdp when world_size > 1, else none
    none = "none"  # one process renders alone (refused when torchrun started several ranks for one render)
    fsdp = "fsdp"  # the A2V and SR DiTs are sharded per transformer block with FSDP2 over all ranks


class BatchMode(Enum):
    """How ``avatargen batch`` uses the ranks torchrun started."""

    spread = "spread"  # rank r renders jobs r, r+N, ... alone (throughput)
    shard = "shard"  # every job is rendered by all ranks together, sharded (big models)


@dataclass
class ModelConfig:
    """The five models and their checkpoint. ``fps``, ``image_size`` and ``sample_rate`` are properties of a trained
    model, so they live here and are checked against the sub-models' own values."""

    name: str = "tiny"
    weights: WeightsSource = WeightsSource.checkpoint
    checkpoint: Optional[str] = None  # a .safetensors file or a folder of them; None = the shipped checkpoint
    fps: int = 25
    image_size: int = 256  # output frames are image_size x image_size
    sample_rate: int = 16000
    audio_encoder: AudioEncoderParams = field(default_factory=AudioEncoderParams)
    text_encoder: TextEncoderParams = field(default_factory=TextEncoderParams)
    vae: VAEParams = field(default_factory=VAEParams)
    a2v: A2VDiTParams = field(default_factory=A2VDiTParams)
    sr: SRDiTParams = field(default_factory=SRDiTParams)
    wan: Optional[WanModelConfig] = None  # a Wan-family model (model=infinitetalk|multitalk|wan_tiny): the five above are unused


@dataclass
class IdleMotionConfig:
    """Procedural head sway and blinks over composited frames (avatargen/compose/idle_motion.py; docs/model-card.md)."""

    head_motion: bool = True  # the head sways (in the image plane); the body and background stay put
    head_amplitude: float = 3.0  # peak sway in pixels per 100 px of face width (0-10)
    blinks_per_minute: float = 15.0  # mean rate, seeded irregular intervals; 0 = no blinks (0-60)
    blink_seconds: float = 0.2  # closing + shut + opening (0.05-1.0)


@dataclass
class PipelineConfig:
    """The chunk schedule and sampling (see docs/architecture.md for the timeline diagram)."""

    n_chunk_frames: int = 16  # timeline frames generated by each N chunk
    motion_frames: Optional[int] = None  # last frames of the previous N chunk that condition the next one; null: motion_frames_for
    interpolate: Optional[bool] = None  # run I chunks that re-generate each seam; null: the model's default (interpolates)
    seam_frames: int = 8  # frames around each seam re-generated by its I chunk
    anchor_frames: int = 2  # anchor frames on each side of a seam given to the I chunk (their predictions are discarded)
    sampling_steps: int = 1  # Euler steps of the A2V sampler: the shipped A2V is distilled to one (docs/model-card.md)
    sampling_shift: float = 1.0  # timestep shift (>1 spends more steps at high noise)
    image_fit: ImageFit = ImageFit.face
    # Reference compositing: the output is the reference picture at its own size with only the generated mouth and
    # jaw blended in (avatargen/compose/composite.py); false: the model's square frames as they come.
    composite: bool = True
    mouth: MouthMode = MouthMode.auto  # composited frames: warp (avatargen/compose/mouth_warp.py), blend, or auto
    idle_motion: IdleMotionConfig = field(default_factory=IdleMotionConfig)  # moves composited frames only
    audio_block_s: float = 0.5  # audio read granularity in seconds


@dataclass
class OutputConfig:
    """The H.264/AAC MP4 encoder."""

    crf: int = 20
    max_side: int = 1280  # pipeline.composite: the output is the picture's size, scaled down to at most this
    preset: str = "veryfast"
    gop_seconds: float = 1.0  # keyframe interval; also the granularity of what survives a kill
    save_config: bool = True  # write the resolved config beside the output as OUT.yaml
    publish: List[str] = field(default_factory=list)  # live outputs: DIR/NAME.m3u8 (HLS), rtmp://HOST/APP/KEY
    on_publish_failure: PublishFailure = PublishFailure.drop
    publish_timeout_s: float = 5.0  # an RTMP ingest that does not answer for this long has failed
    hls_window: int = 0  # segments an HLS playlist lists: 0 = all (EVENT playlist), N = the last N (older deleted)
    realtime: bool = False  # pace the output to the wall clock (live sessions); underruns are counted
    realtime_buffer_s: float = 1.0  # --realtime: how far output starts behind the first frame (absorbs jitter)


@dataclass
class RuntimeConfig:
    """Where and how the models run."""

    device: Device = Device.auto
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    offload: Offload = Offload.none
    offload_resident_blocks: int = 2  # offload=block: most blocks of one model on the device at once (>= 1)
    shard: ShardMode = ShardMode.auto
    batch_mode: BatchMode = BatchMode.spread
    dist_timeout_s: float = 300.0  # process-group init and every collective: a lost rank ends the group, not hangs it
    numa: bool = True  # under torchrun, pin each rank to the CPUs of its GPU's (or its share of) NUMA node
    dtype: Dtype = Dtype.auto  # compute precision of the stage forwards, resolved once per render
    overlap: Optional[bool] = None  # emit segments on a second thread while A2V generates; null: on for one CPU process


@dataclass
class Config:
    """The whole resolved configuration of one render."""

    model: ModelConfig = field(default_factory=ModelConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    seed: int = 0


GROUPS = ("model", "pipeline", "output", "runtime")


COMPOSITED_MOTION_FRAMES = 2  # the count the training recipe conditions its windows on


def motion_frames_for(config: Config, composited: bool | None = None) -> int:
    """``pipeline.motion_frames``, or when it is null the default for what the video is: 2 where the model's frames
    are composited into the reference (only the mouth reaches the video, and it holds over 10 minutes), 0 where the
    video is the model's own square, which drifts when each chunk is conditioned on the last (docs/model-card.md,
    "Boundary-frame conditioning"). ``composited`` None: as configured (``pipeline.composite``, avatargen's models);
    a render knows better (no face found: not composited) and says so."""
    if config.pipeline.motion_frames is not None:
        return config.pipeline.motion_frames
    if composited is None:
        composited = config.pipeline.composite and config.model.wan is None
    return COMPOSITED_MOTION_FRAMES if composited else 0


def interpolates(config: Config) -> bool:
    """Whether the render runs I chunks: ``pipeline.interpolate``, or when it is null the model's default (on for
    avatargen's own models, off for Wan-family models, whose clips already continue from their motion frames)."""
    if config.pipeline.interpolate is not None:
        return config.pipeline.interpolate
    return config.model.wan is None
