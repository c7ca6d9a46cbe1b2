"""Proxies in front of the trust-auth test PostgreSQL server: one that asks for a password, one
that can be cut (an outage) and restored.

The test server (tests/pg.py) trusts every client, so it never checks that a process sends the
password of ``store.password_env``. :class:`PasswordProxy` listens on a free local port, answers
the client's startup with a cleartext password request, refuses a wrong or missing password
(``28P01``, as a real server) and otherwise relays the session to the real server, which then
accepts it without asking. It runs on its own event loop in a thread, so synchronous readers and
subprocesses can use it alike. :class:`CutProxy` relays everything until it is cut: every
session is aborted and new connections are refused (a server that died) until it is restored.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SSL_REQUEST = 80877103


class PasswordProxy:
    """Relay to ``upstream`` (host, port) only clients that send ``password``."""

    def __init__(self, upstream: tuple[str, int], password: str) -> None:
        """Create the (stopped) proxy."""
        self.upstream = upstream
        self.password = password
        self.port = 0
        self.accepted = 0
        self.refused: list[str] = []
        """The passwords (possibly empty) of the refused clients."""
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._client, "127.0.0.1", 0), self._loop)
        self._server = fut.result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        """Close the listener and the loop."""
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            startup = await self._startup(reader, writer)
            writer.write(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
            await writer.drain()
            kind = await reader.readexactly(1)
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            body = await reader.readexactly(length - 4)
            given = body.rstrip(b"\0").decode() if kind == b"p" else ""
            if given != self.password:
                self.refused.append(given)
                writer.write(_error("28P01", "password authentication failed for user"))
                await writer.drain()
                return
            self.accepted += 1
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            up_writer.write(startup)
            await asyncio.gather(_pipe(up_reader, writer), _pipe(reader, up_writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _startup(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        """Return the client's startup message (declining SSL first if asked)."""
        while True:
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            body = await reader.readexactly(length - 4)
            if struct.unpack("!i", body[:4])[0] == SSL_REQUEST:
                writer.write(b"N")
                await writer.drain()
                continue
            return struct.pack("!i", length) + body


def _error(code: str, message: str) -> bytes:
    fields = b"SFATAL\0" + b"C" + code.encode() + b"\0" + b"M" + message.encode() + b"\0\0"
    return b"E" + struct.pack("!i", len(fields) + 4) + fields


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.close()


@contextlib.contextmanager
def password_proxy(url: str, password: str) -> Iterator[tuple[str, PasswordProxy]]:
    """Yield ``url`` rewritten to go through a password-checking proxy, and the proxy."""
    parts = urlsplit(url)
    proxy = PasswordProxy((parts.hostname or "127.0.0.1", parts.port or 5432), password)
    proxy.start()
    user = f"{parts.username}@" if parts.username else ""
    try:
        yield urlunsplit((parts.scheme, f"{user}127.0.0.1:{proxy.port}", parts.path, "",
                          "")), proxy
    finally:
        proxy.stop()


class CutProxy:
    """Relay TCP to ``upstream`` until :meth:`cut`, which drops every session and refuses new
    ones (as a PostgreSQL server that died); :meth:`restore` listens again on the same port.

    The shared test server is never stopped: only the daemon's way to it is cut.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        """Create the (stopped) proxy."""
        self.upstream = upstream
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._sessions: set[asyncio.WriteTransport] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        self._thread.start()
        self._call(self._listen())

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def cut(self) -> None:
        """Stop listening (connections are refused) and abort every relayed session."""
        async def cut() -> None:
            if self._server is not None:
                self._server.close()
                self._server = None
            for transport in list(self._sessions):
                transport.abort()
            self._sessions.clear()

        self._call(cut())

    def restore(self) -> None:
        """Listen again on the same port."""
        self._call(self._listen())

    def stop(self) -> None:
        """Cut everything, end the relays and stop the loop."""
        self.cut()

        async def settle() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self._call(settle())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer.transport, up_writer.transport)
        for t in pair:
            assert isinstance(t, asyncio.WriteTransport)
            self._sessions.add(t)
        try:
            await asyncio.gather(_pipe(up_reader, writer), _pipe(reader, up_writer))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # ended (a cancelled client task trips asyncio 3.11's stream callback)
        finally:
            for t in pair:
                self._sessions.discard(t)  # type: ignore[arg-type]


@contextlib.contextmanager
def cut_proxy(url: str) -> Iterator[tuple[str, CutProxy]]:
    """Yield ``url`` rewritten to go through a :class:`CutProxy`, and the proxy."""
    parts = urlsplit(url)
    proxy = CutProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    proxy.start()
    user = f"{parts.username}@" if parts.username else ""
    try:
        yield urlunsplit((parts.scheme, f"{user}127.0.0.1:{proxy.port}", parts.path, "",
                          "")), proxy
    finally:
        proxy.stop()
