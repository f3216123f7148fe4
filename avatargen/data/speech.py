"""Driving audio: real speech from espeak-ng when it is installed, speech-like procedural audio otherwise."""

from __future__ import annotations

import io
import shutil
import subprocess
from functools import lru_cache

import numpy as np
import soundfile as sf

# Voices of espeak-ng's built-in data (no mbrola needed); "+variant" picks a male/female/other timbre.
VOICES = (
    "en-us", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-029", "en-us+f3", "en-us+f2", "en-us+m3", "en+m3",
    "en+f2", "en+f4", "en-gb+f3", "en-gb-x-rp+m2", "en-us+m5", "en-gb+m4", "en+klatt", "en-us+f5",
)

_SUBJECTS = ("the old man", "my sister", "a small dog", "the teacher", "our neighbour", "the pilot", "everyone",
             "a young girl", "the baker", "my friend", "the team", "the doctor", "nobody", "the children")
_VERBS = ("found", "painted", "carried", "remembered", "opened", "wanted", "bought", "noticed", "fixed", "described",
          "followed", "cooked", "borrowed", "forgot")
_OBJECTS = ("a red umbrella", "the blue window", "seven apples", "a quiet garden", "the heavy box", "a paper boat",
            "the morning train", "a warm blanket", "the last letter", "an orange kite", "the wooden bridge",
            "a silver key", "the big map", "two yellow chairs")
_PLACES = ("near the river", "after lunch", "in the kitchen", "on monday", "by the station", "at the market",
           "before the rain", "under the table", "in the park", "at midnight", "behind the school", "this morning")
_TEMPLATES = (
    "{s} {v} {o} {p}.", "Did {s} really say that {s2} {v} {o}?", "I think {s} {v} {o} {p}.",
    "Yesterday {s} {v} {o}, and then {s2} {v2} {o2}.", "Please tell {s} about {o} {p}.",
    "Well, {o} is {adj}, but {o2} is {adj2}.", "{s} {v} {o} because it was {adj}.",
    "Why is {o} so {adj} {p}?", "Hello, my name is {name}, and {s} {v} {o}.",
)
_ADJ = ("bright", "strange", "lovely", "very cold", "too expensive", "perfect", "rather noisy", "beautiful", "broken")
_NAMES = ("Anna", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Luca")


def espeak_available() -> bool:
    """True when the espeak-ng binary is on PATH."""
    return _espeak_path() is not None


@lru_cache(maxsize=1)
def _espeak_path() -> str | None:
    return shutil.which("espeak-ng")


def resample(wave: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Band-limited resampling in the frequency domain (numpy only; fine for utterances of a few seconds)."""
    if rate_in == rate_out or len(wave) == 0:
        return wave.astype(np.float32)
    n_out = int(round(len(wave) * rate_out / rate_in))
    spec = np.fft.rfft(wave.astype(np.float64))
    keep = min(len(spec), n_out // 2 + 1)
    out_spec = np.zeros(n_out // 2 + 1, dtype=np.complex128)
    out_spec[:keep] = spec[:keep]
    return (np.fft.irfft(out_spec, n=n_out) * (n_out / len(wave))).astype(np.float32)


def synthesize_speech(text: str, voice: str = "en-us", rate_wpm: int = 160, pitch: int = 50,
                      sample_rate: int = 16000) -> np.ndarray:
    """``text`` spoken by espeak-ng as float32 mono at ``sample_rate``; raises RuntimeError if espeak-ng fails."""
    exe = _espeak_path()
    if exe is None:
        raise RuntimeError("espeak-ng is not installed; use procedural_speech() instead")
    proc = subprocess.run([exe, "-v", voice, "-s", str(int(rate_wpm)), "-p", str(int(pitch)), "--stdout", text],
                          capture_output=True, timeout=60)
    if proc.returncode != 0 or not proc.stdout:
        raise RuntimeError(f"espeak-ng failed for voice '{voice}': {proc.stderr.decode(errors='replace').strip()}")
    wave, rate = sf.read(io.BytesIO(proc.stdout), dtype="float32")
    if wave.ndim > 1:
        wave = wave.mean(axis=1)
    return resample(wave, rate, sample_rate)


def random_sentence(rng: np.random.Generator) -> str:
    """One of many thousands of distinct sentences from a few templates and word lists."""
    def pick(options: tuple[str, ...]) -> str:
        return options[int(rng.integers(len(options)))]

    text = pick(_TEMPLATES).format(
        s=pick(_SUBJECTS), s2=pick(_SUBJECTS), v=pick(_VERBS), v2=pick(_VERBS), o=pick(_OBJECTS), o2=pick(_OBJECTS),
        p=pick(_PLACES), adj=pick(_ADJ), adj2=pick(_ADJ), name=pick(_NAMES),
    )
    return text[0].upper() + text[1:]


def _fit(wave: np.ndarray, n: int, sample_rate: int) -> np.ndarray:
    """Exactly n samples: pad with silence, or cut with a 10 ms fade-out."""
    if len(wave) >= n:
        wave = wave[:n].copy()
        fade = min(n, int(0.01 * sample_rate))
        wave[n - fade:] *= np.linspace(1, 0, fade, dtype=np.float32)
        return wave
    return np.concatenate([wave, np.zeros(n - len(wave), np.float32)])


def random_utterance(rng: np.random.Generator, seconds: float, sample_rate: int = 16000) -> np.ndarray:
    """espeak-ng sentences by one random voice, 0.2-1.0 s of silence around them, exactly round(seconds*sr) samples."""
    n = int(round(seconds * sample_rate))
    voice = VOICES[int(rng.integers(len(VOICES)))]
    rate, pitch = int(rng.integers(130, 200)), int(rng.integers(25, 80))
    parts = [np.zeros(int(rng.uniform(0.1, 0.5) * sample_rate), np.float32)]
    total = len(parts[0])
    while total < n:
        speech = synthesize_speech(random_sentence(rng), voice, rate, pitch, sample_rate)
        pause = np.zeros(int(rng.uniform(0.2, 1.0) * sample_rate), np.float32)
        parts += [speech, pause]
        total += len(speech) + len(pause)
    wave = np.concatenate(parts)
    wave *= rng.uniform(0.3, 0.9) / max(1e-6, float(np.abs(wave).max()))
    return _fit(wave, n, sample_rate)


def procedural_speech(rng: np.random.Generator, seconds: float, sample_rate: int = 16000) -> np.ndarray:
    """Speech-like audio without a synthesiser: a glottal pulse train with a wandering pitch through vowel formants,
    syllables at 3-6 Hz, and pauses between phrases. Exactly round(seconds*sr) samples, float32."""
    n = int(round(seconds * sample_rate))
    out = np.zeros(n, np.float32)
    vowels = np.array([(730, 1090, 2440), (270, 2290, 3010), (530, 1840, 2480), (300, 870, 2240), (640, 1190, 2390),
                       (440, 1020, 2240), (660, 1720, 2410)], dtype=np.float64)
    f0_base = rng.uniform(95, 230)
    pos = int(rng.uniform(0.1, 0.5) * sample_rate)
    while pos < n:
        n_syll = int(rng.integers(3, 12))  # one phrase
        syll_rate = rng.uniform(3.0, 6.0)
        for _ in range(n_syll):
            length = int(sample_rate / syll_rate * rng.uniform(0.8, 1.2))
            if pos + length > n:
                break
            t = np.arange(length) / sample_rate
            f0 = f0_base * (1 + 0.12 * np.sin(2 * np.pi * rng.uniform(0.5, 2) * t + rng.uniform(0, 6)))
            phase = np.cumsum(f0 / sample_rate) % 1.0
            pulses = (phase ** 3 - phase ** 4) * 8 - 0.3  # a smooth glottal-like pulse per period
            pulses = pulses + 0.05 * rng.standard_normal(length)
            spec = np.fft.rfft(pulses)
            freqs = np.fft.rfftfreq(length, 1 / sample_rate)
            response = np.zeros_like(freqs)
            for k, f in enumerate(vowels[int(rng.integers(len(vowels)))]):
                bw = 60 + 40 * k
                response += (0.8**k) / (1 + ((freqs - f) / bw) ** 2)
            seg = np.fft.irfft(spec * response, n=length)
            env = np.sin(np.pi * np.arange(length) / length) ** 1.5 * rng.uniform(0.5, 1.0)
            out[pos:pos + length] += (seg * env).astype(np.float32)
            pos += length
        pos += int(rng.uniform(0.2, 1.0) * sample_rate)
    peak = float(np.abs(out).max())
    if peak > 0:
        out *= rng.uniform(0.3, 0.9) / peak
    return out


def driving_audio(rng: np.random.Generator, seconds: float, sample_rate: int = 16000,
                  prefer_espeak: bool = True) -> np.ndarray:
    """espeak-ng speech when preferred and available, procedural speech otherwise."""
    if prefer_espeak and espeak_available():
        return random_utterance(rng, seconds, sample_rate)
    return procedural_speech(rng, seconds, sample_rate)
