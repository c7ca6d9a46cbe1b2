"""Order statistics of many rows of bootstrap draws, found without partitioning whole rows.

A percentile interval of 10,000 draws needs two order statistics per end (numpy's ``linear``
quantile interpolates between the draws at ``floor((n - 1) q)`` and the next one). Partitioning
every row for them dominated a 1,000-agent report (issue 27, point 1). Here a small leading
subsample of each row places a window of values that must hold both order statistics; one
vectorised pass counts the values below the window and gathers those inside it; sorting the few
hundred gathered values gives the order statistics. A row whose window misses (the count check
fails, or the window holds too many values, as with long runs of ties or sorted rows) is left to
the caller's exact partition. The values found are the row's order statistics, whatever method
finds them; which of ``0.0`` and ``-0.0`` a tie returns is the caller's concern (as for
``np.partition``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["MIN_WINDOW_N", "rank_counts", "stacked", "window_order_stats"]

_SAMPLE = 512  # leading columns of a row that place its windows
_SIGMAS = 3.0  # a window reaches this many standard deviations of a rank beyond its target
# (3 rather than 5: a fifth fewer values to order, ~8 % faster in all; a row missed, 4 of the
# 16,000 of a 1,000-agent report, takes the partition)
_SPARE = 4  # a window holding more than this many times its expected values: partition instead
#: Rows shorter than this take the caller's partition (the subsample would be most of the row).
MIN_WINDOW_N = 8 * _SAMPLE


def window_order_stats(x: np.ndarray, positions: Sequence[int]
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(low, high, ok)``: order statistics ``pos`` and ``pos + 1`` of each row of ``x``.

    ``x`` is ``k x n`` (``n >= MIN_WINDOW_N``) without NaN; ``positions`` are in
    ``[0, n - 1)``. ``low[i, j]`` and ``high[i, j]`` equal ``np.sort(x[i])[positions[j]]`` and
    ``[positions[j] + 1]`` for each row with ``ok[i]``; the other rows need another method.

    Each position gets a one-sided window: from the bottom of the row for a position in its
    lower half, from the top (on ``-x``) otherwise, bounded by an order statistic of the
    leading ``_SAMPLE`` values; one pass gathers what every window holds.
    """
    k, n = x.shape
    if n < MIN_WINDOW_N or any(not 0 <= p < n - 1 for p in positions):
        raise ValueError(f"window_order_stats needs n >= {MIN_WINDOW_N} and 0 <= pos < n - 1")
    plan: list[tuple[bool, int, int]] = []  # (from the top, position counted there, sub rank)
    for pos in positions:
        top = pos + 1 > n - 2 - pos
        p = n - 2 - pos if top else pos
        target = -(-(p + 2) * _SAMPLE // n)  # the subsample's rank of the farther one
        # beyond it by _SIGMAS standard deviations of that rank (binomial), and a few more
        r = target + math.ceil(_SIGMAS * math.sqrt(target * (1.0 - target / _SAMPLE))) + 4
        if r >= _SAMPLE:
            raise ValueError("window_order_stats: a position too far from both ends")
        plan.append((top, p, _SAMPLE - 1 - r if top else r))
    ranks = sorted({rank for _, _, rank in plan})
    sub = np.partition(x[:, :_SAMPLE], ranks, axis=1)
    flat = x.reshape(-1)
    ok = np.ones(k, dtype=bool)
    low = np.full((k, len(plan)), np.nan)
    high = np.full((k, len(plan)), np.nan)
    for j, (top, p, rank) in enumerate(plan):
        bound = sub[:, rank, None]
        at = np.flatnonzero(x >= bound if top else x <= bound)  # row by row, in order
        held = np.diff(np.searchsorted(at, np.arange(k + 1) * n))  # per row
        expected = (_SAMPLE - rank if top else rank + 1) * n // _SAMPLE
        fits = (held >= p + 2) & (held <= _SPARE * expected)
        if not fits.all():
            at = at[fits[at // n]]
            held = np.where(fits, held, 0)
            ok &= fits
        v = flat.take(at)
        if top:  # from the top: the bottom of -x
            np.negative(v, out=v)
        width = max(int(held.max()) if k else 0, p + 2)
        packed = np.full((k, width), np.inf)
        packed[np.arange(width) < held[:, None]] = v  # row by row, in order: each row's first
        lo, hi = _two_order_stats(packed, p)
        if top:
            lo, hi = -hi, -lo
        low[fits, j] = lo[fits]
        high[fits, j] = hi[fits]
    low[~ok] = high[~ok] = np.nan
    return low, high, ok


def _two_order_stats(packed: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the order statistics ``p`` and ``p + 1`` of each row of ``packed``.

    numpy's two-position partition in place (``packed.partition([p, p + 1], axis=1)``): on the
    AMD EPYC (AVX-512) of the ninth pass about 4x faster than a row sort on rows of a thousand
    values (numpy 2.4); on the Intel Xeon of earlier passes a sort was about 3x faster. Either
    gives the same values but, in a tie of ``0.0`` and ``-0.0``, maybe not the same of the two;
    this is the partition's.
    """
    packed.partition([p, p + 1], axis=1)
    return packed[:, p].copy(), packed[:, p + 1].copy()


def rank_counts(rows: Sequence[np.ndarray], top: int) -> tuple[list[int], list[int] | None]:
    """Return how often each series is #1 and among the ``top`` largest, draw by draw.

    ``rows[i]`` holds series ``i``'s ``B`` draws (every row the same length). The counts equal
    those of ``argmax`` and ``argpartition(-m, top - 1)[:, :top]`` of the ``B x k`` matrix ``m``
    of the rows as columns (``None`` for the second when ``k <= top``), ties included. One pass
    over the series keeps each draw's ``top + 1`` largest values and the series holding them
    (a later equal value ranks after an earlier one, so the first holder of the largest is
    ``argmax``'s); a draw whose ``top``-th and next largest values are equal is left to numpy's
    partition of that draw, as the whole matrix would have it. A non-finite draw: the whole
    matrix is partitioned.
    """
    k = len(rows)
    if k <= top + 1 or not all(np.isfinite(r).all() for r in rows):
        return _rank_counts_full(np.vstack(rows), top) if rows else ([], None)
    reps = rows[0].size
    vals = [np.full(reps, -np.inf) for _ in range(top + 1)]  # descending, per draw
    held = [np.full(reps, -1, dtype=np.intp) for _ in range(top + 1)]
    for i, r in enumerate(rows):
        at = np.flatnonzero(r > vals[top])
        if not at.size:
            continue
        v = r[at]
        old_v = [a[at] for a in vals]
        old_i = [a[at] for a in held]
        place = sum((o >= v).astype(np.intp) for o in old_v)  # where v goes: after ties
        for j in range(top + 1):
            before = place > j  # keeps its value
            here = place == j
            shifted_v = old_v[j - 1] if j else v
            shifted_i = old_i[j - 1] if j else np.full(at.size, i, dtype=np.intp)
            vals[j][at] = np.where(before, old_v[j], np.where(here, v, shifted_v))
            held[j][at] = np.where(before, old_i[j], np.where(here, i, shifted_i))
    n_first = np.bincount(held[0], minlength=k).tolist()
    tied = vals[top - 1] == vals[top]  # the boundary is a tie: numpy's partition decides
    clear = ~tied
    n_top = np.bincount(np.concatenate([h[clear] for h in held[:top]]), minlength=k)
    at = np.flatnonzero(tied)
    if at.size:  # those draws of every series, partitioned draw by draw as the whole matrix
        drawn = np.ascontiguousarray(np.vstack([r[at] for r in rows]).T)
        n_top += np.bincount(np.argpartition(-drawn, top - 1, axis=1)[:, :top].ravel(),
                             minlength=k)
    return n_first, n_top.tolist()


def _rank_counts_full(by_row: np.ndarray, top: int) -> tuple[list[int], list[int] | None]:
    """Return :func:`rank_counts` of the ``k x B`` draws by partitioning every draw."""
    k = by_row.shape[0]
    cum = np.ascontiguousarray(by_row.T)  # rows: fast argmax
    first = np.bincount(np.argmax(cum, axis=1), minlength=k).tolist()
    if k <= top:
        return first, None
    ranked = np.argpartition(-cum, top - 1, axis=1)[:, :top]
    return first, np.bincount(ranked.ravel(), minlength=k).tolist()


def stacked(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Return ``np.vstack(rows)`` of 1-D rows: a view of their array when they are its
    consecutive rows in order (as a ``k x B`` matrix of draws gives them; the same values,
    no copy), else a copy. The result is for reading only."""
    if rows:
        first = rows[0]
        base = first.base
        if (isinstance(base, np.ndarray) and base.ndim == 2 and first.ndim == 1
                and base.flags.c_contiguous and base.dtype == first.dtype
                and first.size == base.shape[1] and base.shape[1] > 0):
            start = _address(first) - _address(base)
            step = base.strides[0]
            i = start // step
            if (start % step == 0 and i + len(rows) <= base.shape[0]
                    and all(r.base is base and r.ndim == 1 and r.strides == first.strides
                            and r.size == first.size and _address(r) == _address(first) + n * step
                            for n, r in enumerate(rows))):
                return base[i : i + len(rows)]
    return np.vstack(rows)


def _address(a: np.ndarray) -> int:
    """Return the address of ``a``'s first element."""
    return int(a.__array_interface__["data"][0])
