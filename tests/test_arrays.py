"""``unique_rows`` gives what ``np.unique(axis=0)`` gives, without structured comparisons."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from learn_to_shard.arrays import unique_rows


@settings(max_examples=200, deadline=None)
@given(arrays(np.int64, st.tuples(st.integers(0, 40), st.integers(1, 5)),
              elements=st.integers(-3, 3)))
def test_matches_numpy_unique_rows(a):
    want = np.unique(a, axis=0, return_index=True, return_inverse=True, return_counts=True)
    got = unique_rows(a)
    np.testing.assert_array_equal(got.values, want[0])
    np.testing.assert_array_equal(got.first, want[1])
    np.testing.assert_array_equal(got.inverse, want[2].reshape(-1))
    np.testing.assert_array_equal(got.counts, want[3])
    np.testing.assert_array_equal(got.values[got.inverse], a)


def test_floats_and_empty():
    a = np.array([[1.5, 2.0], [0.5, 9.0], [1.5, 2.0], [1.5, -1.0]])
    got = unique_rows(a)
    np.testing.assert_array_equal(got.values, [[0.5, 9.0], [1.5, -1.0], [1.5, 2.0]])
    np.testing.assert_array_equal(got.first, [1, 3, 0])
    np.testing.assert_array_equal(got.counts, [1, 1, 2])
    empty = unique_rows(np.zeros((0, 3), dtype=np.int64))
    assert empty.values.shape == (0, 3) and len(empty.inverse) == 0


def test_refuses_one_dimensional_input():
    with pytest.raises(ValueError, match="2-D"):
        unique_rows(np.arange(4))
