"""Local fake of the Finnhub trades WebSocket (``?token=``), with failure injection.

Listens on 127.0.0.1 (random port). The upgrade is refused with 401 unless the token matches.
``{"type":"subscribe","symbol":..}`` / ``unsubscribe`` manage a connection's symbols; the fake
can stream trades for every subscribed symbol, send ``{"type":"ping"}``, ``{"type":"error"}``,
duplicate trades, arbitrary raw frames, freeze (pings only), or abort connections.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response


def trades_frame(*trades: tuple[str, float, int, float]) -> str:
    """Return a ``trade`` frame from ``(symbol, price, t_ms, volume)`` tuples."""
    data = [{"p": p, "s": s, "t": t, "v": v, "c": ["1"]} for s, p, t, v in trades]
    return json.dumps({"type": "trade", "data": data})


@dataclass
class FinnhubConn:
    """One client connection seen by the fake."""

    ws: ServerConnection
    symbols: list[str] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    open: bool = True


class FakeFinnhub:
    """The fake trades WebSocket and its knobs."""

    def __init__(self, token: str = "TOKEN") -> None:
        """Create the fake accepting ``token``."""
        self.token = token
        self.conns: list[FinnhubConn] = []
        self.paths: list[str] = []
        self.stream_interval: float | None = None
        self.frozen = False
        self._server: Server | None = None
        self._streamer: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self) -> None:
        """Start the server on a random local port."""
        self._server = await serve(
            self._handler,
            "127.0.0.1",
            0,
            ping_interval=None,
            process_request=self._process_request,
            close_timeout=1,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._streamer = asyncio.get_running_loop().create_task(self._stream())

    async def stop(self) -> None:
        """Stop the server."""
        if self._streamer is not None:
            self._streamer.cancel()
            await asyncio.gather(self._streamer, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        """Return the base URL (the client appends ``?token=``)."""
        return f"ws://127.0.0.1:{self.port}"

    @property
    def open_conns(self) -> list[FinnhubConn]:
        """Return the connections still open."""
        return [c for c in self.conns if c.open]

    def subscribed(self, n_conn: int, n_symbols: int) -> bool:
        """Return whether connection ``n_conn`` (0-based) has at least ``n_symbols`` symbols."""
        return len(self.conns) > n_conn and len(self.conns[n_conn].symbols) >= n_symbols

    async def send(self, payload: Any, conn: FinnhubConn | None = None) -> None:
        """Send raw text or a JSON payload to one or every open connection."""
        text = payload if isinstance(payload, str | bytes) else json.dumps(payload)
        for c in [conn] if conn is not None else self.open_conns:
            try:
                await c.ws.send(text)
            except ConnectionClosed:
                c.open = False

    def abort_all(self) -> None:
        """Drop every connection without a close frame."""
        for c in self.open_conns:
            c.ws.transport.abort()
            c.open = False

    async def _stream(self) -> None:
        n = 0
        while True:
            await asyncio.sleep(self.stream_interval or 0.05)
            if self.stream_interval is None:
                continue
            for c in self.open_conns:
                if self.frozen:
                    await self.send({"type": "ping"}, c)
                    continue
                n += 1
                t = int(time.time() * 1000)
                if c.symbols:
                    await self.send(trades_frame(*[(s, 100.0 + n, t, 1.0) for s in c.symbols]), c)

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        self.paths.append(request.path)
        token = parse_qs(urlsplit(request.path).query).get("token", [""])[0]
        if token != self.token:
            return conn.respond(401, "Invalid API key\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        conn = FinnhubConn(ws)
        self.conns.append(conn)
        try:
            async for msg in ws:
                obj = json.loads(msg)
                conn.received.append(obj)
                sym = obj.get("symbol")
                if obj.get("type") == "subscribe" and sym not in conn.symbols:
                    conn.symbols.append(sym)
                elif obj.get("type") == "unsubscribe" and sym in conn.symbols:
                    conn.symbols.remove(sym)
        except ConnectionClosed:
            pass
        finally:
            conn.open = False
