"""Inference of the leaderboard: block-bootstrap intervals, paired tests, Holm, ranks, MCS.

Per market, the daily **excess** returns (``r - rf / N``, the risk-free convention of the
Sharpe ratio) of every agent are resampled by one seeded stationary block bootstrap
(:mod:`scoring.stats.inference`, ``arch``'s draws, block length by Politis-White) per set of
days: the draws are a count matrix applied to all agents' returns at once. From them:

* each row's 95% intervals of the cumulative return, the mean daily return and the Sharpe ratio;
* paired comparisons (``vs_next``, ``vs_baselines``) of the cumulative excess return and of the
  Sharpe ratio over the days both agents have, two-sided p-values from the resampled null; the
  market's comparisons are one family per test with Holm-adjusted p-values
  (:func:`scoring.stats.multiple.holm`), which decide every significance mark;
* rank stability of the ranked agents: the share of resamples in which each is #1 and in the
  top 3, and its one-sided p-value to the best;
* the Model Confidence Set at 90% (Hansen, Lunde and Nason) of the ranked agents' daily losses;
* per row the Probabilistic and Deflated Sharpe Ratios and the minimum track record length
  (:mod:`scoring.stats.sharpe_tests`).

Conventions: docs/scoring.md, section "Significance".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from scoring.board.load import _NAN, AgentCurves, Key
from scoring.stats.inference import (
    BOOTSTRAP_REPS,
    block_length,
    finite_quantiles,
    null_p_values,
    resample_counts,
    stationary_indices,
    two_pass_variances,
)
from scoring.stats.metrics import DDOF, STD_ZERO_RTOL, simple_returns
from scoring.stats.multiple import holm, model_confidence_set
from scoring.stats.order_stats import rank_counts, stacked
from scoring.stats.sharpe_tests import (
    deflated_sharpe,
    min_track_record,
    probabilistic_sharpe,
    sharpe_difference_hac_rows,
    sharpe_moments_many,
)

#: Draws of every interval and test; their seed; the level of the intervals.
BOOTSTRAP_N = BOOTSTRAP_REPS
BOOTSTRAP_SEED = 0
BOOTSTRAP_LEVEL = 0.95
#: Holm-adjusted p-values below this are significant (family-wise error rate per market).
SIGNIFICANCE = 0.05
#: Size of the Model Confidence Set test: the set is the agents not distinguishable from the
#: best at 90%.
MCS_SIZE = 0.10
#: Rank stability counts the resamples in which an agent is #1 and in the top TOP_K.
TOP_K = 3
#: Level of the minimum track record length (Bailey and López de Prado).
MIN_TRL_LEVEL = 0.95
#: Fewer common daily returns than this: a comparison makes no claim (``provisional``).
MIN_PAIRED_DAYS = 20
#: Agent kinds that are baselines: every agent is compared with each one in its market.
BASELINE_KINDS: tuple[str, ...] = ("buy_and_hold", "equal_weight", "cash", "momentum",
                                   "sixty_forty", "risk_parity", "equal_risk_contribution",
                                   "min_variance", "random_guess")
_CHUNK = 256  # columns per matrix product (bounds the memory of a large market)
_BAND = 8  # agents per product of the resampled statistics: the band's draws stay in cache
_P_BAND = 16  # agents per product of an interval computed on the fly
#: A resample's one-pass ``counts @ xc**2 - n * mean(xc)**2`` at or below this share of
#: ``counts @ xc**2`` lost most of its digits (its rounding, up to ``(n + 3) * eps`` of that,
#: is then over ``1e-9`` of it; a draw of one repeated day leaves rounding alone, ~1e-16, a
#: Sharpe of ~1e8): that draw's variance is computed again in two passes.
_CANCELLED = 1e-6
_Two = tuple[np.ndarray, np.ndarray]  # two agents' draws of one statistic


@dataclass
class _Draws:
    """One seeded set of stationary-bootstrap draws over a set of days, with cached stats."""

    days: np.ndarray  # bool mask over the market's days
    counts: np.ndarray  # B x T
    block: float
    cum: dict[int, np.ndarray] = field(default_factory=dict)  # cumulative excess return
    shp: dict[int, np.ndarray] = field(default_factory=dict)  # annualised Sharpe


class _Market:
    """The excess returns of one market's agents on the union of their days."""

    def __init__(self, returns: Mapping[str, Mapping[float, float]], rf: float, periods: int):
        self.agents = sorted(returns)
        self.col = {a: j for j, a in enumerate(self.agents)}
        self.days = sorted({t for r in returns.values() for t in r})
        pos = {t: i for i, t in enumerate(self.days)}
        raw = np.full((len(self.days), len(self.agents)), np.nan)
        for a, r in returns.items():
            for t, x in r.items():
                raw[pos[t], self.col[a]] = x
        raw[~np.isfinite(raw)] = np.nan
        self.raw = raw
        self.excess = raw - rf / periods
        # rf = 0: x - 0.0 is x bit for bit, so the raw cumulative draws are the excess ones
        self.excess_is_raw = rf / periods == 0.0
        self.has = np.isfinite(raw)
        self.days_of = [c.tobytes() for c in np.ascontiguousarray(self.has.T)]  # per column
        self.periods = periods
        self._draws: dict[bytes, _Draws] = {}
        self._estimates: dict[tuple[bytes, int], tuple[float, float]] = {}

    def draws(self, mask: np.ndarray) -> _Draws | None:
        """Return the draws over the days of ``mask`` (cached); None with fewer than 2 days."""
        n = int(mask.sum())
        if n < 2:
            return None
        key = mask.tobytes()
        if key not in self._draws:
            cols = np.flatnonzero(self.has[mask].all(axis=0))
            block = block_length(self.excess[np.ix_(mask, cols)]) if cols.size else 1.0
            idx = stationary_indices(n, block, BOOTSTRAP_N, BOOTSTRAP_SEED)
            self._draws[key] = _Draws(mask, resample_counts(idx, n), block)
        return self._draws[key]

    def stats(self, d: _Draws, cols: Iterable[int]) -> None:
        """Fill the resampled cumulative excess return and Sharpe of ``cols`` on ``d``.

        Each agent's draws are one contiguous row of ``B``: the products are
        ``x.T @ counts.T`` (``k x B``; ``counts.T`` a view, no transposed copy), a band of
        ``_BAND`` agents at a time, their three products (log growth, centred and squared
        centred returns) stacked into one, the band's arithmetic in cache. The same
        expressions as in the comments; BLAS sums each product in its own order (the
        rounding of ``counts @ x``'s sums may differ: about 1e-16 of the operands' scale).
        """
        todo = sorted({j for j in cols if j not in d.cum})
        if not todo:
            return
        n = int(d.days.sum())
        ct = d.counts.T  # n x B, a view
        reps = ct.shape[1]
        root = math.sqrt(self.periods)
        band = min(_BAND, len(todo))
        a = np.empty((3 * band, n))  # a band's rows: centred, squared centred, log growth
        prod = np.empty((3 * band, reps))
        low = np.empty((band, reps), dtype=bool)
        flat = np.empty((band, reps), dtype=bool)
        floor = np.empty((band, reps))
        for s in range(0, len(todo), _CHUNK):
            part = todo[s : s + _CHUNK]
            x = self.excess[np.ix_(d.days, np.asarray(part, dtype=np.intp))]
            centre = x.mean(axis=0)
            xc = (x - centre).T  # centred first: a constant column has exactly zero spread
            growth = np.log1p(np.maximum(x, -1.0 + 1e-12)).T
            cum = np.empty((len(part), reps))  # one contiguous row of B draws per agent
            shp = np.empty((len(part), reps))
            for b in range(0, len(part), band):
                m = min(band, len(part) - b)
                a[:m], a[2 * m : 3 * m] = xc[b : b + m], growth[b : b + m]
                np.square(a[:m], out=a[m : 2 * m])
                mc, var, tmp = prod[:m], prod[m : 2 * m], prod[2 * m : 3 * m]
                np.matmul(a[: 3 * m], ct, out=prod[: 3 * m])
                np.expm1(tmp, out=cum[b : b + m])  # expm1(counts @ log1p(max(x, -1 + 1e-12)))
                mc /= n  # counts @ xc / n
                np.multiply(var, _CANCELLED, out=floor[:m])
                np.square(mc, out=tmp)
                tmp *= n
                var -= tmp  # counts @ xc**2 - n * mc**2
                np.less_equal(var, floor[:m], out=flat[:m])  # cancelled: maybe rounding's
                flat[:m] &= floor[:m] > 0.0  # (no spread at all: exactly 0, nothing to redo)
                var /= n - DDOF  # (counts @ xc**2 - n * mc**2) / (n - DDOF)
                for k in np.flatnonzero(flat[:m].any(axis=1)).tolist():
                    f = np.flatnonzero(flat[k])  # these draws' variances in two passes
                    var[k, f] = two_pass_variances(xc[b + k], mc[k, f], d.counts[f], n)
                mc += centre[b : b + m, None]  # mean = mc + centre
                mean = mc
                sd = np.maximum(var, 0.0, out=var)
                np.sqrt(sd, out=sd)
                out = shp[b : b + m]
                with np.errstate(divide="ignore", invalid="ignore"):
                    np.divide(mean, sd, out=out)
                    out *= root  # mean / sd * sqrt(N)
                small = np.abs(mean, out=mean)
                np.maximum(small, 1.0, out=small)
                small *= STD_ZERO_RTOL
                np.less_equal(sd, small, out=low[:m])
                out[low[:m]] = np.nan  # sd <= RTOL * max(1, |mean|)
            for i, j in enumerate(part):
                d.cum[j] = cum[i]
                d.shp[j] = shp[i]

    def estimate(self, mask: np.ndarray, j: int, days: bytes | None = None) -> tuple[float, float]:
        """Return column ``j``'s observed cumulative excess return and Sharpe on ``mask``
        (``days``: ``mask.tobytes()``, if known)."""
        key = (mask.tobytes() if days is None else days, j)  # the same days: the same figures
        if key not in self._estimates:
            self._estimates[key] = self._estimate(mask, j)
        return self._estimates[key]

    def _estimate(self, mask: np.ndarray, j: int) -> tuple[float, float]:
        """Compute :meth:`estimate`."""
        x = self.excess[mask, j]
        cum = float(np.prod(1.0 + x) - 1.0)
        sd = float(np.std(x, ddof=DDOF)) if x.size > 1 else _NAN
        m = float(np.mean(x)) if x.size else _NAN
        ok = math.isfinite(sd) and sd > STD_ZERO_RTOL * max(1.0, abs(m))
        return cum, (m / sd * math.sqrt(self.periods) if ok else _NAN)


def _product_quantiles(rows: np.ndarray, counts: np.ndarray, *, growth: bool) -> np.ndarray:
    """Return :func:`~scoring.stats.inference.finite_quantiles` of the resampled sums of
    ``rows`` (``k x n``): the draws
    ``expm1(rows @ counts.T)`` (``growth``: the rows are log growth) or ``rows @ counts.T / n``,
    computed and summarised ``_P_BAND`` rows at a time (each draw a row of ``B``, in cache)."""
    k, n = rows.shape
    ct = counts.T  # a view: no transposed copy
    buf = np.empty((min(_P_BAND, k), ct.shape[1]))
    out = np.empty((k, 2))
    for s in range(0, k, _P_BAND):
        m = min(_P_BAND, k - s)
        draws = buf[:m]
        np.matmul(rows[s : s + m], ct, out=draws)
        if growth:
            np.expm1(draws, out=draws)
        else:
            draws /= n
        out[s : s + m] = finite_quantiles(draws, BOOTSTRAP_LEVEL)
    return out


def _intervals(mk: _Market, agents: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """Return each agent's block-bootstrap intervals over its own days.

    Agents with the same days share one draw; their statistics are matrix products with the
    draw counts, a chunk of columns at a time.
    """
    nan2 = [_NAN, _NAN]
    out = {a: {"cumulative_return_ci": nan2, "mean_daily_return_ci": nan2, "sharpe_ci": nan2}
           for a in agents}
    groups: dict[bytes, list[int]] = {}
    for a in agents:
        groups.setdefault(mk.has[:, mk.col[a]].tobytes(), []).append(mk.col[a])
    for group in groups.values():
        cols = sorted(group)  # as stats lays the draws out: their rows read as one view
        d = mk.draws(mk.has[:, cols[0]])
        if d is None:
            continue
        for s in range(0, len(cols), _CHUNK):
            part = cols[s : s + _CHUNK]
            raw = mk.raw[np.ix_(d.days, np.asarray(part, dtype=np.intp))].T  # k x n
            mk.stats(d, part)
            if mk.excess_is_raw:  # the same product as below, done once by stats
                cum = finite_quantiles(stacked([d.cum[j] for j in part]), BOOTSTRAP_LEVEL)
            else:  # expm1(counts @ log1p(max(raw, -1 + 1e-12)))
                cum = _product_quantiles(np.log1p(np.maximum(raw, -1.0 + 1e-12)), d.counts,
                                         growth=True)
            mean = _product_quantiles(raw, d.counts, growth=False)  # counts @ raw / n
            shp = finite_quantiles(stacked([d.shp[j] for j in part]), BOOTSTRAP_LEVEL)
            for i, j in enumerate(part):
                out[mk.agents[j]] = {"cumulative_return_ci": cum[i].tolist(),
                                     "mean_daily_return_ci": mean[i].tolist(),
                                     "sharpe_ci": shp[i].tolist()}
    return out


def _pairs(mk: _Market, wanted: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Return the paired comparison of every ``(a, b)`` over the days both have."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    todo: list[tuple[dict[str, Any], float, float, _Two, _Two]] = []
    bufs: dict[str, np.ndarray] = {}  # the chunk's differences, reused chunk after chunk
    hac: dict[bytes, list[tuple[dict[str, Any], int, int]]] = {}  # by days: one batch each
    masks: dict[bytes, np.ndarray] = {}
    # agents' days -> common days, their count, draws and bytes (most: the same, made once)
    by_days: dict[tuple[bytes, bytes], tuple[np.ndarray, int, _Draws | None, bytes]] = {}
    for a, b in dict.fromkeys(wanted):
        ja, jb = mk.col[a], mk.col[b]
        days = (mk.days_of[ja], mk.days_of[jb])
        if days not in by_days:
            common = mk.has[:, ja] & mk.has[:, jb]
            key = common.tobytes()
            masks.setdefault(key, common)
            by_days[days] = (common, int(common.sum()), mk.draws(common), key)
        mask, n, d, key = by_days[days]
        vs: dict[str, Any] = {"agent": b, "days": n, "difference": _NAN,
                              "difference_ci": [_NAN, _NAN], "p_value": _NAN,
                              "sharpe_difference": _NAN, "sharpe_p_value": _NAN,
                              "sharpe_hac_p_value": _NAN,
                              "provisional": n < MIN_PAIRED_DAYS}
        out[(a, b)] = vs
        if d is None:
            continue
        if ja not in d.cum or jb not in d.cum:
            mk.stats(d, [ja, jb])
        (ca, sa), (cb, sb) = mk.estimate(mask, ja, key), mk.estimate(mask, jb, key)
        hac.setdefault(key, []).append((vs, ja, jb))
        vs |= {"difference": ca - cb, "sharpe_difference": sa - sb}
        todo.append((vs, ca - cb, sa - sb, (d.cum[ja], d.cum[jb]), (d.shp[ja], d.shp[jb])))
        if len(todo) == _CHUNK:
            _pair_tests(todo, bufs)
            todo = []
    _pair_tests(todo, bufs)
    for key, group in hac.items():  # Ledoit-Wolf's test of every pair of these days at once
        x = mk.excess[masks[key]]
        _, _, p = sharpe_difference_hac_rows(x[:, [t[1] for t in group]].T,
                                             x[:, [t[2] for t in group]].T)
        for (vs, _, _), pv in zip(group, p.tolist(), strict=True):
            vs["sharpe_hac_p_value"] = pv
    return out


def _pair_tests(todo: Sequence[tuple[dict[str, Any], float, float, _Two, _Two]],
                bufs: dict[str, np.ndarray]) -> None:
    """Set the interval and both p-values of a chunk of comparisons from their draws.

    Each comparison brings both agents' draws of the cumulative return and of the Sharpe
    ratio; their differences are written into ``bufs`` (kept for the next chunk), ``_P_BAND``
    comparisons at a time, each band tested and summarised while in cache."""
    if not todo:
        return
    reps = todo[0][3][0].size
    if "cum" not in bufs or bufs["cum"].shape[1] != reps:
        bufs["cum"] = np.empty((_P_BAND, reps))
        bufs["shp"] = np.empty((_P_BAND, reps))
    for s in range(0, len(todo), _P_BAND):
        band = todo[s : s + _P_BAND]
        dc, ds = bufs["cum"][: len(band)], bufs["shp"][: len(band)]
        for i, (_, _, _, (ca, cb), (sa, sb)) in enumerate(band):
            np.subtract(ca, cb, out=dc[i])
            np.subtract(sa, sb, out=ds[i])
        pc = null_p_values([t[1] for t in band], dc)
        ps = null_p_values([t[2] for t in band], ds)
        qc = finite_quantiles(dc, BOOTSTRAP_LEVEL)
        for i, (vs, *_) in enumerate(band):
            vs |= {"difference_ci": qc[i].tolist(), "p_value": float(pc[i]),
                   "sharpe_p_value": float(ps[i])}


def _holm_family(comparisons: Sequence[tuple[str, str, dict[str, Any]]], name: str) -> None:
    """Set ``<name>_holm`` of every comparison: Holm over the market's distinct pairs.

    A pair compared twice (as ``vs_next`` and ``vs_baselines``) is one member of the family;
    provisional comparisons (too few days) claim nothing and stay out (their adjusted p is
    null).
    """
    members: dict[frozenset[str], float] = {}
    for a, b, vs in comparisons:
        if not vs["provisional"] and math.isfinite(vs[name]):
            members.setdefault(frozenset((a, b)), vs[name])
    keys = sorted(members, key=sorted)
    adjusted = dict(zip(keys, holm([members[k] for k in keys]), strict=True))
    for a, b, vs in comparisons:
        vs[f"{name}_holm"] = adjusted.get(frozenset((a, b)), _NAN)


def _significant(p: float) -> bool:
    """Tell whether a Holm-adjusted p-value claims a difference."""
    return math.isfinite(p) and p < SIGNIFICANCE


def _track_record(rows: Sequence[dict[str, Any]], excess: Mapping[str, np.ndarray]) -> None:
    """Set PSR, DSR (trials: the market's agents) and the minimum track record length."""
    moments = sharpe_moments_many([excess[r["agent"]] for r in rows])  # once per row
    finite = [m[0] for m in moments if math.isfinite(m[0])]
    var = float(np.var(finite, ddof=DDOF)) if len(finite) > 1 else 0.0
    for r, mom in zip(rows, moments, strict=True):
        x = excess[r["agent"]]
        trl = min_track_record(x, 0.0, MIN_TRL_LEVEL, moments=mom)
        r["psr"] = probabilistic_sharpe(x, 0.0, moments=mom)
        r["dsr"] = deflated_sharpe(x, len(rows), var, moments=mom)
        r["min_trl"] = trl if math.isfinite(trl) else None
        r["min_trl_days"] = None if not math.isfinite(trl) else math.ceil(trl)
        # Distinguishable once the returns outnumber the MinTRL (an SR <= 0 never is).
        r["distinguishable"] = bool(x.size >= trl)  # False for a NaN or infinite MinTRL


def _stability(mk: _Market, ranked: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Set rank stability and Model Confidence Set membership; return the market's MCS."""
    cols = [mk.col[r["agent"]] for r in ranked]
    mask = mk.has[:, cols].all(axis=1) if cols else np.zeros(len(mk.days), dtype=bool)
    d = mk.draws(mask) if len(cols) >= 1 else None
    for r in ranked:
        r |= {"rank_stability": None, "in_mcs": None, "mcs_p_value": None}
    out: dict[str, Any] = {"level": 1.0 - MCS_SIZE, "agents": [], "days": int(mask.sum()),
                           "block_length": None}
    if d is None:
        return out
    out["block_length"] = d.block
    mk.stats(d, cols)
    rows = [d.cum[j] for j in cols]  # one contiguous row of B draws per agent
    est = [mk.estimate(mask, j)[0] for j in cols]
    # p to the best: every agent's one-sided test, a block of agents at a time (no k x B copy;
    # the differences written into one reused block)
    p_best: list[float] = []
    buf = np.empty((min(_CHUNK, max(len(cols) - 1, 0)), rows[0].size))
    for s in range(1, len(cols), _CHUNK):
        block = buf[: len(rows[s : s + _CHUNK])]
        for i, row in enumerate(rows[s : s + _CHUNK]):
            np.subtract(rows[0], row, out=block[i])  # rows[0] - vstack(rows[s : s + _CHUNK])
        p_best += null_p_values([est[0] - e for e in est[s : s + _CHUNK]], block,
                                one_sided=True).tolist()
    adj = holm(p_best)
    # the share of draws in which each agent is #1 and in the top TOP_K, as argmax and
    # argpartition of the B x k draws give them (ties included)
    reps = rows[0].size
    n_first, n_top = rank_counts(rows, TOP_K)
    for i, r in enumerate(ranked):
        in_top = 1.0 if n_top is None else float(n_top[i]) / reps
        r["rank_stability"] = {
            "top1": float(n_first[i]) / reps, f"top{TOP_K}": in_top,
            "p_to_best": None if i == 0 else p_best[i - 1],
            "p_to_best_holm": None if i == 0 else adj[i - 1]}
    if len(cols) < 2:
        ranked[0]["in_mcs"] = True
        out["agents"] = [ranked[0]["agent"]]
        return out
    losses = -mk.excess[np.ix_(mask, np.asarray(cols, dtype=np.intp))]
    included, pvals = model_confidence_set(losses, d.counts, MCS_SIZE)
    for i, r in enumerate(ranked):
        r["in_mcs"] = bool(included[i])
        r["mcs_p_value"] = pvals[i]
    out["agents"] = [r["agent"] for i, r in enumerate(ranked) if included[i]]
    return out


def _daily(curve: AgentCurves | None) -> dict[float, float]:
    """Return the curve's daily returns keyed by the mark each one ends at."""
    if curve is None:
        return {}
    return dict(zip(curve.ts[1:], simple_returns(curve.values).tolist(), strict=True))


def infer(rows: list[dict[str, Any]], curves: Mapping[Key, AgentCurves],
          agents_cfg: Mapping[str, Mapping[str, Any]], rf: Mapping[str, float],
          periods: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Set every row's intervals, comparisons, rank stability, MCS and Sharpe tests.

    ``rows`` are ranked already (``rank`` set, provisional rows without one). Returns per
    market ``{"mcs": ..., "block_length": ..., "comparisons": ...}`` for the market section.
    """
    out: dict[str, dict[str, Any]] = {}
    for market in sorted({r["market"] for r in rows}):
        mine = [r for r in rows if r["market"] == market]
        n = int(periods.get(market, 252))
        mk = _Market({r["agent"]: _daily(curves.get((r["agent"], market))) for r in mine},
                     float(rf.get(market, 0.0)), n)
        excess = {a: mk.excess[mk.has[:, mk.col[a]], mk.col[a]] for a in mk.agents}
        intervals = _intervals(mk, [r["agent"] for r in mine])
        for r in mine:
            r |= intervals[r["agent"]]
        _track_record(mine, excess)
        ranked = sorted((r for r in mine if r.get("rank") is not None), key=lambda r: r["rank"])
        baselines = [r["agent"] for r in mine
                     if (agents_cfg.get(r["agent"]) or {}).get("kind") in BASELINE_KINDS]
        wanted = [(r["agent"], nxt["agent"]) for r, nxt in pairwise(ranked)]
        wanted += [(r["agent"], b) for r in mine for b in baselines if b != r["agent"]]
        done = _pairs(mk, wanted)
        comparisons: list[tuple[str, str, dict[str, Any]]] = []
        for r in mine:
            r["vs_next"] = None
        for r, nxt in pairwise(ranked):
            r["vs_next"] = dict(done[(r["agent"], nxt["agent"])])
            comparisons.append((r["agent"], nxt["agent"], r["vs_next"]))
        for r in mine:
            r["vs_baselines"] = {b: dict(done[(r["agent"], b)]) for b in baselines
                                 if b != r["agent"]}
            comparisons += [(r["agent"], b, vs) for b, vs in r["vs_baselines"].items()]
        _holm_family(comparisons, "p_value")
        _holm_family(comparisons, "sharpe_p_value")
        for _, _, vs in comparisons:
            vs["significant"] = _significant(vs["p_value_holm"])
            vs["sharpe_significant"] = _significant(vs["sharpe_p_value_holm"])
        for r in ranked:
            r["tied_with_next"] = r["vs_next"] is not None and not r["vs_next"]["significant"]
        for r in mine:  # provisional rows: not ranked, no stability, not in the set
            r |= {"rank_stability": None, "in_mcs": None, "mcs_p_value": None}
        mcs = _stability(mk, ranked)
        family = len({frozenset((a, b)) for a, b, vs in comparisons
                      if math.isfinite(vs["p_value_holm"])})
        # Holm's smallest adjusted p-value: family * 1 / (B + 1); from 0.05 on, none can pass
        out[market] = {"mcs": mcs, "comparisons": family,
                       "holm_floor": min(1.0, family / (BOOTSTRAP_N + 1)) if family else None}
    return out
