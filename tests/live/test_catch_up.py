"""Live latency: the pacer catches up after a stall by dropping silence (never speech), with a real encoder; the live
pipeline shows each frame after little more audio than the frame itself (counted, not timed)."""

from __future__ import annotations

import io
import json
import threading
import time

import numpy as np
import soundfile as sf
import torch

from avatargen.config.loader import load_config, to_config
from avatargen.families.tiny.build import build_modules
from avatargen.io.catch_up import InputGate, RawFilter
from avatargen.io.encoder import ENCODER_AUDIO_RATE, Encoder
from avatargen.io.image import load_reference_image
from avatargen.io.pacing import CatchUp, RealtimePacer
from tests.conftest import engine_of
from avatargen.pipeline.build import pipeline_for
from avatargen.runtime.precision import choose_precision
from tests.conftest import REPO, run_cli, write_face_png, write_speechlike_wav
from tests.ffmpeg_probe import decode_frames, probe

FPS = 25
SPEECH = [(0, 40), (140, 175)]  # frames whose audio is a loud tone; the rest is silence
FRAMES = 175
STALL_AT, STALL_S = 30, 1.0  # generation stops for 1 s before frame 30 (in speech: it must stall, not drop)


def frame_audio(index: int) -> bytes:
    """Frame ``index``'s 48 kHz stereo s16le audio: a 440 Hz tone in speech, digital silence elsewhere."""
    n = ENCODER_AUDIO_RATE // FPS
    loud = any(a <= index < b for a, b in SPEECH)
    t = (index * n + np.arange(n)) / ENCODER_AUDIO_RATE
    mono = (0.5 * 32767 * np.sin(2 * np.pi * 440 * t) * loud).astype("<i2")
    return np.repeat(mono, 2).tobytes()


def picture(index: int) -> np.ndarray:
    """A gray frame whose two halves name its index in base 16 (levels 16 apart: the encoder's error is far less)."""
    frame = np.zeros((64, 64, 3), np.uint8)
    frame[:32], frame[32:] = (index % 16) * 16 + 8, (index // 16) * 16 + 8
    return frame


def index_of(frame: np.ndarray) -> int:
    low, high = (int(frame[8:24].mean() // 16), int(frame[40:56].mean() // 16))
    return high * 16 + low


def test_the_pacer_drops_silence_after_a_stall_and_never_speech(tmp_path):
    out = tmp_path / "live.mp4"
    target_s = 0.3
    with Encoder(out, 64, 64, FPS, None, audio_pipe=True) as encoder:
        pacer = RealtimePacer(encoder, FPS, buffer_s=0.1, audio_rate=ENCODER_AUDIO_RATE, catch_up=CatchUp(target_s))
        t0 = time.perf_counter()

        def microphone() -> None:  # the audio arrives at real time, a frame at a time
            for index in range(FRAMES):
                time.sleep(max(0.0, t0 + index / FPS - time.perf_counter()))
                pacer.write_audio(frame_audio(index))

        feeder = threading.Thread(target=microphone)
        feeder.start()
        for index in range(FRAMES):  # generation: each frame once its audio is there, stalled once
            time.sleep(max(0.0, t0 + (index + 1) / FPS - time.perf_counter()))
            if index == STALL_AT:
                time.sleep(STALL_S)
            pacer.write(picture(index)[None])
        feeder.join()
        pacer.close()
    stats = pacer.stats
    frames = decode_frames(out)
    shown = [index_of(f) for f in frames]
    dropped = sorted(set(range(FRAMES)) - set(shown))
    assert shown == sorted(shown), "frames left out of order"
    guard = CatchUp(target_s).guard_frames
    speech = {k for a, b in SPEECH for k in range(a - guard, b + guard)}
    assert not speech & set(dropped), f"speech frames were dropped: {sorted(speech & set(dropped))}"
    assert stats.underruns >= 1 and stats.stall_s >= 0.8 * STALL_S, f"the stall was not seen: {stats}"
    # The stall put the picture ~1 s behind the voice: the silence after it gives that back, down to the target.
    assert len(dropped) >= (STALL_S - target_s) * FPS * 0.8, f"only {len(dropped)} silent frames dropped: {stats}"
    assert stats.dropped == len(dropped)
    # Sound and picture stay in step: the audio lost exactly the dropped frames' audio.
    info = probe(out)
    assert abs(info["audio_duration_s"] - len(shown) / FPS) < 0.1, (info, len(shown))


def test_the_live_pipeline_shows_each_frame_after_little_more_audio_than_the_frame():
    """Frame k leaves the live pipeline once the audio reaches at most a chunk and the look-ahead past it; the
    default pipeline (16-frame chunks, I chunks, the encoder's whole context) needs far more."""
    needed = {}
    for preset in ("live", "default"):
        torch.set_num_threads(1)
        config = to_config(load_config([f"pipeline={preset}", "model.weights=random", "runtime.threads=1"]))
        models = build_modules(config, torch.device("cpu"), precision=choose_precision(config.runtime.dtype.value, torch.device("cpu")))
        pipeline = pipeline_for(config, models, engine_of(config))
        reference = load_reference_image(REPO / "examples" / "avatar_1.png", config.model.image_size)
        per_frame = config.model.sample_rate // config.model.fps
        consumed = [0]

        def audio():  # 2 s, a frame of samples at a time, counted as the pipeline pulls them
            rng = np.random.default_rng(0)
            for _ in range(50):
                consumed[0] += 1
                yield (0.1 * rng.standard_normal(per_frame)).astype(np.float32)

        class AudioAtEachFrame:
            seen: list[int] = []

            def write(self, frames: np.ndarray) -> None:
                self.seen += [consumed[0]] * len(frames)

        sink = AudioAtEachFrame()
        sink.seen = []
        pipeline.render(reference, audio(), [sink])
        ahead = [audio_frames - (k + 1) for k, audio_frames in enumerate(sink.seen) if audio_frames < 50]
        needed[preset] = max(ahead)
    p = to_config(load_config(["pipeline=live"])).pipeline
    assert needed["live"] <= p.n_chunk_frames + p.audio_lookahead_frames, needed
    assert needed["default"] >= 16 + 6, needed


def test_the_input_gate_leaves_out_late_silence_and_keeps_speech():
    """Raw s16le through the gate while nothing is shown yet: silence beyond 0.8 s in flight goes, speech and the
    guard after it stay; once the output has caught up, nothing goes."""
    rate = 16000
    gate = InputGate(backlog_s=0.8)
    keep = RawFilter(gate, "s16le", rate, 1)
    t = np.arange(rate) / rate
    speech = (8000 * np.sin(2 * np.pi * 220 * t)).astype("<i2")  # 1 s
    silence = np.zeros(2 * rate, "<i2")  # 2 s
    out = np.frombuffer(keep(np.concatenate([silence, speech, silence]).tobytes()), "<i2")
    loud = np.flatnonzero(np.abs(out) > 0)
    assert loud[-1] - loud[0] + 1 >= rate - 2, "speech was cut"  # (its first sample is 0)
    kept_before, kept_after = loud[0], len(out) - loud[-1] - 1
    # 0.8 s of silence pass before the backlog is over the limit; then only silence within the guard after speech.
    assert abs(kept_before - 0.8 * rate) <= 0.02 * rate, kept_before
    assert abs(kept_after - gate.guard_pieces * 0.02 * rate) <= 0.02 * rate, kept_after
    assert abs(gate.dropped_s - (4.0 - 0.8 - gate.guard_pieces * 0.02)) < 0.05, gate.dropped_s
    gate.shown(gate.read_s)  # the output caught up: nothing is in flight, silence goes on up to the limit again
    assert len(keep(silence.tobytes())) == round(0.8 * rate) * 2


def test_a_live_session_from_stdin_catches_up_and_keeps_sound_and_picture_in_step(tmp_path):
    """`-a - --realtime` picks live mode: audio that arrives all at once (far ahead of the picture) loses silence
    (at the input, or as frames); the file's sound and picture have the same length."""
    image = write_face_png(tmp_path / "face.png")
    audio = write_speechlike_wav(tmp_path / "speech.wav", 6.0, rate=16000)
    out = tmp_path / "live.mp4"
    result = run_cli("render", "-i", str(image), "-a", "-", "-o", str(out), "--realtime", "--json", "-q",
                     "model.weights=random", "runtime.threads=1", input=audio.read_bytes(), text=False)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    report = json.loads(result.stdout)
    assert report["chunks"] >= report["frames"] // 4 and report["i_chunks"] == 0, "pipeline=live was not picked"
    realtime = report["realtime"]
    assert realtime["buffer_s"] == 0.2 and realtime["dropped"] + realtime["input_dropped_s"] > 0, realtime
    info = probe(out)
    assert info["frames"] == report["frames"] - realtime["dropped"]
    assert abs(info["audio_duration_s"] - info["frames"] / FPS) < 0.1, info


def test_a_silent_microphone_does_not_hang_a_live_render(tmp_path):
    """Digital silence piped in live: every frame after the first is silent and far behind its audio, so nearly all are
    dropped; the audio of the frames kept must still reach ffmpeg before their pictures, or it stops reading video."""
    image = write_face_png(tmp_path / "face.png")
    wav = io.BytesIO()
    sf.write(wav, np.zeros(3 * 16000, np.float32), 16000, format="WAV", subtype="PCM_16")
    out = tmp_path / "live.mp4"
    result = run_cli("render", "-i", str(image), "-a", "-", "-o", str(out), "--realtime", "--json", "-q",
                     "model.weights=random", "runtime.threads=1", input=wav.getvalue(), text=False, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    report = json.loads(result.stdout)
    assert report["realtime"]["dropped"] > 0, report["realtime"]
    assert probe(out)["frames"] == report["frames"] - report["realtime"]["dropped"]
