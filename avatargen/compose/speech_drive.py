"""``SpeechDrive``: how far a photograph's mouth opens in each video frame, read from the speech itself.

The bundled model draws a photograph's open mouth as a smear it was never taught (docs/model-card.md, Limits): read
from its frames, the opening followed loudness at r 0.06-0.75 over the test photos, a frame late, and on a dark or
grey photo not at all. A photograph's warp is driven by the audio instead, as the training data drove its
cartoons' mouths: from loudness.

Per video frame ``t``, the level is the RMS of the audio under it and half a frame either side (``WINDOW_FRAMES``), in
dB over the speech level heard so far (so quiet and loud recordings open alike), mapped from ``FLOOR_DB`` below it
(shut: pauses) to the speech level (1) as the ``CURVE`` power of the way. What a frame is measured against
(``Reference``: the speech level, and the usual tilt and band energies below) is causal: taken over the frames of sound
(over ``SILENT_DB``) up to frame ``t`` itself, within the first ``REFERENCE_S`` (then it holds), and blended with start
values (``START_LEVEL`` and ``START_OFFSETS``, measured on speech) that give way to what was heard over the first
``SETTLE_S`` of sound (a level heard over the start value is taken at once: a loud voice's first words do not open the
mouth wide, a quiet one's open it less at first). So a live stream on stdin and the same audio from a file make the same
frames, and a long silence before the speech does not set the level. The lips also shut, at the frame's own resolution
(its two half frames), where the sound is dull (``CLOSURE_DB``: little energy over 1 kHz) and either quiet
(``QUIET_DB``: the closure of b and p, silent or a voice bar) or humming (``HUM_DB``: the nasal murmur of m, nothing
between 0.5 and 1 kHz; an o or u, as dull, keeps its second formant there; a strong hum with its 4-8 kHz band far down,
``MURMUR_*``, needs less dullness), and not hissing (``HISS_DB``: s, z, sh and the bursts of t and k keep the lips
apart), nor faintly fricative (``FRICATION_DB``: the 4-8 kHz band fell less than the 1-8 kHz one, as in th, v, z, f: the
lips just apart, ``AJAR_LEVEL``). A frame of sound just after a loud one opens at least ``AJAR_LEVEL``
(``AJAR_FRAMES``): a weak consonant does not shut the mouth by its quietness alone. The closing still shuts n, d, g, v
and often th, l, r, z, which acoustics alone cannot tell from m, b, p. Over 36 s of espeak-ng sentences with phoneme
times (``benchmarks/quality/bilabials.py``) the lips meet on 94 % of the m, 97 % of the b and all p, where loudness
alone shut 3 %, 19 % and 56 %; on 46 % of the other consonants (25 %; 69 % without the frication test and the ajar
floor); 95 % of the vowels open (100 %), all o and u. A pure function of the audio up to the frame and the frame index
(resume, chunking and streaming give the same pixels); no smoothing, so no lag.

How round the lips are (``roundness``, 0 spread .. 1 rounded, for the warp to narrow the mouth) comes from the
spectrum's tilt over the same window: the energy between ``HIGH_BAND`` over that in ``LOW_BAND``, in dB. Rounded
vowels (o, u, w) lower the second formant and with it the tilt: espeak-ng's "who knew two moons" has a median tilt
4 dB under "we see three keys" and "father saw a car". It counts from ``ROUND_FROM`` dB under the usual tilt in
speech heard so far (its ``TILT_PERCENTILE``: a voice's own brightness is not taken for spread lips, and a text rich
in rounded vowels does not set it), in full ``ROUND_SPAN`` dB further down, and only where the mouth opens (a pause
is neither).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import numpy as np

from avatargen.numeric import smoothstep

WINDOW_FRAMES = 2.0  # the RMS window, in frames, centred on the frame's own
FLOOR_DB = 24.0  # this far below the speech level the mouth is shut ...
CURVE = 1.5  # ... and the level rises as this power of the way from there to the speech level (loud syllables open
# most: over the 6 s of benchmarks/quality/portrait_judge.py, r with loudness 0.90 against 0.84 linear in dB)
SPEECH_PERCENTILE = 95.0
REFERENCE_S = 30.0  # the speech level is taken over the first this many seconds heard, then holds
SILENT_DB = -70.0  # frames under this (dBFS) are silence: they do not count towards the speech level
SETTLE_S = 2.0  # seconds of sound over which the start values give way to what was heard
START_LEVEL = -16.0  # dBFS: the speech level before any is heard (the examples' speech, espeak-ng: -16.2 .. -15.0)
# ... and the usual tilt (dB) and the usual energies in CLOSURE_BAND, in all and in HISS_BAND over the level (dB),
# measured on the same four tracks: -4.7 .. -2.8; 37.6 .. 38.4; 25.4 .. 26.4; 18.1 .. 30.4. The last is also a floor
# of the usual hiss: heard so far, it is low until the first sibilants come (in bilabials.py's speech +17 dB over
# the level before them, +28 over 36 s), and a hiss taken for usual keeps the lips apart on m. m shut in the first
# 6 s / over 36 s: without the floor 0.40 / 0.69, at +26 0.60 / 0.75, at +28 0.90 / 0.83 (the murmur below not counted)
START_OFFSETS = (-3.8, 38.0, 26.0, 28.0)
LOW_BAND, HIGH_BAND = (100.0, 1000.0), (1000.0, 4000.0)  # Hz: the first formant's band and the second's and above
TILT_PERCENTILE = 75.0  # of the tilt over the speech frames: the spread and open vowels' (rounded ones are fewer)
ROUND_FROM, ROUND_SPAN = 2.5, 5.0  # dB under it where roundness starts, and how much further down it is full
SPEECH_BELOW_DB = 12.0  # frames within this of the speech level are speech (for the usual tilt)
# A half frame is dull from the first to the second this far (dB) under the speech's usual energy in CLOSURE_BAND
# (its SPEECH_PERCENTILE over the half frames of the first REFERENCE_S) ... (benchmarks/quality/bilabials.py without
# HISS_DB, m shut / other consonants shut / vowels open: CLOSURE_DB, QUIET_DB, HUM_DB at 10-16, 10-14, 10-16 dB
# 0.81 / 0.82 / 0.95; at 12-18, 12-16, 10-16 dB 0.67 / 0.73 / 0.97)
CLOSURE_BAND = (1000.0, 8000.0)  # Hz
CLOSURE_DB = (10.0, 16.0)
# ... and quiet (a stop's closure, silent or a voice bar: this far under the speech's usual half frame) or humming
# (the nasal murmur of m: its energy in HUM_BANDS' upper band this far under its lower; a rounded vowel, as dull as
# an m, keeps its second formant there: in benchmarks/quality/bilabials.py's speech m -22 dB median, o, u, w -8)
QUIET_DB = (10.0, 14.0)
HUM_BANDS, HUM_DB = ((100.0, 500.0), (500.0, 1000.0)), (10.0, 16.0)
# ... and not hissing: the lips stay open where HISS_BAND's energy is within the first (dB) of its usual, and may
# shut from the second under it (s, z, sh and the bursts of t and k hiss there; m, b, n and vowels do not). Without
# the frication test below, other consonants shut at 8-12 / 10-14 / 12-16 / 16-20 dB: 0.72 / 0.69 / 0.67 / 0.64, m
# 0.81 up to 12-16, then 0.75, 0.72.
HISS_BAND, HISS_DB = (4000.0, 8000.0), (12.0, 16.0)
# ... and not faintly fricative: a half frame whose HISS_BAND fell under its usual less than its CLOSURE_BAND did, by
# the first (dB) or more, keeps the lips just apart (AJAR_LEVEL at most); by the second or less, may shut (the weak
# noise of th, v, z, f and of t's release is relatively high; a closure's voice bar, silence or a hum has none). Each
# fall is capped at DROP_CAP_DB (silence has no noise to read). In bilabials.py's speech (without the ajar floor and
# the murmur below) other consonants shut 0.54 with it, 0.69 without (th 10 of 22 against all), m 0.83 and p 1.00
# either way, b 0.97 against 1.00; at 2-6 dB 0.52, m 0.81, b 0.94; at 3-7 dB 0.57, b 1.00. The level of such a
# frame is capped at AJAR_LEVEL: left at its loudness (a weak th 10 dB under the speech level opens the mouth 0.5),
# the eval's sync, which follows loudness, pays: on the levels of portrait_judge.py's 5 s of espeak-ng speech 0.698
# capped at AJAR_LEVEL, 0.694 at 0.35, 0.692 uncapped, 0.7025 without the test. A frame is capped by the mean of its
# half frames' frication (``closing``): where it took the more fricative half, the vowels sharing a frame with a th
# stayed at AJAR_LEVEL (131 of 141 open against 134; m, b, p, other consonants, the judge's r and identity the same).
FRICATION_DB, DROP_CAP_DB = (6.5, 2.5), 50.0
# Ajar between syllables: a frame of sound (within FLOOR_DB of the speech level) opens at least AJAR_LEVEL (before
# the lips' shutting above) in the AJAR_FRAMES after a frame at AJAR_AFTER or more: a weak consonant (f, th, a stop's
# release) does not shut the mouth by its quietness alone, where a real one stays a little open. Other consonants
# shut 0.46 with it, 0.54 without (1 frame: 0.51, 3: 0.45); m, b, p, vowels and pauses the same either way.
AJAR_LEVEL, AJAR_AFTER, AJAR_FRAMES = 0.15, 0.3, 2
# A murmur shuts the lips at less dullness: a half frame humming by MURMUR_HUM_DB (the first: may shut; the second: in
# full) whose HISS_BAND lies MURMUR_HUSH_DB under its usual needs only MURMUR_DULL_DB of CLOSURE_DB's fall. An m
# between vowels keeps some of their second formant (12-13.5 dB under the usual, where CLOSURE_DB wants 16 for a
# full closure), yet hums 20-27 dB and its hiss band lies 30-38 dB down; vowels, r and l hum less or hiss more. In
# bilabials.py's speech m shut 34 of 36 with it, 30 without; other consonants (62 of 134), vowels, b and p the same
# either way; the m the same at 16-20 / 24-28 / 6-10 dB (other consonants then up to 0.49).
MURMUR_HUM_DB, MURMUR_HUSH_DB, MURMUR_DULL_DB = (18.0, 22.0), (28.0, 32.0), (10.0, 12.0)


class Reference(NamedTuple):
    """What speech is measured against (``speech_reference``), in dB: floats, or (frames,) arrays of a frame each
    (``CausalReference``)."""

    level: float  # the speech level
    tilt: float  # the usual tilt in speech
    high: float  # the usual energy of a half frame in ``CLOSURE_BAND``
    loud: float  # the usual energy of a half frame
    hiss: float  # the usual energy of a half frame in ``HISS_BAND``


class SpeechDrive:
    """The per-frame opening level (0 shut .. 1 the speech level, more on the loudest) of an audio track.

    ``blocks`` yields the track as float32 mono blocks at ``sample_rate``; it is read on a thread of its own from the
    start, one streamed pass keeping 6 numbers a frame. None: the blocks are handed in as they come (``feed`` and
    ``end``, or ``tee`` over a stream the render reads). ``levels`` waits only until the frames asked for are read
    (each frame's reference is causal), so a file's first frames do not wait for its decoding."""

    def __init__(self, blocks: Callable[[], Iterable[np.ndarray]] | None, sample_rate: int, fps: int) -> None:
        self.sample_rate, self.fps = int(sample_rate), int(fps)
        self._energy = HalfFrameEnergy(sample_rate, fps)
        self._reference = CausalReference(self._energy)
        self._done = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._closed = False
        self._reader: threading.Thread | None = None
        if blocks is not None:
            self._reader = threading.Thread(target=self._read, args=(blocks,), name="speech-drive", daemon=True)
            self._reader.start()

    def _read(self, blocks: Callable[[], Iterable[np.ndarray]]) -> None:
        source = blocks()
        try:
            for block in source:
                if self._closed:
                    break
                self.feed(block)
        except BaseException as error:  # noqa: BLE001: raised in ``levels``, on the compositing thread
            self._error = error
        finally:
            stop = getattr(source, "close", None)
            if stop is not None:
                stop()  # a generator over a decoder stops it now, not when the garbage collector gets to it
            self.end()

    def close(self) -> None:
        """Stop reading the track and wait for the reader (its decoder stopped): a render that ends early, refused
        or failed, leaves no decoder behind. Idempotent; frames asked for after it are shut."""
        self._closed = True
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=10.0)  # a block is a decoder's read of a local file: milliseconds
        self.end()

    def feed(self, block: np.ndarray) -> None:
        """The next (n,) float32 block of the track."""
        with self._changed:
            self._energy.add(block)
            self._changed.notify_all()

    def end(self) -> None:
        """The track ends here: frames past it are shut."""
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def tee(self, blocks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """``blocks`` as they are (a stream the render reads), each fed to the drive first; the end (or a stop) ends
        the track."""
        try:
            for block in blocks:
                self.feed(block)
                yield block
        finally:
            self.end()

    def levels(self, first: int, count: int) -> np.ndarray:
        """(count,) levels of frames ``first`` .. ``first + count - 1`` (0 past the audio's end)."""
        return self.shapes(first, count)[0]

    def shapes(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(count,) levels and (count,) roundness of frames ``first`` .. ``first + count - 1`` (0 past the end)."""
        needed = (2 * (first + count) + 2) * self._energy.half  # samples: the last frame's window, whole
        with self._changed:
            self._changed.wait_for(lambda: self._done or self._energy.samples >= needed)
            if self._error is not None:
                raise self._error
            lead = min(first, AJAR_FRAMES)  # the frames before ``first`` its level depends on
            reference = self._reference.of(first - lead, count + lead)
            levels = frame_levels_of(self._energy, reference, first - lead, count + lead, self._done)[lead:]
            return levels, roundness_of(self._energy, reference.tilt[lead:], levels, first)


class HalfFrameEnergy:
    """The sum of squares of the audio per half video frame (``half`` samples), and its energy in ``LOW_BAND``,
    ``HIGH_BAND``, ``CLOSURE_BAND``, the two ``HUM_BANDS`` and ``HISS_BAND`` (``bands``, per complete half frame; the
    last four under a Hann window: a hum's strong low harmonics would leak into the higher bands through a plain
    cut), added to block by block."""

    def __init__(self, sample_rate: int, fps: int) -> None:
        self.fps = fps
        self.half = sample_rate / fps / 2
        self._sums, self._bands = np.zeros(1024), np.zeros((1024, 6))  # with room to grow (``_grown``)
        self._sum_count = self._band_count = 0
        self.samples = 0
        self._length = int(np.ceil(self.half))  # the FFT's length: a half frame, zero-padded where it is shorter
        freqs = np.fft.rfftfreq(self._length, 1.0 / sample_rate)
        bands = (LOW_BAND, HIGH_BAND, CLOSURE_BAND, *HUM_BANDS, HISS_BAND)
        masks = [(freqs >= low) & (freqs < high) for low, high in bands]
        self._masks = np.stack(masks, axis=1).astype(np.float64)  # (bins, 6)
        self._tail = np.zeros(0)  # the samples from the first half frame not yet complete
        window = np.hanning(int(np.floor(self.half)) + 2)[1:-1]  # no zeros at its ends; zero over the padding
        self._window = np.r_[window, np.zeros(self._length - len(window))]

    def add(self, block: np.ndarray) -> None:
        if len(block) == 0:
            return
        bins = ((self.samples + np.arange(len(block))) / self.half).astype(np.int64)  # each sample's half frame
        start = int(bins[0])
        sums = np.bincount(bins - start, weights=np.asarray(block, np.float64) ** 2)  # this block's half frames only
        self._sums = _grown(self._sums, start + len(sums))
        self._sums[start : start + len(sums)] += sums
        self._sum_count = max(self._sum_count, start + len(sums))
        self.samples += len(block)
        first, done = self._band_count, int(np.floor(self.samples / self.half))  # half frames: first pending, complete
        self._tail = np.concatenate([self._tail, np.asarray(block, np.float64)])
        if done > first:
            base = int(np.floor(first * self.half))  # the tail's first sample
            halves = np.arange(first, done)
            begins = np.floor(halves * self.half).astype(np.int64) - base
            ends = np.floor((halves + 1) * self.half).astype(np.int64) - base
            index = begins[:, None] + np.arange(self._length)  # (n, length)
            frames = np.where(index < ends[:, None], self._tail[np.minimum(index, len(self._tail) - 1)], 0.0)
            plain = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # (n, bins)
            windowed = np.abs(np.fft.rfft(frames * self._window, axis=1)) ** 2  # (n, bins)
            self._bands = _grown(self._bands, done)
            self._bands[first:done, :2] = plain @ self._masks[:, :2]
            self._bands[first:done, 2:] = windowed @ self._masks[:, 2:]
            self._band_count = done
            self._tail = self._tail[ends[-1] :]

    @property
    def sums(self) -> np.ndarray:
        """(half frames,) the sum of squares of each half frame read so far (the last one may be partial)."""
        return self._sums[: self._sum_count]

    @property
    def bands(self) -> np.ndarray:
        """(complete half frames, 6) the energy in ``LOW_BAND``, ``HIGH_BAND``, ``CLOSURE_BAND``, ``HUM_BANDS`` and
        ``HISS_BAND``."""
        return self._bands[: self._band_count]

    @property
    def frames(self) -> int:
        return max(1, int(np.ceil(self.samples / (2 * self.half))))

    def decibels(self, first: int, count: int) -> np.ndarray:
        """(count,) dB of the RMS over each frame's ``WINDOW_FRAMES`` (its own two half frames and one either side;
        silence before the start and past what was read)."""
        rms = np.sqrt(_window_sums(self.sums, first, count) / (WINDOW_FRAMES * 2 * self.half))
        return 20.0 * np.log10(np.maximum(rms, 1e-6))

    def tilts(self, first: int, count: int) -> np.ndarray:
        """(count,) dB of ``HIGH_BAND``'s energy over ``LOW_BAND``'s over each frame's window (as ``decibels``)."""
        bands = _window_sums(self.bands[:, :2], first, count)  # (count, 2)
        return 10.0 * np.log10(np.maximum(bands[:, 1], 1e-12) / np.maximum(bands[:, 0], 1e-12))

    def closing(self, first: int, count: int, reference: Reference) -> tuple[np.ndarray, np.ndarray]:
        """(count,) how shut the lips are in each frame, from its own two half frames (the more shut: a closure shows
        in its frame; silence past what was read): dull (``CLOSURE_DB``) and quiet (``QUIET_DB``) or humming
        (``HUM_DB``), not hissing (``HISS_DB``) and not faintly fricative (``FRICATION_DB``), 0 .. 1; and (count,)
        how much it is such a closure but faintly fricative (its lips just apart: ``AJAR_LEVEL``), 0 .. 1, the mean
        of its half frames (a frame half vowel, half a weak th or f, opens halfway to the vowel's level)."""
        begin, end = 2 * first, min(2 * (first + count), len(self.bands))  # only these half frames (linear in time)
        energies = np.c_[self.bands[begin:end, 2:], self.sums[begin:end]]  # (n, 5)
        decibels = 10.0 * np.log10(np.maximum(energies, 1e-12))
        n = max(end - begin, 0)
        high, loud, hiss = (np.repeat(np.broadcast_to(value, count), 2)[:n] for value in reference[2:])  # (n,) each
        fall, humming, hush = high - decibels[:, 0], decibels[:, 1] - decibels[:, 2], hiss - decibels[:, 3]  # (n,) dB
        dull, hum, hushed = _between(fall, CLOSURE_DB), _between(humming, HUM_DB), _between(hush, HISS_DB)
        quiet = _between(loud - decibels[:, 4], QUIET_DB)
        falls = np.minimum(np.c_[fall, hush], DROP_CAP_DB)  # (n, 2)
        spread = falls[:, 0] - falls[:, 1]  # how much less the hiss band fell: > 0 where noise is left up there
        noiseless = smoothstep((FRICATION_DB[0] - spread) / (FRICATION_DB[0] - FRICATION_DB[1]))
        murmur = _between(humming, MURMUR_HUM_DB) * _between(hush, MURMUR_HUSH_DB) * _between(fall, MURMUR_DULL_DB)
        closure = np.maximum(dull * np.maximum(hum, quiet) * hushed, murmur)  # (n,)
        shut, faint = np.ones(2 * count), np.zeros(2 * count)  # silence past what was read: shut
        shut[:n], faint[:n] = closure * noiseless, closure * (1.0 - noiseless)
        return shut.reshape(count, 2).max(axis=1), faint.reshape(count, 2).mean(axis=1)


def _between(decibels: np.ndarray, span: tuple[float, float]) -> np.ndarray:
    """0 at or under ``span[0]`` .. 1 at or over ``span[1]``, smoothly."""
    return smoothstep((decibels - span[0]) / (span[1] - span[0]))


def _window_sums(values: np.ndarray, first: int, count: int) -> np.ndarray:
    """(count, ...) the sum of ``values`` (per half frame) over each frame's window: its own two half frames and one
    either side; none before the start and past what was read."""
    index = 2 * np.arange(first, first + count)[:, None] + np.arange(-1, 3)  # (count, 4) half frames
    valid = (index >= 0) & (index < len(values))
    kept = values if len(values) else np.zeros((1, *values.shape[1:]))
    picked = kept[np.clip(index, 0, len(kept) - 1)]  # (count, 4, ...): a copy
    picked[~valid] = 0.0
    return picked.sum(axis=1)


def _grown(array: np.ndarray, length: int) -> np.ndarray:
    """``array``, or a copy with room for at least ``length`` rows (doubling: appending stays linear in time)."""
    if length <= len(array):
        return array
    bigger = np.zeros((max(length, 2 * len(array)), *array.shape[1:]))
    bigger[: len(array)] = array
    return bigger


def speech_reference(energy: HalfFrameEnergy, frames: int | None = None) -> Reference:
    """Over the first ``frames`` (None: those of the first ``REFERENCE_S`` read) of sound (over ``SILENT_DB``), blended
    with the start values (see the module docstring): the speech level (the ``SPEECH_PERCENTILE`` of the frames' dB),
    the usual tilt in speech (the ``TILT_PERCENTILE`` of the tilt of the frames within ``SPEECH_BELOW_DB`` of that
    level) and the usual energy of a half frame in ``CLOSURE_BAND``, in all, and in ``HISS_BAND`` (their
    ``SPEECH_PERCENTILE``); all in dB."""
    if frames is None:
        frames = min(energy.frames, max(1, int(REFERENCE_S * energy.fps)))
    decibels = energy.decibels(0, frames)  # (frames,)
    sound = np.nonzero(decibels >= SILENT_DB)[0]
    return _blended(energy, decibels, energy.tilts(0, frames), sound)


def _blended(energy: HalfFrameEnergy, decibels: np.ndarray, tilts: np.ndarray, sound: np.ndarray) -> Reference:
    """The reference over the frames ``sound`` (indices into the frames' ``decibels`` and ``tilts``), blended with
    the start values by how much sound that is (``SETTLE_S``)."""
    share = min(1.0, len(sound) / (SETTLE_S * energy.fps))
    if len(sound) == 0:
        return Reference(START_LEVEL, START_OFFSETS[0], *(START_LEVEL + offset for offset in START_OFFSETS[1:]))
    heard = float(np.percentile(decibels[sound], SPEECH_PERCENTILE))
    level = max(heard, share * heard + (1.0 - share) * START_LEVEL)  # louder than the start: at once (no wide mouth)
    speech = sound[decibels[sound] >= level - SPEECH_BELOW_DB]
    tilt = float(np.percentile(tilts[speech], TILT_PERCENTILE)) if len(speech) else START_OFFSETS[0]
    halves = np.r_[2 * sound, 2 * sound + 1]
    halves = halves[halves < min(len(energy.bands), len(energy.sums))]
    energies = np.c_[energy.bands[halves, 2], energy.sums[halves], energy.bands[halves, 5]]  # (halves, 3)
    decibels_of_halves = 10.0 * np.log10(np.maximum(energies, 1e-12))  # (halves, 3)
    usual = np.percentile(decibels_of_halves, SPEECH_PERCENTILE, axis=0) if len(halves) else None
    start = np.array([START_OFFSETS[0], *(level + offset for offset in START_OFFSETS[1:])])  # (4,)
    found = np.r_[tilt, usual] if usual is not None else np.r_[tilt, start[1:]]
    tilt, high, loud, hiss = (float(value) for value in share * found + (1.0 - share) * start)
    return Reference(level, tilt, high, loud, max(hiss, float(start[3])))


class CausalReference:
    """What each frame is measured against, from the sound heard up to it (``speech_reference`` over frames 0 ..
    ``t``; from ``REFERENCE_S`` on it holds), each frame's computed once."""

    def __init__(self, energy: HalfFrameEnergy) -> None:
        self._energy = energy
        self._last = max(1, int(REFERENCE_S * energy.fps))  # frames from this one on share its reference
        self._rows = np.zeros((0, 5))  # (frames known, 5)

    def of(self, first: int, count: int) -> Reference:
        """(count,) arrays: the references of frames ``first`` .. ``first + count - 1``, whose windows were read (or
        the track ended)."""
        energy, last = self._energy, self._last
        wanted = min(first + count, last)
        if wanted > len(self._rows):
            frames = min(wanted, energy.frames)  # past the end of a track: silence, not counted
            decibels, tilts = energy.decibels(0, frames), energy.tilts(0, frames)  # (frames,) each
            sound = decibels >= SILENT_DB
            rows = [_blended(energy, decibels, tilts, np.nonzero(sound[: t + 1])[0])
                    for t in range(len(self._rows), wanted)]  # fmt: skip
            self._rows = np.r_[self._rows, np.array(rows, dtype=np.float64).reshape(-1, 5)]
        index = np.minimum(np.arange(first, first + count), last - 1)  # (count,)
        return Reference(*self._rows[index].T)


def roundness_of(energy: HalfFrameEnergy, tilt: float, levels: np.ndarray, first: int) -> np.ndarray:
    """(len(levels),) how round the lips are in frames ``first`` .. whose opening ``levels`` are known (see the
    module docstring): 0 where the mouth is shut."""
    below = tilt - ROUND_FROM - energy.tilts(first, len(levels))
    return np.where(levels > 0.0, np.clip(below / ROUND_SPAN, 0.0, 1.0), 0.0)


def frame_levels_of(energy: HalfFrameEnergy, reference: Reference, first: int, count: int, done: bool) -> np.ndarray:
    """(count,) the levels of frames ``first`` .. (see the module docstring); 0 past the end of a finished track.
    The first ``AJAR_FRAMES`` are read without the frames before them (``AJAR_LEVEL``): to read frame ``t`` as a
    whole track does, ask from ``AJAR_FRAMES`` earlier and drop those."""
    loudness = np.clip((energy.decibels(first, count) - (reference.level - FLOOR_DB)) / FLOOR_DB, 0.0, None) ** CURVE
    recent = np.zeros(count)  # the loudest of the AJAR_FRAMES frames before each
    for back in range(1, min(AJAR_FRAMES, count - 1) + 1):
        recent[back:] = np.maximum(recent[back:], loudness[:-back])
    ajar = np.where((loudness > 0.0) & (recent >= AJAR_AFTER), AJAR_LEVEL, 0.0)
    shut, faint = energy.closing(first, count, reference)  # (count,) each
    levels = np.maximum(loudness, ajar) * (1.0 - shut)
    levels = levels + faint * (np.minimum(levels, AJAR_LEVEL) - levels)
    if done:
        levels[np.arange(first, first + count) >= energy.frames] = 0.0
    return levels


def frame_levels(blocks: Iterable[np.ndarray], sample_rate: int, fps: int) -> np.ndarray:
    """(frames,) the opening level of every video frame of the audio in ``blocks`` (see the module docstring)."""
    return frame_shapes(blocks, sample_rate, fps)[0]


def frame_shapes(blocks: Iterable[np.ndarray], sample_rate: int, fps: int) -> tuple[np.ndarray, np.ndarray]:
    """(frames,) opening levels and (frames,) roundness of every video frame of the audio in ``blocks``."""
    energy = HalfFrameEnergy(sample_rate, fps)
    for block in blocks:
        energy.add(block)
    reference = CausalReference(energy).of(0, energy.frames)
    levels = frame_levels_of(energy, reference, 0, energy.frames, True)
    return levels, roundness_of(energy, reference.tilt, levels, 0)
