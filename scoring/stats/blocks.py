"""Politis-White block lengths of many series at once, with ``arch``'s figures bit for bit.

:func:`arch.bootstrap.optimal_block_length` estimates one column at a time in a Python loop
(about 50 dot products per column). :func:`stationary_block_lengths` runs the same steps for
every series together: the autocovariance dot products are one stacked ``matmul`` per lag
(numpy calls the same BLAS dot for each stack item as for one pair of vectors), the cut-off
search is an array comparison, and the last few scalar steps are arch's own code per series,
so every figure equals arch's exactly (``tests/scoring/test_blocks.py`` checks it element by
element).
"""

from __future__ import annotations

import numpy as np

__all__ = ["stationary_block_lengths"]


def _dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return the dot product of each row of ``a`` with the same row of ``b``."""
    return np.matmul(a[:, None, :], b[:, :, None])[:, 0, 0]


def _tail(acv: np.ndarray, m: int, nobs: int, b_max: float) -> float:
    """Return arch's stationary block length of one series from its autocovariances ``acv``."""
    g = 0.0
    lr_acv = acv[0]
    for k in range(1, m + 1):  # arch.bootstrap.base._single_optimal_block, as written there
        lam = 1 if k / m <= 1 / 2 else 2 * (1 - k / m)
        g += 2 * lam * k * acv[k]
        lr_acv += 2 * lam * acv[k]
    d_sb = 2 * lr_acv**2
    b_sb = ((2 * g**2) / d_sb) ** (1 / 3) * nobs ** (1 / 3)
    return float(min(b_sb, b_max))


def stationary_block_lengths(rows: np.ndarray) -> np.ndarray:
    """Return ``optimal_block_length(rows.T)["stationary"]`` of a ``k x T`` matrix, batched.

    Each row is one series (finite values; ``T >= 2``). The result is arch's figure for each
    row, in order, computed as :func:`arch.bootstrap.optimal_block_length` computes it.
    """
    a = np.ascontiguousarray(rows, dtype=float)
    k, nobs = a.shape
    if k == 0:
        return np.empty(0)
    eps = a - a.mean(axis=1)[:, None]
    b_max = float(np.ceil(min(3 * np.sqrt(nobs), nobs / 3)))
    kn = max(5, int(np.log10(nobs)))
    m_max = int(np.ceil(np.sqrt(nobs))) + kn
    cv = 2 * np.sqrt(np.log10(nobs) / nobs)
    acv = np.zeros((k, m_max + 1))
    abs_acorr = np.zeros((k, m_max + 1))
    opt_m = np.full(k, -1, dtype=np.intp)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(m_max + 1):
            v1 = _dots(eps[:, i + 1 :], eps[:, i + 1 :])
            v2 = _dots(eps[:, : nobs - (i + 1)], eps[:, : nobs - (i + 1)])
            cross = _dots(eps[:, i:], eps[:, : nobs - i])
            acv[:, i] = cross / nobs
            abs_acorr[:, i] = np.abs(cross) / np.sqrt(v1 * v2)
            if i >= kn:
                first = (abs_acorr[:, i - kn : i] < cv).all(axis=1) & (opt_m < 0)
                opt_m[first] = i - kn
        out = np.empty(k)
        for j in range(k):
            m = 2 * max(int(opt_m[j]), 1) if opt_m[j] >= 0 else m_max
            out[j] = _tail(acv[j], min(m, m_max), nobs, b_max)
    return out
