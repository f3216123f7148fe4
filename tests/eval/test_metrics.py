"""avatargen.eval on videos made here: each metric must see what was put into the video, and only that."""

from __future__ import annotations

import subprocess
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from avatargen.errors import BadInputError
from avatargen.eval import evaluate_video, format_report

FPS = 25
SIZE = 128
SR = 16000
SECONDS = 12
HOP = SR // FPS  # audio samples per video frame
MOUTH_CENTRE = (64, 92)  # (x, y) in pixels


def _speech_envelope(rng: np.random.Generator) -> np.ndarray:
    """Syllable humps of random length, loudness and spacing, with pauses, at the audio rate -> (SECONDS * SR,)."""
    env = np.zeros(SECONDS * SR)
    t = 0.3
    while t < SECONDS - 0.4:
        if rng.random() < 0.15:
            t += rng.uniform(0.3, 0.7)  # a pause
        length = rng.uniform(0.12, 0.3)
        start, stop = int(t * SR), min(int((t + length) * SR), len(env))
        env[start:stop] = rng.uniform(0.5, 1.0) * np.sin(np.pi * np.arange(stop - start) / (length * SR))
        t += length + rng.uniform(0.03, 0.15)
    return env


def _speech_audio(env: np.ndarray) -> np.ndarray:
    t = np.arange(len(env)) / SR
    voice = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((140, 280, 420, 560), start=1))
    return (0.3 * env * voice).astype(np.float32)


def _face_frames(openness: np.ndarray) -> np.ndarray:
    """A textured face ellipse on a blue background, with a dark mouth whose height follows ``openness`` (T,)."""
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    base = np.empty((SIZE, SIZE, 3), np.float32)
    base[:] = (70, 110, 160)
    face = ((x - 64) / 40) ** 2 + ((y - 64) / 52) ** 2 < 1
    texture = rng.normal(0, 12, (SIZE, SIZE, 1)).astype(np.float32)
    base[face] = (np.array([225, 180, 150], np.float32) + texture)[face]
    for eye_x in (48, 80):
        base[((x - eye_x) / 7) ** 2 + ((y - 52) / 4) ** 2 < 1] = (40, 40, 60)
    frames = np.repeat(base[None], len(openness), axis=0)  # (T, H, W, 3)
    mx, my = MOUTH_CENTRE
    for i, o in enumerate(openness):
        height = 1.0 + 11.0 * o
        frames[i][((x - mx) / 14) ** 2 + ((y - my) / height) ** 2 < 1] = (90, 20, 30)
    return np.clip(frames, 0, 255).astype(np.uint8)


def _write_mp4(path: Path, frames: np.ndarray) -> Path:
    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
           "-s", f"{SIZE}x{SIZE}", "-r", str(FPS), "-i", "pipe:", "-c:v", "libx264", "-preset", "ultrafast",
           "-crf", "18", "-pix_fmt", "yuv420p", str(path)]  # fmt: skip
    subprocess.run(cmd, input=frames.tobytes(), check=True)
    return path


def _write_wav(path: Path, audio: np.ndarray) -> Path:
    sf.write(path, audio, SR)
    return path


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The synthetic talking video, its frames and audio, and its evaluation."""
    folder = tmp_path_factory.mktemp("talk")
    env = _speech_envelope(np.random.default_rng(7))
    frames = _face_frames(env[np.arange(SECONDS * FPS) * HOP])
    video = _write_mp4(folder / "talk.mp4", frames)
    audio_samples = _speech_audio(env)
    audio = _write_wav(folder / "talk.wav", audio_samples)
    return {"folder": folder, "frames": frames, "audio_samples": audio_samples, "video": video, "audio": audio,
            "result": evaluate_video(video, audio)}  # fmt: skip


def test_lip_sync_of_an_in_sync_video_is_offset_zero_with_high_confidence_at_the_mouth(talk: dict) -> None:
    result = talk["result"]
    assert result["frames"] == SECONDS * FPS and result["fps"] == FPS
    assert abs(result["offset_frames"]) <= 1
    assert result["sync_confidence"] > 0.5
    x0, y0, x1, y1 = result["mouth_box"]
    assert x0 <= MOUTH_CENTRE[0] <= x1 and y0 <= MOUTH_CENTRE[1] <= y1
    assert len(result["sync_curve"]) == 2 * result["sync_max_lag"] + 1


@pytest.mark.parametrize("delay", [-5, 3, 7])
def test_delaying_the_audio_by_k_frames_moves_the_offset_by_minus_k(talk: dict, delay: int) -> None:
    samples = talk["audio_samples"]
    if delay > 0:
        shifted = np.concatenate([np.zeros(delay * HOP, np.float32), samples])
    else:
        shifted = samples[-delay * HOP :]
    audio = _write_wav(talk["folder"] / f"delay{delay}.wav", shifted)
    result = evaluate_video(talk["video"], audio)
    assert abs(result["offset_frames"] + delay) <= 1  # video lags the audio by -delay frames
    assert result["sync_confidence"] > 0.4


def test_a_still_image_with_the_same_audio_has_no_sync_confidence(talk: dict) -> None:
    still = _write_mp4(talk["folder"] / "still.mp4", np.repeat(talk["frames"][:1], SECONDS * FPS, axis=0))
    result = evaluate_video(still, talk["audio"])
    assert result["sync_confidence"] < 0.1
    assert result["sync_confidence"] < talk["result"]["sync_confidence"] - 0.4
    assert result["flicker"] < 0.05


def test_motion_unrelated_to_the_audio_scores_only_what_chance_gives(talk: dict) -> None:
    grain = np.random.default_rng(5).normal(0, 6, talk["frames"].shape)  # film grain on a still face
    noisy = np.clip(talk["frames"][:1] + grain, 0, 255).astype(np.uint8)
    result = evaluate_video(_write_mp4(talk["folder"] / "grain.mp4", noisy), talk["audio"])
    assert abs(result["sync_confidence"] - result["sync_chance"]) < 0.1
    assert talk["result"]["sync_confidence"] > talk["result"]["sync_chance"] + 0.4


def test_identity_drops_when_colours_drift_and_stays_at_one_otherwise(talk: dict) -> None:
    ramp = np.linspace(0.0, 1.0, len(talk["frames"]))[:, None, None, None]  # (T, 1, 1, 1)
    drift = talk["frames"].astype(np.float32) + ramp * np.array([50.0, 0.0, -50.0])  # warmer and warmer
    drifted = _write_mp4(talk["folder"] / "drift.mp4", np.clip(drift, 0, 255).astype(np.uint8))
    reference = talk["folder"] / "reference.png"
    Image.fromarray(talk["frames"][0]).save(reference)

    steady = evaluate_video(talk["video"], talk["audio"], reference=reference)
    result = evaluate_video(drifted, talk["audio"], reference=reference)
    assert steady["identity_reference"] == "image" and talk["result"]["identity_reference"] == "first_frame"
    assert steady["identity_ratio"] > 0.95 and talk["result"]["identity_ratio"] > 0.95
    assert result["identity_ratio"] < steady["identity_ratio"] - 0.2
    assert result["identity_start"] > steady["identity_start"] - 0.05  # it drifts later, it does not start off


def test_a_hard_cut_at_a_seam_scores_far_above_a_seam_where_nothing_happens(talk: dict) -> None:
    cut_at = 150
    frames = talk["frames"].copy()
    frames[cut_at:] = np.roll(frames[cut_at:], (6, 9), axis=(1, 2))  # the face jumps to another place
    video = _write_mp4(talk["folder"] / "cut.mp4", frames)
    result = evaluate_video(video, talk["audio"], seams=[cut_at, 60])
    cut_ratio, quiet_ratio = result["seam_ratios"]
    assert cut_ratio > 5.0
    assert quiet_ratio < 2.0  # below 1 when the seam falls in a pause: still invisible
    assert result["seam_ratio"] == pytest.approx((cut_ratio + quiet_ratio) / 2, abs=1e-3)


def test_alternating_brightness_flickers_far_more_than_the_smooth_video(talk: dict) -> None:
    sign = np.where(np.arange(len(talk["frames"])) % 2 == 0, 1.0, -1.0)[:, None, None, None]
    pumped = np.clip(talk["frames"].astype(np.float32) + 8.0 * sign, 0, 255).astype(np.uint8)
    result = evaluate_video(_write_mp4(talk["folder"] / "flicker.mp4", pumped), talk["audio"])
    assert result["flicker"] > 20.0  # about 4 x 8 gray levels
    assert result["flicker"] > 10 * talk["result"]["flicker"]


def test_the_report_names_every_measured_metric(talk: dict) -> None:
    text = format_report(dict(talk["result"], seam_ratio=1.1, seam_ratios=[1.1]))
    for word in ("lip sync", "offset", "identity", "seams", "flicker"):
        assert word in text


def test_missing_or_garbage_inputs_are_bad_input(talk: dict, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    bad_png = tmp_path / "bad.png"
    bad_png.write_bytes(b"not a png at all")
    cases = [
        ((tmp_path / "missing.mp4", talk["audio"]), {}, "does not exist"),
        ((garbage, talk["audio"]), {}, "could not be opened"),
        ((talk["audio"], talk["audio"]), {}, "no video stream"),
        ((talk["video"], tmp_path / "missing.wav"), {}, "does not exist"),
        ((talk["video"], garbage), {}, "audio"),
        ((talk["video"], talk["audio"]), {"reference": bad_png}, "image"),
        ((talk["video"], talk["audio"]), {"seams": [SECONDS * FPS + 5]}, "outside"),
    ]
    for args, kwargs, words in cases:
        with pytest.raises(BadInputError, match=words) as err:
            evaluate_video(*args, **kwargs)
        assert "\n" not in str(err.value)
