"""The rows' diversification scores of a whole report, scored together (issue 27, point 1).

Each row's s_intra / s_inter / s_corr is the mean over its marks of
:func:`scoring.stats.diversification.diversification_rows` (or
:func:`~scoring.stats.diversification.signed_question_rows`) of its weights. Both score every
mark on its own (a mark's figures depend on its weights and the window's correlations only), so
the marks of every row sharing the same assets and correlations are scored in one call and split
back: each row gets the figures of its own call bit for bit, at one call per market and window
instead of one per row. The rows' rolling-k figures wait in the same list
(``[ROLLING_K_JOB, (holdings, prices), row]``) and are compounded together by
:func:`scoring.stats.benchmarks.rolling_k_figures_rows`, the same figures as one row at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from scoring.board.figures import ROLLING_K_JOB, _mean_scores
from scoring.stats.benchmarks import ROLLING_KS, rolling_k_figures_rows

__all__ = ["score_pending"]


def _key(score_rows: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Return what rows scored together share: the function and every argument but the
    weights (lists by value, correlations and question maps by identity)."""
    rest = tuple(tuple(a) if isinstance(a, list) else
                 a if isinstance(a, float) else id(a) for a in args[1:])
    return (score_rows, *rest)


def score_pending(jobs: Sequence[list[Any]]) -> None:
    """Score the waiting ``[score_rows, args, row]`` jobs, a group at a time; set each row's
    s_intra, s_inter and s_corr (keys it holds already, so their place stays); a rolling-k
    job sets its row's ``rolling_k``."""
    rolling = [job for job in jobs if job[0] is ROLLING_K_JOB]
    for job, fig in zip(rolling, rolling_k_figures_rows([job[1] for job in rolling], ROLLING_KS),
                        strict=True):
        if job[2] is not None:
            job[2]["rolling_k"] = fig
    groups: dict[tuple[Any, ...], list[list[Any]]] = {}
    for job in jobs:
        if job[0] is ROLLING_K_JOB:
            continue
        groups.setdefault(_key(job[0], job[1]), []).append(job)
    for group in groups.values():
        score_rows, args = group[0][0], group[0][1]
        weights = [job[1][0] for job in group]
        scores = score_rows(np.vstack(weights), *args[1:])
        at = 0
        for job, w in zip(group, weights, strict=True):
            part = scores[at : at + w.shape[0]]
            at += w.shape[0]
            if job[2] is not None:
                job[2] |= _mean_scores(part)
