"""Array helpers that must stay interruptible: distinct rows of a 2-D array without numpy's
structured dtypes.

``np.unique(a, axis=0)`` views each row as one structured record and compares records; numpy's
structured comparison replaces any exception raised inside it with a ``TypeError`` ("Cannot
compare structured arrays unless they have a common dtype"), so a Ctrl-C that lands there
surfaces as a ``TypeError`` traceback instead of a ``KeyboardInterrupt`` (numpy 2.x,
``numpy/_core/src/multiarray/arrayobject.c``, ``_void_compare``; reproduced with a SIGINT sent
while ``aux[1:] != aux[:-1]`` compares structured rows). :func:`unique_rows` sorts with
``np.lexsort`` and compares plain numbers, so an interrupt stays an interrupt.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class UniqueRows(NamedTuple):
    """What :func:`unique_rows` returns.

    Attributes:
        values: ``[u, k]`` the distinct rows, in lexicographic order (column 0 first), the
            order ``np.unique(a, axis=0)`` gives.
        first: ``[u]`` int, the first row of ``a`` equal to each distinct row.
        inverse: ``[n]`` int, for each row of ``a`` its distinct row (``values[inverse] == a``).
        counts: ``[u]`` int, how many rows of ``a`` equal each distinct row.
    """

    values: np.ndarray
    first: np.ndarray
    inverse: np.ndarray
    counts: np.ndarray


def unique_rows(a: np.ndarray) -> UniqueRows:
    """The distinct rows of a 2-D numeric array, as ``np.unique(a, axis=0, return_index=True,
    return_inverse=True, return_counts=True)`` gives them, without structured dtypes.

    Args:
        a: ``[n, k]`` integer or float array without NaN (``n`` may be 0).

    Returns:
        :class:`UniqueRows`; ``first`` names the first occurrence (the sort is stable).

    Raises:
        ValueError: if ``a`` is not 2-D.
    """
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"unique_rows needs a 2-D array, got shape {a.shape}")
    n = a.shape[0]
    if n == 0:
        empty = np.zeros(0, dtype=np.intp)
        return UniqueRows(a[:0], empty, empty, empty)
    order = np.lexsort(a.T[::-1]) if a.shape[1] else np.arange(n)
    s = a[order]
    new = np.ones(n, dtype=bool)
    if a.shape[1]:
        new[1:] = (s[1:] != s[:-1]).any(axis=1)
    else:
        new[1:] = False
    starts = np.flatnonzero(new)
    inverse = np.empty(n, dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    counts = np.diff(np.append(starts, n))
    return UniqueRows(s[starts], order[starts], inverse, counts)
