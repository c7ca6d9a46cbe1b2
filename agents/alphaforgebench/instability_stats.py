"""AlphaForgeBench instability measures of repeated strategy generations (pure functions).

A *run* is one generated strategy executed over the same frozen bars: its signal at every step
(steps are (asset, bar) pairs in a fixed order) and whether it held a position then ("active").
Measures over the runs of one model at one temperature:

- :func:`pairwise_agreement`: mean over all pairs of runs of the share of steps whose signals
  are equal (the paper's pairwise agreement rate, Appendix C);
- :func:`disagreement_step_fraction`: share of steps where not every run gives the same signal
  (the paper's "disagreement steps");
- :func:`stepwise_agreement`: the paper's step-wise agreement (Appendix C), the Jaccard
  similarity of the runs' actions at each step: per step, the mean over all pairs of runs of
  the Jaccard index of their action sets there (one action each: 1 when equal, else 0); its
  mean over the steps equals the pairwise agreement rate, as in the paper's figures;
- :func:`active_jaccard`: mean over all pairs of runs of the Jaccard index of their active steps,
  ``|A & B| / |A | B|`` (1.0 when neither is ever active; an extra figure of invested steps);
- :func:`temperature_agreement` between two temperatures of one model: the share of steps where
  the runs' majority signals agree (the paper's temperature agreement rate; a tie counts as 0);
- :func:`snr` across models: the spread of the models' mean figures (max - min) over the mean
  within-model standard deviation of that figure (the paper's "inter-model SR range divided by
  the typical run-to-run std", Appendix F; the figure is each run's Sharpe ratio,
  :func:`run_sharpe`).

:func:`exposures` turns signals into the held exposure (signal 1: the position, -1: flat, 0 or a
failed step: the previous exposure), :func:`backtest_values` gives a run's value after each bar
on the frozen closes, one equal sleeve per asset, with a one-way cost per unit of exposure
traded, :func:`backtest_return` its total return and :func:`run_sharpe` the annualised Sharpe
ratio of its bar-to-bar returns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations, pairwise
from statistics import fmean, stdev

from scoring.stats.metrics import sharpe


def _pairs(n: int) -> list[tuple[int, int]]:
    return list(combinations(range(n), 2))


def _check(runs: Sequence[Sequence[object]]) -> int:
    if len(runs) < 2:
        raise ValueError("need at least two runs")
    n = len(runs[0])
    if n == 0 or any(len(r) != n for r in runs):
        raise ValueError("runs must be non-empty and of equal length")
    return n


def agreement_matrix(runs: Sequence[Sequence[int]]) -> list[list[float]]:
    """Return the share of equal signals of every pair of runs (1.0 on the diagonal)."""
    n = _check(runs)
    k = len(runs)
    out = [[1.0] * k for _ in range(k)]
    for i, j in _pairs(k):
        same = sum(1 for a, b in zip(runs[i], runs[j], strict=True) if a == b) / n
        out[i][j] = out[j][i] = same
    return out


def pairwise_agreement(runs: Sequence[Sequence[int]]) -> float:
    """Return the mean, over all pairs of runs, of the share of steps with equal signals."""
    m = agreement_matrix(runs)
    return fmean(m[i][j] for i, j in _pairs(len(runs)))


def disagreement_step_fraction(runs: Sequence[Sequence[int]]) -> float:
    """Return the share of steps at which the runs do not all give the same signal."""
    n = _check(runs)
    return sum(1 for t in range(n) if len({r[t] for r in runs}) > 1) / n


def set_jaccard(a: set[int], b: set[int]) -> float:
    """Return ``|a & b| / |a | b|`` of two action sets (1.0 if both are empty)."""
    union = a | b
    return 1.0 if not union else len(a & b) / len(union)


def stepwise_agreement(runs: Sequence[Sequence[int]]) -> list[float]:
    """Return, per step, the mean over all pairs of runs of the Jaccard similarity of their
    actions there (the paper's step-wise agreement series)."""
    n = _check(runs)
    pairs = _pairs(len(runs))
    return [fmean(set_jaccard({runs[i][t]}, {runs[j][t]}) for i, j in pairs)
            for t in range(n)]


def jaccard(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Return ``|A & B| / |A | B|`` of the active steps of two runs (1.0 if both are empty)."""
    both = sum(1 for x, y in zip(a, b, strict=True) if x and y)
    either = sum(1 for x, y in zip(a, b, strict=True) if x or y)
    return 1.0 if either == 0 else both / either


def active_jaccard(active: Sequence[Sequence[bool]]) -> float:
    """Return the mean Jaccard index of the active steps over all pairs of runs."""
    _check(active)
    return fmean(jaccard(active[i], active[j]) for i, j in _pairs(len(active)))


def snr(figures: Mapping[str, Sequence[float]]) -> float | None:
    """Return (max - min of the models' means) / (mean of the models' sample std).

    ``figures`` maps each model to one figure per run (e.g. each run's return). ``None`` with
    fewer than two models or a model with fewer than two runs; ``inf`` when every model
    reproduces its figure exactly but the models differ; 0.0 when nothing differs at all.
    """
    if len(figures) < 2 or any(len(v) < 2 for v in figures.values()):
        return None
    means = [fmean(v) for v in figures.values()]
    spread = max(means) - min(means)
    within = fmean(stdev(v) for v in figures.values())
    if within == 0.0:
        return 0.0 if spread == 0.0 else math.inf
    return spread / within


def majority(runs: Sequence[Sequence[int]]) -> list[int]:
    """Return the most frequent signal of the runs at each step (a tie: 0, hold)."""
    n = len(runs[0]) if runs else 0
    if not runs or any(len(r) != n for r in runs):
        raise ValueError("runs must be non-empty and of equal length")
    out = []
    for t in range(n):
        counts: dict[int, int] = {}
        for r in runs:
            counts[r[t]] = counts.get(r[t], 0) + 1
        top = max(counts.values())
        winners = [s for s, c in counts.items() if c == top]
        out.append(winners[0] if len(winners) == 1 else 0)
    return out


def temperature_agreement(runs_a: Sequence[Sequence[int]], runs_b: Sequence[Sequence[int]]
                          ) -> float:
    """Return the share of steps where the majority signals of two sets of runs agree (the
    paper's temperature agreement rate: each temperature's runs aggregated first)."""
    a, b = majority(runs_a), majority(runs_b)
    if len(a) != len(b):
        raise ValueError("runs must be of equal length")
    return sum(1 for x, y in zip(a, b, strict=True) if x == y) / len(a)


def exposures(signals: Sequence[int], positions: Sequence[float],
              failed: Sequence[bool] | None = None, start: float = 0.0) -> list[float]:
    """Return the exposure held after each step: 1 -> position, -1 -> 0, 0 / failed -> kept."""
    out: list[float] = []
    e = start
    for t, (s, p) in enumerate(zip(signals, positions, strict=True)):
        if failed is not None and failed[t]:
            pass
        elif s == 1:
            e = p
        elif s == -1:
            e = 0.0
        out.append(e)
    return out


def backtest_values(closes: Sequence[Sequence[float]], held: Sequence[Sequence[float]],
                    cost: float = 1e-3) -> list[float]:
    """Return the value (start 1.0) after each bar of one equal sleeve per asset.

    ``held[i][t]`` is the exposure of asset ``i`` chosen at the close of bar ``t`` and held to
    the close of bar ``t + 1`` (the last bar's choice earns nothing); each change of exposure
    pays ``cost`` per unit traded, from the sleeve's value then. Entry ``t`` is the mean of the
    sleeves' values at the close of bar ``t``, after its trades.
    """
    if not closes:
        raise ValueError("no assets")
    n = len(closes[0])
    paths: list[list[float]] = []
    for c, e in zip(closes, held, strict=True):
        if len(c) != len(e) or len(c) != n:
            raise ValueError("closes and exposures must be of equal length")
        value, prev, path = 1.0, 0.0, []
        for t in range(n):
            if t > 0:
                value *= 1.0 + prev * (c[t] / c[t - 1] - 1.0)
            value -= value * abs(e[t] - prev) * cost
            prev = e[t]
            path.append(value)
        paths.append(path)
    return [fmean(p[t] for p in paths) for t in range(n)]


def backtest_return(closes: Sequence[Sequence[float]], held: Sequence[Sequence[float]],
                    cost: float = 1e-3) -> float:
    """Return the total return of one equal sleeve per asset (see :func:`backtest_values`)."""
    return backtest_values(closes, held, cost)[-1] - 1.0


def run_sharpe(values: Sequence[float], periods: int = 252) -> float:
    """Return the annualised Sharpe ratio (r_f 0) of the bar-to-bar returns of ``values``
    (:func:`backtest_values`; the first return runs from the start value 1.0 to the second
    bar's close, so it carries the first trades' cost). A run whose value never changes has
    no volatility: its ratio is 0.0 (no excess return), not undefined."""
    path = [1.0, *values[1:]]
    rets = [b / a - 1.0 for a, b in pairwise(path)]
    if len(rets) < 2 or max(abs(r) for r in rets) == 0.0:
        return 0.0
    sr = sharpe(rets, periods)
    return 0.0 if math.isnan(sr) else sr
