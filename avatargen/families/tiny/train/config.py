"""Typed hyper-parameters of the training recipe (``conf/train/tiny.yaml``; ``key=value`` overrides)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from omegaconf import OmegaConf

from avatargen.config.loader import default_config_dir, load_config, to_config
from avatargen.config.schema import Config
from avatargen.config.validate import MAX_CHUNK_FRAMES, MAX_THREADS, numbers, require_in
from avatargen.data.motion import num_frames
from avatargen.errors import ConfigError, first_line
from avatargen.families.tiny.config import motion_frames_for
from avatargen.families.tiny.params import ATTENTION_KINDS


@dataclass
class RecipeConfig:
    """Step counts, not time budgets, so a seed gives the same weights on any machine of the same build."""

    model: str = "tiny"  # the model config (conf/model/<model>.yaml) to train
    seed: int = 0
    threads: int = 0  # torch threads; 0 = torch's default
    init_from: Optional[str] = None  # a checkpoint folder: load its five modules, run only the distillations
    train_identities: int = 100_000  # identity seeds [0, train_identities) are the training pool
    # VAE: random single frames of random identities and poses, at full and half resolution
    vae_steps: int = 900
    vae_batch: int = 8
    vae_lr: float = 1e-3
    vae_kl_weight: float = 1e-6
    vae_mouth_weight: float = 4.0
    # With init_from a checkpoint whose VAE decoder has other widths than the model config's
    # (model.vae.decoder_widths): the model's decoder learns to decode that checkpoint's latents from its decoder
    # (the encoder is kept). Without init_from the VAE phase trains the model's decoder itself.
    decoder_distill_steps: int = 2000
    decoder_distill_lr: float = 1e-3
    # Talking clips for the audio encoder, A2V and SR phases
    clips: int = 100
    clip_seconds: float = 5.0
    # Audio encoder: predicts the ground-truth mouth openness per frame (the head is dropped after training)
    audio_steps: int = 600
    audio_batch: int = 8
    audio_lr: float = 2e-3
    # A2V DiT (+ text encoder): flow matching on low-res latent windows
    a2v_steps: int = 2400
    a2v_batch: int = 4
    a2v_window: int = 12
    a2v_lr: float = 5e-4
    a2v_mouth_weight: float = 8.0
    # A2V distilled to one sampling step (0 steps: keep the multi-step model); the teacher is the A2V phase's model
    a2v_distill_steps: int = 2000
    a2v_distill_lr: float = 2e-4
    a2v_teacher_steps: int = 2
    # the A2V phase's (the teacher's) self-attention; the distilled student takes the model's (model.a2v.attention,
    # frame-axial: cheaper to run). Without distillation the A2V phase trains the model's. With init_from: that
    # checkpoint's (its model.yaml).
    a2v_teacher_attention: str = "full"
    # SR DiT: one step from low-res to high-res latents
    sr_steps: int = 1200
    sr_batch: int = 16
    sr_lr: float = 1e-3
    sr_mouth_weight: float = 4.0
    sr_input_noise: float = 0.1  # robustness to the A2V's imperfect low-res latents
    log_every: int = 50
    save_dtype: str = "float16"  # what the shipped checkpoint stores (loaded into fp32)


def load_recipe(overrides: Sequence[str] = ()) -> RecipeConfig:
    """``conf/train/tiny.yaml`` over the RecipeConfig defaults, then ``key=value`` overrides (typed, validated)."""
    base = OmegaConf.structured(RecipeConfig)
    try:
        cfg = OmegaConf.merge(base, OmegaConf.load(default_config_dir() / "train" / "tiny.yaml"), OmegaConf.from_dotlist(list(overrides)))
    except Exception as error:  # OmegaConf's validation errors: one line naming the key
        raise ConfigError(f"training config: {first_line(error)}") from None
    recipe: RecipeConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    try:
        check_recipe(recipe)
    except ConfigError as error:
        raise ConfigError(f"training config: {error}") from None
    return recipe


SAVE_DTYPES = ("float16", "bfloat16", "float32")
MAX_STEPS, MAX_BATCH, MAX_CLIPS, MAX_CLIP_SECONDS = 10_000_000, 4096, 1_000_000, 600.0
MAX_TRAIN_SEED = (2**63 - 1) // 100_003 - MAX_CLIPS  # clip seeds are seed * 100_003 + i, within a 64-bit seed


def check_recipe(recipe: RecipeConfig) -> None:
    """Raise ConfigError naming the first recipe key out of range, before any training (and torch-free): a value
    that would fail minutes into a run, or after it (``save_dtype``), is refused at once."""
    for key, value in numbers(recipe):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key} must be a finite number, got {value}")
        if key.endswith("_steps") and key != "a2v_teacher_steps":
            require_in(value, 0, MAX_STEPS, key)
        elif key.endswith("_batch"):
            require_in(value, 1, MAX_BATCH, key)
        elif key.endswith("_lr"):
            _require_positive(value, key)
        elif key.endswith("_weight") or key == "sr_input_noise":
            require_in(value, 0.0, 1e6, key)
    require_in(recipe.seed, 0, MAX_TRAIN_SEED, "seed")
    require_in(recipe.threads, 0, MAX_THREADS, "threads", " (0: torch's default)")
    require_in(recipe.train_identities, 1, 2**31 - 1, "train_identities")
    require_in(recipe.a2v_teacher_steps, 1, 64, "a2v_teacher_steps")
    require_in(recipe.log_every, 1, MAX_STEPS, "log_every")
    require_in(recipe.clips, 1, min(MAX_CLIPS, recipe.train_identities), "clips", " (and <= train_identities)")
    require_in(recipe.a2v_window, 1, MAX_CHUNK_FRAMES, "a2v_window")
    require_in(recipe.clip_seconds, 0.0, MAX_CLIP_SECONDS, "clip_seconds", " seconds")
    if recipe.a2v_teacher_attention not in ATTENTION_KINDS:
        raise ConfigError(f"a2v_teacher_attention must be one of {', '.join(ATTENTION_KINDS)}, got "
                          f"{recipe.a2v_teacher_attention!r}")  # fmt: skip
    if recipe.save_dtype not in SAVE_DTYPES:
        raise ConfigError(f"save_dtype must be one of {', '.join(SAVE_DTYPES)}, got {recipe.save_dtype[:40]!r}")
    _check_model(recipe)


def _require_positive(value: float, key: str) -> None:
    if not 0 < value <= 1e3:
        raise ConfigError(f"{key} must be in (0, 1000], got {value:g}")


def distill_windows(config: Config) -> tuple[int, int]:
    """The frames of the two windows the A2V's distillation cuts: an N chunk with its motion frames, an I chunk
    (the pipeline's own sizes, composited as the bundled default is)."""
    pipeline, motion = config.pipeline, motion_frames_for(config, composited=True)
    return pipeline.n_chunk_frames + motion, pipeline.seam_frames + 2 * pipeline.anchor_frames


def _check_model(recipe: RecipeConfig) -> None:
    """``model`` is a config of this recipe's family, and each clip holds the longest window a DiT phase cuts."""
    config = to_config(load_config([f"model={recipe.model}"]))
    if config.model.family != "tiny":
        raise ConfigError(f"model={recipe.model} is of the '{config.model.family}' family; this recipe trains "
                          "the bundled family's: model=tiny")  # fmt: skip
    windows = [recipe.a2v_window] if recipe.init_from is None else []
    if recipe.a2v_distill_steps:
        windows += distill_windows(config)
    if not windows:  # no A2V phase runs: no clip is made
        return
    model = config.model
    frames = num_frames(round(recipe.clip_seconds * model.sample_rate), model.sample_rate, model.fps)  # make_clip's
    if frames < max(windows):
        need = max(windows) / model.fps
        raise ConfigError(f"clip_seconds={recipe.clip_seconds:g} gives {frames} frames; the A2V "
                          f"phases cut windows of {max(windows)}: give clip_seconds >= {need:.2f}")  # fmt: skip
