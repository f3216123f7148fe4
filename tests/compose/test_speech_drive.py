"""A photograph's mouth opens with the speech: shut in silence from the frame the sound stops, open from the frame it
starts (no lag), the same levels however the audio arrives, narrower on rounded vowels; a mouth open in the picture
is closed before it is driven."""

from __future__ import annotations

import math

import numpy as np
import pytest

from avatargen.compose.mouth_close import OPEN_GAP, close_mouth, inner_gap
from avatargen.compose.speech_drive import AJAR_LEVEL, SpeechDrive, frame_levels, frame_shapes
from avatargen.face.choice import reference_lips
from avatargen.face.detector import shared_detector
from tests.face import photos

RATE, FPS = 16000, 25
HOP = RATE // FPS


def _voice(seconds: float, top: float = 4000.0) -> np.ndarray:
    """A buzz at 180 Hz with its harmonics up to ``top`` Hz, falling 6 dB an octave (a vowel's source, roughly)."""
    t = np.arange(int(seconds * RATE)) / RATE
    harmonics = np.arange(1, int(top // 180) + 1)
    wave = (np.sin(2 * np.pi * 180 * harmonics[:, None] * t) / harmonics[:, None]).sum(axis=0)
    return wave / np.abs(wave).max()


def _bursts() -> tuple[np.ndarray, np.ndarray]:
    """2 s of a voiced tone in bursts (frames 10-19 and 30-34 loud, 25-29 10 dB quieter) and which frames are
    silent."""
    envelope = np.zeros(50)
    envelope[10:20], envelope[25:30], envelope[30:35] = 1.0, 0.3, 1.0
    wave = _voice(2.0) * np.repeat(envelope, HOP)
    return wave.astype(np.float32), envelope == 0


def test_the_mouth_opens_and_shuts_with_the_sound_in_the_same_frame():
    wave, silent = _bursts()
    levels = frame_levels([wave], RATE, FPS)
    assert len(levels) == 50
    assert levels[10] > 0.5 and levels[19] > 0.5 and levels[30] > 0.5  # the first and last loud frames: open
    inside = silent.copy()
    inside[[9, 20, 35]] = False  # the frames just beside a burst hear half a frame of it
    assert levels[inside].max() == 0.0  # shut in silence
    assert 0.0 < levels[27] < 0.5 * levels[15]  # quieter speech opens less


def test_the_levels_do_not_depend_on_how_the_audio_is_cut():
    wave, _ = _bursts()
    whole = frame_levels([wave], RATE, FPS)
    pieces = frame_levels([wave[i : i + 777] for i in range(0, len(wave), 777)], RATE, FPS)
    np.testing.assert_allclose(pieces, whole, atol=1e-9)
    drive = SpeechDrive(lambda: iter([wave]), RATE, FPS)
    np.testing.assert_allclose(drive.levels(45, 10), np.r_[whole[45:], np.zeros(5)])  # past the end: shut


def test_the_lips_meet_on_a_hum_as_loud_as_the_vowels_around_it():
    """An m between vowels is as loud as they are but has no high frequencies (its sound leaves through the nose,
    the lips shut): the mouth shuts on it, in its own frames, and opens on the vowels either side."""
    vowel, hum = _voice(0.4), _voice(0.2, top=400.0)  # frames 0-9, 10-14, 15-24
    wave = np.concatenate([vowel, hum * np.sqrt(np.mean(vowel**2) / np.mean(hum**2)), vowel]).astype(np.float32)
    levels = frame_levels([wave], RATE, FPS)
    decibels = 10 * np.log10([np.mean(part**2) for part in (wave[: 10 * HOP], wave[10 * HOP : 15 * HOP])])
    assert abs(decibels[0] - decibels[1]) < 0.5  # as loud
    assert levels[1:9].min() > 0.5 and levels[16:24].min() > 0.5  # open on the vowels ...
    assert levels[11:14].max() == 0.0  # ... shut on the hum, from its second frame to its last but one


def _hiss_between_vowels(under_db: float, lead: int = 0) -> np.ndarray:
    """0.4 s of a bright vowel, 0.2 s of hiss over 4 kHz ``under_db`` under it, the vowel again (frames 10-14: s);
    ``lead`` samples more of the vowel first (half a frame: the hiss starts in the middle of frame 10)."""
    t = np.arange(int(0.4 * RATE) + lead) / RATE
    harmonics = np.arange(1, 4000 // 180 + 1)[:, None]
    vowel = (np.sin(2 * np.pi * 180 * harmonics * t) / np.sqrt(harmonics)).sum(axis=0)  # 3 dB an octave: formants
    spectrum = np.fft.rfft(np.random.default_rng(0).normal(size=int(0.2 * RATE)))
    spectrum[np.fft.rfftfreq(int(0.2 * RATE), 1 / RATE) < 4000] = 0.0
    hiss = np.fft.irfft(spectrum)
    hiss *= np.sqrt(np.mean(vowel**2) / np.mean(hiss**2)) * 10 ** (-under_db / 20)
    return (np.concatenate([vowel, hiss, vowel[lead:]]) / np.abs(vowel).max()).astype(np.float32)


def test_a_faint_hiss_keeps_the_mouth_open():
    """A faint s between bright vowels (18 dB under them): as dull below 4 kHz as a stop's closure (16 dB under their
    energy over 1 kHz), but hissing above it, where the lips are apart: the mouth stays a little open there."""
    levels = frame_levels([_hiss_between_vowels(18.0)], RATE, FPS)
    assert levels[11:14].min() > 0.05, levels[9:16]  # 0 where a hiss counted as a closure


def test_a_weak_consonant_after_a_vowel_leaves_the_mouth_ajar_however_the_frames_are_asked_for():
    """A hiss 22 dB under the vowel is nearly as quiet as a pause (its loudness alone: level 0.02), yet a mouth that
    just said a vowel stays a little apart on it (its first two frames), and asked one frame at a time, as a live
    stream asks, the levels are the same."""
    wave = _hiss_between_vowels(22.0)
    levels = frame_levels([wave], RATE, FPS)
    assert levels[11:13].min() >= 0.15 - 1e-9, levels[9:16]  # 0.02 before the ajar floor
    drive = SpeechDrive(None, RATE, FPS)
    drive.feed(wave)
    drive.end()
    np.testing.assert_allclose(np.concatenate([drive.levels(k, 1) for k in range(len(levels))]), levels, atol=1e-9)


def test_a_frame_half_vowel_half_faint_fricative_opens_for_the_vowel():
    """A faint fricative (noise over 4 kHz, 33 dB under the vowels: a weak th or f) holds the lips just apart, but
    a frame whose first half is still the vowel opens halfway from there to the vowel's level, and the frame after
    the fricative, half vowel again, alike (held at AJAR_LEVEL, a 30-60 ms vowel beside a th never opened)."""
    levels = frame_levels([_hiss_between_vowels(33.0, lead=HOP // 2)], RATE, FPS)  # the hiss: frames 10.5-15.5
    assert levels[11:15].max() <= AJAR_LEVEL, levels[9:17]
    assert levels[10] >= 0.3 and levels[15] >= 0.3, levels[9:17]  # 0.15 when either half frame held the lips
    assert levels[10] < 0.75 * levels[9] and levels[15] < 0.75 * levels[16]  # not the whole vowel's opening


def test_silence_keeps_the_mouth_shut():
    assert frame_levels([np.zeros(RATE, np.float32)], RATE, FPS).max() == 0.0


# Vowels' first three formants (Hz; Peterson and Barney's men): rounded o, u; spread i, e; open a.
FORMANTS = {"i": (270, 2290, 3010), "e": (530, 1840, 2480), "a": (730, 1090, 2440), "o": (570, 840, 2410),
            "u": (300, 870, 2240)}  # fmt: skip


def _vowels(names: str, seconds: float = 0.6) -> np.ndarray:
    """Each vowel of ``names`` voiced at 120 Hz for ``seconds`` (harmonics under resonance peaks at its formants),
    all at the same RMS, then as long a pause."""
    t = np.arange(int(seconds * RATE)) / RATE
    parts = []
    for name in names:
        harmonics = 120.0 * np.arange(1, 33)
        gain = sum(1.0 / (1.0 + ((harmonics - f) / (60.0 + 0.05 * f)) ** 2) for f in FORMANTS[name]) / harmonics**0.5
        wave = (gain[:, None] * np.sin(2 * np.pi * harmonics[:, None] * t)).sum(axis=0)
        parts += [0.1 * wave / np.sqrt((wave**2).mean()), np.zeros_like(t)]
    return np.concatenate(parts).astype(np.float32)


def _middles(names: str, seconds: float = 0.6) -> list[int]:
    """The video frame in the middle of each vowel of ``_vowels(names, seconds)``."""
    return [int((2 * k + 0.5) * seconds * FPS) for k in range(len(names))]


def test_rounded_vowels_read_round_spread_and_open_ones_do_not_and_pauses_neither():
    track = _vowels("iuaoeu")
    levels, roundness = frame_shapes([track], RATE, FPS)
    middles = dict(zip("iuaoeu", _middles("iuaoeu")))
    assert min(roundness[middles[v]] for v in "uo") > 0.4
    assert max(roundness[middles[v]] for v in "iea") == 0.0
    assert roundness[levels == 0].max() == 0.0
    pieces = frame_shapes([track[i : i + 999] for i in range(0, 20 * RATE, 999)], RATE, FPS)
    np.testing.assert_allclose(pieces[1], roundness, atol=1e-9)  # however the audio arrives


def test_a_rounded_vowel_draws_the_photos_open_mouth_narrower(tmp_path):
    import soundfile as sf

    from avatargen.config.loader import load_config, to_config
    from avatargen.io.image import load_reference, save_png
    from avatargen.render import compositor_for

    dlib = pytest.importorskip("dlib", reason="the mouth's corners are found by dlib's 68 landmarks (avatargen[eval])")
    from avatargen.face.detector import face_model_folder

    sf.write(tmp_path / "vowels.wav", _vowels("iauieu"), RATE)
    save_png(tmp_path / "astronaut.png", photos.astronaut())
    config = to_config(load_config(["pipeline.idle_motion.head_motion=false", "pipeline.idle_motion.blinks_per_minute=0"]))
    loaded = load_reference(tmp_path / "astronaut.png", 256, "face", lambda line: None)
    compositor = compositor_for(loaded, config, warn=lambda line: None, speech=tmp_path / "vowels.wav")
    landmarks = dlib.shape_predictor(str(face_model_folder() / "shape_predictor_68_face_landmarks.dat"))
    face = max(dlib.get_frontal_face_detector()(compositor.background, 1), key=lambda box: box.width())
    widths = {}
    for vowel, frame in zip("iauieu", _middles("iauieu")):
        out = compositor.compose(loaded.square[None], frame)[0]  # the speech opens it alike on every vowel
        points = landmarks(out, face)
        widths.setdefault(vowel, []).append(math.hypot(points.part(54).x - points.part(48).x,
                                                       points.part(54).y - points.part(48).y))  # fmt: skip
    assert max(widths["u"]) < 0.95 * min(widths["i"] + widths["a"] + widths["e"]), widths  # 40 px against 44


def test_a_smile_is_closed_and_the_rest_of_the_picture_kept():
    picture = photos.astronaut()
    lips = reference_lips(picture, shared_detector().find(picture)).lips
    assert inner_gap(lips) > OPEN_GAP  # her smile shows her teeth
    closed, shut = close_mouth(picture, lips)
    assert inner_gap(shut) < 0.01
    changed = np.abs(closed.astype(int) - picture).max(axis=2) > 0
    ys, xs = np.nonzero(changed)
    assert changed.sum() > 100  # the lips moved over the teeth ...
    reach = 2.6 * lips.width  # ... and nothing far from the mouth did
    assert np.hypot(xs - lips.centre[0], ys - lips.centre[1]).max() < reach
    grace = photos.grace_hopper()
    still = reference_lips(grace, shared_detector().find(grace)).lips
    assert inner_gap(still) < OPEN_GAP and close_mouth(grace, still)[0] is grace  # closed lips: the picture as it is


def test_a_mouth_open_mid_scream_closes_into_lips_not_a_swollen_band_of_its_inside():
    """Mid-scream, the face mesh's inner contour stops short of the lips on a tongue and palate as red as a lip: what
    it left between the contours was closed into a thick dark-red band (a swollen lip, a bruise under it). The inner
    edges now move out over what looks like the inside first: half as much of it is left in the closed mouth."""
    from avatargen.numeric import column_median

    picture = photos.screaming()
    lips = reference_lips(picture, shared_detector().find(picture)).lips
    inside = column_median(picture[270:310, 245:290].reshape(-1, 3).astype(float))  # the palate and the tongue
    closed, shut = close_mouth(picture, lips)
    (x, y), width = lips.centre, lips.width
    mouth = closed[int(y - 0.25 * width) : int(y + 0.35 * width), int(x - 0.4 * width) : int(x + 0.4 * width)]
    left = (np.linalg.norm(mouth.reshape(-1, 3) - inside, axis=1) < 40).mean()
    assert inner_gap(shut) < 0.02 and left < 0.12, left  # 0.09 (the mesh's contour as it is: 0.18)


def test_a_photo_driven_by_the_speech_gives_the_same_frames_however_they_are_batched(tmp_path):
    """Resume and chunking: frame t's opening is a function of t and the audio, not of the batch it came in."""
    import soundfile as sf

    from avatargen.compose.mouth_warp import MouthWarp
    from avatargen.config.loader import load_config, to_config
    from avatargen.io.image import load_reference, save_png
    from avatargen.render import compositor_for

    wave, _ = _bursts()
    sf.write(tmp_path / "speech.wav", wave, RATE)
    save_png(tmp_path / "astronaut.png", photos.astronaut())
    config = to_config(load_config(["pipeline.idle_motion.head_motion=false", "pipeline.idle_motion.blinks_per_minute=0"]))
    loaded = load_reference(tmp_path / "astronaut.png", 256, "face", lambda line: None)
    compositor = compositor_for(loaded, config, warn=lambda line: None, speech=tmp_path / "speech.wav")
    assert isinstance(compositor.mouth, MouthWarp) and compositor.mouth.drive is not None
    generated = np.repeat(loaded.square[None], 12, axis=0)  # the model's frames: what they draw is not read for it
    whole = compositor.compose(generated, 6)  # frames 6-17: silence, then the burst from frame 10
    parts = np.concatenate([compositor.compose(generated[:5], 6), compositor.compose(generated[5:], 11)])
    np.testing.assert_array_equal(whole, parts)
    changed = np.abs(whole.astype(int) - compositor.background).max(axis=(1, 2, 3))  # (12,)
    assert changed[:3].max() == 0 and changed[4:].min() > 40  # shut in the silence, open from the burst's frame


def test_the_compositing_sink_hands_each_frame_on_as_it_is_drawn_and_draws_what_compose_draws(tmp_path):
    """The encoder (another process) takes frame i while frame i + 1 is drawn; a batch at a time, they took turns."""
    import soundfile as sf

    from avatargen.compose.composite import CompositingSink
    from avatargen.config.loader import load_config, to_config
    from avatargen.io.image import load_reference, save_png
    from avatargen.render import compositor_for

    wave, _ = _bursts()
    sf.write(tmp_path / "speech.wav", wave, RATE)
    save_png(tmp_path / "astronaut.png", photos.astronaut())
    config = to_config(load_config(["pipeline.idle_motion.blinks_per_minute=60"]))  # head motion and blinks on
    loaded = load_reference(tmp_path / "astronaut.png", 256, "face", lambda line: None)
    compositor = compositor_for(loaded, config, warn=lambda line: None, speech=tmp_path / "speech.wav")
    generated = np.repeat(loaded.square[None], 12, axis=0)

    class Recorder:
        def __init__(self) -> None:
            self.writes: list[np.ndarray] = []

        def write(self, frames: np.ndarray) -> None:
            self.writes.append(frames.copy())

    recorder = Recorder()
    sink = CompositingSink(compositor, [recorder], first_frame=6)
    sink.write(generated[:5])
    sink.write(generated[5:])
    assert [len(frames) for frames in recorder.writes] == [1] * 12
    handed = np.concatenate(recorder.writes)
    np.testing.assert_array_equal(handed, compositor.compose(generated, 6))
    moved = np.abs(handed.astype(int) - compositor.background).max(axis=(1, 2, 3))
    assert moved.min() > 0  # the head moves in every frame: the warp ran on each
