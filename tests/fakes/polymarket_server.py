"""Local fake of Polymarket: CLOB market WebSocket + Gamma / CLOB REST, with failure injection.

Everything listens on 127.0.0.1 with random ports. The WebSocket speaks the market channel as in
``docs``/feeds.md: the first client frame subscribes (``initial_dump`` -> one JSON array of
``book`` snapshots, bids ascending and asks descending, best LAST), ``operation``
subscribe/unsubscribe, text ``PING`` -> ``PONG``. Failure modes: reject the upgrade with an HTTP
status, frames sent before the snapshot, freeze (PONGs only), close with 1008 when text PINGs
stop, abrupt abort, arbitrary raw frames.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from tests.helpers import wait_for


@dataclass
class Book:
    """Server-side order book of one token."""

    bids: list[tuple[float, float]] = field(default_factory=list)
    asks: list[tuple[float, float]] = field(default_factory=list)
    last: float | None = None


def gamma_market(
    mid: str,
    question: str,
    yes: str,
    no: str,
    *,
    volume_24h: float = 1000.0,
    closed: bool = False,
    prices: tuple[str, str] = ("0.5", "0.5"),
    outcomes: tuple[str, str] = ("Yes", "No"),
    enable_order_book: bool = True,
    slug: str | None = None,
    end_date: str = "2030-01-01T00:00:00Z",
) -> dict[str, Any]:
    """Return a Gamma market object with its JSON-ENCODED-STRING fields, like the real API."""
    tokens = (yes, no) if outcomes[0].lower() != "no" else (no, yes)
    return {
        "id": mid,
        "question": question,
        "conditionId": f"0xcond{mid}",
        "slug": slug or f"market-{mid}",
        "endDate": end_date,
        "liquidity": "1000.5",
        "liquidityNum": 1000.5,
        "volume": str(volume_24h * 10),
        "volumeNum": volume_24h * 10,
        "volume24hr": volume_24h,
        "outcomes": json.dumps(list(outcomes)),
        "outcomePrices": json.dumps(list(prices)),
        "clobTokenIds": json.dumps(list(tokens)),
        "active": True,
        "closed": closed,
        "acceptingOrders": not closed,
        "enableOrderBook": enable_order_book,
        "orderPriceMinTickSize": 0.01,
        "negRisk": False,
        "umaResolutionStatuses": "[]",
        "events": [],
    }


def book_event(token: str, book: Book, ts_ms: int, market: str = "0xm") -> dict[str, Any]:
    """Return a ``book`` snapshot with bids ascending and asks descending (best LAST)."""
    bids = sorted(book.bids)
    asks = sorted(book.asks, reverse=True)
    return {
        "event_type": "book",
        "market": market,
        "asset_id": token,
        "timestamp": str(ts_ms),
        "hash": "h",
        "bids": [{"price": f"{p:g}", "size": f"{s:g}"} for p, s in bids],
        "asks": [{"price": f"{p:g}", "size": f"{s:g}"} for p, s in asks],
        "tick_size": "0.01",
        "last_trade_price": "" if book.last is None else f"{book.last:g}",
    }


def price_change(entries: list[dict[str, Any]], ts_ms: int, market: str = "0xm") -> dict[str, Any]:
    """Return a current-schema ``price_change`` event."""
    return {
        "event_type": "price_change",
        "market": market,
        "timestamp": str(ts_ms),
        "price_changes": entries,
    }


def change(
    token: str,
    price: str,
    size: str,
    side: str,
    best_bid: str | None = None,
    best_ask: str | None = None,
) -> dict[str, Any]:
    """Return one ``price_changes`` entry (best bid/ask omitted when None)."""
    out: dict[str, Any] = {
        "asset_id": token,
        "price": price,
        "size": size,
        "side": side,
        "hash": "x",
    }
    if best_bid is not None:
        out["best_bid"] = best_bid
    if best_ask is not None:
        out["best_ask"] = best_ask
    return out


@dataclass
class FakeConn:
    """One client connection seen by the fake server."""

    ws: ServerConnection
    assets: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)
    pings: int = 0
    last_ping: float = field(default_factory=time.monotonic)
    open: bool = True
    close_code: int | None = None
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)


class FakePolymarket:
    """The fake servers and their knobs."""

    def __init__(self) -> None:
        """Create the fake with no market."""
        self.markets: dict[str, dict[str, Any]] = {}
        self.books: dict[str, Book] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.midpoints: dict[str, dict[str, Any]] = {}
        self.conns: list[FakeConn] = []
        self.http_requests: list[tuple[str, list[tuple[str, str]]]] = []
        # knobs
        self.initial_dump = True
        self.frozen = False
        self.answer_ping = True
        self.require_ping: float | None = None
        self.reject_status: int | None = None
        self.rejected = 0
        self.pre_snapshot: list[str] = []
        self.on_subscribe: Callable[[FakeConn], None] | None = None
        self.ts_ms = 1_786_604_072_000
        self._server: Server | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.ws_port = 0
        self.http_port = 0
        #: WebSocket compression the server accepts (None: send frames as they are).
        self.compression: str | None = "deflate"

    # ------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the WebSocket and HTTP servers on random local ports."""
        self._server = await serve(
            self._handler,
            "127.0.0.1",
            0,
            ping_interval=None,
            process_request=self._process_request,
            close_timeout=1,
            compression=self.compression,
        )
        self.ws_port = self._server.sockets[0].getsockname()[1]
        app = web.Application()
        app.router.add_get("/markets", self._markets)
        app.router.add_get("/markets/slug/{slug}", self._market_by_slug)
        app.router.add_get("/markets/{id}", self._market_by_id)
        app.router.add_get("/prices-history", self._prices_history)
        app.router.add_get("/midpoint", self._midpoint)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.http_port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Stop both servers."""
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def ws_url(self) -> str:
        """Return the market-channel URL."""
        return f"ws://127.0.0.1:{self.ws_port}/ws/market"

    @property
    def http_url(self) -> str:
        """Return the REST base URL (Gamma and CLOB)."""
        return f"http://127.0.0.1:{self.http_port}"

    # ------------------------------------------------------------------------- market data

    def add_market(self, market: dict[str, Any], books: dict[str, Book] | None = None) -> None:
        """Add a Gamma market and optional books of its tokens."""
        self.markets[str(market["id"])] = market
        for tok, book in (books or {}).items():
            self.books[tok] = book

    def next_ts(self) -> int:
        """Return a fresh, increasing timestamp in ms."""
        self.ts_ms += 1000
        return self.ts_ms

    def snapshot(self, token: str) -> dict[str, Any]:
        """Return the current ``book`` snapshot of ``token``."""
        return book_event(token, self.books.get(token, Book()), self.next_ts())

    # ------------------------------------------------------------------------- WS control

    @property
    def open_conns(self) -> list[FakeConn]:
        """Return the connections still open."""
        return [c for c in self.conns if c.open]

    async def send(self, payload: Any, conn: FakeConn | None = None) -> None:
        """Send a raw string or a JSON payload to one connection or every open one."""
        text = payload if isinstance(payload, str) else json.dumps(payload)
        for c in [conn] if conn is not None else self.open_conns:
            try:
                await c.ws.send(text)
            except ConnectionClosed:
                c.open = False

    async def send_to_token(self, token: str, payload: Any) -> None:
        """Send to the connection(s) subscribed to ``token``."""
        for c in self.open_conns:
            if token in c.assets:
                await self.send(payload, c)

    def abort_all(self) -> None:
        """Drop every connection without a close frame."""
        for c in self.open_conns:
            c.ws.transport.abort()
            c.open = False

    async def close_all(self, code: int = 1000, reason: str = "") -> None:
        """Close every connection with ``code``."""
        for c in self.open_conns:
            c.close_code = code
            await c.ws.close(code, reason)
            c.open = False

    async def wait_conns(self, n: int, timeout: float = 5.0) -> list[FakeConn]:
        """Wait until ``n`` connections (total, ever) have subscribed."""
        await wait_for(lambda: sum(1 for c in self.conns if c.subscribed.is_set()) >= n, timeout)
        return [c for c in self.conns if c.subscribed.is_set()]

    # ------------------------------------------------------------------------- WS server

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        if self.reject_status is not None:
            self.rejected += 1
            return conn.respond(self.reject_status, "rejected\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        conn = FakeConn(ws)
        self.conns.append(conn)
        watch: asyncio.Task[None] | None = None
        if self.require_ping is not None:
            watch = asyncio.get_running_loop().create_task(self._ping_watch(conn))
            self._tasks.add(watch)
            watch.add_done_callback(self._tasks.discard)
        try:
            async for msg in ws:
                text = msg if isinstance(msg, str) else msg.decode()
                conn.received.append(text)
                if text == "PING":
                    conn.pings += 1
                    conn.last_ping = time.monotonic()
                    if self.answer_ping:
                        await ws.send("PONG")
                    continue
                try:
                    obj = json.loads(text)
                except ValueError:
                    continue
                await self._on_message(conn, obj)
        except ConnectionClosed:
            pass
        finally:
            conn.open = False
            if conn.close_code is None:
                conn.close_code = ws.close_code
            if watch is not None:
                watch.cancel()

    async def _on_message(self, conn: FakeConn, obj: dict[str, Any]) -> None:
        assets = [str(a) for a in obj.get("assets_ids", [])]
        if obj.get("type") == "market":
            conn.assets = list(assets)
            for raw in self.pre_snapshot:
                await conn.ws.send(raw)
            if obj.get("initial_dump") and self.initial_dump and not self.frozen:
                await conn.ws.send(json.dumps([self.snapshot(a) for a in assets]))
            conn.subscribed.set()
            if self.on_subscribe is not None:
                self.on_subscribe(conn)
        elif obj.get("operation") == "subscribe":
            new = [a for a in assets if a not in conn.assets]
            if not new:
                await conn.ws.send("NO NEW ASSETS")
                return
            conn.assets.extend(new)
            if not self.frozen:
                await conn.ws.send(json.dumps([self.snapshot(a) for a in new]))
        elif obj.get("operation") == "unsubscribe":
            conn.assets = [a for a in conn.assets if a not in assets]

    async def _ping_watch(self, conn: FakeConn) -> None:
        assert self.require_ping is not None
        while conn.open:
            await asyncio.sleep(self.require_ping / 4)
            if time.monotonic() - conn.last_ping > self.require_ping:
                conn.close_code = 1008
                await conn.ws.close(1008, "no ping received")
                conn.open = False
                return

    # ------------------------------------------------------------------------- REST

    def _record(self, request: web.Request) -> None:
        self.http_requests.append((request.path, list(request.query.items())))

    async def _markets(self, request: web.Request) -> web.Response:
        self._record(request)
        q = request.query
        items = list(self.markets.values())
        ids = q.getall("id", [])
        if ids:
            items = [m for m in items if str(m["id"]) in ids]
        if "slug" in q:
            items = [m for m in items if m["slug"] == q["slug"]]
        want_closed = q.get("closed", "false") == "true"
        items = [m for m in items if bool(m["closed"]) == want_closed]
        if q.get("active") == "true":
            items = [m for m in items if m["active"]]
        if q.get("order") == "volume_24hr":
            items.sort(key=lambda m: m["volume24hr"], reverse=q.get("ascending") != "true")
        offset = int(q.get("offset", "0"))
        limit = int(q.get("limit", "20"))
        return web.json_response(items[offset : offset + limit])

    async def _market_by_id(self, request: web.Request) -> web.Response:
        self._record(request)
        m = self.markets.get(request.match_info["id"])
        if m is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(m)

    async def _market_by_slug(self, request: web.Request) -> web.Response:
        self._record(request)
        for m in self.markets.values():
            if m["slug"] == request.match_info["slug"]:
                return web.json_response(m)
        return web.json_response({"error": "not found"}, status=404)

    async def _prices_history(self, request: web.Request) -> web.Response:
        self._record(request)
        tok = request.query.get("market", "")
        if tok not in self.history:
            return web.json_response({"history": []})
        return web.json_response({"history": self.history[tok]})

    async def _midpoint(self, request: web.Request) -> web.Response:
        self._record(request)
        tok = request.query.get("token_id", "")
        if tok not in self.midpoints:
            return web.json_response({"error": "no orderbook"}, status=404)
        return web.json_response(self.midpoints[tok])
