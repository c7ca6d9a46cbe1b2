"""Standing and ranking of the leaderboard's rows.

Provisional agents (valid-decision rate or scored days too low) are listed without rank; the
others are ranked by cumulative excess return (over the risk-free rate, the convention of the
Sharpe ratio) with the StockBench composite beside it. The comparisons are
:mod:`scoring.board.significance`'s.
"""

from __future__ import annotations

import math
from typing import Any

from scoring.board.load import _NAN
from scoring.stats.benchmarks import composite_rank


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
    """Rank the non-provisional rows by cumulative excess return, add the composite score and
    rank; provisional rows get neither and sort last in their market."""
    for market in sorted({r["market"] for r in rows}):
        mine = [r for r in rows if r["market"] == market and not r["provisional"]]
        for r in rows:
            if r["market"] == market and r["provisional"]:
                r |= {"rank": None, "tied_with_next": False, "composite_score": None,
                      "composite_rank": None}
        if not mine:
            continue
        ranked = sorted(mine, key=lambda r: (
            -(r["cumulative_excess_return"] if _finite(r["cumulative_excess_return"])
              else -math.inf), r["agent"]))
        for i, r in enumerate(ranked):
            r["rank"] = i + 1
            r["tied_with_next"] = False  # set by significance.infer (Holm-adjusted vs_next)

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
