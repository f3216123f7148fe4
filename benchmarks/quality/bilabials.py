"""Do the lips meet on m, b and p? The speech drive of a photograph (avatargen/compose/speech_drive.py) over
espeak-ng sentences whose phoneme times espeak-ng itself reports (its library's phoneme events, through ctypes).

    python benchmarks/quality/bilabials.py [--tree OLD] [--first SECONDS] [--silence-before SECONDS] [--gain-db DB]
                                           [--feed]

Per phoneme: the frames whose middle lies in it (for b and p also the 60 ms before their release: the closure);
"shut" where the least opening level among them is at most 0.1 of the speech level's. Vowels: the most open level
among them ("open" where it is at least 0.3). Pauses between sentences: the most open level of the frames inside
(a frame from each edge, which hears half a frame of speech). Prints one row per class: m, b, p, the other
consonants, the vowels but o and u, those, and the pauses.

``--first`` scores only the phonemes that start in the first SECONDS of speech (the start of a live stream, where
the speech level is still being learnt); ``--silence-before`` puts that much silence before the speech (a stream
that opens silent); ``--gain-db`` scales the speech (a quiet or loud voice); ``--feed`` reads the levels from a
``SpeechDrive`` fed 20 ms blocks as a stream on stdin feeds it, each frame asked for as soon as its audio is in.
Needs libespeak-ng (Debian: ``apt-get install espeak-ng``) and scipy.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import numpy as np

RATE, FPS = 16000, 25
SENTENCES = [
    "Maybe the map by the pump is better.", "Bob put my purple bag in the boat.",
    "Mom made me promise to bake more pies.", "The baby plays with a bubble by the pool.",
    "Please bring me a blue pen from the bottom box.", "Tim and Pam came home from the big farm.",
    "A simple plan might improve the campaign.", "Peter picked a peck of pickled peppers.",
    "The mob moved past the empty barn.", "I think the weather will be fine tomorrow.",
    "She sells sea shells on the sea shore.", "Every morning my brother buys bread at the bakery.",
    "Remember to stop by the pharmacy.", "The problem is the number of people in the room.",
    "Put the lamp above the bed, please.",
]
VOICES = [(b"en", 175, 50), (b"en-us", 160, 40), (b"en+f3", 170, 60), (b"en-us+m3", 190, 45)]  # name, wpm, pitch
PAUSE_S, CLOSURE_S = 0.35, 0.06
PAUSE = "||"  # the name of a pause between sentences in the phoneme list
VOWEL_LETTERS = set("aeiouAEIOU@3V0")


class _Id(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):  # espeak_EVENT (speak_lib.h)
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", _Id)]  # fmt: skip


class Espeak:
    """libespeak-ng in synchronous mode: ``speak`` -> (16 kHz float32 samples, [(phoneme, start s, end s)])."""

    PHONEME_EVENT, SYNCHRONOUS, PHONEME_EVENTS = 7, 2, 1

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libespeak-ng.so.1")
        self.rate = self.lib.espeak_Initialize(self.SYNCHRONOUS, 0, None, self.PHONEME_EVENTS)
        self._chunks: list[np.ndarray] = []
        self._marks: list[tuple[int, str]] = []
        callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))
        self._callback = callback(self._heard)  # kept: the library holds only the pointer
        self.lib.espeak_SetSynthCallback(self._callback)

    def _heard(self, wave, count: int, events) -> int:
        if wave and count > 0:
            self._chunks.append(np.ctypeslib.as_array(wave, shape=(count,)).copy())
        i = 0
        while events[i].type != 0:  # espeakEVENT_LIST_TERMINATED
            if events[i].type == self.PHONEME_EVENT:
                self._marks.append((events[i].sample, events[i].id.string.decode(errors="replace")))
            i += 1
        return 0

    def speak(self, text: str, voice: bytes, words_per_minute: int, pitch: int):
        from scipy.signal import resample_poly

        self._chunks.clear()
        self._marks.clear()
        self.lib.espeak_SetVoiceByName(voice)
        self.lib.espeak_SetParameter(1, words_per_minute, 0)  # espeakRATE
        self.lib.espeak_SetParameter(3, pitch, 0)  # espeakPITCH
        data = text.encode()
        self.lib.espeak_Synth(data, len(data) + 1, 0, 0, 0, 0, None, None)
        self.lib.espeak_Synchronize()
        wave = np.concatenate(self._chunks).astype(np.float32) / 32768.0
        starts = [sample / self.rate for sample, _ in self._marks]
        ends = starts[1:] + [len(wave) / self.rate]
        phonemes = [(name, start, end) for (_, name), start, end in zip(self._marks, starts, ends)]
        return resample_poly(wave, RATE, self.rate).astype(np.float32), phonemes


def corpus() -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """All ``SENTENCES``, voices in turn, ``PAUSE_S`` apart, and their phonemes on the one timeline."""
    espeak = Espeak()
    waves, phonemes, at = [], [], 0.0
    for i, text in enumerate(SENTENCES):
        wave, marks = espeak.speak(text, *VOICES[i % len(VOICES)])
        phonemes += [(name, start + at, end + at) for name, start, end in marks]
        waves += [wave, np.zeros(int(PAUSE_S * RATE), np.float32)]
        at += len(wave) / RATE
        phonemes.append((PAUSE, at + 1.0 / FPS, at + PAUSE_S - 1.0 / FPS))  # a frame from each edge
        at += PAUSE_S
    return np.concatenate(waves), phonemes


def kind(phoneme: str) -> str | None:
    if phoneme.startswith("_"):
        return None  # a pause
    if phoneme in ("m", "b", "p"):
        return phoneme
    if phoneme in ("u:", "U", "oU", "O:"):
        return "rounded vowels"
    if phoneme == PAUSE:
        return "pauses"
    return "vowels" if VOWEL_LETTERS & set(phoneme) else "other consonants"


def fed_levels(wave: np.ndarray) -> np.ndarray:
    """The levels a ``SpeechDrive`` gives a stream of 20 ms blocks, each frame read once its window is in."""
    from avatargen.compose.speech_drive import SpeechDrive

    drive, block = SpeechDrive(None, RATE, FPS), RATE // 50
    frames, levels = -(-len(wave) * FPS // RATE), []
    for start in range(0, len(wave), block):
        drive.feed(wave[start : start + block])
        ready = min(frames, (start + block) * FPS // RATE - 1)  # frames whose window (+ half a frame) was fed
        if ready > len(levels):
            levels += list(drive.levels(len(levels), ready - len(levels)))
    drive.end()
    return np.r_[levels, drive.levels(len(levels), frames - len(levels))] if frames > len(levels) else np.array(levels)


def phoneme_levels(levels: np.ndarray, phonemes: list[tuple[str, float, float]]) -> dict[str, list[float]]:
    """Per class of ``kind``, each phoneme's least level over its frames (for b and p from ``CLOSURE_S`` before
    it), or for vowels and pauses its most."""
    middles = (np.arange(len(levels)) + 0.5) / FPS
    rows: dict[str, list[float]] = {}
    for name, start, end in phonemes:
        what = kind(name)
        if what is None:
            continue
        begin = start - CLOSURE_S if name in ("b", "p") else start
        frames = np.nonzero((middles >= begin) & (middles < end))[0]
        if len(frames) == 0:
            frames = np.array([min(int(0.5 * (start + end) * FPS), len(levels) - 1)])
        most = what.endswith("vowels") or what == "pauses"
        rows.setdefault(what, []).append(levels[frames].max() if most else levels[frames].min())
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--first", type=float, default=None, help="score the first SECONDS of speech only")
    parser.add_argument("--silence-before", type=float, default=0.0, help="seconds of silence before the speech")
    parser.add_argument("--gain-db", type=float, default=0.0, help="the speech scaled by this")
    parser.add_argument("--feed", action="store_true", help="levels from a SpeechDrive fed 20 ms blocks")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree))
    from avatargen.compose.speech_drive import frame_levels

    wave, phonemes = corpus()
    lead = int(args.silence_before * RATE)
    wave = np.r_[np.zeros(lead, np.float32), wave * np.float32(10 ** (args.gain_db / 20))]
    phonemes = [(name, start + lead / RATE, end + lead / RATE) for name, start, end in phonemes]
    levels = fed_levels(wave) if args.feed else frame_levels([wave], RATE, FPS)
    if args.first is not None:
        phonemes = [mark for mark in phonemes if mark[1] - lead / RATE < args.first]
    rows = phoneme_levels(levels, phonemes)
    import avatargen

    seconds = len(wave) / RATE
    scored = f"the first {args.first:g} s scored" if args.first is not None else "all scored"
    how = "a SpeechDrive fed 20 ms blocks" if args.feed else "frame_levels"
    print(f"# {Path(avatargen.__file__).parent} {seconds:.1f} s of espeak-ng speech, {len(SENTENCES)} sentences, "
          f"{args.silence_before:g} s of silence before, gain {args.gain_db:g} dB, {scored}, {how}\n")  # fmt: skip
    print("| phonemes | count | shut (least level <= 0.1) | median least level | vowels: open (most >= 0.3) |")
    print("|---|---|---|---|---|")
    for what in ("m", "b", "p", "other consonants", "vowels", "rounded vowels", "pauses"):
        values = np.array(rows.get(what, [np.nan]))
        if what == "pauses":
            print(f"| {what} | {len(values)} | {np.mean(values <= 0.1):.2f} (most level) | {np.median(values):.2f} | |")
        elif what.endswith("vowels"):
            opened = np.mean(values >= 0.3)
            print(f"| {what} | {len(values)} | | median most level {np.median(values):.2f} | {opened:.2f} |")
        else:
            print(f"| {what} | {len(values)} | {np.mean(values <= 0.1):.2f} | {np.median(values):.2f} | |")


if __name__ == "__main__":
    main()
