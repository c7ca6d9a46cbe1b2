"""Connection-level plumbing of the HTTP server: a bounded site, one-line errors, busy answers.

A :class:`BoundedSite` listens for the daemon's aiohttp application and answers connections beyond
``[http] max_connections`` itself (:class:`_Busy`): ``GET /healthz`` still gets the daemon's health,
anything else 503 and the connection closed. A malformed request (its line, headers or length) is
answered ``{"error": "<one line>"}`` like the API's own errors and logged as one warning line
(:data:`PROTOCOL_LOG`). :class:`HttpBindError` reports an address already in use like a config
problem.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from daemon.config.settings import ConfigError

log = structlog.get_logger(__name__)

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Connection: close\r\nContent-Length: 47\r\n\r\n"
         b'{"error":"too many connections, retry shortly"}')

#: Connections beyond ``max_connections`` that may wait for their request (the liveness probe
#: is still answered there); beyond these a connection is answered 503 at once.
HEALTH_RESERVE = 8
#: The longest request head a connection beyond the limit may send.
_MAX_HEAD = 8192

Health = Callable[[], tuple[int, dict[str, Any]]]


def _reply(status: int, body: dict[str, Any]) -> bytes:
    """Return a whole HTTP/1.1 answer carrying ``body`` as JSON, closing the connection."""
    data = json.dumps(body, sort_keys=True).encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json"
            f"\r\nConnection: close\r\nContent-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


def _is_health_probe(head: bytes) -> bool:
    """Return whether a request head asks ``GET /healthz`` (or HEAD)."""
    parts = head.split(b"\r\n", 1)[0].split()
    return (len(parts) == 3 and parts[0] in (b"GET", b"HEAD")
            and parts[1].split(b"?", 1)[0] == b"/healthz")


class _Busy(asyncio.Protocol):
    """Answer one connection beyond the limit: the liveness probe with the daemon's health,
    anything else 503; a connection that sends no whole request head is closed at ``timeout``."""

    def __init__(self, health: Health | None, timeout: float, pending: set[_Busy]) -> None:
        """Answer from ``health`` (None: 503 at once), counted in ``pending`` while waiting."""
        self._health = health
        self._timeout = timeout
        self._pending = pending
        self._buf = b""
        self._transport: asyncio.WriteTransport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Wait for the request head, or answer 503 at once when no probe can be served."""
        assert isinstance(transport, asyncio.WriteTransport)
        self._transport = transport
        if self._health is None or len(self._pending) >= HEALTH_RESERVE:
            self._answer(_BUSY)
            return
        self._pending.add(self)
        self._timer = asyncio.get_running_loop().call_later(self._timeout, transport.close)

    def data_received(self, data: bytes) -> None:
        """Answer once the request head is complete (or too long)."""
        if self._transport is None or self._transport.is_closing():
            return
        self._buf += data
        if b"\r\n\r\n" not in self._buf and len(self._buf) <= _MAX_HEAD:
            return
        if self._health is not None and _is_health_probe(self._buf):
            status, body = self._health()
            self._answer(_reply(status, body))
        else:
            self._answer(_BUSY)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection."""
        self._done()

    def _answer(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)
        self._transport.close()
        self._done()

    def _done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending.discard(self)


class _ProtocolLogger(logging.Logger):
    """aiohttp's connection logger: a malformed request is one warning line, no traceback."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kw: Any) -> None:
        """Log one line naming the request's problem."""
        exc = exc_info if isinstance(exc_info, BaseException) else None
        text = str(msg) % args if args else str(msg)
        reason = " ".join(str(getattr(exc, "message", "") or exc or "").split())[:160]
        log.warning("http request rejected", detail=text,
                    reason=f"{type(exc).__name__}: {reason}" if exc else None)


#: The connection logger given to aiohttp (see :class:`_ProtocolLogger`).
PROTOCOL_LOG = _ProtocolLogger("aiohttp.server.paperarena")
PROTOCOL_LOG.parent = logging.getLogger("aiohttp.server")  # debug lines follow its config


class _OneLineErrors(RequestHandler):
    """aiohttp's request handler whose protocol-level errors (a malformed request line, header
    or length) answer ``{"error": "<one line>"}`` like the API's own errors."""

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None
                     ) -> StreamResponse:
        """Log the error as aiohttp does, then answer one JSON line with its status."""
        super().handle_error(request, status, exc, message)  # logs; raises if already sent
        detail = getattr(exc, "message", None) or message or HTTPStatus(status).phrase
        reason = " ".join(str(detail).split())[:200]
        resp = web.json_response({"error": reason}, status=status)
        resp.force_close()
        return resp


def _request_handler(server: web.Server) -> RequestHandler:
    """Return a request handler for one connection of ``server``, with one-line errors."""
    kwargs = getattr(server, "_kwargs", None)
    loop = getattr(server, "_loop", None)
    if kwargs is None or loop is None:  # an aiohttp without these: its own handler
        return server()
    return _OneLineErrors(server, loop=loop, **kwargs)


class BoundedSite(web.BaseSite):
    """A TCP site that answers connections beyond ``max_connections`` with 503 and closes them."""

    __slots__ = ("_health", "_host", "_max", "_pending", "_port", "_reuse_address",
                 "_timeout")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, max_connections: int,
                 reuse_address: bool = True, health: Health | None = None,
                 header_timeout: float = 10.0) -> None:
        """Prepare the site on ``host:port`` with at most ``max_connections`` open; beyond
        them ``health`` still answers ``GET /healthz`` (within ``header_timeout``)."""
        super().__init__(runner)
        self._host = host
        self._port = port
        self._max = max_connections
        self._reuse_address = reuse_address
        self._health = health
        self._timeout = header_timeout
        self._pending: set[_Busy] = set()

    @property
    def name(self) -> str:
        """Return the site's URL."""
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        """Listen; every accepted connection beyond the limit gets :class:`_Busy`."""
        await super().start()
        server = self._runner.server
        assert server is not None

        def factory() -> asyncio.BaseProtocol:
            if len(server.connections) >= self._max:
                return _Busy(self._health, self._timeout, self._pending)
            return _request_handler(server)

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(factory, self._host, self._port,
                                                reuse_address=self._reuse_address)
        if self._server.sockets:
            self._port = int(self._server.sockets[0].getsockname()[1])


class HttpBindError(ConfigError):
    """The HTTP server cannot bind its address (reported like a config problem)."""
