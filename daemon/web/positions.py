"""An agent's positions and completed trades, rebuilt from its stored fills.

- ``GET /api/agents/{id}/positions``: per market and held asset, units, average entry price,
  current price, value, unrealized P&L and weight of the agent's value.
- ``GET /api/agents/{id}/trades?market=&offset=&limit=``: its trades, newest first (time, market,
  asset, side, units, price, fee, realized P&L), ``total`` for paging.

A fill stores each asset's traded units, the weights after it, the value after it and its cost;
the price an asset traded at is read back from them: ``weight * value_after / units_after`` for an
asset still held, and for an asset sold out the cash the fill moved that the held ones do not
explain (shared in proportion to their last prices when several were sold out at once).
Average entry prices follow the average-cost method (a sale leaves it unchanged); a sale's
realized P&L is ``(price - average entry) * units - fee``, a fill's cost shared by notional. A
resolved Polymarket question closes the tokens held at their payout (side ``resolved``). Units
and current prices come from the running engine's book, or the stored book under ``serve``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from daemon.core.sparse_rows import fill_map
from daemon.web.json import BadRequest
from daemon.web.json import json_response as _json
from daemon.web.labels import assets_in

if TYPE_CHECKING:
    from collections.abc import Callable

    from daemon.web.host import Host

#: Largest page of trades one request returns.
MAX_TRADES = 200
#: Units below this are none.
EPS = 1e-12


@dataclass
class _Ledger:
    """One agent's running position per asset in one market."""

    units: dict[str, float] = field(default_factory=dict)
    basis: dict[str, float] = field(default_factory=dict)
    last_price: dict[str, float] = field(default_factory=dict)
    cash: float | None = None

    def avg(self, asset: str) -> float | None:
        u = self.units.get(asset, 0.0)
        return self.basis.get(asset, 0.0) / u if u > EPS else None


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def replay_trades(fills: list[tuple[Any, ...]], resolutions: list[tuple[float, dict[str, float]]]
                  ) -> tuple[list[dict[str, Any]], _Ledger]:
    """Return the trades of one agent in one market (oldest first) and its ledger after them.

    ``fills``: (ts, trades, weights, value_before, value_after, cost) in time order;
    ``resolutions``: (ts, {token: payout}) in time order.
    """
    led = _Ledger()
    out: list[dict[str, Any]] = []
    res = list(resolutions)
    r = 0

    def resolve_until(ts: float) -> None:
        nonlocal r
        while r < len(res) and res[r][0] <= ts:
            rts, payouts = res[r]
            r += 1
            for token, payout in payouts.items():
                units = led.units.get(token, 0.0)
                if units <= EPS:
                    continue
                avg = led.avg(token)
                out.append({"ts": rts, "asset": token, "side": "resolved", "units": units,
                            "price": payout, "fee": 0.0,
                            "realized_pnl": None if avg is None else (payout - avg) * units})
                led.units[token] = 0.0
                led.basis[token] = 0.0
                if led.cash is not None:
                    led.cash += payout * units

    for ts, trades, weights, value_before, value_after, cost in fills:
        resolve_until(ts)
        if led.cash is None:  # the first fill: everything held before it was cash
            led.cash = value_before if not any(u > EPS for u in led.units.values()) else None
        after = {a: led.units.get(a, 0.0) + q for a, q in trades.items()}
        price: dict[str, float | None] = {}
        for a in trades:
            w = weights.get(a, 0.0)
            price[a] = (w * value_after / after[a]) if after[a] > EPS and w > 0 else None
        cash_after = weights.get("CASH", 0.0) * value_after
        closed = [a for a in trades if price[a] is None]
        if closed and led.cash is not None:
            moved = led.cash - cash_after - cost - sum(
                q * (price[a] or 0.0) for a, q in trades.items() if a not in closed)
            scale = sum(trades[a] * led.last_price.get(a, 0.0) for a in closed)
            for a in closed:
                share = (trades[a] * led.last_price.get(a, 0.0) / scale if scale
                         else 1.0 / len(closed))
                p = moved * share / trades[a] if trades[a] else None
                price[a] = p if p is not None and p > 0 and math.isfinite(p) else None
        notional = {a: abs(q * (price[a] or 0.0)) for a, q in trades.items()}
        total = sum(notional.values())
        for a in sorted(trades, key=lambda x: (trades[x] > 0, x)):  # sales first
            q = trades[a]
            p = price[a]
            fee = cost * notional[a] / total if total else cost / max(1, len(trades))
            avg = led.avg(a)
            realized = None
            if q < 0 and p is not None and avg is not None:
                realized = (p - avg) * -q - fee
            out.append({"ts": ts, "asset": a, "side": "buy" if q > 0 else "sell",
                        "units": abs(q), "price": p, "fee": fee, "realized_pnl": realized})
            if q > 0:
                led.basis[a] = led.basis.get(a, 0.0) + q * (p or 0.0)
            elif avg is not None:
                led.basis[a] = avg * max(0.0, after[a])
            led.units[a] = max(0.0, after[a])
            if p is not None:
                led.last_price[a] = p
        led.cash = cash_after
    resolve_until(math.inf)
    return out, led


class PositionsApi:
    """The ``/api/agents/{id}/positions`` and ``/trades`` routes (see the module doc)."""

    def __init__(self, server: Host) -> None:
        """Answer from ``server``'s store and books."""
        self.server = server

    def add_routes(self, app: web.Application) -> None:
        """Add the two routes to ``app``."""
        app.router.add_get("/api/agents/{id}/positions", self.handle_positions)
        app.router.add_get("/api/agents/{id}/trades", self.handle_trades)

    async def _ledgers(self, agent: str, t: Callable[[str], str]
                       ) -> dict[str, tuple[list[dict[str, Any]], _Ledger]]:
        store = self.server.engine.store
        async with self.server._queries:
            fills = await store.fetchall(
                "SELECT f.market, f.ts, f.trades_json, f.weights_json, f.value_before,"
                f" f.value_after, f.cost, s.assets_json FROM {t('fills')} f"
                f" LEFT JOIN {t('asset_sets')} s ON s.sha256 = f.assets_sha256"
                " WHERE f.agent=? ORDER BY f.scheduled_ts", (agent,))
            resolutions = await store.fetchall(
                "SELECT market, ts, payouts_json FROM resolutions ORDER BY ts, question_id")
        by_market: dict[str, list[tuple[Any, ...]]] = {}
        for m, ts, tj, wj, vb, va, cost, assets in fills:
            try:
                trades, weights = fill_map(tj, assets), fill_map(wj, assets)
            except (ValueError, TypeError):
                continue
            by_market.setdefault(m, []).append((ts, trades, weights, vb, va, cost))
        res: dict[str, list[tuple[float, dict[str, float]]]] = {}
        for m, ts, payouts in resolutions:
            try:
                res.setdefault(m, []).append((ts, {str(k): float(v) for k, v in
                                                   json.loads(payouts).items()}))
            except (ValueError, TypeError, AttributeError):
                continue
        return {m: replay_trades(f, res.get(m, [])) for m, f in by_market.items()}

    async def _books(self) -> dict[str, dict[str, Any]]:
        """Return market -> {agents, assets, holdings, prices, cash}: live or stored books."""
        engine = self.server.engine
        out: dict[str, dict[str, Any]] = {}
        for market, book in getattr(engine, "books", {}).items():
            out[market] = {"agents": list(book.agents), "assets": list(book.assets),
                           "holdings": book.holdings.tolist(), "prices": book.prices.tolist(),
                           "cash": book.cash.tolist()}
        if out:
            return out
        async with self.server._queries:
            rows = await engine.store.fetchall("SELECT market, state_json FROM books")
        for market, state in rows:
            try:
                out[market] = json.loads(state)
            except ValueError:
                continue
        return out

    async def handle_positions(self, request: web.Request) -> web.Response:
        """Return the agent's open positions per market."""
        agent = request.match_info["id"]
        t = await self.server._tables_of(agent)
        if t is None:
            return _json({"error": f"unknown agent {agent!r}"}, 404)
        ledgers = await self._ledgers(agent, t)
        positions = []
        for market, book in sorted((await self._books()).items()):
            agents = list(book.get("agents") or [])
            if agent not in agents:
                continue
            i = agents.index(agent)
            assets = list(book.get("assets") or [])
            units = (book.get("holdings") or [])[i] if i < len(book.get("holdings") or []) else []
            prices = list(book.get("prices") or [])
            cash = _finite((book.get("cash") or [None] * (i + 1))[i]) or 0.0
            led = ledgers.get(market, ([], _Ledger()))[1]
            rows = []
            for j, a in enumerate(assets):
                u = _finite(units[j]) if j < len(units) else None
                if not u or u <= EPS:
                    continue
                p = _finite(prices[j]) if j < len(prices) else None
                avg = led.avg(a)
                value = u * p if p is not None else None
                rows.append({"market": market, "asset": a, "units": u, "avg_price": avg,
                             "price": p, "value": value,
                             "unrealized_pnl": None if avg is None or p is None
                             else (p - avg) * u})
            total = cash + sum(r["value"] or 0.0 for r in rows)
            for r in rows:
                r["weight"] = r["value"] / total if total > 0 and r["value"] is not None else None
            positions += sorted(rows, key=lambda r: -(r["value"] or 0.0))
        labels = await self.server.asset_labels.labels(
            self.server.engine.store.fetchall, {p["asset"] for p in positions})
        return _json({"agent": agent, "positions": positions, "assets": labels})

    async def handle_trades(self, request: web.Request) -> web.Response:
        """Return one page of the agent's trades, newest first."""
        agent = request.match_info["id"]
        unknown = sorted(set(request.query) - {"offset", "limit", "market"})
        if unknown:
            raise BadRequest(f"unknown query parameter {unknown[0][:40]!r} "
                             "(use offset, limit, market)")
        offset = _count(request, "offset", 0)
        limit = max(1, min(MAX_TRADES, _count(request, "limit", 20)))
        market = request.query.get("market")
        t = await self.server._tables_of(agent)
        if t is None:
            return _json({"error": f"unknown agent {agent!r}"}, 404)
        rows = []
        for m, (trades, _) in (await self._ledgers(agent, t)).items():
            if market is None or m == market:
                rows += [{"market": m, **tr} for tr in trades]
        rows.sort(key=lambda r: (-r["ts"], r["market"], r["asset"]))
        page = rows[offset:offset + limit]
        labels = await self.server.asset_labels.labels(
            self.server.engine.store.fetchall, assets_in({r["asset"]: 0.0 for r in page}))
        return _json({"agent": agent, "total": len(rows), "offset": offset, "limit": limit,
                      "trades": page, "assets": labels})


def _count(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
        raise BadRequest(f"{name} must be a non-negative integer, got {raw[:40]!r}")
    return int(raw)
