"""Issue 27, point 1: rank stability counted in one pass and the Model Confidence Set's steps
a block of draws at a time give the whole-matrix figures exactly, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from scoring.stats.multiple import _step_draws
from scoring.stats.order_stats import rank_counts


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=float).view(np.int64)


def _by_matrix(m: np.ndarray, top: int) -> tuple[list[int], list[int] | None]:
    """The counts as the report first computed them: argmax and argpartition of B x k."""
    cum = np.ascontiguousarray(m.T)
    k = m.shape[0]
    first = np.bincount(np.argmax(cum, axis=1), minlength=k).tolist()
    if k <= top:
        return first, None
    picked = np.argpartition(-cum, top - 1, axis=1)[:, :top]
    return first, np.bincount(picked.ravel(), minlength=k).tolist()


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(27)
    plain = rng.normal(size=(1000, 2_000))
    rounded = np.round(rng.normal(size=(300, 2_000)), 1)  # ties everywhere
    flat_top = rng.normal(size=(200, 2_000))
    flat_top[5:60] = 4.0  # 55 series tied above the rest: every boundary a tie
    pairs = rng.normal(size=(50, 2_000))
    pairs[1::2] = pairs[::2]  # each series twice
    nan_row = rng.normal(size=(20, 500))
    nan_row[7, 3] = np.nan  # not finite: the whole matrix
    return [plain, rounded, flat_top, pairs, nan_row, rng.normal(size=(4, 300)),
            rng.normal(size=(3, 300)), rng.normal(size=(1, 30))]


@pytest.mark.parametrize("case", range(8))
def test_rank_counts_equal_argmax_and_argpartition(case: int) -> None:
    m = _cases()[case]
    rows = [np.ascontiguousarray(r) for r in m]
    for top in (1, 3):
        assert rank_counts(rows, top) == _by_matrix(m, top), top


def _step_reference(boot: np.ndarray, cols: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One step over the whole matrix, as the report computed it before blocks."""
    reps = boot.shape[0]
    if cols is None:
        err = np.empty_like(boot)
        np.copyto(err, boot)
    else:
        err = boot[:, cols]
    err -= err.mean(axis=1, keepdims=True)
    tmp = np.empty((reps, err.shape[1]))
    np.square(err, out=tmp)
    sd = np.sqrt(tmp.mean(axis=0))
    sd[sd <= 0.0] = np.inf
    np.divide(err, sd, out=tmp)
    return sd, np.max(tmp, axis=1)


@pytest.mark.parametrize(("reps", "k"), [(10_000, 1_000), (257, 40), (256, 7), (5, 3),
                                         (1_000, 2)])
def test_mcs_step_in_blocks_equals_whole_matrix(reps: int, k: int) -> None:
    rng = np.random.default_rng(reps + k)
    boot = rng.normal(0.0, 1e-3, (reps, k)) + rng.normal(0.0, 1e-4, k)
    boot[:, -1] = boot[:, 0]  # a degenerate difference when both remain
    for cols in (None, np.arange(0, k, 2), np.array([0, k - 1])):
        got_sd, got_sim = _step_draws(boot, cols)
        want_sd, want_sim = _step_reference(boot, cols)
        assert np.array_equal(_bits(got_sd), _bits(want_sd))
        assert np.array_equal(_bits(got_sim), _bits(want_sim))
