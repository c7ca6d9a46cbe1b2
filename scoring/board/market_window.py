"""A market's prices at a row's marks and the row's figures read against them alone.

What every row with the same marks of a market shares is made once per report and kept in the
store's cache (:class:`_Window`, :func:`_window`): the panel's prices at the marks, their
mark-to-mark returns and the CapitalBench window (first priced mark, best return). Each row's
diversification (s_intra / s_inter / s_corr, Polymarket by question) is scored against the
window's correlations, kept with it, or left in ``_Store.div_jobs`` for
:mod:`scoring.board.batched_rows` to score with the others. Imports the store's structures
(:mod:`scoring.board.load`) and the statistics (:mod:`scoring.stats`) only; the row that uses
them is :mod:`scoring.board.figures`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scoring.board.load import _NAN, _Store
from scoring.stats.benchmarks import CASH, capitalbench_score
from scoring.stats.diversification import (
    class_correlations,
    diversification_rows,
    signed_question_rows,
)
from scoring.stats.small_sums import np_mean

_HELD_EPS = 1e-12


def _asset_returns(prices: np.ndarray) -> np.ndarray:
    """Return mark-to-mark simple returns per asset (NaN where a price is missing or 0)."""
    if prices.shape[0] < 2:
        return np.empty((0, prices.shape[1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = prices[1:] / prices[:-1] - 1.0
    r[~np.isfinite(r)] = np.nan
    return r


def _window_asset_returns(assets: Sequence[str], p0: np.ndarray, p1: np.ndarray
                          ) -> dict[str, float]:
    """Return each asset's return between two price rows, CASH (0) included."""
    out = {CASH: 0.0}
    for j, a in enumerate(assets):
        if math.isfinite(p0[j]) and math.isfinite(p1[j]) and p0[j] > 0:
            out[a] = float(p1[j] / p0[j] - 1.0)
    return out


def _first_priced(prices: np.ndarray) -> int:
    """Return the first row with any finite price (the CapitalBench window start), else -1."""
    rows: Sequence[int] = (np.flatnonzero(np.isfinite(prices).any(axis=1)).tolist()
                           if prices.size else [])
    return int(rows[0]) if len(rows) else -1


def _capitalbench(values: Sequence[float], assets: Sequence[str], prices: np.ndarray,
                  window: tuple[int, float] | None = None) -> tuple[float, float]:
    """Score the realised window return the way capitalbench_score scores ``sum(w r)``.

    The window runs from the first mark with a price in the market to the last mark; the
    portfolio return is the agent's value ratio over it, the universe every asset priced at both
    ends plus CASH (return 0). ``window``: :func:`_capitalbench_window` of the prices, if known.
    """
    i, best = window if window is not None else _capitalbench_window(assets, prices)
    if i < 0 or len(values) - i < 2 or values[i] <= 0:
        return _NAN, _NAN
    pr = values[-1] / values[i] - 1.0
    return (100.0 * pr / best if best > 0 else _NAN), best - pr


def _capitalbench_window(assets: Sequence[str], prices: np.ndarray) -> tuple[int, float]:
    """Return the CapitalBench window's first row and its best return (NaN without two rows)."""
    i = _first_priced(prices)
    if i < 0 or prices.shape[0] - i < 2:
        return i, _NAN
    rets = _window_asset_returns(assets, prices[i], prices[-1])
    _, best = capitalbench_score({}, rets)  # empty weights: regret = best - 0 = best
    return i, best


@dataclass
class _Window:
    """What every row with the same marks of a market shares (:func:`_window`): never written
    to by a row."""

    prices: np.ndarray  # the panel's rows at the marks
    pz: np.ndarray  # the prices, 0 where missing, with CASH's 1 last
    returns: np.ndarray  # :func:`_asset_returns` of the prices
    best: tuple[int, float]  # :func:`_capitalbench_window` of the prices
    corr: dict[Any, Any] = field(default_factory=dict)  # :func:`_diversification`'s


def _window(store: _Store, market: str, mark_ts: list[float]) -> _Window:
    """Return the market's :class:`_Window` at the marks ``mark_ts``, made once per report (kept
    in ``store.corr_cache``)."""
    key = ("window", market, tuple(mark_ts))
    win: _Window | None = store.corr_cache.get(key)
    if win is None:
        panel = store.panels[market]
        prices = panel.rows(mark_ts)
        pz = np.hstack([np.nan_to_num(prices, nan=0.0), np.ones((len(mark_ts), 1))])
        win = _Window(prices, pz, _asset_returns(prices),
                      _capitalbench_window(panel.assets, prices))
        store.corr_cache[key] = win
    return win


def _diversification(held: np.ndarray, classes: Mapping[str, str], assets: list[str],
                     returns: np.ndarray, questions: Mapping[str, Sequence[str]] | None = None,
                     cache: dict[Any, Any] | None = None,
                     jobs: list[list[Any]] | None = None) -> dict[str, float]:
    """Return the mean over marks of s_intra / s_inter / s_corr of the portfolio held.

    ``held`` is the value held per asset and mark (units times prices, CASH last); correlations
    come from the window's mark-to-mark asset returns ``returns`` (kept in ``cache``, the
    window's). With ``questions`` (Polymarket: question -> its YES and NO tokens) each question
    is one signed exposure (:func:`scoring.stats.diversification.signed_question_exposures`).
    """
    if questions is not None:
        return _question_diversification(held, assets, returns, questions, cache, jobs)
    if returns.shape[0] < 2:
        return {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}
    names = [*assets, CASH]
    corr = cache.get("assets") if cache is not None else None
    if corr is None:
        panel = np.column_stack([returns, np.zeros(returns.shape[0])])
        cls = {**{a: classes.get(a, a) for a in assets}, CASH: "cash"}
        corr = class_correlations(panel, names, cls)  # the whole class's, once for the window
        if cache is not None:
            cache["assets"] = corr
    return _scores(diversification_rows, (_row_weights(held), names, corr, _HELD_EPS), jobs)


def _scores(score_rows: Any, args: tuple[Any, ...], jobs: list[list[Any]] | None
            ) -> dict[str, float]:
    """Return :func:`_mean_scores` of ``score_rows(*args)``; with ``jobs``, NaN for now and
    the call left in ``jobs`` (its row is set by :func:`_row`) to be scored with others."""
    if jobs is None:
        return _mean_scores(score_rows(*args))
    jobs.append([score_rows, args, None])
    return {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}


def _row_weights(held: np.ndarray) -> np.ndarray:
    """Return the weights (row / its sum) of the rows holding a positive value, in order."""
    v = held.sum(axis=1)
    ok = v > 0
    return held[ok] / v[ok, None]


def _mean_scores(scores: np.ndarray) -> dict[str, float]:
    """Return the mean over rows of each finite s_intra / s_inter / s_corr (NaN if none)."""
    out = {}
    for k, col in zip(("s_intra", "s_inter", "s_corr"), scores.T.tolist(), strict=True):
        finite = [x for x in col if math.isfinite(x)]
        out[k] = np_mean(finite) if finite else _NAN  # np.mean of the finite ones, in Python
    return out


def _question_diversification(held: np.ndarray, assets: list[str], returns: np.ndarray,
                              questions: Mapping[str, Sequence[str]],
                              cache: dict[Any, Any] | None = None,
                              jobs: list[list[Any]] | None = None) -> dict[str, float]:
    """Return the mean s_intra / s_inter / s_corr with questions as the unit of exposure.

    A question's series is its YES token's mark-to-mark return (its NO token's, negated, when
    the YES token has no price); every question is its own class, so one question held is
    concentrated (``rho_intra`` 1); the held exposure is ``w_YES - w_NO``, signed. The
    correlations are kept in ``cache`` (the window's; ``None`` there: no question held).
    """
    if "questions" in (cache or {}):
        corr = cache["questions"]  # type: ignore[index]
    else:
        corr = _question_correlations(assets, returns, questions)
        if cache is not None:
            cache["questions"] = corr
    if corr is None:
        return {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}
    return _scores(signed_question_rows, (_row_weights(held), assets, questions, corr), jobs)


def _question_correlations(assets: list[str], returns: np.ndarray,
                           questions: Mapping[str, Sequence[str]]) -> Any:
    """Return the class correlations of the questions' series (None: fewer than two returns or
    no question among ``assets``)."""
    col = {a: j for j, a in enumerate(assets)}
    names = sorted(q for q, toks in questions.items() if any(t in col for t in toks))
    if returns.shape[0] < 2 or not names:
        return None
    series = np.full((returns.shape[0], len(names)), np.nan)
    for i, q in enumerate(names):
        toks = list(questions[q])
        if toks and toks[0] in col and np.isfinite(returns[:, col[toks[0]]]).sum() >= 2:
            series[:, i] = returns[:, col[toks[0]]]
        elif len(toks) > 1 and toks[1] in col:
            series[:, i] = -returns[:, col[toks[1]]]
    panel = np.column_stack([series, np.zeros(series.shape[0])])
    return class_correlations(panel, [*names, CASH], {**{q: q for q in names}, CASH: "cash"})
