"""column_median is np.median over rows, bit for bit, on what the face and compositing code hands it."""

from __future__ import annotations

import numpy as np
import pytest

from avatargen.numeric import column_median


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 35, 100, 101])
def test_the_median_of_each_column_is_numpys(dtype, rows):
    rng = np.random.default_rng(rows)
    values = rng.integers(0, 256, (rows, 3)) if np.issubdtype(dtype, np.integer) else rng.random((rows, 3)) * 255
    values = values.astype(dtype)
    found, expected = column_median(values), np.median(values, axis=0)
    assert found.dtype == expected.dtype and np.array_equal(found, expected)
