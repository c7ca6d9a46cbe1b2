"""Local fake of the Alpaca market-data WebSocket v2 (JSON), with failure injection.

Listens on 127.0.0.1 (random port). Flow like the real server: ``[{"T":"success","msg":
"connected"}]`` on open, ``{"action":"auth"}`` -> ``authenticated`` or ``[{"T":"error",
"code":402}]`` + close, ``{"action":"subscribe",..}`` -> ``[{"T":"subscription",..}]`` with the
FULL state. Every frame is an array. Failure modes: reject the upgrade with an HTTP status (429),
send an error on connect then close (406), delay ``authenticated``, freeze (no frame at all, no
pings), abrupt abort, arbitrary raw frames.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

CHANNELS = ("trades", "quotes", "bars", "dailyBars", "statuses")


def rfc3339(t: float, nanos: int | None = None) -> str:
    """Return ``t`` as RFC 3339 UTC with nanoseconds (``nanos`` overrides the fraction)."""
    whole = int(t)
    frac = nanos if nanos is not None else min(round((t - whole) * 1e9), 999_999_999)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{frac:09d}Z"


def trade(symbol: str, price: float, t: float) -> dict[str, Any]:
    """Return a trade message."""
    return {
        "T": "t",
        "S": symbol,
        "i": 11,
        "x": "V",
        "p": price,
        "s": 100,
        "c": ["@"],
        "z": "C",
        "t": rfc3339(t),
    }


def quote(symbol: str, bid: float, ask: float, t: float) -> dict[str, Any]:
    """Return a quote message."""
    return {
        "T": "q",
        "S": symbol,
        "bx": "V",
        "bp": bid,
        "bs": 1,
        "ax": "V",
        "ap": ask,
        "as": 2,
        "c": ["R"],
        "z": "C",
        "t": rfc3339(t),
    }


def bar(symbol: str, close: float, minute_start: float, kind: str = "b") -> dict[str, Any]:
    """Return a minute bar (``t`` is the minute START)."""
    return {
        "T": kind,
        "S": symbol,
        "o": close,
        "h": close,
        "l": close,
        "c": close,
        "v": 10,
        "t": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(minute_start))),
        "n": 3,
        "vw": close,
    }


@dataclass
class AlpacaConn:
    """One client connection seen by the fake."""

    ws: ServerConnection
    received: list[dict[str, Any]] = field(default_factory=list)
    authenticated: bool = False
    state: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CHANNELS})
    open: bool = True
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)


class FakeAlpaca:
    """The fake data stream and its knobs."""

    def __init__(self, key: str = "KEY", secret: str = "SECRET") -> None:
        """Create the fake accepting ``key``/``secret``."""
        self.key = key
        self.secret = secret
        self.conns: list[AlpacaConn] = []
        self.attempts: list[float] = []
        self.reject_status: int | None = None
        self.error_on_connect: int | None = None
        self.auth_delay = 0.0
        self.frozen = False
        self._server: Server | None = None
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

    async def stop(self) -> None:
        """Stop the server."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        """Return the stream URL."""
        return f"ws://127.0.0.1:{self.port}/v2/iex"

    @property
    def open_conns(self) -> list[AlpacaConn]:
        """Return the connections still open."""
        return [c for c in self.conns if c.open]

    async def send(self, payload: Any, conn: AlpacaConn | None = None) -> None:
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

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        self.attempts.append(time.monotonic())
        if self.reject_status is not None:
            return conn.respond(self.reject_status, "Too Many Requests\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        conn = AlpacaConn(ws)
        self.conns.append(conn)
        try:
            if self.error_on_connect is not None:
                await ws.send(
                    json.dumps(
                        [
                            {
                                "T": "error",
                                "code": self.error_on_connect,
                                "msg": "connection limit exceeded",
                            }
                        ]
                    )
                )
                await ws.close(1008, "limit")
                return
            await ws.send(json.dumps([{"T": "success", "msg": "connected"}]))
            async for msg in ws:
                obj = json.loads(msg)
                conn.received.append(obj)
                await self._on_message(conn, obj)
        except ConnectionClosed:
            pass
        finally:
            conn.open = False

    async def _on_message(self, conn: AlpacaConn, obj: dict[str, Any]) -> None:
        action = obj.get("action")
        if action == "auth":
            if self.auth_delay:
                await asyncio.sleep(self.auth_delay)
            if obj.get("key") == self.key and obj.get("secret") == self.secret:
                conn.authenticated = True
                await conn.ws.send(json.dumps([{"T": "success", "msg": "authenticated"}]))
            else:
                await conn.ws.send(json.dumps([{"T": "error", "code": 402, "msg": "auth failed"}]))
                await conn.ws.close(1008, "auth failed")
        elif action in ("subscribe", "unsubscribe"):
            if not conn.authenticated:
                await conn.ws.send(
                    json.dumps([{"T": "error", "code": 401, "msg": "not authenticated"}])
                )
                return
            for ch in CHANNELS:
                syms = obj.get(ch, [])
                if action == "subscribe":
                    conn.state[ch] += [s for s in syms if s not in conn.state[ch]]
                else:
                    conn.state[ch] = [s for s in conn.state[ch] if s not in syms]
            if not self.frozen:
                await conn.ws.send(json.dumps([{"T": "subscription", **conn.state}]))
            conn.subscribed.set()
