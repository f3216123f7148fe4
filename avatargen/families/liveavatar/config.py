"""The typed ``model.*`` keys of a LiveAvatar model (``model=liveavatar|liveavatar_tiny``): the shared ones and
``model.liveavatar.*``: its architecture spec, its files (relative to ``model.checkpoint``, laid out as the reference's
README downloads them: ``ckpt/Wan2.2-S2V-14B/`` and ``ckpt/LiveAvatar/``) and the reference's sampling defaults
(``infinite_inference_single_gpu.sh``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from avatargen.config.families import FamilyConfig
from avatargen.config.schema import Config, ModelConfig
from avatargen.errors import ConfigError

S2V_DIR = "Wan2.2-S2V-14B"
LORA_FILE = "LiveAvatar/liveavatar.safetensors"

# The reference's negative prompt (Wan2.2's s2v config ``sample_neg_prompt``, in Chinese as the model was trained).
REFERENCE_NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，"
    "丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，静止不动的画面，"
    "杂乱的背景，三条腿，背景人很多，倒着走"
)


@dataclass
class LiveAvatarModelConfig:
    """One LiveAvatar model: its spec, files, LoRA and sampling settings (the reference's defaults)."""

    spec: str = "liveavatar"  # a SPECS entry (avatargen/families/liveavatar/build.py): the four architectures
    dtype: str = "bfloat16"  # bfloat16 | float16 | float32: what the DiT and umT5 run in
    # Files under model.checkpoint (glob patterns; the DiT's shards merged by name).
    dit: List[str] = field(default_factory=lambda: [f"{S2V_DIR}/diffusion_pytorch_model-*.safetensors"])
    lora: Optional[str] = LORA_FILE  # peft LoRA merged into the DiT at load; null: the base S2V model
    lora_alpha: float = 64.0  # the reference's training config (rank 128, alpha 64): scale alpha / rank
    vae: str = f"{S2V_DIR}/Wan2.1_VAE.pth"
    text_encoder: str = f"{S2V_DIR}/models_t5_umt5-xxl-enc-bf16.pth"
    tokenizer: Optional[str] = f"{S2V_DIR}/google/umt5-xxl"  # null: byte-level (the toy)
    wav2vec2: str = f"{S2V_DIR}/wav2vec2-large-xlsr-53-english"
    # Sampling (infinite_inference_single_gpu.sh).
    sampling_steps: int = 4
    guide_scale: float = 0.0  # the reference has no guidance branch; any other value is refused
    clip_frames: int = 48  # --infer_frames: the KV ring holds one clip's latent frames
    frames_per_block: int = 3  # latent frames a block generates (12 video frames)
    max_area: int = 704 * 384  # --size "704*384": the frame keeps the picture's aspect within this many pixels
    negative_prompt: Optional[str] = None  # null: the reference's; unused without guidance
    audio_context_s: float = 0.5  # audio wav2vec2 hears on each side of a block


@dataclass
class LiveAvatarConfig(ModelConfig):
    """The ``model`` section of a LiveAvatar model."""

    name: str = "liveavatar"
    family: str = "liveavatar"
    checkpoint: Optional[str] = "ckpt/"
    image_size: int = 704  # unused by the framing (model.liveavatar.max_area and the picture's aspect decide)
    liveavatar: LiveAvatarModelConfig = field(default_factory=LiveAvatarModelConfig)


def validate_liveavatar(config: Config) -> None:
    """Raise ConfigError naming the first bad ``model.*`` key of a LiveAvatar model."""
    from avatargen.families.liveavatar.models.params import SPECS

    model = config.model
    assert isinstance(model, LiveAvatarConfig)
    la = model.liveavatar

    def require(condition: bool, message: str) -> None:
        if not condition:
            raise ConfigError(message)

    require(la.spec in SPECS, f"model.liveavatar.spec '{la.spec}' is not a LiveAvatar model; valid: {', '.join(sorted(SPECS))}")
    require(la.dtype in ("bfloat16", "float16", "float32"), f"model.liveavatar.dtype '{la.dtype}': bfloat16, float16 or float32")
    require(la.sampling_steps == 4, f"model.liveavatar.sampling_steps={la.sampling_steps}: the LoRA is distilled to 4 steps (one KV ring each)")
    require(la.guide_scale == 0, f"model.liveavatar.guide_scale={la.guide_scale}: LiveAvatar has no guidance branch; use 0")
    require(la.frames_per_block >= 1, "model.liveavatar.frames_per_block must be >= 1")
    require(la.clip_frames % (4 * la.frames_per_block) == 0,
            f"model.liveavatar.clip_frames ({la.clip_frames}) must be a multiple of {4 * la.frames_per_block} "
            "(whole blocks of frames_per_block latent frames)")  # fmt: skip
    require(model.image_size % 64 == 0, f"model.image_size ({model.image_size}) must be a multiple of 64 (VAE 8 x patch 2 x FramePack's 4x)")
    require(model.sample_rate == 16000, f"model.sample_rate must be 16000 (wav2vec2 hears 16 kHz), got {model.sample_rate}")
    require(model.fps == 25, f"model.fps must be 25 (the audio is bucketed at 25 fps), got {model.fps}")
    require(la.max_area >= 64 * 64, f"model.liveavatar.max_area ({la.max_area}) must hold at least one 64x64 frame")
    require(la.lora_alpha > 0, "model.liveavatar.lora_alpha must be > 0")
    require(bool(la.dit), "model.liveavatar.dit must name the DiT's safetensors")
    require(la.audio_context_s >= 0, "model.liveavatar.audio_context_s must be >= 0 (seconds)")


def negative_prompt(model: LiveAvatarConfig) -> str:
    """``model.liveavatar.negative_prompt``, or the reference's."""
    return REFERENCE_NEGATIVE_PROMPT if model.liveavatar.negative_prompt is None else model.liveavatar.negative_prompt


FAMILY = FamilyConfig(name="liveavatar", model_config=LiveAvatarConfig, engine="avatargen.families.liveavatar.engine:ENGINE", validate=validate_liveavatar)
