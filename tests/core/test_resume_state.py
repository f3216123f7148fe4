"""A resume point is read on the CPU; before the pipeline uses it every tensor must be on the pipeline's device
(on CUDA the decoder cache is concatenated with device activations: a CPU tensor there crashes ``--resume``)."""

from __future__ import annotations

import torch

from avatargen.pipeline.checkpoint import RenderCheckpoint
from avatargen.pipeline.state import LatentWindow, RollingState


def resume_point() -> RenderCheckpoint:
    state = RollingState(n_windows={3: LatentWindow(40, torch.randn(1, 8, 4, 16, 16))},
                         i_window=LatentWindow(44, torch.randn(1, 8, 2, 16, 16)), i_index=1)  # fmt: skip
    cache = {"decoder_cache.0": torch.randn(1, 96, 2, 16, 16), "decoder_cache.1": torch.randn(1, 96, 2, 16, 16)}
    return RenderCheckpoint(frames=48, steps=7, n_chunks=4, i_chunks=2, state=state, family_state=(cache, {"decoder_cache": 2}))


def test_every_tensor_of_a_loaded_resume_point_moves_to_the_device():
    tensors, meta = resume_point().to_tensors()
    loaded = RenderCheckpoint.from_tensors(tensors, meta)  # as read from disk: CPU tensors
    device = torch.device("meta")  # a device other than the CPU, available on any machine
    moved = loaded.to(device)
    assert len(moved.tensors()) == len(loaded.tensors()) == 4
    assert all(t.device == device for t in moved.tensors())
    assert (moved.frames, moved.steps, moved.n_chunks, moved.i_chunks) == (48, 7, 4, 2)
    assert moved.state.i_window.start == 44 and moved.state.n_windows[3].start == 40 and moved.state.i_index == 1
    assert [t.shape for t in moved.tensors()] == [t.shape for t in loaded.tensors()]
    assert moved.family_state[1] == {"decoder_cache": 2}  # the family's part comes back as it saved it
    assert all(t.device.type == "cpu" for t in loaded.tensors())  # the loaded point itself is left as it was


def test_a_resume_folder_of_another_format_is_noted_and_the_render_starts_over(tmp_path):
    """Never misread: a folder written by another version (format 1 held the decoder cache in the engine's part)."""
    import json

    from avatargen.io.resume_store import ResumeStore
    from avatargen.resume import resume_point

    store = ResumeStore(tmp_path / "out.mp4")
    store.folder.mkdir()
    (store.folder / "resume.json").write_text(json.dumps({"version": 1, "fingerprint": {}, "parts": [], "checkpoints": []}))
    notes: list[str] = []
    assert resume_point(store, {}, tmp_path / "out.partial.mp4", notes.append) is None
    assert len(notes) == 1 and "another avatargen version" in notes[0] and "from the start" in notes[0]
