"""Numeric helpers shared by the face and compositing code."""

from __future__ import annotations

import numpy as np

LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601 weights of R, G, B in a pixel's grey (luma)


def column_median(values: np.ndarray) -> np.ndarray:
    """``np.median(values, axis=0)`` of an (N, C) array, bit for bit (float input keeps its dtype, integer input
    gives float64; N >= 1, no NaN), without the import of ``numpy.ma`` that ``np.median``'s first call makes: 13 ms
    of a render's time to first frame."""
    if not np.issubdtype(values.dtype, np.floating):
        values = values.astype(np.float64)
    count = len(values)
    half = count // 2
    if count % 2:
        return np.partition(values, half, axis=0)[half]
    middle = np.partition(values, [half - 1, half], axis=0)
    return (middle[half - 1] + middle[half]) / values.dtype.type(2)


def smoothstep(x):
    """0 below 0, 1 above 1, and 3x^2 - 2x^3 between (zero slope at both ends): of a numpy array or a torch
    tensor, elementwise."""
    x = x.clip(0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def nearest_pixels(picture: np.ndarray, points: np.ndarray) -> np.ndarray:
    """(..., 3) float64: the pixels of ``picture`` (H, W, 3) nearest the points (..., 2) x, y, clipped to it."""
    height, width = picture.shape[:2]
    x = np.clip(np.rint(points[..., 0]).astype(int), 0, width - 1)
    y = np.clip(np.rint(points[..., 1]).astype(int), 0, height - 1)
    return picture[y, x].astype(np.float64)


class SeededUniform:
    """``np.random.default_rng(entropy).uniform(low, high)``, draw for draw and bit for bit (numpy's ``SeedSequence``
    and ``PCG64`` in Python integers), without importing ``numpy.random``: 17-45 ms of a render's time to first
    frame, for the few dozen draws the idle motion makes before it. ``entropy``: non-negative integers."""

    _MASK32, _MASK64, _MASK128 = (1 << 32) - 1, (1 << 64) - 1, (1 << 128) - 1
    _MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645  # PCG's default 128-bit LCG multiplier

    def __init__(self, entropy: list[int]) -> None:
        words = _uint64_state(_seed_pool(entropy), 4)
        self._increment = ((((words[2] << 64) | words[3]) << 1) | 1) & self._MASK128
        self._state = 0
        self._step()
        self._state = (self._state + ((words[0] << 64) | words[1])) & self._MASK128
        self._step()

    def _step(self) -> None:
        self._state = (self._state * self._MULTIPLIER + self._increment) & self._MASK128

    def _next_uint64(self) -> int:
        self._step()
        value = ((self._state >> 64) ^ self._state) & self._MASK64  # XSL-RR: xor-fold, then a random rotation
        rotation = self._state >> 122
        return ((value >> rotation) | (value << ((-rotation) & 63))) & self._MASK64

    def uniform(self, low: float, high: float, size: int | tuple[int, ...] | None = None) -> float | np.ndarray:
        """One draw in [low, high) (``size`` None) or an array of ``size`` draws in C order, as numpy's."""
        count = 1 if size is None else int(np.prod(size))
        span = high - low
        draws = [low + span * ((self._next_uint64() >> 11) * (1.0 / 9007199254740992.0)) for _ in range(count)]
        return draws[0] if size is None else np.array(draws, dtype=np.float64).reshape(size)


def _seed_pool(entropy: list[int], pool_size: int = 4) -> list[int]:
    """numpy's ``SeedSequence(entropy).pool``: the entropy's 32-bit words hashed and mixed into ``pool_size`` words."""
    mask = SeededUniform._MASK32
    words = []
    for value in entropy:
        if value < 0:
            raise ValueError("entropy must be non-negative")
        words.extend([0] if value == 0 else [(value >> shift) & mask for shift in range(0, value.bit_length(), 32)])
    hash_const = [0x43B0D7E5]

    def hashmix(value: int) -> int:
        value = (value ^ hash_const[0]) & mask
        hash_const[0] = (hash_const[0] * 0x931E8875) & mask
        value = (value * hash_const[0]) & mask
        return value ^ (value >> 16)

    def mix(x: int, y: int) -> int:
        result = (0xCA01F9DD * x - 0x4973F715 * y) & mask
        return result ^ (result >> 16)

    pool = [hashmix(words[i] if i < len(words) else 0) for i in range(pool_size)]
    for source in range(pool_size):
        for target in range(pool_size):
            if source != target:
                pool[target] = mix(pool[target], hashmix(pool[source]))
    for source in range(pool_size, len(words)):
        for target in range(pool_size):
            pool[target] = mix(pool[target], hashmix(words[source]))
    return pool


def _uint64_state(pool: list[int], count: int) -> list[int]:
    """numpy's ``SeedSequence.generate_state(count, np.uint64)`` of a seed ``pool``."""
    mask = SeededUniform._MASK32
    hash_const = 0x8B51F9DD
    words = []
    for index in range(2 * count):
        value = pool[index % len(pool)] ^ hash_const
        hash_const = (hash_const * 0x58F38DED) & mask
        value = (value * hash_const) & mask
        words.append(value ^ (value >> 16))
    return [words[2 * i] | (words[2 * i + 1] << 32) for i in range(count)]
