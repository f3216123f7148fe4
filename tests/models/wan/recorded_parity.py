"""avatargen's Wan path against what MeiGen-AI's own InfiniteTalk code computed, recorded once into fixtures/.

CI cannot reach the reference repository, so tests/models/wan/record_reference.py runs its modules (from a checkout,
CPU, fp32, toy sizes) on the inputs and weights built here and saves what they computed; the functions below run
ours on the same inputs and weights and return the maximum absolute differences (asserted by
test_recorded_parity.py, printed by ``python benchmarks/quality/reference_parity.py --recorded``).

Weights and the larger inputs are not stored: they are rebuilt from names and seeds by an integer hash
(``hashed_uniform``: the same values on every machine, torch and numpy version), and the fixture keeps their SHA-256
so a changed rule or a changed module layout is named instead of showing as a difference. The smaller inputs are
stored as they were.
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STORED_NUMEL = 8192  # inputs up to this size are stored in the fixture; larger ones are rebuilt and checked by digest

TOY_DIT = dict(model_type="i2v", patch_size=(1, 2, 2), text_len=16, in_dim=36, dim=64, ffn_dim=128, freq_dim=32,
               text_dim=32, out_dim=16, num_heads=2, num_layers=2, audio_window=5, intermediate_dim=32, output_dim=32,
               context_tokens=4, vae_scale=4, norm_input_visual=True, norm_output_audio=True)  # fmt: skip
DIT_LATENTS = (3, 8, 12)  # frames, height, width
DUBBING_SOURCE = (360, 640)  # a 16:9 source frame -> the 480p bucket 448 x 896
FRAMED_STRIDE = 16  # the framed frame's stored sample: every 16th row and column (the whole frame by digest)
COLOUR_CLIP = (4, 16, 24)  # frames, height, width
AUDIO_SECONDS = 30.0


def hashed_uniform(shape: tuple[int, ...], key: str) -> Tensor:
    """float32 values in [-1, 1) that depend only on ``key`` and each element's index: an integer hash, not a random
    stream, so every machine and library version rebuilds them bit for bit."""
    n = math.prod(shape)
    offset = (zlib.crc32(key.encode()) * 0x85EBCA77 + 0x165667B1) & 0xFFFFFFFF
    x = (torch.arange(n, dtype=torch.int64) * 0x9E3779B1 + offset) & 0xFFFFFFFF
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) & 0xFFFFFFFF
    x = ((x ^ (x >> 12)) * 0x297A2D39) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    return ((x >> 8).to(torch.float32) / 2**23 - 1.0).reshape(shape)  # 24-bit integers: exact in float32


def seeded_weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, Tensor]:
    """A state dict for these names and shapes: norm scales near 1, biases near 0, other weights with unit-variance
    fan-in scaling (uniform), each from its own name, so two modules with the same layout get the same weights."""
    out = {}
    for name, shape in shapes.items():
        u = hashed_uniform(tuple(shape), f"{seed}:{name}")
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "gamma" or (leaf == "weight" and len(shape) == 1):
            out[name] = 1.0 + 0.1 * u
        elif leaf == "bias":
            out[name] = 0.1 * u
        else:
            out[name] = u * math.sqrt(3.0 / max(1, math.prod(shape) // shape[0]))
    return out


def layout(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """Names and shapes of a module's state dict."""
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def digest(tensors: dict[str, Tensor]) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


# ---- the cases' inputs (the recorder and our side build them here) ----


def dit_inputs() -> dict[str, Tensor]:
    """The DiT forward's inputs: noisy latents x, the I2V condition y, a timestep, text, CLIP features, two speakers'
    audio windows, and person masks (speaker 1 left, speaker 2 right, the rest background)."""
    frames, height, width = DIT_LATENTS
    audio_frames = 1 + TOY_DIT["vae_scale"] * (frames - 1)
    masks = torch.zeros(3, height, width)
    masks[0, 1:-1, : width // 2 - 1], masks[1, 1:-1, width // 2 + 1 :] = 1.0, 1.0
    masks[2] = (masks[:2].sum(0) == 0).float()
    root3 = math.sqrt(3.0)  # unit variance
    return {
        "x": root3 * hashed_uniform((16, frames, height, width), "dit.x"),
        "y": root3 * hashed_uniform((20, frames, height, width), "dit.y"),
        "t": torch.tensor([730.0]),
        "text": root3 * hashed_uniform((9, TOY_DIT["text_dim"]), "dit.text"),
        "clip": root3 * hashed_uniform((1, 257, 1280), "dit.clip"),
        "audio": root3 * hashed_uniform((2, audio_frames, TOY_DIT["audio_window"], 12, 768), "dit.audio"),
        "masks": masks,
    }


def dubbing_source_frame() -> np.ndarray:
    """A uint8 (360, 640, 3) source frame of noise (every pixel differs from its neighbours: resampling shows)."""
    u = hashed_uniform((*DUBBING_SOURCE, 3), "dubbing.frame")
    return ((u + 1.0) * 128.0).to(torch.uint8).numpy()


def colour_inputs() -> dict[str, Tensor]:
    """A clip in [-0.9, 0.9) and a reference picture in [-1, 1): (1, 3, F, H, W) and (1, 3, 1, H, W)."""
    frames, height, width = COLOUR_CLIP
    return {"video": 0.9 * hashed_uniform((1, 3, frames, height, width), "colour.video"),
            "image": hashed_uniform((1, 3, 1, height, width), "colour.image")}  # fmt: skip


def speech(seconds: float = AUDIO_SECONDS, rate: int = 16000) -> np.ndarray:
    """float32 speech-like audio: a 170 Hz triangle wave gated 1.5 times a second, loud for 4 s of every 7 and quiet
    otherwise, with a little noise; integer phases and IEEE arithmetic only (no sin), so it is the same everywhere."""
    n = np.arange(int(rate * seconds), dtype=np.int64)
    phase = ((n * 170) % rate) / rate
    triangle = 4.0 * np.abs(phase - 0.5) - 1.0
    gate = ((n * 3) % (2 * rate)) < int(1.2 * rate)  # on 60 % of each 2/3 s
    loud = (n % (7 * rate)) < 4 * rate
    noise = hashed_uniform((len(n),), "audio.noise").double().numpy()
    return (0.25 * triangle * gate * (0.3 + 0.7 * loud) + 0.017 * noise).astype(np.float32)


# ---- fixture files ----


def write_fixture(name: str, tensors: dict[str, Tensor], meta: dict[str, Any]) -> Path:
    """Save ``tensors`` and JSON ``meta`` as fixtures/<name>.safetensors."""
    from safetensors.torch import save_file

    FIXTURES.mkdir(parents=True, exist_ok=True)
    path = FIXTURES / f"{name}.safetensors"
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path),
              metadata={k: json.dumps(v) for k, v in meta.items()})  # fmt: skip
    return path


def read_fixture(name: str) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The tensors and metadata of fixtures/<name>.safetensors."""
    from safetensors import safe_open

    with safe_open(str(FIXTURES / f"{name}.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = {k: json.loads(v) for k, v in (f.metadata() or {}).items()}
    return tensors, meta


def stored_inputs(inputs: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """What a fixture keeps of ``inputs``: the small ones as tensors ("input.<name>"), a digest of each."""
    kept = {f"input.{k}": v for k, v in inputs.items() if v.numel() <= STORED_NUMEL}
    return kept, {k: digest({k: v}) for k, v in inputs.items()}


class StaleFixture(AssertionError):
    """The rebuilt weights or inputs are not those the fixture was recorded with."""


def _same(what: str, ours: Any, recorded: Any) -> None:
    if ours != recorded:
        raise StaleFixture(f"{what} differs from the recording ({ours} != {recorded}): rebuild or re-record the "
                           "fixture (tests/models/wan/record_reference.py)")  # fmt: skip


def _rebuilt_inputs(inputs: dict[str, Tensor], tensors: dict[str, Tensor], meta: dict[str, Any]) -> dict[str, Tensor]:
    """``inputs`` checked against the recorded digests, the stored ones taken from the fixture."""
    for k, v in inputs.items():
        _same(f"input {k}", digest({k: v}), meta["input_digests"][k])
    return {k: tensors.get(f"input.{k}", v) for k, v in inputs.items()}


def _load_seeded(module: torch.nn.Module, meta: dict[str, Any], seed: int, prefix: str = "") -> torch.nn.Module:
    """``module`` with the recorded layout's seeded weights, loaded strictly (the reference's names)."""
    shapes = {k: tuple(v) for k, v in meta[f"{prefix}layout"].items()}
    _same("the module's state dict layout", layout(module), shapes)
    weights = seeded_weights(shapes, seed)
    _same("the seeded weights", digest(weights), meta[f"{prefix}weights_digest"])
    module.load_state_dict(weights, strict=True)
    return module.eval()


# ---- our side against the recordings ----


def dit_two_speakers() -> dict[str, float]:
    """Our DiT with the audio adapter against the reference ``WanModel`` (multitalk_model.py): two speakers routed by
    their masks, and one speaker."""
    from avatargen.families.wan.models.dit import WanDiT
    from avatargen.families.wan.models.params import AudioAdapterParams, dit_params

    tensors, meta = read_fixture("infinitetalk_dit")
    _same("the toy DiT config", TOY_DIT, {k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items()})
    audio_params = AudioAdapterParams(layers=12, channels=768, intermediate_dim=32, output_dim=32, context_tokens=4)
    ours = _load_seeded(WanDiT(dit_params("wan_tiny", clip_dim=1280, audio=audio_params)), meta, meta["seed"])
    i = _rebuilt_inputs(dit_inputs(), tensors, meta)
    out = {}
    with torch.no_grad():
        for name, speakers in (("two_speakers", i["audio"]), ("one_speaker", i["audio"][:1])):
            got = ours(torch.cat([i["x"], i["y"]])[None], i["t"], i["text"][None], i["clip"],
                       speakers[None] if len(speakers) > 1 else speakers, person_masks=i["masks"])  # fmt: skip
            expected = tensors[f"output.{name}"]
            out[name] = (got - expected).abs().max().item()
            out[f"{name}_scale"] = expected.abs().max().item()
    return out


def colour_correction() -> dict[str, float]:
    """Ours against ``match_and_blend_colors`` (multitalk_utils.py) at strength 1 and 0.5."""
    from avatargen.families.wan.colour import ColourTarget, match_and_blend

    tensors, meta = read_fixture("infinitetalk_colour")
    i = _rebuilt_inputs(colour_inputs(), tensors, meta)
    out = {}
    for strength in meta["strengths"]:
        got = match_and_blend(i["video"], ColourTarget.of(i["image"]), strength)
        out[f"strength_{strength:g}"] = (got - tensors[f"output.strength_{strength:g}"]).abs().max().item()
    return out


def dubbing_conditioning() -> dict[str, Any]:
    """A dubbing clip's conditioning: the framed source frame (the reference's ``resize_and_centercrop``, ``/ 255``,
    ``- 0.5``, ``* 2``), its I2V latent through the reference's toy-width VAE, which source frames the clips read."""
    from avatargen.families.wan.framing import cover_crop, pixels_to_unit_range
    from avatargen.families.wan.models.params import vae_params
    from avatargen.families.wan.models.vae import WanVAE
    from avatargen.pipeline.audio_timeline import AudioTimeline

    tensors, meta = read_fixture("infinitetalk_dubbing")
    frame = dubbing_source_frame()
    _same("the source frame", digest({"frame": torch.from_numpy(frame)}), meta["input_digests"]["frame"])
    framing = cover_crop(*DUBBING_SOURCE, 640, 16)
    picture = framing.picture(frame)  # uint8 (H, W, 3)
    image = pixels_to_unit_range(picture, torch.device("cpu"))  # (1, 3, 1, H, W)
    sample = image[..., ::FRAMED_STRIDE, ::FRAMED_STRIDE]
    out: dict[str, Any] = {
        "bucket": list(framing.target), "reference_bucket": meta["bucket"],
        "framed_frame_digest_equal": digest({"framed": torch.from_numpy(picture.copy()).permute(2, 0, 1)})
        == meta["framed_digest"],
        "framed_frame_sample": (sample - tensors["output.framed_sample"]).abs().max().item(),
    }  # fmt: skip

    params = vae_params("wan_tiny")
    _same("the toy VAE", _vae_config(params), meta["vae_config"])
    ours = _load_seeded(WanVAE(params), meta, meta["vae_seed"], prefix="vae_")
    small = tensors["input.small"]  # (1, 3, 1, 32, 64): the framed frame, area-resized
    video = torch.cat([small, torch.zeros(1, 3, 12, *small.shape[-2:])], dim=2)  # [frame, black frames]: 13 frames
    with torch.no_grad():
        got, _ = ours.encode(video)
    out["i2v_latent"] = (got - tensors["output.i2v_latent"]).abs().max().item()
    timeline = AudioTimeline([np.zeros(400 * 640, np.float32)], 16000, 25, 0)  # 16 s: InfiniteTalk's 81-frame clips
    out["clip_source_frames"] = [0] + [span.start - 9 for span in list(timeline.spans(72, 81))[1:]]
    out["reference_source_frames"] = tensors["output.source_frames"].tolist()
    return out


def _vae_config(params: Any) -> dict[str, Any]:
    return {"dim": params.base_dim, "z_dim": params.z_dim, "dim_mult": list(params.dim_mult),
            "num_res_blocks": params.num_res_blocks, "temperal_downsample": list(params.temporal_downsample),
            "latent_mean": list(params.latent_mean), "latent_std": list(params.latent_std)}  # fmt: skip


def audio_features() -> dict[str, Any]:
    """Whole-file features of a 30 s clip from our WanAudioStage (streamed, the file's statistics, transformers'
    current wav2vec2) against the reference's ``loudness_norm`` + ``get_embedding`` (its Wav2Vec2Model subclass
    under transformers 4.x, as recorded); toy wav2vec2, the same weights."""
    from transformers import Wav2Vec2Config

    from avatargen.families.wan.config import WanAudioFeatures
    from avatargen.families.wan.models.specs import WAV2VEC2_TINY
    from avatargen.families.wan.models.wav2vec2 import Wav2Vec2Encoder
    from avatargen.families.wan.stages.audio import WanAudioStage
    from avatargen.io.audio_stats import TrackStats
    from avatargen.modules import Module, ModuleSpec
    from avatargen.pipeline.audio_timeline import AudioTimeline
    from avatargen.runtime.placement import PlacementPlan, RandomInit

    tensors, meta = read_fixture("infinitetalk_audio")
    _same("the toy wav2vec2 config", json.loads(json.dumps(WAV2VEC2_TINY)), meta["config"])
    ours = Module.place(ModuleSpec("audio_encoder", lambda: Wav2Vec2Encoder(Wav2Vec2Config(**WAV2VEC2_TINY))),
                        RandomInit(0), PlacementPlan("none", torch.device("cpu")))  # fmt: skip
    _load_seeded(ours.model, meta, meta["seed"])
    samples = speech(meta["seconds"])
    _same("the speech", digest({"speech": torch.from_numpy(samples)}), meta["input_digests"]["speech"])
    expected = tensors["output.features"]  # (frames, layers, C)
    frames, n = expected.shape[0], len(samples)
    stage = WanAudioStage(ours, 16000, 25, WanAudioFeatures.whole, 60 * 25, 25, 81, 1, (TrackStats.of(samples),))
    timeline = AudioTimeline([samples[i : i + 16000] for i in range(0, n, 16000)], 16000, 25, 25)
    got = torch.cat([stage.windows(timeline, s, min(s + 81, frames + 3))[0, :, 2] for s in range(0, frames + 3, 81)])
    difference = (got[:frames] - expected).abs()
    return {"features": difference.max().item(), "features_mean": difference.mean().item(),
            "scale": expected.abs().max().item(), "frames": frames,
            "tail_mirrored": (got[frames : frames + 3] - expected.flip(0)[:3]).abs().max().item()}  # fmt: skip
