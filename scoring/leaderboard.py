"""The leaderboard: per agent and market performance computed from the store.

Returns are daily: the equity series is the initial cash followed by the daily marks (NYSE close
for equities, 00:00 UTC for Polymarket), so Sharpe and volatility annualise with 252 / 365
periods (see docs/scoring.md). The risk-free rate is the equity market's configured one; 0 for
Polymarket. Output is deterministic: the same store gives byte-identical JSON.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

from scoring.metrics import periods_per_year, summarise

FIELDS = ("cumulative_return", "annualised_return", "volatility", "sharpe", "sortino",
          "max_drawdown", "calmar", "win_rate", "mean_turnover", "flip_rate")


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        if not math.isfinite(x):
            return None
        return float(f"{x:.12g}")
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def leaderboard(db_path: str | Path, *, window: tuple[float | None, float | None] = (None, None)
                ) -> dict[str, Any]:
    """Compute the leaderboard of the database at ``db_path`` (read-only)."""
    p = Path(db_path)
    if not p.exists():
        raise FileNotFoundError(f"{db_path}: no such database")
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    try:
        return _leaderboard(con, window)
    finally:
        con.close()


def _leaderboard(con: sqlite3.Connection, window: tuple[float | None, float | None]
                 ) -> dict[str, Any]:
    lo = -math.inf if window[0] is None else window[0]
    hi = math.inf if window[1] is None else window[1]
    row = con.execute("SELECT config_json FROM runs ORDER BY id LIMIT 1").fetchone()
    config = json.loads(row[0]) if row else {}
    markets_cfg = config.get("markets", {})
    rf = {"equity": float(markets_cfg.get("equity", {}).get("risk_free_rate", 0.0)),
          "polymarket": 0.0}
    initial = {m: float(markets_cfg.get(m, {}).get("initial_cash", 0.0)) for m in rf}
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for agent, market, ts, value in con.execute(
        "SELECT agent, market, ts, value FROM equity WHERE kind='daily' ORDER BY agent, market, ts"
    ):
        if lo <= ts <= hi:
            series[(agent, market)].append((ts, value))
    weights: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    costs: dict[tuple[str, str], float] = defaultdict(float)
    for agent, market, ts, w, cost in con.execute(
        "SELECT agent, market, ts, weights_json, cost FROM fills ORDER BY agent, market,"
        " scheduled_ts"
    ):
        if lo <= ts <= hi:
            weights[(agent, market)].append(json.loads(w))
            costs[(agent, market)] += cost
    outcomes: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for agent, market, outcome, n in con.execute(
        "SELECT agent, market, outcome, COUNT(*) FROM decisions WHERE scheduled_ts BETWEEN ? AND ?"
        " GROUP BY agent, market, outcome ORDER BY agent, market, outcome",
        (max(lo, -1e18), min(hi, 1e18)),
    ):
        outcomes[(agent, market)][outcome] = n
    rows = []
    keys = sorted(set(series) | set(outcomes))
    for agent, market in keys:
        pts = series.get((agent, market), [])
        start_value = initial.get(market) or (pts[0][1] if pts else 0.0)
        values = [start_value] + [v for _, v in pts] if window[0] is None else [v for _, v in pts]
        summary = summarise(values, periods_per_year(market), rf.get(market, 0.0),
                            weights.get((agent, market), []))
        rows.append({
            "agent": agent,
            "market": market,
            "final_value": pts[-1][1] if pts else None,
            "days": len(pts),
            "costs": costs.get((agent, market), 0.0),
            "decisions": outcomes.get((agent, market), {}),
            **summary.to_dict(),
        })
    for market in sorted({r["market"] for r in rows}):
        ranked = sorted(
            (r for r in rows if r["market"] == market),
            key=lambda r: (-(r["cumulative_return"] if r["cumulative_return"] is not None
                             else -math.inf), r["agent"]),
        )
        for rank, r in enumerate(ranked, 1):
            r["rank"] = rank
    rows.sort(key=lambda r: (r["market"], r["rank"]))
    return _clean({
        "conventions": {
            "returns": "daily simple returns from daily marks",
            "periods_per_year": {"equity": 252, "polymarket": 365},
            "ddof": 1,
            "risk_free_rate": rf,
        },
        "window": {"start": None if window[0] is None else window[0],
                   "end": None if window[1] is None else window[1]},
        "rows": rows,
    })


def to_json(board: dict[str, Any]) -> str:
    """Serialise the leaderboard deterministically."""
    return json.dumps(board, sort_keys=True, indent=2, allow_nan=False) + "\n"


def to_table(board: dict[str, Any]) -> str:
    """Render the leaderboard as a fixed-width text table."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:+.2f}%"

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    head = (f"{'market':<11}{'#':>3}  {'agent':<20}{'return':>10}{'sharpe':>8}{'sortino':>9}"
            f"{'max dd':>9}{'vol':>9}{'win':>8}{'turnover':>9}{'days':>6}  decisions")
    lines = [head, "-" * len(head)]
    for r in board["rows"]:
        dec = ",".join(f"{k}={v}" for k, v in sorted(r["decisions"].items()))
        lines.append(
            f"{r['market']:<11}{r['rank']:>3}  {r['agent'][:19]:<20}"
            f"{pct(r['cumulative_return']):>10}"
            f"{num(r['sharpe']):>8}{num(r['sortino']):>9}{pct(r['max_drawdown']):>9}"
            f"{pct(r['volatility']):>9}{pct(r['win_rate']):>8}{num(r['mean_turnover']):>9}"
            f"{r['days']:>6}  {dec}"
        )
    return "\n".join(lines) + "\n"
