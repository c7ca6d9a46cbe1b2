"""Connection-level plumbing of the HTTP server: a bounded site, one-line errors, busy answers.

A :class:`BoundedSite` listens for the daemon's aiohttp application and reads each connection's
first request head itself (:class:`_Gate`) before aiohttp gets it: beyond ``[http]
max_connections`` served connections ``GET /healthz`` still gets the daemon's health and anything
else 503; an event stream that would be refused is answered 503 there, so it never takes a
connection of aiohttp. Every refusal is a whole answer with a JSON body, then a lingering close
(never a reset). A malformed request (its line, headers or length) is
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

#: Connections still sending their first request head, at most, per ``max_connections``
#: (at least :data:`MIN_WAITING`); beyond them a new connection is answered 503 at once.
WAITING_PER_CONNECTION = 16
MIN_WAITING = 1024
#: The longest first request head read before the connection is handed to aiohttp (which
#: answers a longer one 400) or refused.
_MAX_HEAD = 8192
#: Pending connections the listening socket queues (a reconnect storm arrives at once).
BACKLOG = 1024

Health = Callable[[], tuple[int, dict[str, Any]]]
Refusal = Callable[[], str | None]
"""Why an event stream would be refused now (None: it would be served)."""


def _reply(status: int, body: dict[str, Any]) -> bytes:
    """Return a whole HTTP/1.1 answer carrying ``body`` as JSON, closing the connection."""
    data = json.dumps(body, sort_keys=True).encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json"
            f"\r\nConnection: close\r\nContent-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


def _target(head: bytes) -> tuple[bytes, bytes]:
    """Return the method and path (no query) of a request head (empty if malformed)."""
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3:
        return b"", b""
    return parts[0], parts[1].split(b"?", 1)[0]


def _is_health_probe(head: bytes) -> bool:
    """Return whether a request head asks ``GET /healthz`` (or HEAD)."""
    method, path = _target(head)
    return method in (b"GET", b"HEAD") and path == b"/healthz"


class _Gate(asyncio.Protocol):
    """Read a connection's first request head, then hand the connection to aiohttp or answer
    it here: a refused event stream or a connection beyond the limit never holds one of
    ``max_connections``, and every refusal is a whole 503 answer with a JSON body.

    An answer given here is followed by a lingering close: the connection is half-closed and
    what the client still sends is read and dropped until it closes (or ``timeout``), so the
    answer is never lost to a reset.
    """

    def __init__(self, site: BoundedSite) -> None:
        """Serve a connection of ``site``."""
        self._site = site
        self._buf = b""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._answered = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Wait for the request head (``header_timeout`` at most), or answer 503 at once
        when too many connections are waiting already."""
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        site = self._site
        self._timer = asyncio.get_running_loop().call_later(site.timeout, transport.close)
        if len(site.waiting) >= site.max_waiting:
            self._answer(_BUSY)
            return
        site.waiting.add(self)

    def data_received(self, data: bytes) -> None:
        """Decide once the request head is complete (or too long to be one)."""
        if self._answered or self._transport is None:
            return  # lingering: dropped
        self._buf += data
        if b"\r\n\r\n" not in self._buf and len(self._buf) <= _MAX_HEAD:
            return
        answer = self._site.refusal(self._buf)
        if answer is not None:
            self._answer(answer)
        else:
            self._hand_over()

    def eof_received(self) -> bool:
        """Close at the client's end of data (nothing more will come)."""
        self._done()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection."""
        self._done()

    def _answer(self, data: bytes) -> None:
        assert self._transport is not None
        self._answered = True
        self._site.waiting.discard(self)
        self._transport.write(data)
        if self._transport.can_write_eof():
            self._transport.write_eof()  # lingering close: read until the client closes
        else:
            self._transport.close()

    def _hand_over(self) -> None:
        transport = self._transport
        assert transport is not None
        self._done()
        handler = _request_handler(self._site.aiohttp_server())
        transport.set_protocol(handler)
        handler.connection_made(transport)
        handler.data_received(self._buf)
        self._buf = b""

    def _done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._site.waiting.discard(self)

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
    """A TCP site that reads each connection's first request head before aiohttp gets it:
    beyond ``max_connections`` served connections, or for an event stream that would be
    refused, it answers 503 itself (``GET /healthz`` is always answered)."""

    __slots__ = ("_health", "_host", "_max", "_port", "_reuse_address", "_streams",
                 "max_waiting", "timeout", "waiting")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, max_connections: int,
                 reuse_address: bool = True, health: Health | None = None,
                 header_timeout: float = 10.0, streams: Refusal | None = None) -> None:
        """Prepare the site on ``host:port`` with at most ``max_connections`` served; beyond
        them ``health`` still answers ``GET /healthz``; ``streams`` says why a ``GET
        /api/events`` would be refused (answered 503 before it takes a connection)."""
        super().__init__(runner)
        self._host = host
        self._port = port
        self._max = max_connections
        self._reuse_address = reuse_address
        self._health = health
        self._streams = streams
        self.timeout = header_timeout
        self.waiting: set[_Gate] = set()
        """Connections still sending their first request head."""
        self.max_waiting = max(MIN_WAITING, WAITING_PER_CONNECTION * max_connections)

    @property
    def name(self) -> str:
        """Return the site's URL."""
        return f"http://{self._host}:{self._port}"

    def aiohttp_server(self) -> web.Server:
        """Return the runner's aiohttp server."""
        server = self._runner.server
        assert isinstance(server, web.Server)
        return server

    def refusal(self, head: bytes) -> bytes | None:
        """Return the answer to a connection whose first request head is ``head``, or None to
        hand it to aiohttp."""
        full = len(self.aiohttp_server().connections) >= self._max
        method, path = _target(head)
        if full and _is_health_probe(head):
            if self._health is None:
                return _BUSY
            return _reply(*self._health())
        if self._streams is not None and method == b"GET" and path == b"/api/events":
            reason = self._streams()
            if reason is not None:
                return _reply(503, {"error": reason})
        return _BUSY if full else None

    async def start(self) -> None:
        """Listen; every accepted connection starts at a :class:`_Gate`."""
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Gate(self), self._host, self._port,
                                                reuse_address=self._reuse_address,
                                                backlog=BACKLOG)
        if self._server.sockets:
            self._port = int(self._server.sockets[0].getsockname()[1])


class HttpBindError(ConfigError):
    """The HTTP server cannot bind its address (reported like a config problem)."""
