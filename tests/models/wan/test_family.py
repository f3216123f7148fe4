"""The Wan-family model sets: full-size builds on the meta device from the configs, InfiniteTalk's timestep shift,
the guidance's DiT passes, the byte-level tokenizer of wan_tiny."""

from __future__ import annotations

import math

import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.wan.models.specs import family_spec
from avatargen.modules import Module, ModuleSpec
from avatargen.families.wan.models.dit import WanDiT
from avatargen.families.wan.build import wan_parts
from avatargen.runtime.placement import build_on_meta
from avatargen.families.wan.stages.context import WanReference
from avatargen.families.wan.stages.sampler import Guidance, WanSamplerStage, shifted_timesteps
from avatargen.families.wan.stages.text import ByteTokenizer


def test_infinitetalk_at_full_size_builds_on_meta_with_the_documented_sizes() -> None:
    config = to_config(load_config(["model=infinitetalk", "model.weights=random"]))
    counts = {}
    for part in wan_parts(config, None):
        model = build_on_meta(part.build)
        real = [k for k, t in model.state_dict().items() if t.device.type != "meta"]
        assert real == (["masked_spec_embed"] if part.name == "audio_encoder" else [])  # transformers makes 768 floats
        counts[part.name] = sum(t.numel() for t in model.state_dict().values())
    assert counts["dit"] == 18_882_046_784  # docs/models.md: Wan2.1 I2V 14B + the InfiniteTalk adapter
    assert counts["text_encoder"] == 5_680_910_336 and counts["image_encoder"] == 632_076_800
    assert 94e6 < counts["audio_encoder"] < 96e6  # wav2vec2-base


def test_timesteps_follow_infinitetalks_shift() -> None:
    times = shifted_timesteps(4, 7.0)
    assert times[0] == 1000.0 and times[-1] == 0.0 and len(times) == 5
    u = (1000 - 333) / 1000  # linspace(1000, 1, 4)[1] / 1000
    assert math.isclose(times[1], 1000 * 7 * u / (1 + 6 * u))
    assert all(a > b for a, b in zip(times, times[1:]))


def test_guidance_runs_three_dit_passes_per_step_or_two_without_text_guidance() -> None:
    spec = family_spec("wan_tiny")
    dit = Module.random(ModuleSpec("dit", lambda: WanDiT(spec.dit)), 0)
    calls = []
    dit.model.register_forward_hook(lambda *_: calls.append(1))
    latents, h = 4, 8
    reference = WanReference(text=torch.randn(1, 3, 32), negative=torch.randn(1, 2, 32), clip_tokens=torch.randn(1, 5, 32),
                             condition=torch.randn(1, 20, latents, h, h), image=torch.zeros(1, 3, 1, 64, 64))  # fmt: skip
    audio = torch.randn(1, 13, 5, 2, 16)
    motion = torch.randn(1, 16, 2, h, h)
    for scales, passes in ((Guidance(5.0, 4.0), 3), (Guidance(1.0, 2.0), 2)):
        calls.clear()
        out = WanSamplerStage(dit, 2, 7.0, scales).sample(reference, audio, motion, torch.randn(1, 16, latents, h, h))
        assert len(calls) == 2 * passes
        assert torch.equal(out[:, :, :2], motion)  # the motion frames' latents stay pinned


def test_byte_tokenizer_pads_to_the_text_length_with_eos() -> None:
    ids, mask = ByteTokenizer(8)("hi")
    assert ids.tolist() == [[ord("h") + 3, ord("i") + 3, 1, 0, 0, 0, 0, 0]] and mask.sum() == 3
    ids, mask = ByteTokenizer(4)("a long prompt")
    assert ids[0, -1] == 1 and mask.sum() == 4


def test_a_tokenizer_folder_is_read_with_autotokenizer_padded_to_the_text_length(tmp_path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from avatargen.families.wan.stages.text import FolderTokenizer

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3, "talking": 4, "face": 5}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(tmp_path / "tok")
    ids, mask = FolderTokenizer(tmp_path / "tok", 6)("a   talking\nface")  # whitespace cleaned as the reference does
    assert ids.tolist() == [[3, 4, 5, 0, 0, 0]] and mask.tolist() == [[1, 1, 1, 0, 0, 0]]
