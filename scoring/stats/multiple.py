"""Multiple comparisons: Holm's step-down adjustment and the Model Confidence Set.

Holm ("A simple sequentially rejective multiple test procedure", Scandinavian Journal of
Statistics 6, 1979) controls the family-wise error rate of a family of p-values. The Model
Confidence Set of Hansen, Lunde and Nason (Econometrica 79(2), 2011) is the set of models
(agents) not distinguishable from the best at a given level; :func:`model_confidence_set` runs
the ``T_max`` elimination of ``arch.bootstrap.MCS(method="max")`` on bootstrap draws shared with
the rest of the report (``scoring.stats.inference.stationary_indices``), vectorised and
stopping at the first step that does not reject (the set); the tests check it against
``arch.bootstrap.MCS`` itself. Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["holm", "model_confidence_set"]

_NAN = float("nan")


def holm(p_values: Sequence[float]) -> list[float]:
    """Return Holm-adjusted p-values in the input order (NaN stays NaN, out of the family).

    With the ``m`` finite p-values sorted ascending, ``p_(i)`` becomes
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``.
    """
    out = [_NAN] * len(p_values)
    live = sorted((float(p), i) for i, p in enumerate(p_values)
                  if p is not None and math.isfinite(p))
    m = len(live)
    running = 0.0
    for rank, (p, i) in enumerate(live):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def model_confidence_set(losses: np.ndarray, counts: np.ndarray, size: float = 0.10, *,
                         full: bool = False) -> tuple[np.ndarray, list[float]]:
    """Return ``(included, p_values)`` of the Model Confidence Set at level ``1 - size``.

    ``losses`` is ``T x k`` (one column per model, lower is better), ``counts`` the
    ``B x T`` resample counts (:func:`scoring.stats.inference.resample_counts`). The ``T_max``
    method of Hansen, Lunde and Nason as ``arch.bootstrap.MCS(method="max")`` implements it:
    at each step the models still in the set are compared with their mean loss; the one(s) with
    the largest standardised excess loss are eliminated with the step's p-value
    ``(1 + #{T*_max > T_max}) / (B + 1)`` (arch's share without the ``+1``: never below
    ``1 / (B + 1)``); a model's MCS p-value is the running maximum. The elimination stops at
    the first p-value above ``size``: the models left are the set and get NaN (``full=True``
    runs to one model, as arch does, and gives the survivor 1.0).
    """
    t, k = losses.shape
    p_out = [_NAN] * k
    included = np.ones(k, dtype=bool)
    if k < 2 or t < 2:
        return included, p_out
    means = losses.mean(axis=0)
    boot = counts @ (losses - means)  # B x k
    boot /= counts.sum(axis=1, keepdims=True)
    reps = boot.shape[0]
    running = 0.0
    while included.sum() > 1:
        cols = np.flatnonzero(included)
        sd, sim = _step_draws(boot, None if cols.size == k else cols)
        diffs = means[cols] - means[cols].mean()
        stat_i = diffs / sd
        test = float(np.max(stat_i))
        p = (1 + int(np.count_nonzero(test < sim))) / (reps + 1)
        running = max(running, p)
        if running > size and not full:
            break
        out = cols[stat_i == test]
        for j in out.tolist():
            p_out[j] = running
        included[out] = False
    if full:
        for j in np.flatnonzero(included).tolist():
            p_out[j] = 1.0
        included = np.array([p > size for p in p_out])
    return included, p_out


_ROWS = 256  # draws per block of a step: the block's temporaries stay in cache


def _step_draws(boot: np.ndarray, cols: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Return one elimination step's ``(sd, sim)`` from the ``B x k`` centred draws ``boot``.

    Over the models ``cols`` (``None``: all): each draw's deviations ``e`` from its mean over
    those models, ``sd`` the root mean square of ``e`` over the draws, ``sim`` each draw's
    largest ``e / sd`` (degenerate ``sd`` of 0 counted as infinite). A block of draws at a time
    with reused buffers instead of ``B x k`` temporaries; the sum over the draws adds them in
    order, one draw after another, as numpy's reduction over the first axis does, so the
    figures are those of the whole-matrix expressions bit for bit.
    """
    reps = boot.shape[0]
    kc = boot.shape[1] if cols is None else cols.size
    buf = np.empty((min(_ROWS, reps) + 1, kc))
    total = np.zeros(kc)
    for s in range(0, reps, _ROWS):
        e = _centred(boot, cols, s, buf[1:])
        np.square(e, out=e)
        if s == 0:
            total = np.add.reduce(e, axis=0)
        else:
            buf[0] = total
            total = np.add.reduce(buf[: e.shape[0] + 1], axis=0)
    sd = np.sqrt(total / reps)
    sd[sd <= 0.0] = np.inf  # a degenerate difference is never eliminated on its own
    sim = np.empty(reps)
    for s in range(0, reps, _ROWS):
        e = _centred(boot, cols, s, buf[1:])
        np.divide(e, sd, out=e)
        sim[s : s + e.shape[0]] = np.max(e, axis=1)
    return sd, sim


def _centred(boot: np.ndarray, cols: np.ndarray | None, start: int, out: np.ndarray
             ) -> np.ndarray:
    """Return draws ``start:start + _ROWS`` of ``boot`` (columns ``cols``) less their row
    means, written into ``out``."""
    block = boot[start : start + _ROWS]
    e = out[: block.shape[0]]
    if cols is None:
        np.copyto(e, block)
        e -= e.mean(axis=1, keepdims=True)
    else:  # gathered columns come column-major: the row means add column after column
        picked = block[:, cols]
        picked -= picked.mean(axis=1, keepdims=True)
        np.copyto(e, picked)
    return e
