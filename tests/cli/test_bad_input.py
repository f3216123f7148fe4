"""The bad-input matrix through the real CLI: one clear line, exit 2, no traceback, nothing under the output name;
and odd but valid inputs that must render."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image

from tests.conftest import FAST, REPO, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import probe


def _bad_audio(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.wav"
    if kind == "missing":
        return folder / "nope.wav"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "corrupt":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 20_000, dtype=np.uint8).tobytes())
    elif kind == "truncated":  # a valid header that promises far more samples than the file holds
        write_speechlike_wav(path, 2.0)
        data = path.read_bytes()
        path.write_bytes(data[:200])
    elif kind == "folder":
        path.mkdir()
    elif kind == "no_samples":
        sf.write(path, np.zeros(0, np.float32), 16000)
    return path


def _bad_image(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.png"
    if kind == "missing":
        return folder / "nope.png"
    if kind == "not_an_image":
        path.write_text("hello, I am a text file\n")
    elif kind == "corrupt":
        write_face_png(path)
        data = bytearray(path.read_bytes())
        data[100:400] = np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8).tobytes()
        path.write_bytes(bytes(data))
    elif kind == "truncated":
        write_face_png(path)
        path.write_bytes(path.read_bytes()[:300])
    elif kind == "too_small":
        Image.new("RGB", (20, 20), (200, 150, 120)).save(path)
    return path


def _assert_bad_input(result, out: Path, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists(), "nothing may be left under the output name"


@pytest.mark.parametrize("kind", ["missing", "empty", "corrupt", "truncated", "folder", "no_samples"])
def test_bad_audio_exits_2_with_one_line(tmp_path, face_png, kind):
    audio, out = _bad_audio(kind, tmp_path), tmp_path / "o.mp4"
    _assert_bad_input(run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), *FAST), out, audio.name)


@pytest.mark.parametrize("kind", ["missing", "not_an_image", "corrupt", "truncated", "too_small"])
def test_bad_image_exits_2_with_one_line(tmp_path, speech_wav, kind):
    image, out = _bad_image(kind, tmp_path), tmp_path / "o.mp4"
    _assert_bad_input(run_cli("render", "-i", str(image), "-a", str(speech_wav), "-o", str(out), *FAST), out, image.name)


def test_a_bad_image_is_reported_before_a_bad_audio_file(tmp_path):
    # the audio file is checked beside the image (RenderSession.open_inputs): the image's error still comes first
    image, audio, out = _bad_image("corrupt", tmp_path), _bad_audio("corrupt", tmp_path), tmp_path / "o.mp4"
    _assert_bad_input(run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(out), *FAST), out, image.name)


def test_a_bad_image_is_reported_before_a_broken_checkpoint(tmp_path, speech_wav):
    # the models load beside the image (RenderSession.open_inputs, load_models_early): the image's error still comes
    # first, and the checkpoint's when the image is good
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.yaml").write_text("a2v: {attention: axial}\nvae: {decoder_widths: null}\n")
    image, out = _bad_image("corrupt", tmp_path), tmp_path / "o.mp4"
    _assert_bad_input(run_cli("render", "-i", str(image), "-a", str(speech_wav), "-o", str(out), *FAST,
                              "model.weights=checkpoint", f"model.checkpoint={broken}"), out, image.name)  # fmt: skip
    good = REPO / "examples" / "avatar_1.png"
    _assert_bad_input(run_cli("render", "-i", str(good), "-a", str(speech_wav), "-o", str(out), *FAST,
                              "model.weights=checkpoint", f"model.checkpoint={broken}"), out, "model.vae.decoder_widths=null")  # fmt: skip


def test_unwritable_output_folder_exits_2(tmp_path, face_png, speech_wav):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    out = blocker / "o.mp4"  # a folder that cannot be created, even by root
    _assert_bad_input(run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), *FAST), out, "a_file")


def test_an_ffmpeg_that_cannot_run_exits_2_saying_how_to_fix_it(tmp_path, face_png, speech_wav):
    broken = tmp_path / "ffmpeg"
    broken.write_text("#!/bin/sh\nexit 0\n")  # IMAGEIO_FFMPEG_EXE at a file that is not executable
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), *FAST,
                     env_extra={"IMAGEIO_FFMPEG_EXE": str(broken)})  # fmt: skip
    _assert_bad_input(result, out, f"ffmpeg '{broken}' is not an executable file", "unset IMAGEIO_FFMPEG_EXE")


def test_file_size_limit_mid_render_is_a_disk_space_error(tmp_path, face_png):
    audio = write_speechlike_wav(tmp_path / "a.wav", 4.0)
    out = tmp_path / "o.mp4"

    def limit_file_size() -> None:  # in the child: ffmpeg inherits it and hits EFBIG/SIGXFSZ after ~100 KB
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), *FAST, preexec_fn=limit_file_size)
    _assert_bad_input(result, out, "file-size limit")


def _checkpoint(tmp_path: Path, mutate) -> Path:
    """A checkpoint of randomly initialised modules (the default model config), changed by ``mutate(tensors)``."""
    from safetensors.torch import load_file, save_file

    from avatargen.config.loader import load_config, to_config
    from avatargen.modules import save_checkpoint
    from avatargen.families.tiny.build import module_specs

    config = to_config(load_config([]))
    path = tmp_path / "model.safetensors"
    torch.manual_seed(0)
    save_checkpoint({spec.name: spec.build() for spec in module_specs(config)}, path)
    tensors = load_file(str(path))
    mutate(tensors)
    save_file(tensors, str(path))
    return path


def _nan_in_a2v(tensors: dict) -> None:
    key = next(k for k in sorted(tensors) if k.startswith("a2v.") and k.endswith("weight") and tensors[k].ndim == 2)
    tensors[key][0, 0] = float("nan")


def _wrong_shape_in_sr(tensors: dict) -> None:
    key = next(k for k in sorted(tensors) if k.startswith("sr.") and tensors[k].ndim == 2)
    tensors[key] = torch.zeros(3, 3)


@pytest.mark.parametrize(
    "kind, needles",
    [("missing", ["none.safetensors"]), ("truncated", ["could not be read"]),
     ("wrong_shapes", ["'sr'", "mis-shaped"]), ("nan_weights", ["A2V", "NaN"])],
)  # fmt: skip
def test_broken_checkpoint_exits_2_naming_the_module(tmp_path, face_png, speech_wav, kind, needles):
    if kind == "missing":
        checkpoint = tmp_path / "none.safetensors"
    elif kind == "truncated":
        checkpoint = _checkpoint(tmp_path, lambda t: None)
        checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    elif kind == "wrong_shapes":
        checkpoint = _checkpoint(tmp_path, _wrong_shape_in_sr)
    else:
        checkpoint = _checkpoint(tmp_path, _nan_in_a2v)
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), "runtime.threads=1",
                     f"model.checkpoint={checkpoint}")  # fmt: skip
    _assert_bad_input(result, out, *needles)
    assert not list(tmp_path.glob("o.*")), "a broken checkpoint leaves nothing to resume"


@pytest.mark.parametrize("section, key, setting", [("a2v", "attention", "model.a2v.attention=full"),
                                                   ("vae", "decoder_widths", "model.vae.decoder_widths=null")])
def test_a_checkpoint_trained_for_an_older_architecture_names_the_override_it_needs(tmp_path, face_png, speech_wav,
                                                                                   section, key, setting):
    """A checkpoint folder from a recipe before frame-axial attention or the narrower decoder: its model.yaml has no
    model.a2v.attention (full attention) or no model.vae.decoder_widths (the decoder as wide as the encoder)."""
    import shutil

    from omegaconf import OmegaConf

    from avatargen.families.tiny.config import SHIPPED_CHECKPOINTS

    folder = tmp_path / "older"
    shutil.copytree(SHIPPED_CHECKPOINTS["tiny"], folder)
    model = OmegaConf.load(folder / "model.yaml")
    del model[section][key]
    OmegaConf.save(model, folder / "model.yaml")
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", str(out), "runtime.threads=1",
                     f"model.checkpoint={folder}")  # fmt: skip
    _assert_bad_input(result, out, f"trained with {setting}", f"add {setting}")


# --- odd but valid inputs ------------------------------------------------------------------------------------------


def _odd_image(kind: str, folder: Path) -> Path:
    face = Image.open(write_face_png(folder / "base.png", size=120)).convert("RGB")
    path = folder / f"{kind}.png"
    if kind == "rgba":
        face.convert("RGBA").save(path)
    elif kind == "grayscale":
        face.convert("L").save(path)
    elif kind == "palette":
        face.convert("P").save(path)
    elif kind == "16bit":
        Image.fromarray((np.asarray(face.convert("L"), np.uint16) * 257)).save(path)
    elif kind == "cmyk":
        path = folder / "cmyk.jpg"
        face.convert("CMYK").save(path)
    elif kind == "exif_rotated":
        path = folder / "rotated.jpg"
        exif = Image.Exif()
        exif[0x0112] = 6  # rotate 90 degrees on display
        face.resize((160, 120)).save(path, exif=exif)
    elif kind == "animated":
        path = folder / "animated.gif"
        face.save(path, save_all=True, append_images=[face.rotate(90)], duration=100, loop=0)
    elif kind == "huge":
        face.resize((4000, 3000)).save(path)
    return path


# Each mode is decoded in-process by tests/io/test_image.py; end to end, CMYK and a huge image run by default, the
# rest with the slow checks (a CLI render each).
_SLOW = pytest.mark.slow


@pytest.mark.parametrize("kind", [*(pytest.param(k, marks=_SLOW) for k in ("rgba", "grayscale", "palette", "16bit",
                                    "exif_rotated", "animated")), "cmyk", "huge"])  # fmt: skip
def test_odd_but_valid_images_render(tmp_path, kind):
    image = _odd_image(kind, tmp_path)
    audio = write_speechlike_wav(tmp_path / "a.wav", 0.4)
    out = tmp_path / "o.mp4"
    result = run_cli("render", "-i", str(image), "-a", str(audio), "-o", str(out), "-q", *FAST)
    assert result.returncode == 0, result.stderr
    assert probe(out)["frames"] == 10


def test_silent_audio_renders_into_a_new_folder(tmp_path, face_png):
    audio = tmp_path / "silence.wav"
    sf.write(audio, np.zeros(16000, np.float32), 16000)
    out = tmp_path / "new" / "deeper" / "o.mp4"
    result = run_cli("render", "-i", str(face_png), "-a", str(audio), "-o", str(out), "-q", *FAST)
    assert result.returncode == 0, result.stderr
    info = probe(out)
    assert info["frames"] == 25 and abs(info["audio_duration_s"] - 1.0) < 0.04



@pytest.mark.parametrize("output, says", [("nm/.mp4", "'nm/.mp4' has no name before .mp4"),
                                          ("out/", "'out' is a folder; give a file name ending in .mp4, e.g. out/talk.mp4"),
                                          ("o.mov", "'o.mov' must end in .mp4")])  # fmt: skip
def test_an_output_name_that_is_no_mp4_name_says_what_is_missing(tmp_path, face_png, speech_wav, output, says):
    (tmp_path / "out").mkdir()
    result = run_cli("render", "-i", str(face_png), "-a", str(speech_wav), "-o", output, "-q", *FAST, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith(f"error: output {says}"), result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "out" / "talk.mp4").exists()
