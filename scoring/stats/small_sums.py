"""Numpy's float64 sum, mean, variance and product of short Python lists, bit for bit.

A report computes them on a few dozen returns per figure, where numpy's per-call cost dominates.
These repeat numpy's operations in its order: ``np.add.reduce`` sums pairwise (below 8 items one
running sum from 0.0; up to 128 items eight running sums combined as ``((r0 + r1) + (r2 + r3)) +
((r4 + r5) + (r6 + r7))`` and the rest added; above 128 the two halves, split at a multiple of
8, summed that way), ``np.mean`` divides that sum by the count, ``np.var`` (``np.std``: its
square root) sums the squared deviations from that mean the same way, and ``np.prod``
multiplies left to right. The tests compare each with numpy on lists of every length up to 300
(random values, NaN, infinities, signed zeros). Bit for bit, except that the sign of a NaN
result may differ where NaNs of both signs meet (e.g. a ``nan`` beside ``inf - inf``); a report
writes every NaN as ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["np_mean", "np_prod", "np_std", "np_sum", "np_var"]

_BLOCK = 128  # numpy's PW_BLOCKSIZE


def _pairwise(a: Sequence[float], lo: int, n: int) -> float:
    """Return numpy's pairwise sum of ``a[lo:lo + n]``."""
    if n < 8:
        res = 0.0
        for x in a[lo:lo + n]:
            res += x
        return res
    if n <= _BLOCK:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        end = lo + n - n % 8
        for i in range(lo + 8, end, 8):
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for x in a[end:lo + n]:
            res += x
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


def np_sum(a: Sequence[float]) -> float:
    """Return ``float(np.sum(np.asarray(a, dtype=float)))`` of a list of floats."""
    return 0.0 + _pairwise(a, 0, len(a))  # numpy starts from its identity, 0.0


def np_mean(a: Sequence[float]) -> float:
    """Return ``float(np.mean(a))`` of a non-empty list of floats."""
    return np_sum(a) / len(a)


def np_var(a: Sequence[float], ddof: int = 0) -> float:
    """Return ``float(np.var(a, ddof=ddof))`` of a list of more than ``ddof`` floats."""
    m = np_mean(a)
    return np_sum([d * d for d in [x - m for x in a]]) / (len(a) - ddof)


def np_std(a: Sequence[float], ddof: int = 0) -> float:
    """Return ``float(np.std(a, ddof=ddof))`` of a list of more than ``ddof`` floats."""
    return math.sqrt(np_var(a, ddof))


def np_prod(a: Sequence[float]) -> float:
    """Return ``float(np.prod(a))`` of a list of floats (left to right from 1.0)."""
    p = 1.0
    for x in a:
        p *= x
    return p
