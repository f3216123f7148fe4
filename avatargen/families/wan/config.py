"""The typed ``model.*`` keys of a Wan-family model (InfiniteTalk, MultiTalk, wan_tiny): the shared ones and
``model.wan.*``, its architecture spec, its files and its sampling settings.

Every path is relative to ``model.checkpoint`` (the ``weights/`` folder of InfiniteTalk's README), and the defaults
are that download's layout, so another layout (MultiTalk's adapter, a local mirror) is one override away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List, Optional

from avatargen.config.families import FamilyConfig
from avatargen.config.schema import Config, ModelConfig
from avatargen.errors import ConfigError

WAN_DIR = "Wan2.1-I2V-14B-480P"


# The reference's default negative prompt (MeiGen-AI's wan/configs/wan_multitalk_14B.py ``sample_neg_prompt``),
# which both generate scripts use since neither passes one.
REFERENCE_NEGATIVE_PROMPT = (
    "bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, static, overall "
    "gray, worst quality, low quality, JPEG compression residue, ugly, incomplete, extra fingers, poorly drawn hands, "
    "poorly drawn faces, deformed, disfigured, misshapen limbs, fused fingers, still picture, messy background, three "
    "legs, many people in the background, walking backwards"
)


class WanFraming(Enum):
    """How the reference picture becomes the model's frame."""

    bucket = "bucket"  # the reference's: nearest aspect-ratio bucket, resized to cover, centre-cropped
    square = "square"  # the square of pipeline.image_fit (face / crop / pad), model.image_size a side


class WanAudioFeatures(Enum):
    """What wav2vec2 hears at once."""

    whole = "whole"  # the reference's: the whole file (windows of feature_window_s), normalised over the whole file
    clip = "clip"  # each clip's window alone (audio_context_s on each side), normalised per window


class WanClipCondition(Enum):
    """What each clip after the first is conditioned on (its I2V mask and latent, its CLIP tokens)."""

    reference = "reference"  # InfiniteTalk: the reference image (dubbing: the source frame at the clip's start)
    motion = "motion"  # MultiTalk: its motion frames (the CLIP tokens of the last one)


class WanDtype(Enum):
    """The dtype the Wan models run in (the checkpoints ship bf16)."""

    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


@dataclass
class WanModelConfig:
    """One Wan-family model: its architecture (``spec``), its files, LoRAs, and InfiniteTalk's sampling settings."""

    spec: str = "infinitetalk"  # a WAN_FAMILY entry (avatargen/families/wan/models/specs.py): the five architectures
    dtype: WanDtype = WanDtype.bfloat16
    # Files under model.checkpoint (glob patterns allowed; the DiT's files are merged in order).
    dit: List[str] = field(
        default_factory=lambda: [
            f"{WAN_DIR}/diffusion_pytorch_model-*-of-00007.safetensors",
            "InfiniteTalk/single/infinitetalk.safetensors",
        ]
    )
    vae: str = f"{WAN_DIR}/Wan2.1_VAE.pth"
    text_encoder: str = f"{WAN_DIR}/models_t5_umt5-xxl-enc-bf16.pth"
    image_encoder: str = f"{WAN_DIR}/models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"
    image_encoder_prefix: str = "visual."  # the CLIP file holds both towers; Wan uses the vision one
    wav2vec2: str = "chinese-wav2vec2-base"  # a transformers folder (config.json, model.safetensors)
    tokenizer: Optional[str] = f"{WAN_DIR}/google/umt5-xxl"  # a tokenizer folder; null = byte-level (wan_tiny)
    lora: List[str] = field(default_factory=list)  # LoRA files merged into the DiT at load (paths as given)
    lora_scale: float = 1.2  # InfiniteTalk's --lora_scale default
    # Sampling (InfiniteTalk's defaults).
    sampling_steps: int = 40
    sampling_shift: Optional[float] = None  # t' = s t / (1 + (s - 1) t); null: the reference's 7 at 480p, 11 at 720p
    text_guide_scale: float = 5.0  # 1 with the step-distilled LoRAs (then two DiT passes per step, not three)
    audio_guide_scale: float = 4.0  # 2 with the step-distilled LoRAs
    negative_prompt: Optional[str] = None  # null: the reference's default (REFERENCE_NEGATIVE_PROMPT); "" none
    # The reference's defaults, each overridable (docs/wan-rendering.md, "Defaults").
    framing: WanFraming = WanFraming.bucket
    color_correction: float = 1.0  # strength of the reference's Lab match to the reference image per frame; 0 off
    audio_features: WanAudioFeatures = WanAudioFeatures.whole
    feature_window_s: float = 60.0  # whole: a file up to this long is one wav2vec2 pass, as the reference's
    audio_context_s: float = 1.0  # audio wav2vec2 hears past a window's ends (clip; whole beyond one window)
    fp32_time_head: bool = True  # the time embedding, its projection and the output head in fp32, as the reference
    clip_condition: WanClipCondition = WanClipCondition.reference  # multitalk: motion (its long-video loop)
    # I chunks (with pipeline.interpolate=true; off by default for Wan models, docs/models.md), in video frames,
    # multiples of the VAE's 4-frame latent step: the seam around each clip boundary, anchors on each side of it.
    seam_frames: int = 8
    anchor_frames: int = 4


@dataclass
class WanConfig(ModelConfig):
    """The ``model`` section of a Wan-family model: the shared keys and ``model.wan``."""

    name: str = "infinitetalk"
    family: str = "wan"
    checkpoint: Optional[str] = "weights/"
    image_size: int = 640
    wan: WanModelConfig = field(default_factory=WanModelConfig)


def sampling_shift(model: WanConfig) -> float:
    """``model.wan.sampling_shift``, or the reference's default for the table ``model.image_size`` selects."""
    from avatargen.families.wan.framing import is_720p

    if model.wan.sampling_shift is not None:
        return model.wan.sampling_shift
    return 11.0 if is_720p(model.image_size) else 7.0


def negative_prompt(model: WanConfig) -> str:
    """``model.wan.negative_prompt``, or the reference's default negative prompt when it is null."""
    return REFERENCE_NEGATIVE_PROMPT if model.wan.negative_prompt is None else model.wan.negative_prompt


def validate_wan(config: Config) -> None:
    """Raise ConfigError naming the first inconsistent ``model.*`` key of a Wan-family model."""
    from avatargen.families.wan.models.specs import WAN_FAMILY

    model = config.model
    assert isinstance(model, WanConfig)
    wan: WanModelConfig = model.wan

    def require(condition: bool, message: str) -> None:
        if not condition:
            raise ConfigError(message)

    require(wan.spec in WAN_FAMILY, f"model.wan.spec '{wan.spec}' is not a Wan model; valid choices: {', '.join(sorted(WAN_FAMILY))}")
    spec = WAN_FAMILY[wan.spec]
    unit = spec.vae.spatial_stride * spec.dit.patch_size[1]
    require(model.image_size % unit == 0, f"model.image_size ({model.image_size}) must be a multiple of {unit} for model.wan.spec={wan.spec} (VAE stride x DiT patch)")
    require(model.sample_rate == 16000, f"model.sample_rate must be 16000 for a Wan model (wav2vec2 hears 16 kHz), got {model.sample_rate}")
    require(wan.sampling_steps >= 1, "model.wan.sampling_steps must be >= 1")
    require(wan.sampling_shift is None or wan.sampling_shift > 0, "model.wan.sampling_shift must be > 0 (or null: 7 at 480p, 11 at 720p)")
    require(0.0 <= wan.color_correction <= 1.0, f"model.wan.color_correction ({wan.color_correction}) is a strength in [0, 1] (0: off)")
    require(wan.feature_window_s >= 1.0, "model.wan.feature_window_s must be >= 1 (seconds wav2vec2 hears at once)")
    require(wan.text_guide_scale >= 0 and wan.audio_guide_scale >= 0, "model.wan.text_guide_scale and audio_guide_scale must be >= 0")
    require(wan.lora_scale >= 0, "model.wan.lora_scale must be >= 0")
    require(wan.audio_context_s >= 0, "model.wan.audio_context_s must be >= 0 (seconds)")
    require(bool(wan.dit), "model.wan.dit must name at least one file (the DiT's safetensors)")
    step = spec.vae.temporal_stride
    new_frames = spec.clip_frames - spec.motion_frames
    require(wan.seam_frames >= 2 * step and wan.seam_frames % (2 * step) == 0,
            f"model.wan.seam_frames ({wan.seam_frames}) must be a positive multiple of {2 * step} (half on each side of "
            f"a clip boundary, whole {step}-frame latent steps)")  # fmt: skip
    require(wan.anchor_frames >= step and wan.anchor_frames % step == 0,
            f"model.wan.anchor_frames ({wan.anchor_frames}) must be a positive multiple of {step} (whole latent steps)")
    require(wan.seam_frames <= new_frames and wan.seam_frames // 2 + wan.anchor_frames <= new_frames,
            f"model.wan.seam_frames / 2 + model.wan.anchor_frames ({wan.seam_frames // 2 + wan.anchor_frames}) and "
            f"seam_frames must be <= the {new_frames} new frames of a clip of model.wan.spec={wan.spec}")  # fmt: skip


FAMILY = FamilyConfig(name="wan", model_config=WanConfig, engine="avatargen.families.wan.engine:ENGINE", validate=validate_wan)
