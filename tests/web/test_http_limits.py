"""HTTP hardening: malformed requests get 4xx with one line, slow clients and floods are bounded."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import daemon.store.reports as leaderboard_mod
from daemon.config.settings import ConfigError, parse_config
from tests.web.test_alerts import T0, buy, make_config, tick
from tests.web.test_metrics_http import Daemon, start_daemon, stop_daemon

DEEP = "[" * 5000 + "]" * 5000


async def raw(d: Daemon, data: bytes, *, read: bool = True) -> bytes:
    """Send ``data`` on a fresh connection and return everything the server answers."""
    assert d.obs.server is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", d.obs.server.port)
    writer.write(data)
    await writer.drain()
    out = await asyncio.wait_for(reader.read(), 30) if read else b""
    writer.close()
    return out


def post(path: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


RESUME = "/api/agents/ew/resume"
#: (request, expected status, a fragment of the one-line reason)
MALFORMED: list[tuple[bytes, int, str]] = [
    (post(RESUME, b'{"market": ["equity"]}'), 400, "market must be a string, got a list"),
    (post(RESUME, b'{"market": {"a": 1}}'), 400, "market must be a string, got an object"),
    (post(RESUME, b'{"market": ' + DEEP.encode() + b"}"), 400, "nested too deeply"),
    (post(RESUME, DEEP.encode()), 400, "nested too deeply"),
    (post(RESUME, b'["equity"]'), 400, "must be a JSON object, got a list"),
    (post(RESUME, b'"equity"'), 400, "must be a JSON object, got a string"),
    (post(RESUME, b"{not json"), 400, "invalid JSON body"),
    (post(RESUME, b'{"market": "\xff"}'), 400, "not UTF-8"),
    (post(RESUME, b'{"market": 7}'), 400, "got a number"),
    (post(RESUME, b'{"by": ["x"]}'), 400, "by must be a string"),
    (post(RESUME, b'{"markte": "equity"}'), 400, "unknown key 'markte'"),
    (post(RESUME, b'{"market": "mars"}'), 400, "unknown market 'mars'"),
    (post(RESUME, b'{"market": NaN}'), 400, "got a number"),
    (post(RESUME, b" " * 20000), 413, "larger than"),
    (post(RESUME, b"{}", "text/plain"), 415, "Content-Type"),
    (b"GET /api/agents/ew?limit=abc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400,
     "limit must be a positive integer"),
    (b"GET /api/agents/ew?limit=1e999 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400,
     "limit must be a positive integer"),
    (b"GET /api/agents/ew?limit=%ff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400,
     "limit must be a positive integer"),
    (b"GET /api/agents/ew?kind=x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400,
     "kind must be"),
    (b"GET /api/agents/ew?lmit=5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400,
     "unknown query parameter 'lmit'"),
    (b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, "not found"),
    (b"DELETE /api/agents HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405,
     "method not allowed"),
]


@pytest.fixture
async def daemon(tmp_path: Path) -> Any:
    d = await start_daemon(tmp_path, make_config())
    yield d
    await stop_daemon(d)


@pytest.mark.parametrize(("request_bytes", "status", "reason"), MALFORMED,
                         ids=[f"{i}-{m[1]}" for i, m in enumerate(MALFORMED)])
async def test_malformed_requests_get_4xx_with_one_line(daemon: Daemon, request_bytes: bytes,
                                                        status: int, reason: str) -> None:
    answer = await raw(daemon, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ")[1] == str(status).encode(), answer[:300]
    error = json.loads(body)["error"]
    assert reason in error and "\n" not in error, error
    # The daemon keeps serving.
    assert (await daemon.get("/healthz"))[0] == 200


@pytest.mark.parametrize("request_bytes", [
    b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n",
    b"POST /api/agents/ew/resume HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET /healthz HTTP/1.1 extra\r\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n",
], ids=["long-header", "bad-content-length", "bad-request-line", "bad-header"])
async def test_malformed_http_is_answered_400_with_one_line(daemon: Daemon,
                                                            request_bytes: bytes) -> None:
    answer = await raw(daemon, request_bytes)
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.0 400")), answer[:200]
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error and "\n" not in error, error
    assert (await daemon.get("/healthz"))[0] == 200


async def test_slow_clients_are_dropped_after_the_header_timeout(tmp_path: Path) -> None:
    d = await start_daemon(tmp_path, make_config(header_timeout="0.3s", body_timeout=0.3))
    try:
        # Headers never finished: the server closes the connection (read() returns at EOF).
        answer = await raw(d, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert answer == b""
        # A connection that sends nothing at all.
        assert await raw(d, b"") == b""
        # Headers sent, body never completed: 408 with one line, and the connection closes
        # after body_timeout more of waiting for the rest (not aiohttp's fixed 10 s).
        t0 = time.monotonic()
        answer = await raw(d, (f"POST {RESUME} HTTP/1.1\r\nHost: x\r\nContent-Type: "
                               "application/json\r\nContent-Length: 100\r\n\r\n{").encode())
        assert time.monotonic() - t0 < 9.0  # not aiohttp's fixed 10 s
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"not received within 0.3s" in answer
        assert (await d.get("/healthz"))[0] == 200
    finally:
        await stop_daemon(d)


async def test_connections_beyond_the_limit_get_503(tmp_path: Path) -> None:
    d = await start_daemon(tmp_path, make_config(max_connections=3, header_timeout="2s"))
    assert d.obs.server is not None
    idle = []
    for _ in range(3):  # kept alive after a request: each holds a connection
        reader, writer = await asyncio.open_connection("127.0.0.1", d.obs.server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        idle.append((reader, writer))
    try:
        answer = await raw(d, b"GET /api/leaderboard HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"too many connections" in answer
        # The liveness probe still answers beyond the limit: a busy daemon is not a dead one.
        answer = await raw(d, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["healthy"] is True
        # A connection beyond the limit that sends nothing is closed after the header timeout.
        assert await raw(d, b"") == b""
    finally:
        for _, w in idle:
            w.close()
    for _ in range(50):  # the idle connections are released by the server
        await asyncio.sleep(0.05)
        if len(d.obs.server._runner.server.connections) == 0:  # type: ignore[union-attr]
            break
    assert (await d.get("/healthz"))[0] == 200
    await stop_daemon(d)


async def test_many_leaderboard_requests_compute_it_once_per_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = leaderboard_mod.leaderboard

    def counting(path: Any, **kw: Any) -> dict[str, Any]:
        if sys._getframe(1).f_code.co_name != "live_figures":  # not the /metrics figures
            calls.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(leaderboard_mod, "leaderboard", counting)
    d = await start_daemon(tmp_path)
    try:
        eng = d.engine
        await tick(eng, T0 + 60, 1.0)
        await buy(eng, T0 + 61)
        await eng.mark("equity", T0 + 62)
        answers = await asyncio.gather(*(d.get("/api/leaderboard") for _ in range(60)))
        assert all(s == 200 for s, _ in answers)
        assert {r["agent"] for r in answers[0][1]["rows"]} == {"ew", "bh", "cash"}
        first = len(calls)
        assert first <= 2  # the start-up warm-up and at most one for the burst
        for _ in range(20):  # nothing new committed: served from the cache
            assert (await d.get("/api/leaderboard"))[0] == 200
        assert len(calls) == first
        await tick(eng, T0 + 120, 1.05)
        await eng.mark("equity", T0 + 122)  # a new mark: one recomputation for the next burst
        before = {k: v for k, v in answers[0][1].items() if k != "live"}
        answers = await asyncio.gather(*(d.get("/api/leaderboard") for _ in range(60)))
        assert len(calls) == first + 1
        assert {k: v for k, v in answers[-1][1].items() if k != "live"} != before
        assert (await d.get("/healthz"))[0] == 200
    finally:
        await stop_daemon(d)


def test_http_limits_are_validated() -> None:
    for bad in ({"header_timeout": 0}, {"body_timeout": "soon"}, {"max_connections": 0},
                {"max_body": -1}, {"max_queries": 0}):
        with pytest.raises(ConfigError):
            parse_config({"http": bad})
    assert parse_config({"http": {"header_timeout": "1m"}}).http.header_timeout == 60.0
