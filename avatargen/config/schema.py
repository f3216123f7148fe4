"""The typed schema of every configuration key.

OmegaConf checks values against these dataclasses as they are merged, so a wrong type or an unknown key fails
before any work starts. The ``model`` section is the model family's own subclass of ``ModelConfig``
(avatargen/config/families.py): its keys are the shared ones below plus the family's (e.g. ``model.a2v.*`` or
``model.wan.*``), and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List, Optional, Union



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
    """How a composited frame gets its mouth (``pipeline.mouth``; docs/compositing.md, "Reference compositing")."""

    blend = "blend"  # the generated mouth and jaw blended in under a feathered ellipse (avatargen/compose/composite.py)
    warp = "warp"  # the reference's own lips and jaw moved by the generated opening; only the interior generated
    auto = "auto"  # warp; blend for a cartoon whose shut mouth its cue reads open, a dark beard (docs/compositing.md)


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Dtype(Enum):
    """What the stage forwards compute in (avatargen/runtime/precision.py)."""

    auto = "auto"  # bfloat16 where the device runs it natively and faster (CPU: flags + a timed probe), else float32
    float32 = "float32"
    bfloat16 = "bfloat16"


class Quantize(Enum):
    """Whether linear layers run in int8 (avatargen/runtime/quantize.py)."""

    auto = "auto"  # float linear layers, as none: int8 changes the frames, only int8 asks for it
    none = "none"  # float linear layers
    int8 = "int8"


class Offload(Enum):
    """Where idle modules keep their weights (see docs/offload.md)."""

    none = "none"  # every module resident on the device
    model = "model"  # a module's weights are copied to the device on stage entry; the copy is dropped on exit
    block = "block"  # weights stay in pinned host memory; the DiTs' blocks stream to the device just in time


class PublishFailure(Enum):
    """What a render does when a live output (``output.publish``) fails."""

    drop = "drop"  # report it, stop sending to it, keep rendering the other outputs
    stop = "stop"  # end the render (exit code 3); the MP4 so far is kept as OUT.partial.mp4 and can be resumed


class ShardMode(Enum):
    """How a render uses the ranks torchrun started (see docs/distributed.md)."""

    auto = "auto"  # fsdp when world_size > 1, else none
    none = "none"  # one process renders alone (refused when torchrun started several ranks for one render)
    fsdp = "fsdp"  # the DiTs (and umT5) are sharded per transformer block with FSDP2 (docs/distributed.md)


class BatchMode(Enum):
    """How ``avatargen batch`` uses the ranks torchrun started."""

    spread = "spread"  # every rank is a batch worker of its own, claiming the next free job (throughput)
    shard = "shard"  # every job is rendered by all ranks together, sharded (big models)


class BatchEngine(Enum):
    """Who hands out the jobs of ``avatargen batch`` (docs/batch.md)."""

    workers = "workers"  # any number of worker processes, each claiming jobs itself (lock files or bucket claims)
    ray = "ray"  # a Ray driver schedules long-lived worker actors over a Ray cluster (``--ray``)


class AddressingStyle(Enum):
    """How S3 requests name the bucket (``storage.addressing_style``)."""

    auto = "auto"  # boto3's choice (virtual-hosted on AWS)
    path = "path"  # http://endpoint/bucket/key: most self-hosted stores
    virtual = "virtual"  # http://bucket.endpoint/key


@dataclass
class ModelConfig:
    """The keys every model family shares. ``fps``, ``image_size`` and ``sample_rate`` are properties of a trained
    model, so they live here; a family's subclass adds its own section(s) and checks them against these."""

    name: str = ""  # the model option (conf/model/<name>.yaml)
    family: str = ""  # the model family (avatargen/families/<family>/), set by the model option's YAML
    weights: WeightsSource = WeightsSource.checkpoint
    checkpoint: Optional[str] = None  # a file or folder of weights; None = the checkpoint shipped for ``name``
    fps: int = 25
    image_size: int = 256  # output frames are image_size x image_size
    sample_rate: int = 16000


@dataclass
class IdleMotionConfig:
    """Procedural head sway and blinks over composited frames (avatargen/compose/idle_motion.py; docs/compositing.md)."""

    head_motion: bool = True  # the head sways (in the image plane); the body and background stay put
    head_amplitude: float = 3.0  # peak sway in pixels per 100 px of face width (0-10)
    blinks_per_minute: float = 15.0  # mean rate, seeded irregular intervals; 0 = no blinks (0-60)
    blink_seconds: float = 0.2  # closing + shut + opening (0.05-1.0)


@dataclass
class PipelineConfig:
    """The chunk schedule and sampling (see docs/architecture.md for the timeline diagram)."""

    n_chunk_frames: int = 16  # timeline frames generated by each N chunk
    motion_frames: Optional[int] = None  # last frames of the previous N chunk that condition the next one; null: the family's default
    interpolate: Optional[bool] = None  # run I chunks that re-generate each seam; null: the family's default
    seam_frames: int = 4  # frames around each seam re-generated by its I chunk
    anchor_frames: int = 2  # anchor frames on each side of a seam given to the I chunk (their predictions are discarded)
    sampling_steps: int = 1  # Euler steps of the A2V sampler: the shipped A2V is distilled to one (docs/model-card.md)
    sampling_shift: float = 1.0  # timestep shift (>1 spends more steps at high noise)
    image_fit: ImageFit = ImageFit.face
    face: Optional[int] = None  # image_fit=face: which face to animate, 1-based left to right (--face); null: the largest
    # Reference compositing: the output is the reference picture at its own size with only the generated mouth and
    # jaw blended in (avatargen/compose/composite.py); false: the model's square frames as they come.
    composite: bool = True
    mouth: MouthMode = MouthMode.auto  # composited frames: warp (avatargen/compose/mouth_warp.py), blend, or auto
    idle_motion: IdleMotionConfig = field(default_factory=IdleMotionConfig)  # moves composited frames only
    audio_block_s: float = 0.5  # audio read granularity in seconds
    audio_lookahead_frames: Optional[int] = None  # audio frames a chunk waits for past its end; null: the audio encoder's whole context (6)

    def interpolates(self, family_default: bool) -> bool:
        """Whether I chunks run: ``interpolate``, or when it is null the family's own default."""
        return family_default if self.interpolate is None else self.interpolate


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
    realtime_target_s: float = 0.0  # --realtime with --audio -: drop silent frames while the voice is this far ahead of the picture (0: never)


@dataclass
class RuntimeConfig:
    """Where and how the models run."""

    device: Device = Device.auto
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    offload: Offload = Offload.none
    offload_resident_blocks: int = 2  # offload=block: most blocks of one model on the device at once (>= 1)
    shard: ShardMode = ShardMode.auto
    # Under torchrun, how the ranks of one render split its work (docs/distributed.md, "Choosing a layout"):
    sequence_parallel: Union[int, str] = "auto"  # ranks that split the DiT's tokens (Ulysses); auto: all a Wan model has; 1 = off
    guidance_parallel: Union[bool, str] = "auto"  # run a step's guidance passes on different ranks; auto: when they divide evenly
    pipeline_parallel: Union[int, str] = 1  # stages of a causal family's denoising steps over the ranks (docs/distributed.md); auto: every rank, one a step at most
    batch_mode: BatchMode = BatchMode.spread
    dist_timeout_s: float = 300.0  # process-group init and every collective: a lost rank ends the group, not hangs it
    numa: bool = True  # under torchrun, pin each rank to the CPUs of its GPU's (or its share of) NUMA node
    dtype: Dtype = Dtype.auto  # compute precision of the stage forwards, resolved once per render
    quantize: Quantize = Quantize.auto  # the bundled model's DiTs' linear layers in int8 (auto: float, as none)
    overlap: Optional[bool] = None  # emit segments on a second thread while A2V generates; null: on for one CPU process


@dataclass
class RayConfig:
    """The Ray engine of ``avatargen batch`` (``--ray``; docs/batch.md, "Ray cluster")."""

    address: Optional[str] = None  # a running cluster: HOST:PORT, ray://HOST:10001 or auto; null: RAY_ADDRESS, else a local Ray (127.0.0.1)
    workers: int = 0  # worker actors; 0: as many as the cluster's free CPUs (and GPUs, if they reserve one) fit
    num_cpus: float = 1.0  # CPUs each worker reserves (also its torch threads when runtime.threads is 0)
    num_gpus: Optional[float] = None  # GPUs each worker reserves; null: 1 where the cluster has GPUs (not device=cpu)
    forward_aws_env: bool = True  # give the workers the driver's AWS_* variables (endpoint, region, credentials)


@dataclass
class BatchConfig:
    """How ``avatargen batch`` runs its jobs (docs/batch.md)."""

    engine: BatchEngine = BatchEngine.workers
    max_retries: int = 2  # a job that fails other than by bad input, or loses its worker, is tried this many more times
    ray: RayConfig = field(default_factory=RayConfig)


@dataclass
class StorageConfig:
    """Object storage for ``s3://`` inputs and outputs (docs/batch.md, "Object storage")."""

    endpoint_url: Optional[str] = None  # S3-compatible endpoint; null: AWS_ENDPOINT_URL(_S3) or ~/.aws/config, else AWS
    region: Optional[str] = None  # null: AWS_REGION / AWS_DEFAULT_REGION / ~/.aws/config, else us-east-1
    addressing_style: AddressingStyle = AddressingStyle.auto
    scratch_dir: Optional[str] = None  # where s3:// renders download inputs and write before upload; null: the temp folder
    lease_s: float = 30.0  # a claim in a bucket that its worker has not renewed for this long is free again


@dataclass
class Config:
    """The whole resolved configuration of one render."""

    model: ModelConfig = field(default_factory=ModelConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    seed: int = 0


GROUPS = ("model", "pipeline", "output", "runtime")
