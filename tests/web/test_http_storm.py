"""HTTP under a reconnect storm (issue 28, point 4).

Three hundred page clients reconnect their event stream over and over (a stream that is served
is held a moment and dropped, like a page reloaded), while API clients and a liveness probe keep
asking. Every answer is a whole HTTP answer: 200, or 503 with a JSON body, never a connection
reset or an empty read; at least 95 % of the API requests are served; ``/healthz`` always
answers 200. Refused streams are answered before they take a connection, so they never shed the
API.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from tests.web.test_alerts import make_config
from tests.web.test_metrics_http import start_daemon, stop_daemon

PAGES = 300
RECONNECTS = 4
API_CLIENTS = 12
#: Hang guard of the whole storm (never reached unless something hangs).
HANG = 180.0


async def _ask(port: int, path: str, *, hold: float = 0.0) -> tuple[str, bytes]:
    """Send one GET on a fresh connection; return its status (or how it failed) and body."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        return f"connect failed: {exc!r}", b""
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1].decode()
        if b"text/event-stream" in head:
            await reader.readuntil(b"event: hello")  # served: hold it a moment, then drop
            await asyncio.sleep(hold)
            return status, b""
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        return status, await reader.readexactly(length)
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        return f"reset: {exc!r}", b""
    finally:
        writer.close()


async def test_a_reconnect_storm_gets_200_or_503_never_a_reset(tmp_path: Path) -> None:
    d = await start_daemon(tmp_path, make_config())
    assert d.obs.server is not None
    port = d.obs.server.port
    pages: Counter[str] = Counter()
    api: Counter[str] = Counter()
    health: Counter[str] = Counter()
    bodies: list[bytes] = []
    storming = True

    async def page() -> None:
        for _ in range(RECONNECTS):
            status, body = await _ask(port, "/api/events", hold=0.05)
            pages[status] += 1
            if status == "503":
                bodies.append(body)
            await asyncio.sleep(0)

    async def api_client(path: str, tally: Counter[str]) -> None:
        while storming:
            status, body = await _ask(port, path)
            tally[status] += 1
            if status == "503":
                bodies.append(body)

    try:
        async with asyncio.timeout(HANG):
            askers = [asyncio.create_task(api_client(p, api))
                      for p in ("/api/status", "/api/agents") * (API_CLIENTS // 2)]
            askers.append(asyncio.create_task(api_client("/healthz", health)))
            await asyncio.gather(*(page() for _ in range(PAGES)))
            storming = False
            await asyncio.gather(*askers)
    finally:
        await stop_daemon(d)
    assert set(pages) <= {"200", "503"}, pages
    assert set(api) <= {"200", "503"}, api
    assert set(health) == {"200"}, health
    assert pages["200"] > 0 and pages["503"] > 0, pages  # a storm: some streams refused
    assert api["200"] >= 0.95 * sum(api.values()), api
    for body in bodies:
        assert json.loads(body)["error"], body


async def test_a_refused_stream_holds_no_connection_even_if_its_client_stays(
        tmp_path: Path) -> None:
    d = await start_daemon(tmp_path, make_config(max_connections=8))
    assert d.obs.server is not None and d.obs.server._runner is not None
    port = d.obs.server.port
    served = d.obs.server._runner.server
    assert served is not None
    limit = d.obs.server.page.events.limit
    opened: list[asyncio.StreamWriter] = []
    try:
        for _ in range(limit):  # every stream the API may spare
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            opened.append(writer)
            writer.write(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
            await reader.readuntil(b"event: hello")
        for _ in range(3 * limit):  # refused streams whose clients keep their sockets open
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            opened.append(writer)
            writer.write(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
            assert head.startswith(b"HTTP/1.1 503"), head
            assert "too many event streams" in json.loads(body)["error"]
            assert len(served.connections) == limit  # the refused one holds none
            assert await reader.read() == b""  # the server ended it, though the client stays
        status, _ = await _ask(port, "/api/agents")
        assert status == "200"
    finally:
        for writer in opened:
            writer.close()
        await stop_daemon(d)
