"""Models built on the meta device and placed in one pass run exactly as an eager build with load_state_dict did.

The reference in each test is the way modules were made before the placement pass: build the model in host memory
(seeded), ``load_state_dict`` the whole checkpoint into it, and run it. Every offload policy must give the same
outputs bit for bit, from the same checkpoint in any layout the reader accepts.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from avatargen.config import load_config, to_config
from avatargen.errors import CheckpointError
from avatargen.families.tiny.models.text_encoder import tokenize
from avatargen.models.meta import build_on_meta
from avatargen.modules import Module
from avatargen.runtime.offload import OffloadMonitor
from avatargen.runtime.placement import PlacementPlan, RandomInit, place
from avatargen.families.tiny.build import module_specs
from avatargen.families.tiny.config import SHIPPED_CHECKPOINTS

CPU = torch.device("cpu")
SHIPPED = SHIPPED_CHECKPOINTS["tiny"]


@pytest.fixture(scope="module")
def specs():
    return {spec.name: spec for spec in module_specs(to_config(load_config()))}


def forward(name: str, model: torch.nn.Module) -> list[torch.Tensor]:
    """Each model on fixed inputs shaped as its stage feeds it."""
    g = torch.Generator().manual_seed(7)
    if name == "audio_encoder":
        return [model(torch.randn(1, 16000, generator=g))]
    if name == "text_encoder":
        return list(model(tokenize(["a calm speaker"], 64)))
    if name == "vae":
        video, cache = model.decode(torch.randn(1, 8, 3, 16, 16, generator=g))
        return [model.encode(torch.rand(1, 3, 128, 128, generator=g) * 2 - 1), video, *cache.frames]
    if name == "sr":
        return [model(torch.randn(2, 8, 16, 16, generator=g), torch.randn(2, 8, 32, 32, generator=g))]
    x_t, given = torch.randn(1, 8, 3, 16, 16, generator=g), torch.randn(1, 8, 3, 16, 16, generator=g)
    mask = torch.tensor([[True, False, False]])
    ref, audio, text = torch.randn(1, 8, 16, 16, generator=g), torch.randn(1, 3, 128, generator=g), torch.randn(1, 128, generator=g)
    return [model(x_t, torch.tensor([0.5]), given, mask, ref, audio, text) for _ in range(2)]


def eager_outputs(spec, tensors: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The old path: a full host build, the whole state dict loaded into it, frozen for inference (as Module did:
    a parameter that requires grad takes a different, unfused kernel path for the same linear)."""
    torch.manual_seed(0)
    model = spec.build()
    model.load_state_dict(tensors, strict=True)
    model.eval().requires_grad_(False)
    with torch.inference_mode():
        return forward(spec.name, model)


def placed_outputs(module: Module) -> list[torch.Tensor]:
    with torch.inference_mode(), module.active() as model:
        return forward(module.name, model)


@pytest.mark.parametrize("policy", ["none", "model", "block"])
def test_placed_modules_equal_the_eager_build_bit_for_bit(specs, policy):
    for name, spec in specs.items():
        expected = eager_outputs(spec, load_file(str(SHIPPED / f"{name}.safetensors")))
        module = Module.load(spec, SHIPPED, PlacementPlan(policy, CPU))
        got = placed_outputs(module)
        assert len(got) == len(expected)
        for a, b in zip(expected, got):
            assert torch.equal(a, b), (name, policy)
        assert all(t.device.type == "cpu" for t in [*module.model.parameters(), *module.model.buffers()])


def test_random_weights_on_meta_equal_the_seeded_eager_build(specs):
    for name, spec in specs.items():
        torch.manual_seed(11)
        eager = spec.build().state_dict()
        for policy in ("none", "block"):
            placed = Module.random(spec, 11, PlacementPlan(policy, CPU)).model.state_dict()
            assert eager.keys() == placed.keys()
            assert all(torch.equal(eager[k], placed[k]) for k in eager), (name, policy)


class _ForgetfulInit(torch.nn.Module):
    """A layer whose own init forgets one parameter (built on meta, nothing fills it)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.forgotten = torch.nn.Parameter(torch.zeros(1, 4))


@pytest.mark.parametrize("policy", ["none", "block"])
def test_a_parameter_the_random_init_forgets_is_named_not_left_as_garbage(policy):
    """Uninitialised memory is often zero and sometimes not: a forgotten parameter must fail every time, by name."""
    model = build_on_meta(_ForgetfulInit)
    with pytest.raises(RuntimeError, match="forgotten unset"):
        place(model, RandomInit(0), PlacementPlan(policy=policy), OffloadMonitor(policy, 2, CPU), "forgetful")


def test_an_index_sharded_checkpoint_folder_loads(tmp_path, specs):
    tensors = load_file(str(SHIPPED / "a2v.safetensors"))
    keys = sorted(tensors)
    halves = {"a2v-00001-of-00002.safetensors": keys[: len(keys) // 2], "a2v-00002-of-00002.safetensors": keys[len(keys) // 2 :]}
    for file, names in halves.items():
        save_file({k: tensors[k] for k in names}, str(tmp_path / file))
    weight_map = {k: file for file, names in halves.items() for k in names}
    (tmp_path / "a2v.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    module = Module.load(specs["a2v"], tmp_path, PlacementPlan("block", CPU))
    assert all(torch.equal(a, b) for a, b in zip(eager_outputs(specs["a2v"], tensors), placed_outputs(module)))
    (tmp_path / "a2v-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="names files that are not there .*a2v-00002-of-00002.safetensors"):
        Module.load(specs["a2v"], tmp_path)


def test_weights_only_pth_loads_and_a_pickle_is_refused_in_one_line(tmp_path, specs):
    tensors = load_file(str(SHIPPED / "sr.safetensors"))
    torch.save({f"sr.{k}": v for k, v in tensors.items()}, tmp_path / "all.pth")
    module = Module.load(specs["sr"], tmp_path / "all.pth")
    assert all(torch.equal(a, b) for a, b in zip(eager_outputs(specs["sr"], tensors), placed_outputs(module)))
    torch.save({"sr.config": CheckpointError("not a tensor"), **{f"sr.{k}": v for k, v in tensors.items()}}, tmp_path / "pickle.pth")
    with pytest.raises(CheckpointError) as error:
        Module.load(specs["sr"], tmp_path / "pickle.pth")
    message = str(error.value)
    assert "\n" not in message and "is not a weights-only .pth" in message and "pickle.pth" in message


def test_weights_are_cast_to_the_run_dtype_where_they_land(specs):
    module = Module.load(specs["a2v"], SHIPPED, PlacementPlan("block", CPU, torch.bfloat16))
    assert {p.dtype for p in module.model.parameters()} == {torch.bfloat16}
    stored = load_file(str(SHIPPED / "a2v.safetensors"))  # float16 on disk
    weight = module.model.blocks[0].attn.qkv.weight if hasattr(module.model.blocks[0].attn, "qkv") else next(module.model.blocks[0].parameters())
    name = next(k for k, v in module.model.named_parameters() if v is weight)
    assert torch.equal(weight, stored[name].to(torch.bfloat16))
