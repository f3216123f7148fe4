"""``avatargen train``: the whole recipe in order, deterministic for a seed, writing a loadable checkpoint folder.

Phases: VAE -> audio encoder -> latent cache of talking clips -> A2V DiT + text encoder -> the A2V distilled to one
sampling step -> SR DiT. ``init_from`` starts from a checkpoint folder's five modules instead: only the
distillations run (its VAE decoder into the model config's widths where they differ; its A2V into one step, with the
latent cache, unless ``a2v_distill_steps=0``). Each logs its losses (``train_log.jsonl``) and the time it took;
the output folder holds ``<module>.safetensors`` for the five modules (the format ``model.checkpoint`` reads),
``model.yaml`` (the model config that built them) and ``recipe.yaml`` (the recipe config).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

from avatargen.config.loader import load_config, to_config
from avatargen.families.tiny.config import checkpoint_architecture, motion_frames_for, trained_vae_params
from avatargen.errors import ConfigError
from avatargen.families.tiny.models.a2v_dit import A2VDiT
from avatargen.families.tiny.models.audio_encoder import AudioEncoder
from avatargen.families.tiny.models.sr_dit import SRDiT
from avatargen.families.tiny.models.text_encoder import TextEncoder
from avatargen.families.tiny.models.vae import VAE
from avatargen.families.tiny.train.config import RecipeConfig, distill_windows
from avatargen.families.tiny.train.dit_phases import distill_a2v, train_a2v, train_sr
from avatargen.families.tiny.train.latent_cache import build_cache
from avatargen.families.tiny.train.pixel_phases import distill_decoder, train_audio_encoder, train_vae


def save_module(model: torch.nn.Module, path: Path, dtype: torch.dtype) -> None:
    tensors = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(path))


MODULES = ("audio_encoder", "text_encoder", "vae", "a2v", "sr")  # a checkpoint folder's files, <name>.safetensors


def load_module(model: torch.nn.Module, path: Path) -> None:
    """Weights saved by :func:`save_module`, into ``model``'s own dtype."""
    model.load_state_dict(load_file(str(path)))


def check_init_from(folder: Path, recipe: RecipeConfig) -> None:
    """``init_from`` must be a checkpoint folder; one whose A2V is distilled already only with
    ``a2v_distill_steps=0``."""
    missing = [name for name in MODULES if not (folder / f"{name}.safetensors").is_file()]
    if missing:
        raise ConfigError(f"init_from={folder}: no {missing[0]}.safetensors there; give a checkpoint folder")
    recipe_file = folder / "recipe.yaml"
    if recipe.a2v_distill_steps and recipe_file.is_file() and OmegaConf.load(recipe_file).get("a2v_distill_steps", 0):
        raise ConfigError(f"init_from={folder}: its A2V is already distilled; give the checkpoint it was distilled "
                          "from, or a2v_distill_steps=0")  # fmt: skip


def load_vae(folder: Path, vae: VAE, log: Callable[[str, dict], None]) -> VAE | None:
    """``folder``'s VAE into ``vae``; where its decoder has other widths (its model.yaml says), that VAE is returned
    instead, built and loaded, for :func:`distill_decoder` to teach ``vae``'s decoder."""
    params = trained_vae_params(folder, vae.params)
    if params.decoder_levels == vae.params.decoder_levels:
        load_module(vae, folder / "vae.safetensors")
        return None
    teacher = VAE(params)
    load_module(teacher, folder / "vae.safetensors")
    log("decoder_distill", {"msg": f"decoder widths {params.decoder_levels} -> {vae.params.decoder_levels}"})
    return teacher


def run_recipe(recipe: RecipeConfig, out_dir: Path) -> dict:
    """Train all five modules and write them to ``out_dir``; returns a summary (times, final losses)."""
    start = Path(recipe.init_from) if recipe.init_from else None
    if start is not None:
        check_init_from(start, recipe)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = load_config([f"model={recipe.model}"])
    model_cfg = to_config(cfg).model
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    torch.manual_seed(recipe.seed)
    log_file = (out_dir / "train_log.jsonl").open("w")
    summary: dict = {"phases": {}}
    if start is not None:  # the record starts with the checkpoint's own: what trained the modules loaded
        if (start / "train_log.jsonl").is_file():
            log_file.write((start / "train_log.jsonl").read_text())
        if (start / "summary.json").is_file():
            summary["init_from"] = json.loads((start / "summary.json").read_text())
    started = time.perf_counter()

    def log(phase: str, values: dict) -> None:
        record = {"phase": phase, "t": round(time.perf_counter() - started, 1), **values}
        log_file.write(json.dumps(record) + "\n")
        log_file.flush()
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()), file=sys.stderr, flush=True)
        summary["phases"].setdefault(phase, {}).update({k: v for k, v in values.items() if not isinstance(v, list)})

    def timed(phase: str, fn) -> None:
        t0 = time.perf_counter()
        fn()
        summary["phases"].setdefault(phase, {})["seconds"] = round(time.perf_counter() - t0, 1)

    vae = VAE(model_cfg.vae)
    audio_encoder = AudioEncoder(model_cfg.audio_encoder)
    text_encoder = TextEncoder(model_cfg.text_encoder)
    a2v = A2VDiT(model_cfg.a2v)
    sr = SRDiT(model_cfg.sr)

    modules = {"audio_encoder": audio_encoder, "text_encoder": text_encoder, "vae": vae, "a2v": a2v, "sr": sr}
    student_attention = model_cfg.a2v.attention  # what the shipped A2V computes
    if start is not None:
        trained = checkpoint_architecture(start)
        teacher_attention = str(trained[("a2v", "attention")]) if trained else recipe.a2v_teacher_attention
    else:
        teacher_attention = recipe.a2v_teacher_attention if recipe.a2v_distill_steps else student_attention
    a2v.use_attention(teacher_attention)
    if start is not None:
        for name, model in modules.items():
            if name != "vae":
                load_module(model, start / f"{name}.safetensors")
            model.eval()
        teacher_vae = load_vae(start, vae, log)
        if teacher_vae is not None:
            timed("decoder_distill", lambda: distill_decoder(vae, teacher_vae, recipe, model_cfg.image_size, log))
    else:
        timed("vae", lambda: train_vae(vae, recipe, model_cfg.image_size, log))
        timed("audio", lambda: train_audio_encoder(audio_encoder, recipe, model_cfg.fps, model_cfg.sample_rate, log))
    cache: list = []
    if start is None or recipe.a2v_distill_steps:  # the DiT phases' data (the decoder plays no part in it)
        timed("cache", lambda: cache.extend(build_cache(
            vae, audio_encoder, recipe.clips, recipe.clip_seconds, model_cfg.image_size, model_cfg.fps,
            model_cfg.sample_rate, recipe.seed, recipe.train_identities, lambda m: log("cache", {"msg": m}))))
    config = to_config(cfg)
    pipeline, motion_frames = config.pipeline, motion_frames_for(config, composited=True)  # the bundled default's
    if start is None:
        timed("a2v", lambda: train_a2v(a2v, text_encoder, cache, recipe, motion_frames, pipeline.anchor_frames,
                                       model_cfg.text_encoder.max_tokens, log))  # fmt: skip
    if recipe.a2v_distill_steps:
        teacher = copy.deepcopy(a2v).requires_grad_(False)
        a2v.use_attention(student_attention)  # the same weights, to learn the model's attention
        windows = distill_windows(config)  # N, I
        timed("a2v_distill", lambda: distill_a2v(a2v, teacher, text_encoder, cache, recipe, motion_frames,
                                                 pipeline.anchor_frames, windows, model_cfg.text_encoder.max_tokens, log))  # fmt: skip
    if start is None:
        timed("sr", lambda: train_sr(sr, cache, recipe, log))

    dtype = getattr(torch, recipe.save_dtype)
    for name, model in modules.items():
        save_module(model, out_dir / f"{name}.safetensors", dtype)
    cfg.model.a2v.attention = a2v.params.attention  # the saved A2V's (a loaded teacher not distilled keeps its own)
    (out_dir / "model.yaml").write_text(OmegaConf.to_yaml(cfg.model))
    (out_dir / "recipe.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(recipe)))
    summary["total_seconds"] = round(time.perf_counter() - started, 1)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    log_file.close()
    return summary
