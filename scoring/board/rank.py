"""Standing, ranking and comparisons of the leaderboard's rows.

Provisional agents (valid-decision rate or scored days too low) are listed without rank; the
others are ranked by cumulative return with the StockBench composite beside it, and compared
with the next agent and with every baseline by a paired bootstrap of the daily returns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import numpy as np

from scoring.board.figures import BOOTSTRAP_LEVEL, BOOTSTRAP_N, BOOTSTRAP_SEED
from scoring.board.load import _NAN, AgentCurves, Key
from scoring.stats.benchmarks import composite_rank
from scoring.stats.inference import paired_bootstrap
from scoring.stats.metrics import simple_returns

#: Agent kinds that are baselines: every agent is compared with each of them (paired bootstrap).
BASELINE_KINDS: tuple[str, ...] = ("buy_and_hold", "equal_weight", "cash", "momentum")
#: Fewer common daily returns than this: a comparison makes no claim (``provisional``).
MIN_PAIRED_DAYS = 20


def _finite(x: float | None) -> bool:
    """Tell whether ``x`` is a finite number."""
    return x is not None and math.isfinite(x)


def _share(x: float) -> str:
    """Format a share as a percentage without a misleading round-up (79.5%, not 80%)."""
    return f"{100 * x:.1f}".rstrip("0").rstrip(".") + "%"


def _standing(row: dict[str, Any], min_rate: float, min_days: int) -> None:
    """Set ``provisional`` and ``provisional_reason`` of a row from its rate and days."""
    reasons = []
    rate = row["valid_decision_rate"]
    if rate is None:
        reasons.append("no decision was asked of the agent in the window")
    elif rate < min_rate - 1e-12:
        reasons.append(f"valid-decision rate {_share(rate)} ({row['valid_decisions']}/"
                       f"{row['counted_decisions']}) below {_share(min_rate)}")
    if row["days"] < min_days:
        days = row["days"]
        reasons.append(f"{days} scored day{'' if days == 1 else 's'}, fewer than {min_days}")
    row["provisional"] = bool(reasons)
    row["provisional_reason"] = "; ".join(reasons) if reasons else None


def _rank(rows: list[dict[str, Any]]) -> None:
    """Rank the non-provisional rows by cumulative return, flag insignificant gaps, add the
    composite score and rank; provisional rows get neither and sort last in their market."""
    for market in sorted({r["market"] for r in rows}):
        mine = [r for r in rows if r["market"] == market and not r["provisional"]]
        for r in rows:
            if r["market"] == market and r["provisional"]:
                r |= {"rank": None, "tied_with_next": False, "composite_score": None,
                      "composite_rank": None}
        if not mine:
            continue
        ranked = sorted(mine, key=lambda r: (
            -(r["cumulative_return"] if _finite(r["cumulative_return"]) else -math.inf),
            r["agent"]))
        for i, r in enumerate(ranked):
            r["rank"] = i + 1
            r["tied_with_next"] = False  # set by _compare (paired bootstrap with the next)

        def num(x: float | None) -> float:
            return x if x is not None else _NAN

        comp = composite_rank({r["agent"]: num(r["cumulative_return"]) for r in mine},
                              {r["agent"]: num(r["max_drawdown"]) for r in mine},
                              {r["agent"]: num(r["sortino_stockbench"]) for r in mine})
        order = sorted(mine, key=lambda r: (
            -comp[r["agent"]] if math.isfinite(comp[r["agent"]]) else math.inf, r["agent"]))
        for i, r in enumerate(order):
            r["composite_score"] = comp[r["agent"]]
            r["composite_rank"] = i + 1 if math.isfinite(comp[r["agent"]]) else None
    rows.sort(key=lambda r: (r["market"], r["provisional"], r["rank"] or 0, r["agent"]))


def _daily_returns(curve: AgentCurves | None) -> dict[float, float]:
    """Return the curve's daily returns keyed by the mark each one ends at."""
    if curve is None:
        return {}
    r = simple_returns(curve.values)
    return dict(zip(curve.ts[1:], r.tolist(), strict=True))


def _paired(a: Mapping[float, float], b: Mapping[float, float], other: str) -> dict[str, Any]:
    """Return the paired-bootstrap comparison of two agents' cumulative returns."""
    days = sorted(set(a) & set(b))
    lo, hi, p = paired_bootstrap([a[d] for d in days], [b[d] for d in days],
                                 lambda x: np.prod(1.0 + x, axis=1) - 1.0, BOOTSTRAP_N,
                                 BOOTSTRAP_LEVEL, BOOTSTRAP_SEED, vectorised=True)
    return {"agent": other, "days": len(days), "difference_ci": [lo, hi], "p_value": p,
            "provisional": len(days) < MIN_PAIRED_DAYS}


def _significant(vs: Mapping[str, Any]) -> bool:
    """Tell whether a comparison claims a difference: long enough, interval excluding 0."""
    lo, hi = vs["difference_ci"]
    return (not vs["provisional"] and math.isfinite(lo) and math.isfinite(hi)
            and (lo > 0.0 or hi < 0.0))


def _compare(rows: list[dict[str, Any]], curves: Mapping[Key, AgentCurves],
             agents_cfg: Mapping[str, Mapping[str, Any]]) -> None:
    """Set ``vs_next``, ``tied_with_next`` and ``vs_baselines`` from paired bootstraps."""
    rets = {(r["agent"], r["market"]): _daily_returns(curves.get((r["agent"], r["market"])))
            for r in rows}
    for market in sorted({r["market"] for r in rows}):
        mine = [r for r in rows if r["market"] == market]
        ranked = sorted((r for r in mine if r.get("rank") is not None), key=lambda r: r["rank"])
        for r in mine:
            r["vs_next"] = None
        for r, nxt in pairwise(ranked):
            r["vs_next"] = _paired(rets[(r["agent"], market)], rets[(nxt["agent"], market)],
                                   nxt["agent"])
            r["tied_with_next"] = not _significant(r["vs_next"])
        baselines = [r["agent"] for r in mine
                     if (agents_cfg.get(r["agent"]) or {}).get("kind") in BASELINE_KINDS]
        for r in mine:
            r["vs_baselines"] = {b: _paired(rets[(r["agent"], market)], rets[(b, market)], b)
                                 for b in baselines if b != r["agent"]}
