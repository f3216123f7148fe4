"""`avatargen render model=wan_tiny`: the InfiniteTalk code path (wav2vec2, umT5, CLIP, guided DiT sampling, motion
frames, the VAE decode stream carried across clips) end to end through the real CLI, checked by ffmpeg."""

from __future__ import annotations

import json

from tests.conftest import FAST, FrameList, engine_of, run_cli, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames, probe
from avatargen.pipeline.run import RenderRun


def test_wan_tiny_renders_a_playable_mp4_with_one_frame_per_audio_frame(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "speech.wav", 1.5)
    out = tmp_path / "out.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "--json", "--quiet",
                     "model=wan_tiny", *FAST)  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # 1.5 s at 25 fps = 38 frames (37.5 rounded up); wan_tiny clips are 13 frames, 5 of them motion: 8 new per clip.
    assert report["frames"] == 38 and report["chunks"] == 5
    info = probe(out)
    assert (info["video_codec"], info["audio_codec"]) == ("h264", "aac")
    assert (info["width"], info["height"]) == (64, 64)
    assert info["frames"] == 38
    frames = decode_frames(out)
    assert frames.std() > 1.0  # the decoder's output, not a blank video


def test_infinitetalk_without_its_weights_folder_fails_in_one_line_naming_the_key(tmp_path, face_png, speech_wav):
    out = tmp_path / "out.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), "model=infinitetalk",
                     f"model.checkpoint={tmp_path / 'weights'}", "runtime.threads=1")  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and "model.checkpoint" in lines[0] and "Traceback" not in result.stderr
    assert not out.exists()


def test_wan_tiny_renders_from_a_downloaded_layout_with_a_lora_merged_at_load(tmp_path, face_png):
    import torch
    from safetensors.torch import save_file

    from tests.models.wan.wan_tiny_folder import write_wan_tiny_folder

    root = write_wan_tiny_folder(tmp_path / "weights")
    audio = write_speechlike_wav(tmp_path / "speech.wav", 0.25)
    generator = torch.Generator().manual_seed(1)
    lora = tmp_path / "lora.safetensors"
    save_file({"diffusion_model.blocks.0.ffn.0.lora_down.weight": torch.randn(2, 64, generator=generator),
               "diffusion_model.blocks.0.ffn.0.lora_up.weight": torch.randn(128, 2, generator=generator)}, lora)  # fmt: skip
    videos = []
    for extra in ([], [f"model.wan.lora=[{lora}]"]):
        out = tmp_path / f"out{len(videos)}.mp4"
        result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "--quiet", "model=wan_tiny",
                         "model.weights=checkpoint", f"model.checkpoint={root}", "runtime.threads=1", *extra)  # fmt: skip
        assert result.returncode == 0, result.stderr
        videos.append(decode_frames(out).astype(int))
    assert videos[0].shape == videos[1].shape == (6, 64, 64, 3)
    assert abs(videos[0] - videos[1]).mean() > 0.5  # the LoRA's update is in the weights the render ran


def test_colour_correction_moves_every_frame_to_the_reference_lab_statistics():
    """On by default as in the reference (``model.wan.color_correction=1``): every frame's Lab mean is the
    reference's (scikit-image's Lab as the oracle); ``0`` turns it off."""
    import numpy as np
    import torch
    from skimage.color import rgb2lab

    from avatargen.config.loader import load_config, to_config
    from avatargen.pipeline.build import place_models, pipeline_for
    from avatargen.runtime.distributed import ParallelContext, world_info

    torch.set_num_threads(1)
    reference = np.zeros((64, 64, 3), dtype=np.uint8)
    reference[:], reference[16:48, 16:48] = (190, 110, 70), (120, 170, 60)  # warm, a green square: far from mid-grey
    target = rgb2lab(reference / 255.0).reshape(-1, 3).mean(axis=0)
    audio = [np.sin(np.arange(8000) / 10).astype(np.float32)]  # 0.5 s
    distance = {}
    for strength in ("0", "1"):
        config = to_config(load_config(["model=wan_tiny", f"model.wan.color_correction={strength}",
                                        "model.wan.sampling_steps=1"]))  # fmt: skip
        models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
        sink = FrameList()
        pipeline_for(config, models, engine_of(config)).render(reference, audio, [sink])
        video = sink.video()  # (T, 64, 64, 3)
        assert video.shape[0] == 13
        means = np.stack([rgb2lab(frame / 255.0).reshape(-1, 3).mean(axis=0) for frame in video])  # (T, 3)
        distance[strength] = np.abs(means - target).max()
    assert distance["1"] < 1.5  # L, a, b within 1.5 of the reference's in every frame (uint8 rounding, clipping)
    assert distance["0"] > 10.0  # untrained weights alone are nowhere near it


def test_block_offload_streams_the_dit_and_umt5_and_gives_the_same_frames():
    import numpy as np
    import torch

    from avatargen.config.loader import load_config, to_config
    from avatargen.pipeline.build import place_models, pipeline_for
    from avatargen.runtime.distributed import ParallelContext, world_info

    torch.set_num_threads(1)
    reference = np.full((64, 64, 3), 128, dtype=np.uint8)
    audio = [np.sin(np.arange(4000) / 7).astype(np.float32)]  # 0.25 s
    videos, policies = [], {}
    for offload in ("none", "block"):
        config = to_config(load_config(["model=wan_tiny", f"runtime.offload={offload}"]))
        models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
        policies[offload] = {m.name: m.offload for m in models.all()}
        sink = FrameList()
        pipeline_for(config, models, engine_of(config)).render(reference, audio, [sink])
        videos.append(sink.video())
    assert policies["block"] == {"audio_encoder": "model", "text_encoder": "block", "image_encoder": "model",
                                 "vae": "model", "dit": "block"}  # fmt: skip
    assert videos[0].shape == (6, 64, 64, 3) and np.array_equal(videos[0], videos[1])


def test_the_state_between_clips_does_not_grow_with_the_duration():
    import numpy as np
    import torch

    from avatargen.config.loader import load_config, to_config
    from avatargen.pipeline.schedule import CheckpointGrid
    from avatargen.pipeline.build import place_models, pipeline_for
    from avatargen.runtime.distributed import ParallelContext, world_info

    torch.set_num_threads(1)
    config = to_config(load_config(["model=wan_tiny", "model.wan.sampling_steps=1"]))
    models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
    sizes = []
    audio = [np.sin(np.arange(16000 * 3) / 9).astype(np.float32)]  # 3 s = 75 frames: 13 + 8 x 8, 9 clips
    on_checkpoint = lambda point: sizes.append(sum(t.numel() * t.element_size() for t in point.tensors()))  # noqa: E731
    stats = pipeline_for(config, models, engine_of(config)).render(np.full((64, 64, 3), 90, dtype=np.uint8), audio, [FrameList()],
                                               run=RenderRun(checkpoints=CheckpointGrid(8, 3), on_checkpoint=on_checkpoint))  # fmt: skip
    assert stats.n_chunks == 9 and len(sizes) == 8  # a resume point after every clip but the last (frames 13, 21, ...)
    assert len(set(sizes)) == 1  # the motion frames and the decoder's past: the same bytes after clip 1 and clip 8


def test_the_first_clip_starts_from_the_reference_as_one_given_frame():
    import numpy as np
    import torch

    from avatargen.config.loader import load_config, to_config
    from avatargen.pipeline.build import place_models, pipeline_for
    from avatargen.families.wan.chunks import to_uint8
    from avatargen.runtime.distributed import ParallelContext, world_info
    from avatargen.families.wan.framing import pixels_to_unit_range

    torch.set_num_threads(1)
    reference = np.zeros((64, 64, 3), dtype=np.uint8)
    reference[:], reference[8:40, 20:52] = (200, 90, 60), (40, 160, 210)
    config = to_config(load_config(["model=wan_tiny", "model.wan.sampling_steps=2", "model.wan.color_correction=0"]))
    models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
    sink = FrameList()
    pipeline_for(config, models, engine_of(config)).render(reference, [np.sin(np.arange(8000) / 10).astype(np.float32)], [sink])  # 0.5 s
    video = sink.video()
    assert video.shape[0] == 13  # one clip, every frame of it shown (the given frame is the video's first)
    with torch.inference_mode(), models.vae.active() as vae:
        latent, _ = vae.encode(pixels_to_unit_range(reference, torch.device("cpu")))  # (1, z, 1, 8, 8)
        round_trip = to_uint8(vae.decode(latent)[0])[0]  # (64, 64, 3): the reference through the VAE
    assert np.array_equal(video[0], round_trip)
    # Only that one frame is given: the rest of the clip is generated, not the reference held still.
    assert all(np.abs(frame.astype(int) - round_trip).mean() > 2.0 for frame in video[1:])


def test_bfloat16_renders_on_a_cpu():
    """``model.wan.dtype=bfloat16`` (InfiniteTalk's dtype) renders on a CPU: every model runs in the dtype its
    weights need (the CLIP tower's LayerNorms failed with a mixed-dtype error)."""
    import numpy as np
    import torch

    from avatargen.config.loader import load_config, to_config
    from avatargen.pipeline.build import place_models, pipeline_for
    from avatargen.runtime.distributed import ParallelContext, world_info

    torch.set_num_threads(1)
    config = to_config(load_config(["model=wan_tiny", "model.wan.dtype=bfloat16", "model.wan.sampling_steps=1"]))
    models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
    assert next(models.dit.model.parameters()).dtype == torch.bfloat16
    sink = FrameList()
    pipeline_for(config, models, engine_of(config)).render(np.full((64, 64, 3), 128, dtype=np.uint8), [np.zeros(4000, np.float32)], [sink])
    assert sink.video().shape == (6, 64, 64, 3)


def test_multitalk_conditions_each_later_clip_on_its_motion_frames():
    """``model=multitalk``'s long-video loop (``model.wan.clip_condition=motion``): a clip after the first is
    conditioned on its motion frames (the I2V mask marks them, the CLIP tokens are the last one's), not on the
    reference as InfiniteTalk's are; the first clip is the same."""
    import numpy as np
    import torch

    from avatargen.config.loader import load_config, to_config
    from avatargen.families.wan.stages.context import WanContextStage
    from avatargen.pipeline.build import place_models, pipeline_for
    from avatargen.runtime.distributed import ParallelContext, world_info

    torch.set_num_threads(1)
    reference = np.zeros((64, 64, 3), dtype=np.uint8)
    reference[:], reference[8:40, 20:52] = (200, 90, 60), (40, 160, 210)
    audio = [np.sin(np.arange(12000) / 10).astype(np.float32)]  # 0.75 s: 19 frames, two clips
    videos, given = {}, []
    original = WanContextStage.encode_given
    WanContextStage.encode_given = lambda self, frames: given.append(frames.shape[2]) or original(self, frames)
    try:
        for mode in ("reference", "motion"):
            config = to_config(load_config(["model=wan_tiny", "model.wan.sampling_steps=1", f"model.wan.clip_condition={mode}"]))
            models = place_models(config, engine_of(config), torch.device("cpu"), ParallelContext(world_info()))
            sink = FrameList()
            pipeline_for(config, models, engine_of(config)).render(reference, audio, [sink])
            videos[mode] = sink.video().astype(int)
    finally:
        WanContextStage.encode_given = original
    assert given == [1, 1, 5]  # the reference (each render), then the 5 motion frames of the second clip
    assert np.array_equal(videos["motion"][:13], videos["reference"][:13])
    assert np.abs(videos["motion"][13:] - videos["reference"][13:]).mean() > 0.1  # one step of untrained weights
