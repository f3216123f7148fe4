"""Record LiveAvatar's own outputs at toy size into fixtures/ (run once; CI compares against them).

    AVATARGEN_REFERENCE=/path/to/LiveAvatar python tests/models/liveavatar/record_reference.py

Runs the reference's ``CausalWanModel_S2V`` (reference_code.py) in fp32 on the CPU with the weights of toy.py, and
writes ``fixtures/reference.safetensors``: the cond cache each layer holds after the sink forward, the velocity of
blocks 0-3 at one denoising step through one KV ring (block 1 reads block 0's keys; block 2 rolls the ring; block 3
reads the rolled ring), the ring after each, the four-step denoise of blocks 0 and 1 with one ring per step as the
reference pipeline runs it (``causal_s2v_pipeline.py``), the flow-matching schedule, and the velocity of block 0
after a peft LoRA was merged (``merge_and_unload``). The RoPE offsets the reference drew (``random.randint(4, 30)``
in every forward) are recorded with them, and the fixture's metadata names the reference's commit (the checkout's
HEAD) and the versions it ran with (``provenance``). Needs diffusers, einops and (for the LoRA) peft.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.models.liveavatar import reference_code, toy  # noqa: E402

FIXTURE = Path(__file__).with_name("fixtures") / "reference.safetensors"
MOTION_FRAMES = [73, 19]  # video frames and latent frames of motion the reference conditions on


class OffsetLog:
    """``random.randint`` seeded, each draw kept (the reference draws the reference's RoPE offset per forward)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.draws: list[int] = []

    def __call__(self, low: int, high: int) -> int:
        value = self.rng.randint(low, high)
        self.draws.append(value)
        return value


def provenance(root: Path) -> dict[str, str]:
    """Which reference code recorded the fixture: the repository, the checkout's commit, the libraries' versions."""
    import diffusers
    import peft

    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"reference": "Alibaba-Quark/LiveAvatar", "commit": commit, "torch": torch.__version__,
            "diffusers": diffusers.__version__, "peft": peft.__version__}  # fmt: skip


def empty_cache(net, ring_tokens: int) -> list[dict]:
    heads, head_dim = net.num_heads, net.dim // net.num_heads
    return [
        {
            "k": torch.zeros(1, ring_tokens, heads, head_dim),
            "v": torch.zeros(1, ring_tokens, heads, head_dim),
            "cond_k": torch.zeros(1, 64, heads, head_dim),
            "cond_v": torch.zeros(1, 64, heads, head_dim),
            "cond_end": torch.tensor([0], dtype=torch.long),
        }
        for _ in range(net.num_layers)
    ]


def call(net, latents, t, data, cache, block, frame_tokens, sink=False):
    """One forward of the reference at ``block`` (its tokens start at block * 3 frames)."""
    f = toy.FRAMES_PER_BLOCK
    start = block * f * frame_tokens
    audio = data["audio"][..., block * f * 4 : (block + 1) * f * 4]
    kwargs = dict(
        context=[data["context"][0]],
        seq_len=None,
        cond_states=torch.zeros(1, 16, f, toy.LATENT_SIDE, toy.LATENT_SIDE),
        motion_latents=data["motion_latents"],
        ref_latents=data["ref_latents"],
        audio_input=audio,
        motion_frames=MOTION_FRAMES,
        drop_motion_frames=False,
        kv_cache=cache,
        crossattn_cache=[{} for _ in range(net.num_layers)],
        current_start=start,
        current_end=start + f * frame_tokens,
    )
    if sink:
        kwargs["sink_flag"] = True
    timestep = torch.full((1, f), float(t))
    return net([latents], t=timestep, **kwargs)


def main() -> None:
    root = reference_code.reference_root()
    if root is None:
        raise SystemExit(f"set {reference_code.ENV} to a checkout of Alibaba-Quark/LiveAvatar")
    ref = reference_code.load(root)
    torch.manual_seed(0)
    net = reference_code.build(ref, **toy.TOY)
    toy.fill(net)
    names = ";".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in net.state_dict().items())
    data = toy.inputs()
    frame_tokens = (toy.LATENT_SIDE // 2) ** 2
    ring = toy.RING_BLOCKS * toy.FRAMES_PER_BLOCK * frame_tokens
    f = toy.FRAMES_PER_BLOCK
    out: dict[str, torch.Tensor] = {}
    offsets = OffsetLog(seed=46)
    random.randint = offsets

    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3)
    scheduler.set_timesteps(4)
    out["schedule.timesteps"] = scheduler.timesteps.float().clone()
    out["schedule.sigmas"] = scheduler.sigmas.float().clone()

    ref.causal.BF16_NORM3_DTYPE = torch.float32  # see reference_code: the rounding is checked on its own below
    with torch.no_grad():
        # the sink forward fills the cond cache; one ring for the single-step checks
        cache = empty_cache(net, ring)
        call(net, data["noise"][:, :f], 0, data, cache, 0, frame_tokens, sink=True)
        for layer, entry in enumerate(cache):
            n = int(entry["cond_end"])
            out[f"sink.{layer}.cond_k"] = entry["cond_k"][:, :n].clone()
            out[f"sink.{layer}.cond_v"] = entry["cond_v"][:, :n].clone()
        t = float(scheduler.timesteps[1])
        for block in range(4):
            first = len(offsets.draws)
            velocity = call(net, data["noise"][:, block * f : (block + 1) * f], t, data, cache, block, frame_tokens)[0]
            out[f"step.{block}.velocity"] = velocity.clone()
            out[f"step.{block}.offsets"] = torch.tensor(offsets.draws[first:])
            if block in (1, 3):  # the ring holding blocks 0-1, then the rolled one holding 2-3
                out[f"step.{block}.ring_k"] = torch.stack([entry["k"] for entry in cache]).clone()
                out[f"step.{block}.ring_v"] = torch.stack([entry["v"] for entry in cache]).clone()
        out["step.t"] = torch.tensor(t)

        # the same through the reference's bf16 rounding before norm3 is only checked for block 0 (see reference_code)
        ref.causal.BF16_NORM3_DTYPE = torch.bfloat16
        cache = empty_cache(net, ring)
        call(net, data["noise"][:, :f], 0, data, cache, 0, frame_tokens, sink=True)
        first = len(offsets.draws)
        out["bf16.velocity"] = call(net, data["noise"][:, :f], t, data, cache, 0, frame_tokens)[0].clone()
        out["bf16.offsets"] = torch.tensor(offsets.draws[first:])
        ref.causal.BF16_NORM3_DTYPE = torch.float32

        # the pipeline's block loop: one ring per denoising step, the cond cache shared (filled by the sink)
        rings = [empty_cache(net, ring) for _ in range(4)]
        for r in rings:
            call(net, data["noise"][:, :f], 0, data, r, 0, frame_tokens, sink=True)
        for block in range(2):
            scheduler.set_timesteps(4)
            latents = data["noise"][:, block * f : (block + 1) * f].clone()
            first = len(offsets.draws)
            for i, t in enumerate(scheduler.timesteps):
                velocity = call(net, latents, t, data, rings[i], block, frame_tokens)[0]
                latents = scheduler.step(velocity.unsqueeze(0), t, latents.unsqueeze(0), return_dict=False)[0][0]
            out[f"denoise.{block}.latents"] = latents.clone()
            out[f"denoise.{block}.offsets"] = torch.tensor(offsets.draws[first:])

        # a peft LoRA merged as the reference merges it (get_peft_model, load, merge_and_unload)
        from peft import LoraConfig, get_peft_model

        targets = {
            name: tuple(module.weight.shape)
            for name, module in net.named_modules()
            if isinstance(module, torch.nn.Linear) and any(name.endswith(t) for t in toy.LORA_TARGETS)
        }
        config = LoraConfig(r=toy.LORA_RANK, lora_alpha=toy.LORA_ALPHA, target_modules=list(toy.LORA_TARGETS))
        peft_net = get_peft_model(net, config)
        missing, unexpected = peft_net.load_state_dict(toy.lora_state(targets), strict=False)
        if unexpected or any("lora" in key for key in missing):
            raise SystemExit(f"the toy LoRA does not fit: {unexpected or missing}")
        merged = peft_net.merge_and_unload()
        cache = empty_cache(merged, ring)
        call(merged, data["noise"][:, :f], 0, data, cache, 0, frame_tokens, sink=True)
        first = len(offsets.draws)
        out["lora.velocity"] = call(merged, data["noise"][:, :f], out["step.t"], data, cache, 0, frame_tokens)[0].clone()
        out["lora.offsets"] = torch.tensor(offsets.draws[first:])
        out["lora.targets"] = torch.tensor(len(targets))

    FIXTURE.parent.mkdir(exist_ok=True)
    metadata = {"state_dict": names, "provenance": json.dumps(provenance(root))}
    save_file({k: v.contiguous() for k, v in out.items()}, str(FIXTURE), metadata=metadata)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size // 1024} KB, {len(out)} tensors)")


if __name__ == "__main__":
    main()
