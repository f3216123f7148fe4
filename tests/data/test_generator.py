"""The synthetic talking-avatar generator: varied people, a mouth that follows the audio, natural motion."""

from __future__ import annotations


import numpy as np
import pytest

from avatargen.data.examples import make_clip
from avatargen.data.identity import identity_from_seed
from avatargen.data.motion import audio_envelope, motion_track, num_frames
from avatargen.data.pose import FacePose, Style, style_from_prompt
from avatargen.data.render import FaceRenderer
from avatargen.data.speech import espeak_available, procedural_speech, synthesize_speech
from tests.conftest import run_cli

SIZE = 128  # small frames keep the suite fast; the geometry is resolution-independent


def _crop(frame: np.ndarray, box) -> np.ndarray:
    x0, y0, x1, y1 = box
    return frame[y0:y1, x0:x1].astype(np.float32)


def test_identities_differ_and_render_deterministically():
    refs = [FaceRenderer(identity_from_seed(s), SIZE).render()[0].astype(np.float32) for s in range(6)]
    dists = [np.abs(a - b).mean() for i, a in enumerate(refs) for b in refs[i + 1:]]
    assert min(dists) > 10, dists
    again = FaceRenderer(identity_from_seed(3), SIZE).render()[0]
    assert np.array_equal(again, refs[3].astype(np.uint8))
    assert identity_from_seed(7) == identity_from_seed(7)


def test_mouth_follows_audio_and_stays_closed_in_silence():
    sr, fps = 16000, 25
    t = np.arange(4 * sr) / sr
    # 1 s silence, 2 s of 4 Hz syllables on a harmonic voice, 1 s silence
    syll = np.clip(np.sin(2 * np.pi * 4 * t), 0, None) ** 2 * ((t > 1) & (t < 3))
    wave = (0.3 * syll * np.sin(2 * np.pi * 150 * t)).astype(np.float32)
    env = audio_envelope(wave, sr, fps)
    assert len(env) == num_frames(len(wave), sr, fps) == 100
    poses = motion_track(env, fps, Style(), np.random.default_rng(0))
    opening = np.array([p.mouth_open for p in poses])
    assert opening[:20].max() == 0 and opening[-20:].max() == 0
    assert opening[25:75].max() > 0.8
    # no lag: the opening peaks where the energy peaks
    peaks = [i for i in range(26, 74) if env[i] > 0.5 and env[i] >= env[i - 1] and env[i] >= env[i + 1]]
    assert peaks and all(opening[i] >= opening[i - 1] and opening[i] >= opening[i + 1] for i in peaks)

    renderer = FaceRenderer(identity_from_seed(11), SIZE)
    frames = [renderer.render(p) for p in poses]
    closed = _crop(*renderer.render(FacePose()))
    change = np.array([np.abs(_crop(f, b)[: closed.shape[0], : closed.shape[1]] - closed).mean() for f, b in frames])
    silent = [np.abs(_crop(*frames[i]) - _crop(*frames[i + 1])).mean() for i in range(2, 18)]
    assert max(silent) < 4.0, silent
    assert np.corrcoef(env, change)[0, 1] > 0.5


def test_blinks_happen_and_head_motion_is_continuous():
    fps, t_frames = 25, 60 * 25  # a minute: long enough to catch a motion that resets or drifts away
    env = np.clip(np.sin(np.arange(t_frames) / 3.0), 0, None) * (np.arange(t_frames) % 200 < 150)
    poses = motion_track(env, fps, style_from_prompt("nodding"), np.random.default_rng(4))
    blink = np.array([p.blink for p in poses[:250]])
    assert (blink > 0.9).sum() >= 2  # at least two blinks in the first 10 s
    # per-frame limits: 0.006 of the image is 1.5 px at 256x256
    for name, limit, bound in (("dx", 0.006, 0.05), ("dy", 0.006, 0.05), ("roll", 0.02, 0.15), ("yaw", 0.05, 1.0),
                               ("pitch", 0.2, 1.0)):
        track = np.array([getattr(p, name) for p in poses])
        assert np.abs(np.diff(track)).max() < limit, name
        assert np.abs(track).max() <= bound, name  # bounded
        assert np.ptp(track[:250]) > 0.2 * np.ptp(track), name  # it keeps moving, no long frozen stretches


def test_looking_left_and_right_shift_features_opposite_ways():
    renderer = FaceRenderer(identity_from_seed(2), SIZE)
    env = np.zeros(10)

    def eye_x(prompt: str) -> float:
        pose = motion_track(env, 25, style_from_prompt(prompt), np.random.default_rng(0))[0]
        frame = renderer.render(pose)[0].astype(np.float32)
        dark = (frame.sum(-1) < 120)[int(SIZE * 0.3): int(SIZE * 0.45)]  # pupils and lashes in the eye band
        return float(np.nonzero(dark)[1].mean())

    left, neutral, right = eye_x("looking left"), eye_x(""), eye_x("looking right")
    assert left < neutral < right


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng not installed")
def test_espeak_speech_has_right_duration_and_is_not_silent():
    wave = synthesize_speech("Hello, this is a short test sentence.", "en-us", 170, 50, 16000)
    assert wave.dtype == np.float32 and 1.0 < len(wave) / 16000 < 4.0
    assert np.sqrt(np.mean(wave**2)) > 0.01


def test_procedural_speech_has_pauses_and_clip_frame_count_rule():
    wave = procedural_speech(np.random.default_rng(1), 6.0, 16000)
    assert len(wave) == 96000
    env = audio_envelope(wave, 16000, 25)
    assert (env == 0).sum() >= 5 and (env > 0.5).sum() >= 20
    clip = make_clip(1_000_001, 2, 1.37, size=64, prefer_espeak=False, prompt="smiling")
    assert len(clip.frames) == round(len(clip.audio) / clip.sample_rate * clip.fps) == len(clip.openness)
    assert clip.mouth_boxes.shape == (len(clip.frames), 4) and clip.reference.shape == (64, 64, 3)


def test_synth_refuses_a_users_file_or_link_and_replaces_its_own(tmp_path):
    out, kept = tmp_path / "examples", tmp_path / "notes.wav"
    out.mkdir()
    kept.write_bytes(b"the user's recording")
    (out / "0000.wav").symlink_to(kept)
    (out / "0000.json").write_text("the user's notes")
    synth = ("synth", "--out", str(out), "--count", "1", "--seconds", "0.5", "--size", "64")
    refused = run_cli(*synth)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "0000.wav' is a symbolic link; synth would replace it" in refused.stderr
    assert sorted(p.name for p in out.iterdir()) == ["0000.json", "0000.wav"]  # nothing written
    assert run_cli(*synth, "--overwrite").returncode == 0
    assert kept.read_bytes() == b"the user's recording" and not (out / "0000.wav").is_symlink()  # replaced as a link
    assert run_cli(*synth).returncode == 0, "a rerun replaces the examples it wrote (each carries avatargen's mark)"
    assert sorted(p.name for p in out.iterdir()) == ["0000.json", "0000.mp4", "0000.wav", "0000_ref.png"]
