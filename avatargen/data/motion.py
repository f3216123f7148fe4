"""Per-frame motion of a talking face: the mouth from the audio envelope, blinks, and continuous head motion."""

from __future__ import annotations

import numpy as np

from avatargen.data.pose import FacePose, Style

# Envelope mapping (see audio_envelope): frames quieter than the clip's loud level minus _RANGE_DB (20 dB) read 0,
# frames at the loud level read 1.
_RANGE_DB = 20.0
_ABS_FLOOR_DB = -55.0  # below this RMS (dBFS) a frame is silence whatever the clip level


def num_frames(num_samples: int, sample_rate: int, fps: float) -> int:
    """The frame count of an audio track: round(duration x fps), the rule the whole project uses."""
    return int(round(num_samples / sample_rate * fps))


def audio_envelope(wave: np.ndarray, sample_rate: int, fps: float) -> np.ndarray:
    """Per-video-frame loudness in [0, 1]; the ground truth of how open the mouth is.

    Frame t covers the samples of [t/fps, (t+1)/fps). Its RMS in dBFS is mapped linearly from
    ``ref - 20 dB`` -> 0 to ``ref`` -> 1, where ``ref`` is the 95th percentile of the clip's frame levels (so the
    mapping does not depend on the recording gain), and clipped to [0, 1]. Frames below -55 dBFS are gated to 0
    (silence). Returns float32 of length round(len(wave)/sample_rate*fps).
    """
    wave = np.asarray(wave, dtype=np.float64).reshape(-1)
    t_frames = num_frames(len(wave), sample_rate, fps)
    if t_frames == 0:
        return np.zeros(0, np.float32)
    edges = np.round(np.arange(t_frames + 1) * sample_rate / fps).astype(np.int64)
    edges = np.minimum(edges, len(wave))
    power = np.add.reduceat(np.concatenate([wave**2, [0.0]]), edges[:-1])
    counts = np.maximum(np.diff(edges), 1)
    db = 10 * np.log10(power / counts + 1e-12)
    loud = db[db > _ABS_FLOOR_DB]
    if loud.size == 0:
        return np.zeros(t_frames, np.float32)
    ref = np.percentile(loud, 95)
    env = np.clip((db - (ref - _RANGE_DB)) / _RANGE_DB, 0.0, 1.0)
    env[db <= _ABS_FLOOR_DB] = 0.0
    return env.astype(np.float32)


def _slow_noise(rng: np.random.Generator, t: np.ndarray, freqs: tuple[float, float], n: int = 4) -> np.ndarray:
    """A bounded, smooth random signal in about [-1, 1]: a sum of slow sinusoids with random phases (never resets)."""
    f = rng.uniform(*freqs, n)
    phase = rng.uniform(0, 2 * np.pi, n)
    amp = rng.uniform(0.5, 1.0, n)
    return (amp[:, None] * np.sin(2 * np.pi * f[:, None] * t[None] + phase[:, None])).sum(0) / amp.sum() * 1.6


def _blinks(rng: np.random.Generator, t_frames: int, fps: float) -> np.ndarray:
    """Blink amount per frame: a blink (3-4 frames) every 2-6 s."""
    blink = np.zeros(t_frames)
    profiles = ([0.6, 1.0, 0.4], [0.5, 1.0, 0.8, 0.3])
    t = rng.uniform(0.5, 3.0) * fps
    while t < t_frames:
        prof = profiles[int(rng.integers(2))]
        i = int(t)
        seg = blink[i : i + len(prof)]
        seg[:] = np.maximum(seg, prof[: len(seg)])
        t += rng.uniform(2.0, 6.0) * fps
    return blink


def motion_track(envelope: np.ndarray, fps: float, style: Style, rng: np.random.Generator) -> list[FacePose]:
    """One ``FacePose`` per envelope frame.

    The mouth opening is the envelope through a zero-phase 3-tap smoother (symmetric, so no lag: it peaks on the
    frame of the audio energy, and it is 0 in silence longer than a frame); the width narrows as the mouth opens
    (rounded vowels) with a little per-syllable variation. Head motion is a sum of slow sinusoids (continuous and
    bounded across the whole clip), with extra motion while speaking and nodding when the style asks for it.
    """
    env = np.asarray(envelope, dtype=np.float64)
    t_frames = len(env)
    t = np.arange(t_frames) / fps
    prev, nxt = np.pad(env, 1)[:-2], np.pad(env, 1)[2:]
    opening = np.clip(0.25 * prev + 0.5 * env + 0.25 * nxt, 0.0, 1.0)
    opening = np.maximum(opening, env)  # a local maximum of the envelope stays the local maximum of the opening
    opening[(env == 0) & (prev == 0) & (nxt == 0)] = 0.0

    # A slow "speaking" level (zero-phase moving average) drives the extra head motion and brow accents.
    half = max(1, int(fps * 0.3))
    speaking = np.convolve(np.pad(env, half, mode="edge"), np.ones(2 * half + 1) / (2 * half + 1), mode="valid")

    width = 1.0 - 0.25 * opening + 0.12 * _slow_noise(rng, t, (0.6, 2.0), 3) * np.minimum(1, 3 * opening)
    motion = style.motion
    dx = 0.018 * motion * _slow_noise(rng, t, (0.04, 0.35))
    dy = 0.010 * motion * _slow_noise(rng, t, (0.04, 0.35))
    roll = 0.05 * motion * _slow_noise(rng, t, (0.03, 0.3))
    yaw = style.gaze + 0.18 * motion * _slow_noise(rng, t, (0.03, 0.25))
    pitch = 0.12 * motion * _slow_noise(rng, t, (0.05, 0.3))
    # Speaking adds a little faster bobbing, weighted by the smooth speaking level so it fades in and out.
    pitch = pitch + 0.25 * speaking * _slow_noise(rng, t, (0.8, 1.8), 3)
    roll = roll + 0.02 * speaking * _slow_noise(rng, t, (0.5, 1.5), 3)
    if style.nod > 0:
        nod_f = rng.uniform(0.8, 1.2)
        nod = style.nod * np.sin(2 * np.pi * nod_f * t + rng.uniform(0, 2 * np.pi))
        pitch = pitch + 0.35 * nod
        dy = dy + 0.012 * nod
    gaze = yaw * 0.8 + 0.15 * _slow_noise(rng, t, (0.1, 0.5), 3)
    smile = np.clip(style.smile + 0.15 * _slow_noise(rng, t, (0.03, 0.15), 3), -1, 1)
    brow = np.clip(style.brow + 0.15 * _slow_noise(rng, t, (0.1, 0.4), 3) + 0.35 * speaking * np.maximum(
        0, _slow_noise(rng, t, (0.2, 0.6), 3)), -1, 1)
    blink = np.clip(_blinks(rng, t_frames, fps) - style.eye_wide * 0.5, -0.5, 1.0)

    return [
        FacePose(dx=float(dx[i]), dy=float(dy[i]), roll=float(roll[i]), yaw=float(np.clip(yaw[i], -1, 1)),
                 pitch=float(np.clip(pitch[i], -1, 1)), gaze=float(np.clip(gaze[i], -1, 1)),
                 mouth_open=float(opening[i]), mouth_width=float(np.clip(width[i], 0.6, 1.3)), smile=float(smile[i]),
                 blink=float(blink[i]), brow_raise=float(brow[i]))
        for i in range(t_frames)
    ]
