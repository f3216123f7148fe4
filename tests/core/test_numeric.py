"""column_median is np.median over rows, and SeededUniform is np.random.default_rng(entropy).uniform, bit for bit, on
what the face and compositing code hands them."""

from __future__ import annotations

import numpy as np
import pytest

from avatargen.numeric import SeededUniform, column_median


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 35, 100, 101])
def test_the_median_of_each_column_is_numpys(dtype, rows):
    rng = np.random.default_rng(rows)
    values = rng.integers(0, 256, (rows, 3)) if np.issubdtype(dtype, np.integer) else rng.random((rows, 3)) * 255
    values = values.astype(dtype)
    found, expected = column_median(values), np.median(values, axis=0)
    assert found.dtype == expected.dtype and np.array_equal(found, expected)


@pytest.mark.parametrize("entropy", [[0], [1, 0x1D1E], [12345, 0xB11C], [2**31 - 1, 0x1D1E], [2**32 + 5, 7, 0, 9, 11],
                                     [2**64 + 3], [2**100 - 1, 2**40, 3, 4, 5, 6, 7]])  # fmt: skip
def test_seeded_draws_are_numpys(entropy):
    """Seeds of one word and of several, entropy longer than the seed pool: the same stream of draws, any shape."""
    expected, found = np.random.default_rng(entropy), SeededUniform(entropy)
    for low, high, size in [(0.2, 1.0, None), (*np.log((2.5, 9.0)), (4, 3)), (0.5, 1.5, 64), (-3.0, 0.0, 1000)]:
        draws = found.uniform(low, high, size)
        assert np.array_equal(np.asarray(draws), np.asarray(expected.uniform(low, high, size=size)))
