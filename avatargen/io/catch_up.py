"""Catching up at the input of a live session: silent audio that arrives while the render is far behind is left out
before it is decoded, so no time is spent generating frames that would only be dropped.

``--realtime`` with ``--audio -``: the pacer (avatargen/io/pacing.py) drops silent frames that are ready while the
picture is more than ``output.realtime_target_s`` behind the voice; that catches up only as fast as generation runs
ahead. After a late start (the models load while the producer already writes) or a stall, seconds of audio wait at
the input; ``InputGate`` leaves out its silent pieces while more than ``backlog_s`` of audio is in flight (read, not
yet shown), so the render starts again near the present. Speech is never left out: a piece goes only when it and the
``guard_s`` before it are silence.
"""

from __future__ import annotations

import threading

import numpy as np

_DTYPES = {"u8": "u1", "s16le": "<i2", "s32le": "<i4", "f32le": "<f4", "f64le": "<f8"}
_FULL_SCALE = {"u8": 128.0, "s16le": 32768.0, "s32le": 2147483648.0, "f32le": 1.0, "f64le": 1.0}
PIECE_S = 0.02
# Audio in flight (read, not yet shown) beyond which silent input is left out, at least: above what a live render
# holds while it keeps up (a 4-frame chunk and its look-ahead, generation, the output buffer: about 0.6 s).
LIVE_BACKLOG_S = 0.8


class InputGate:
    """Decides, piece by piece (20 ms), which raw input audio goes on to the decoder (see the module docstring).

    ``shown(seconds)`` (from the pacer): the stream time the output has reached. ``read`` counts what went on."""

    def __init__(self, backlog_s: float, silence_dbfs: float = -40.0, guard_s: float = 0.16) -> None:
        self.backlog_s = backlog_s
        self.silence = 10 ** (silence_dbfs / 20)
        self.guard_pieces = max(1, round(guard_s / PIECE_S))
        self.read_s = 0.0  # stream seconds passed on
        self.dropped_s = 0.0
        self._shown_s = 0.0
        self._quiet_run = 0  # silent pieces in a row, up to this one
        self._lock = threading.Lock()

    def shown(self, seconds: float) -> None:
        with self._lock:
            self._shown_s = max(self._shown_s, seconds)

    def in_flight_s(self) -> float:
        with self._lock:
            return self.read_s - self._shown_s

    def keep(self, samples: np.ndarray, seconds: float) -> bool:
        """Whether a piece (float samples in [-1, 1], any channels) of ``seconds`` goes on to the decoder."""
        quiet = samples.size == 0 or float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) < self.silence
        self._quiet_run = self._quiet_run + 1 if quiet else 0
        if quiet and self._quiet_run > self.guard_pieces and self.in_flight_s() > self.backlog_s:
            self.dropped_s += seconds
            return False
        with self._lock:
            self.read_s += seconds
        return True


class RawFilter:
    """Cuts raw PCM bytes (``sample_format``, ``rate``, ``channels`` as ffmpeg names them) into 20-ms pieces and
    passes on those ``gate`` keeps. Formats it cannot read (24-bit) pass whole."""

    def __init__(self, gate: InputGate, sample_format: str, rate: int, channels: int) -> None:
        self.gate = gate
        self.dtype = _DTYPES.get(sample_format)
        self.scale = _FULL_SCALE.get(sample_format, 1.0)
        self.offset = 128.0 if sample_format == "u8" else 0.0
        self.channels = channels
        self.samples = max(1, round(rate * PIECE_S))
        self.seconds = self.samples / rate
        self.piece_bytes = self.samples * channels * (np.dtype(self.dtype).itemsize if self.dtype else 1)
        self._carry = b""

    def __call__(self, data: bytes) -> bytes:
        """What of ``data`` goes on (bytes of a partial piece wait for the next call); at the end call ``flush``."""
        if self.dtype is None:
            return data
        data = self._carry + data
        whole = len(data) // self.piece_bytes * self.piece_bytes
        self._carry = data[whole:]
        out = bytearray()
        for i in range(0, whole, self.piece_bytes):
            piece = data[i : i + self.piece_bytes]
            samples = (np.frombuffer(piece, self.dtype).astype(np.float64) - self.offset) / self.scale
            if self.gate.keep(samples, self.seconds):
                out += piece
        return bytes(out)

    def flush(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest
