"""Local fake of Yahoo Finance: the streamer WebSocket and the v8 chart REST endpoint.

Both listen on 127.0.0.1 with random ports. The streamer takes ``{"subscribe":[...]}`` /
``{"unsubscribe":[...]}`` and answers ``{"type":"pricing","message":"<base64 PricingData>"}``;
like the real one it silently keeps only the first ``max_symbols`` (100) symbols of a connection
and sends one (possibly days-old) snapshot per newly subscribed symbol. Failure modes: reject the
upgrade with an HTTP status, freeze (socket open, no data), abrupt abort, arbitrary raw frames.
The chart endpoint serves canned per-symbol payloads, answers 429 to non-browser User-Agents and
can be told to fail the next N requests with a status.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from feeds.yahoo_proto import PricingData, encode_pricing


def pricing_frame(
    symbol: str,
    price: float,
    time_ms: int,
    *,
    bid: float = 0.0,
    ask: float = 0.0,
    exchange: str = "NMS",
    quote_type: int = 8,
    market_hours: int = 1,
) -> str:
    """Return one streamer ``pricing`` frame (JSON text); regular-session equity by default."""
    pd = PricingData(
        id=symbol,
        price=price,
        time=time_ms,
        exchange=exchange,
        quote_type=quote_type,
        market_hours=market_hours,
        bid=bid,
        ask=ask,
        price_hint=2,
    )
    msg = base64.b64encode(encode_pricing(pd)).decode()
    return json.dumps({"type": "pricing", "message": msg})


def chart_payload(
    symbol: str,
    price: float | None,
    price_time: int,
    days: list[tuple[int, float | None]],
    *,
    session: tuple[int, int] | None = None,
    adjclose: list[float | None] | None = None,
) -> dict[str, Any]:
    """Return a v8 chart payload with ``timestamp[]`` and ``close[]`` (None -> JSON null);
    ``adjclose``: the dividend-adjusted closes (default: the closes, no distribution)."""
    meta: dict[str, Any] = {
        "currency": "USD",
        "symbol": symbol,
        "regularMarketPrice": price,
        "regularMarketTime": price_time,
    }
    if session is not None:
        meta["currentTradingPeriod"] = {
            "regular": {"start": session[0], "end": session[1], "timezone": "EDT"}
        }
    closes = [c for _, c in days]
    return {
        "chart": {
            "result": [
                {
                    "meta": meta,
                    "timestamp": [t for t, _ in days],
                    "indicators": {
                        "quote": [{"close": closes, "open": closes}],
                        "adjclose": [{"adjclose": closes if adjclose is None else adjclose}],
                    },
                }
            ],
            "error": None,
        }
    }


@dataclass
class YahooConn:
    """One client connection seen by the fake streamer."""

    ws: ServerConnection
    symbols: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)
    subscribes: int = 0
    open: bool = True
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)


class FakeYahoo:
    """The fake streamer + chart endpoint and their knobs."""

    def __init__(self) -> None:
        """Create the fake with default knobs."""
        self.conns: list[YahooConn] = []
        self.attempts: list[float] = []
        self.max_symbols = 100
        self.reject_status: int | None = None
        self.frozen = False
        self.snapshot_on_subscribe = True
        self.snapshot_age = 0.0
        self.prices: dict[str, float] = {}
        self.stream_interval: float | None = None
        self.charts: dict[str, dict[str, Any]] = {}
        self.chart_fail: list[int] = []
        self.chart_requests: list[tuple[str, dict[str, str], str]] = []
        self.require_browser_ua = True
        self._server: Server | None = None
        self._runner: web.AppRunner | None = None
        self._streamer: asyncio.Task[None] | None = None
        self.ws_port = 0
        self.http_port = 0

    async def start(self) -> None:
        """Start both servers on random local ports."""
        self._server = await serve(
            self._handler,
            "127.0.0.1",
            0,
            ping_interval=None,
            process_request=self._process_request,
            close_timeout=1,
        )
        self.ws_port = self._server.sockets[0].getsockname()[1]
        app = web.Application()
        app.router.add_get("/v8/finance/chart/{symbol}", self._chart)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.http_port = self._runner.addresses[0][1]
        self._streamer = asyncio.get_running_loop().create_task(self._stream())

    async def stop(self) -> None:
        """Stop both servers."""
        if self._streamer is not None:
            self._streamer.cancel()
            await asyncio.gather(self._streamer, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def ws_url(self) -> str:
        """Return the streamer URL."""
        return f"ws://127.0.0.1:{self.ws_port}/?version=2"

    @property
    def chart_url(self) -> str:
        """Return the chart base URL (``<chart_url>/<symbol>``)."""
        return f"http://127.0.0.1:{self.http_port}/v8/finance/chart"

    @property
    def open_conns(self) -> list[YahooConn]:
        """Return the connections still open."""
        return [c for c in self.conns if c.open]

    # ------------------------------------------------------------------------- streamer

    def price_of(self, symbol: str) -> float:
        """Return the price the fake streams for ``symbol``."""
        return self.prices.get(symbol, 100.0)

    async def send(self, payload: str, conn: YahooConn | None = None) -> None:
        """Send a raw frame to one connection or to every open one."""
        for c in [conn] if conn is not None else self.open_conns:
            try:
                await c.ws.send(payload)
            except ConnectionClosed:
                c.open = False

    async def push(self, symbol: str, price: float, time_ms: int | None = None) -> None:
        """Send a pricing snapshot of ``symbol`` to the connections subscribed to it."""
        t = time_ms if time_ms is not None else int(time.time() * 1000)
        for c in self.open_conns:
            if symbol in c.symbols:
                await self.send(pricing_frame(symbol, price, t), c)

    def abort_all(self) -> None:
        """Drop every connection without a close frame."""
        for c in self.open_conns:
            c.ws.transport.abort()
            c.open = False

    async def _stream(self) -> None:
        while True:
            await asyncio.sleep(self.stream_interval or 0.05)
            if self.stream_interval is None or self.frozen:
                continue
            t = int(time.time() * 1000)
            for c in self.open_conns:
                for s in list(c.symbols):
                    await self.send(pricing_frame(s, self.price_of(s), t), c)

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        self.attempts.append(time.monotonic())
        if self.reject_status is not None:
            return conn.respond(self.reject_status, "rejected\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        conn = YahooConn(ws)
        self.conns.append(conn)
        try:
            async for msg in ws:
                text = msg if isinstance(msg, str) else msg.decode()
                conn.received.append(text)
                try:
                    obj = json.loads(text)
                except ValueError:
                    await ws.close(1003, "malformed")
                    return
                await self._on_message(conn, obj)
        except ConnectionClosed:
            pass
        finally:
            conn.open = False

    async def _on_message(self, conn: YahooConn, obj: dict[str, Any]) -> None:
        if "subscribe" in obj:
            conn.subscribes += 1
            new = [s for s in obj["subscribe"] if s not in conn.symbols]
            room = max(self.max_symbols - len(conn.symbols), 0)
            new = new[:room]  # silently truncated, like the real streamer
            conn.symbols.extend(new)
            conn.subscribed.set()
            if self.snapshot_on_subscribe and not self.frozen:
                t = int((time.time() - self.snapshot_age) * 1000)
                for s in new:
                    await self.send(pricing_frame(s, self.price_of(s), t), conn)
        if "unsubscribe" in obj:
            gone = set(obj["unsubscribe"])
            conn.symbols = [s for s in conn.symbols if s not in gone]

    # ------------------------------------------------------------------------- chart REST

    async def _chart(self, request: web.Request) -> web.Response:
        symbol = request.match_info["symbol"]
        ua = request.headers.get("User-Agent", "")
        self.chart_requests.append((symbol, dict(request.query), ua))
        if self.require_browser_ua and not ua.startswith("Mozilla/"):
            return web.Response(status=429, text="Too Many Requests")
        if self.chart_fail:
            status = self.chart_fail.pop(0)
            return web.Response(status=status, text="error", headers={"Retry-After": "0"})
        payload = self.charts.get(symbol)
        if payload is None:
            return web.json_response(
                {"chart": {"result": None, "error": {"code": "Not Found"}}}, status=404
            )
        return web.json_response(_within_period(payload, request.query))


def _within_period(payload: dict[str, Any], query: Any) -> dict[str, Any]:
    """Keep only the bars in ``[period1, period2)`` when the request names a period (as Yahoo)."""
    if "period1" not in query or "period2" not in query:
        return payload
    lo, hi = int(query["period1"]), int(query["period2"])
    r0 = payload["chart"]["result"][0]
    keep = [i for i, t in enumerate(r0["timestamp"]) if lo <= t < hi]
    ind = r0["indicators"]
    r1 = {**r0, "timestamp": [r0["timestamp"][i] for i in keep],
          "indicators": {name: [{k: [v[i] for i in keep] for k, v in arrays[0].items()}]
                         for name, arrays in ind.items()}}
    return {"chart": {**payload["chart"], "result": [r1]}}
