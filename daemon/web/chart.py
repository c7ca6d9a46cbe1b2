"""The live page's combined chart: every agent's value per market, with a benchmark.

- ``GET /api/chart?market=``: per market, each agent's mark-to-market value over time (every
  stored mark, daily and per round, thinned to at most :data:`MAX_POINTS` per agent with the
  latest :data:`KEEP_RECENT` kept whole) and the market's equal-weight benchmark as a cumulative
  return at each daily mark (``benchmark``, from the cached leaderboard, ``null`` until the first
  two daily marks).
- :func:`board_with_benchmarks` is the leaderboard cache's computation: the leaderboard of the
  store plus ``benchmark_curves``, the equal-weight index of each market (the mean return of the
  assets priced at both of two consecutive daily marks, rebalanced at each, as the leaderboard's
  ``equal_weight`` benchmark), compounded from the first daily mark. ``assets`` names the
  leaderboard's best assets (Polymarket: question title and side, :mod:`daemon.web.labels`),
  ``trades`` each agent's rebalances that traded, per market (the leaderboard's trades column).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from daemon.web.json import BadRequest
from daemon.web.json import json_response as _json

if TYPE_CHECKING:
    from daemon.web.host import Host

#: Points per agent the chart answer carries at most.
MAX_POINTS = 2000
#: The latest points kept whole when an agent's curve is thinned (a day of minute marks).
KEEP_RECENT = 1440


def thin(points: list[list[float]]) -> list[list[float]]:
    """Return ``points`` with at most :data:`MAX_POINTS`, the latest :data:`KEEP_RECENT` whole."""
    if len(points) <= MAX_POINTS:
        return points
    head, tail = points[:-KEEP_RECENT], points[-KEEP_RECENT:]
    step = math.ceil(len(head) / (MAX_POINTS - KEEP_RECENT))
    return head[::step] + tail


def benchmark_curve(panel_prices: Any, marks: list[float]) -> list[list[float]]:
    """Return [[mark, cumulative return], ...] of the equal-weight index over ``marks``.

    ``panel_prices`` is a (marks x assets) array of the last price at each mark; a step's return
    is the mean over the assets priced (positive) at both marks; steps with none add nothing.
    """
    import numpy as np

    if len(marks) < 2:
        return []
    out = [[marks[0], 0.0]]
    level = 1.0
    for t in range(1, len(marks)):
        a, b = panel_prices[t - 1], panel_prices[t]
        ok = np.isfinite(a) & np.isfinite(b) & (a > 0)
        if ok.any():
            level *= 1.0 + float(np.mean(b[ok] / a[ok] - 1.0))
        out.append([marks[t], level - 1.0])
    return out


def board_with_benchmarks(path: str | Path) -> dict[str, Any]:
    """Return the leaderboard of the store at ``path`` with ``benchmark_curves`` per market."""
    from daemon.store.reports import leaderboard, reading
    from scoring.board.panels import _load_panel

    board = leaderboard(path)
    curves: dict[str, list[list[float]]] = {}
    series = board.get("series") or {}
    if series:
        with reading(path) as con:
            for market, agents in series.items():
                marks = sorted({float(p[0]) for pts in agents.values() for p in pts})
                if len(marks) >= 2:
                    panel = _load_panel(con, market, marks, [])
                    curves[market] = benchmark_curve(panel.prices, marks)
    board["benchmark_curves"] = curves
    return board


class ChartApi:
    """The ``/api/chart`` route of the page (see the module doc)."""

    def __init__(self, server: Host) -> None:
        """Answer from ``server``'s store and leaderboard cache."""
        self.server = server

    def add_routes(self, app: web.Application) -> None:
        """Add ``GET /api/chart`` to ``app``."""
        app.router.add_get("/api/chart", self.handle_chart)

    async def handle_chart(self, request: web.Request) -> web.Response:
        """Return every agent's value curve per market and the market's benchmark."""
        unknown = sorted(set(request.query) - {"market"})
        if unknown:
            raise BadRequest(f"unknown query parameter {unknown[0][:40]!r} (use market)")
        market = request.query.get("market")
        return _json(await self.chart(market))

    async def chart(self, market: str | None = None) -> dict[str, Any]:
        """Return ``{"markets": {market: {"agents": {agent: [[ts, value]]}, "benchmark"}}}``."""
        srv = self.server
        where, params = ("", ()) if market is None else (" WHERE market=?", (market,))
        async with srv._queries:
            rows = await srv.engine.store.fetchall(
                f"SELECT market, agent, ts, value FROM equity{where} ORDER BY ts, kind", params)
            traded = await srv.engine.store.fetchall(
                "SELECT market, agent, COUNT(*) FROM fills WHERE traded_value > 0"
                + ("" if market is None else " AND market=?") + " GROUP BY market, agent",
                params)
        trades: dict[str, dict[str, int]] = {}
        for m, agent, n in traded:
            trades.setdefault(m, {})[agent] = int(n)
        curves: dict[str, dict[str, list[list[float]]]] = {}
        for m, agent, ts, value in rows:
            if value is None or not math.isfinite(value):
                continue
            pts = curves.setdefault(m, {}).setdefault(agent, [])
            if pts and pts[-1][0] == ts:  # a daily mark and a round's mark at one time
                pts[-1][1] = value
            else:
                pts.append([ts, value])
        board: dict[str, Any] = {}
        cache = srv.board_cache
        if cache is not None:
            try:
                board = await cache.get()
            except Exception:  # no board yet (an empty store): the chart goes without
                board = {}
        bench = board.get("benchmark_curves") or {}
        best = {str(info.get("best_asset")) for info in (board.get("markets") or {}).values()
                if isinstance(info, dict) and info.get("best_asset")}
        names: set[str] = set(curves) | ({market} if market else set())
        out: dict[str, Any] = {}
        for m in sorted(names):
            marks = bench.get(m) or []
            out[m] = {"agents": {a: thin(p) for a, p in sorted(curves.get(m, {}).items())},
                      "benchmark": {"name": "equal_weight", "points": marks} if marks else None}
        # The board's best assets by name (Polymarket: question title and side).
        labels = await srv.asset_labels.labels(srv.engine.store.fetchall, best)
        return {"markets": out, "assets": labels, "trades": trades}

