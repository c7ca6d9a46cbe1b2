"""Runs of one model reported as one model: the mean and spread of their figures.

StockBench runs each model three times with different seeds and reports the average. Agents
that share ``run_group`` in the config (``[[agents]] run_group = "name"``) are runs of one
model: :func:`run_groups` adds one entry per (market, group) with, for each headline figure, the
mean, the sample standard deviation, the minimum and the maximum over the runs that have it.
The individual rows, and their ranks, are unchanged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

#: The figures aggregated per group (the keys of a leaderboard row).
FIGURES = (
    "cumulative_return", "sharpe", "sortino", "max_drawdown", "volatility", "win_rate",
    "mean_turnover", "valid_decision_rate", "composite_score", "final_value", "llm_cost_usd",
)  # fmt: skip


def spread(values: Sequence[Any]) -> dict[str, float | int | None]:
    """Return n, mean, std (sample; 0 for one run), min and max of the finite ``values``."""
    xs = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if not xs:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    return {"n": len(xs), "mean": math.fsum(xs) / len(xs),
            "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "min": min(xs), "max": max(xs)}


def run_groups(rows: Sequence[Mapping[str, Any]], agents_cfg: Mapping[str, Mapping[str, Any]],
               extra: Mapping[str, Mapping[str, float | None]] | None = None
               ) -> list[dict[str, Any]]:
    """Return one entry per (market, run_group) of ``rows``, sorted by market and group.

    ``extra`` adds per-agent figures kept outside the rows (e.g. PortBench's CEPS).
    """
    members: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        group = (agents_cfg.get(r["agent"]) or {}).get("run_group")
        if group:
            members.setdefault((r["market"], str(group)), []).append(r)
    out = []
    for (market, group), rs in sorted(members.items()):
        rs = sorted(rs, key=lambda r: r["agent"])
        figures = {f: spread([r.get(f) for r in rs]) for f in FIGURES}
        for name in sorted({k for a in (extra or {}).values() for k in a}):
            figures[name] = spread([(extra or {}).get(r["agent"], {}).get(name)
                                    for r in rs])
        ranks = [r.get("rank") for r in rs]
        out.append({"group": group, "market": market, "agents": [r["agent"] for r in rs],
                    "runs": len(rs), "ranks": ranks, "figures": figures})
    return out


def format_groups(groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """Return the text lines of the groups table (mean ± std [min, max])."""
    if not groups:
        return []

    def pct(s: Mapping[str, Any]) -> str:
        if s.get("mean") is None:
            return "-"
        return (f"{100 * s['mean']:+.2f}% ±{100 * s['std']:.2f}pp "
                f"[{100 * s['min']:+.2f},{100 * s['max']:+.2f}]")

    def drawdown(s: Mapping[str, Any]) -> str:  # as the leaderboard prints it: a loss, unsigned
        if s.get("mean") is None:
            return "-"
        return pct(s).replace("+", "")

    def num(s: Mapping[str, Any]) -> str:
        if s.get("mean") is None:
            return "-"
        return f"{s['mean']:.2f} ±{s['std']:.2f} [{s['min']:.2f},{s['max']:.2f}]"

    head = (f"{'market':<11}{'group':<20}{'runs':>5}  {'return (mean ±std [min,max])':<34}"
            f"{'sharpe':<26}{'max dd':<34}composite")
    lines = ["", "runs of one model (run_group): mean ±std [min,max] over the runs; "
             "each run keeps its own row and rank above", head, "-" * len(head)]
    for g in groups:
        f = g["figures"]
        lines.append(f"{g['market']:<11}{g['group'][:19]:<20}{g['runs']:>5}  "
                     f"{pct(f['cumulative_return']):<34}{num(f['sharpe']):<26}"
                     f"{drawdown(f['max_drawdown']):<34}{num(f['composite_score'])}".rstrip())
        lines.append(f"{'':<31}  runs: {', '.join(g['agents'])}")
    return lines
