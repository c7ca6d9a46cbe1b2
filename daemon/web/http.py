"""The daemon's HTTP server (aiohttp): metrics, health, readiness, a read-only JSON API, resume.

Routes (bound to 127.0.0.1 by default, ``[http] host/port``):

- ``GET /metrics``: Prometheus exposition of the daemon's own registry;
- ``GET /healthz``: 200 while the event loop ticks on time (a background task measures its lag),
  503 when it lags or stopped ticking;
- ``GET /readyz``: 200 when the store is writable (a probe row and the buffered market events
  committed under the store's write lock, 1 MiB free on its disk) and every feed is live or its
  market closed; 503 with the reasons in JSON;
- ``GET /api/leaderboard``: the leaderboard of the live database plus every agent's live
  figures; served from a :class:`~daemon.web.board_cache.BoardCache` recomputed in a thread only
  after new marks or rounds, one computation at a time;
- ``GET /api/capitalbench``: CapitalBench rounds, history, comparison sets, consistency;
- ``GET /api/agents``: the running agents with their live figures;
- ``GET /api/agents/{id}``: equity curve, allocations (fills), recent decisions and alerts;
- ``GET /``, ``GET /agent/{id}``, ``GET /static/{name}``, ``GET /api/events`` (server-sent
  events), ``GET /api/status``, ``GET /api/agents/{id}/decisions``: the live page and its data
  (:mod:`daemon.web.page`);
- ``POST /api/agents/{id}/resume`` (operator action; JSON body ``{}`` or ``{"market": ...}``,
  ``Content-Type: application/json`` required): resume an agent halted after a drawdown breach.

Every error answers JSON ``{"error": "<one line>"}``: 400 for a malformed request (bad JSON,
wrong types, unknown keys, bad query values), 404/405 for an unknown route or method, 408 when a
body is not sent within ``[http] body_timeout``, 413 beyond ``[http] max_body``, 415 without
JSON. A client gets ``[http] header_timeout`` to send its headers (and as keep-alive idle time)
before its connection is closed; beyond ``[http] max_connections`` open connections a new one is
answered 503 and closed, except ``GET /healthz``, still answered there (a busy daemon is alive);
at most ``[http] max_queries`` API requests read the database at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from daemon.alerts.rules import market_open, source_market, state_name
from daemon.config.settings import ConfigError, HttpConfig
from daemon.core.sparse_rows import fill_map
from daemon.web.board_cache import BoardCache
from daemon.web.json import BadRequest
from daemon.web.json import dumps as _dumps
from daemon.web.json import json_response as _json
from daemon.web.metrics import portfolio_rows
from daemon.web.page import Page

if TYPE_CHECKING:
    from daemon.alerts.rules import AlertMonitor
    from daemon.engine.engine import Engine
    from daemon.web.metrics import Metrics, PerformanceCache

log = structlog.get_logger(__name__)

#: How long /readyz waits for the store write probe.
PROBE_TIMEOUT = 2.0
MAX_ROWS = 5000


#: The keys a resume body may carry.
RESUME_KEYS = frozenset({"market", "by"})

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


_PROTOCOL_LOG = _ProtocolLogger("aiohttp.server.paperarena")
_PROTOCOL_LOG.parent = logging.getLogger("aiohttp.server")  # debug lines follow its config


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


class LoopLagMonitor:
    """Measure how late a periodic heartbeat wakes up on the event loop."""

    def __init__(self, *, interval: float = 0.5, unhealthy_after: float = 2.0,
                 on_lag: Callable[[float, float], None] | None = None) -> None:
        """Tick every ``interval`` s; a lag or silence beyond ``unhealthy_after`` s is unhealthy."""
        self.interval = interval
        self.unhealthy_after = unhealthy_after
        self.lag = 0.0
        self.last_tick: float | None = None
        self._recent: deque[float] = deque(maxlen=max(1, int(60 / interval)))
        self._on_lag = on_lag
        self._task: asyncio.Task[None] | None = None

    @property
    def max_lag(self) -> float:
        """Return the largest lag over the last minute."""
        return max(self._recent, default=0.0)

    def start(self) -> None:
        """Start the heartbeat task."""
        if self._task is None:
            self.last_tick = time.monotonic()
            self._task = asyncio.create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        """Stop the heartbeat task."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(self.interval)
            now = time.monotonic()
            self.record(max(0.0, now - t0 - self.interval), now)

    def record(self, lag: float, now: float) -> None:
        """Record one heartbeat that woke ``lag`` s late at monotonic ``now``."""
        self.lag = lag
        self.last_tick = now
        self._recent.append(lag)
        if self._on_lag is not None:
            self._on_lag(lag, self.max_lag)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Return (healthy, details)."""
        now = time.monotonic()
        since = None if self.last_tick is None else now - self.last_tick
        problems = []
        if self._task is None or self._task.done():
            problems.append("loop monitor is not running")
        if since is not None and since > self.interval + self.unhealthy_after:
            problems.append(f"no loop heartbeat for {since:.1f}s")
        if self.lag > self.unhealthy_after:
            problems.append(f"event loop lagging by {self.lag:.2f}s")
        return not problems, {"loop_lag_s": round(self.lag, 6),
                              "loop_lag_max_1m_s": round(self.max_lag, 6),
                              "since_last_tick_s": None if since is None else round(since, 3),
                              "problems": problems}


class HttpServer:
    """Serve metrics, health, readiness, the JSON API and the resume action."""

    def __init__(self, engine: Engine, *, registry: CollectorRegistry, host: str = "127.0.0.1",
                 port: int = 9464, lag: LoopLagMonitor | None = None,
                 monitor: AlertMonitor | None = None, performance: PerformanceCache | None = None,
                 metrics: Metrics | None = None,
                 feeds: Callable[[], list[Any]] = list,
                 settings: HttpConfig | None = None) -> None:
        """Prepare the server; :meth:`start` binds it (limits and timeouts from ``settings``)."""
        self.settings = settings if settings is not None else HttpConfig()
        self.engine = engine
        self.registry = registry
        self.host = host
        self.port = port
        self.lag = lag
        self.monitor = monitor
        self.performance = performance
        self.metrics = metrics
        self.feeds = feeds
        self._runner: web.AppRunner | None = None
        self._probe: asyncio.Future[None] | None = None
        self._queries = asyncio.Semaphore(self.settings.max_queries)
        path = engine.store.path
        self.board_cache = None if path == ":memory:" else BoardCache(path, serialize=_dumps)
        self.page = Page(self)  # the live page at / and its event stream (daemon/web/page.py)
        self.app = self._build_app()

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._count], client_max_size=self.settings.max_body)
        app.router.add_get("/metrics", self.handle_metrics)
        app.router.add_get("/healthz", self.handle_healthz)
        app.router.add_get("/readyz", self.handle_readyz)
        app.router.add_get("/api/leaderboard", self.handle_leaderboard)
        app.router.add_get("/api/capitalbench", self.handle_capitalbench)
        app.router.add_get("/api/agents", self.handle_agents)
        app.router.add_get("/api/agents/{id}", self.handle_agent)
        app.router.add_get("/api/alphaforge", self.handle_alphaforge)
        app.router.add_post("/api/agents/{id}/resume", self.handle_resume)
        self.page.add_routes(app)
        return app

    @web.middleware
    async def _count(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> web.StreamResponse:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "other"
        try:
            resp = await handler(request)
        except BadRequest as exc:
            self._inc(name, exc.status)
            return _json({"error": exc.reason}, exc.status)
        except web.HTTPException as exc:
            self._inc(name, exc.status)
            if exc.status < 400:
                raise
            reason = exc.text if exc.text and exc.text != f"{exc.status}: {exc.reason}" else (
                exc.reason.lower())
            resp = _json({"error": " ".join(str(reason).split())}, exc.status)
            resp.headers.extend((k, v) for k, v in exc.headers.items() if k == "Allow")
            return resp
        except Exception:
            log.exception("http handler failed", path=request.path)
            self._inc(name, 500)
            return _json({"error": "internal error"}, 500)
        self._inc(name, resp.status)
        return resp

    def _inc(self, handler: str, code: int) -> None:
        if self.metrics is not None:
            self.metrics.http_requests.labels(handler, str(code)).inc()

    async def start(self) -> None:
        """Bind and serve; raise :class:`HttpBindError` (one line) if the address is taken."""
        # lingering_time: after answering a request whose body was not read (408, 413), the
        # rest of the body is read and dropped for at most body_timeout (aiohttp's own 10 s
        # otherwise, whatever the configured limit) before the connection closes.
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                               keepalive_timeout=self.settings.header_timeout,
                               lingering_time=self.settings.body_timeout,
                               logger=_PROTOCOL_LOG)
        await runner.setup()
        site = BoundedSite(runner, self.host, self.port,
                           max_connections=self.settings.max_connections,
                           health=self.health, header_timeout=self.settings.header_timeout)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise HttpBindError("config", [
                f"http: cannot listen on {self.host}:{self.port}: {exc.strerror or exc} "
                "(another daemon? change [http] port or set enabled = false)"]) from None
        self._runner = runner
        self.page.start()
        for addr in runner.addresses:
            if isinstance(addr, tuple) and len(addr) >= 2:
                self.port = int(addr[1])
                break
        if self.board_cache is not None:
            self.board_cache.refresh()
        if not _is_loopback(self.host):
            log.warning("http server reachable beyond this host: the resume action is exposed",
                        host=self.host, port=self.port)
        log.info("http server listening", host=self.host, port=self.port)

    async def stop(self) -> None:
        """Stop serving."""
        await self.page.close()  # end the event streams first: cleanup waits for handlers
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.board_cache is not None:
            await self.board_cache.close()

    # -- handlers -----------------------------------------------------------------------------
    async def handle_metrics(self, request: web.Request) -> web.Response:
        """Serve the Prometheus exposition (OpenMetrics when asked)."""
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(self.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    def health(self) -> tuple[int, dict[str, Any]]:
        """Return the liveness answer: whether the event loop is responsive."""
        if self.lag is None:
            return 200, {"healthy": True}
        ok, details = self.lag.health()
        return (200 if ok else 503), {"healthy": ok, **details}

    async def handle_healthz(self, request: web.Request) -> web.Response:
        """Report whether the event loop is responsive."""
        status, body = self.health()
        return _json(body, status)

    async def handle_readyz(self, request: web.Request) -> web.Response:
        """Report whether the store is writable and every feed live or its market closed."""
        problems: list[str] = []
        store_problem = await self.probe_store()
        if store_problem:
            problems.append(store_problem)
        now = self.engine.clock.now()
        feeds = {}
        for src in self.feeds():
            name = str(getattr(src, "name", "?"))
            st = state_name(src)
            market = source_market(src)
            is_open = market_open(market, now)
            ok = st == "live" or not is_open
            feeds[name] = {"state": st, "market": market, "market_open": is_open, "ok": ok}
            if not ok:
                problems.append(f"feed {name} is {st} while {market or 'its market'} is open")
        ready = not problems
        return _json({"ready": ready, "store": store_problem or "ok", "feeds": feeds,
                      "problems": problems}, 200 if ready else 503)

    async def probe_store(self) -> str | None:
        """Return why the store is not writable, or None (one probe in flight at most)."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._write_probe())
        try:
            await asyncio.wait_for(asyncio.shield(self._probe), PROBE_TIMEOUT)
        except TimeoutError:
            return f"store write probe took longer than {PROBE_TIMEOUT:g}s"
        except Exception as exc:
            return f"store not writable: {exc}"
        return None

    async def _write_probe(self) -> None:
        await self.engine.store.probe_writable()

    async def handle_leaderboard(self, request: web.Request) -> web.Response:
        """Return the leaderboard of the live database plus live figures."""
        live = [asdict(r) for r in portfolio_rows(self.engine, self.monitor)]
        if self.board_cache is None:
            return _json({"error": "in-memory store: no leaderboard", "live": live}, 503)
        try:
            board = await self.board_cache.get()
        except FileNotFoundError as exc:
            return _json({"error": str(exc), "live": live}, 503)
        text = self.board_cache.text
        if text is None or not text.startswith("{") or text == "{}" or "live" in board:
            return _json({**board, "live": live})
        # The board was serialised in the worker thread: splice the live figures in.
        return web.Response(text=f'{text[:-1]},"live":{_dumps(live)}}}',
                            content_type="application/json")

    async def handle_capitalbench(self, request: web.Request) -> web.Response:
        """Return the CapitalBench rounds, history, comparison sets and consistency."""
        if self.board_cache is None:
            return _json({"error": "in-memory store: no CapitalBench rounds"}, 503)
        try:
            board = await self.board_cache.get()
        except FileNotFoundError as exc:
            return _json({"error": str(exc)}, 503)
        empty: dict[str, Any] = {"rounds": [], "history": {}, "comparison_sets": {},
                                 "consistency": {}}
        return _json(board.get("capitalbench") or empty)

    async def handle_agents(self, request: web.Request) -> web.Response:
        """Return every running agent with its live figures."""
        rows = portfolio_rows(self.engine, self.monitor)
        agents: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            agents.setdefault(r.agent, []).append(asdict(r))
        return _json({"agents": agents})

    async def handle_alphaforge(self, request: web.Request) -> web.Response:
        """Return AlphaForgeBench's figures per strategy version and the latest instability."""
        from agents.alphaforgebench.report import load_async

        return _json(await load_async(self.engine.store.fetchall))

    def _known(self, agent: str) -> bool:
        return any(agent in slots for slots in self.engine.slots.values()) or any(
            a.id == agent for a in self.engine.config.agents)

    async def _tables_of(self, agent: str) -> Callable[[str], str] | None:
        """Return how to name the tables holding ``agent``'s rows, None for an unknown agent:
        this process's own, or on a shared store those of the scope owning the agent (the
        leaderboard of any process lists every agent, and its page links to each)."""
        if self._known(agent):
            return _own_table
        owner = getattr(self.engine.store.db, "owner_schema", None)
        schema = None if owner is None else await owner(agent)
        if schema is None:
            return None
        return lambda table: f'"{schema}".{table}'

    async def handle_agent(self, request: web.Request) -> web.Response:
        """Return one agent's equity curve, allocations, recent decisions and alerts."""
        agent = request.match_info["id"]
        tables = await self._tables_of(agent)
        if tables is None:
            return _json({"error": f"unknown agent {agent!r}"}, 404)
        unknown = sorted(set(request.query) - {"limit", "kind"})
        if unknown:
            raise BadRequest(f"unknown query parameter {unknown[0]!r} (use limit, kind)")
        raw = request.query.get("limit", "500")
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
            raise BadRequest(f"limit must be a positive integer, got {raw[:40]!r}")
        limit = min(MAX_ROWS, max(1, int(raw)))
        kind = request.query.get("kind", "all")
        if kind not in ("all", "daily", "decision"):
            raise BadRequest("kind must be all, daily or decision")
        async with self._queries:
            return await self._agent(agent, limit, kind, tables)

    async def _agent(self, agent: str, limit: int, kind: str,
                     t: Callable[[str], str] | None = None) -> web.Response:
        t = t or _own_table
        store = self.engine.store
        kind_sql, params = ("", (agent, limit)) if kind == "all" else (
            " AND kind=?", (agent, kind, limit))
        equity = await store.fetchall(
            f"SELECT market, ts, kind, value, cash FROM {t('equity')} WHERE agent=?" + kind_sql +
            " ORDER BY ts DESC LIMIT ?", params)
        fills = await store.fetchall(
            "SELECT f.market, f.scheduled_ts, f.ts, f.weights_json, f.traded_value, f.cost,"
            f" f.value_after, s.assets_json FROM {t('fills')} f LEFT JOIN {t('asset_sets')} s"
            " ON s.sha256 = f.assets_sha256 WHERE f.agent=? ORDER BY f.scheduled_ts DESC"
            " LIMIT ?", (agent, limit))
        decisions = await store.fetchall(
            "SELECT d.market, d.scheduled_ts, d.decided_ts, d.outcome, d.reason,"
            f" d.allocation_json, d.attempts, d.duration_s, s.assets_json FROM {t('decisions')} d"
            f" LEFT JOIN {t('observations')} o ON o.sha256 = d.observation_sha256"
            f" LEFT JOIN {t('asset_sets')} s ON s.sha256 = o.assets_sha256 WHERE d.agent=?"
            " ORDER BY d.scheduled_ts DESC LIMIT ?", (agent, min(limit, 100)))
        alerts = await store.fetchall(
            f"SELECT ts, kind, severity, market, value, limit_value, message FROM {t('alerts')}"
            " WHERE agent=? ORDER BY id DESC LIMIT 50", (agent,))
        llm = await store.fetchall(
            "SELECT market, COUNT(*), COALESCE(SUM(tokens_in),0), COALESCE(SUM(tokens_out),0),"
            f" COALESCE(SUM(cost_usd),0) FROM {t('llm_calls')} WHERE agent=? GROUP BY market",
            (agent,))
        current = []
        for r in portfolio_rows(self.engine, self.monitor):
            if r.agent != agent:
                continue
            item = asdict(r)
            item["weights"] = self.engine.books[r.market].weights(agent)
            if self.performance is not None:
                item["performance"] = self.performance.summary(r.market, agent).to_dict()
            current.append(item)
        return _json({
            "agent": agent,
            "current": current,
            "equity": [{"market": m, "ts": ts, "kind": k, "value": v, "cash": c}
                       for m, ts, k, v, c in reversed(equity)],
            "allocations": [{"market": m, "scheduled_ts": st, "ts": ts,
                             "weights": fill_map(w, a), "traded_value": tv, "cost": cost,
                             "value_after": va}
                            for m, st, ts, w, tv, cost, va, a in reversed(fills)],
            "decisions": [{"market": m, "scheduled_ts": st, "decided_ts": dt, "outcome": o,
                           "reason": r, "allocation": fill_map(a, assets) if a else None,
                           "attempts": n, "duration_s": d}
                          for m, st, dt, o, r, a, n, d, assets in decisions],
            "alerts": [{"ts": ts, "kind": k, "severity": s, "market": m, "value": v,
                        "limit": lim, "message": msg}
                       for ts, k, s, m, v, lim, msg in alerts],
            "llm": [{"market": m, "calls": n, "tokens_in": ti, "tokens_out": to,
                     "cost_usd": c} for m, n, ti, to, c in llm],
        })

    async def handle_resume(self, request: web.Request) -> web.Response:
        """Resume an agent halted after a drawdown breach (operator action)."""
        agent = request.match_info["id"]
        if request.content_type != "application/json":
            return _json({"error": "send Content-Type: application/json (body {} or "
                                   "{\"market\": \"equity\"})"}, 415)
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise BadRequest(f"the body must be a JSON object, got {_kind(body)}")
        unknown = sorted(set(body) - RESUME_KEYS)
        if unknown:
            raise BadRequest(f"unknown key {unknown[0][:40]!r} in the body (use market, by)")
        market = body.get("market")
        if market is not None and not isinstance(market, str):
            raise BadRequest(f"market must be a string, got {_kind(market)}")
        if market is not None and market not in self.engine.slots:
            raise BadRequest(f"unknown market {market[:40]!r} (use one of "
                             f"{', '.join(sorted(self.engine.slots))})")
        raw_by = body.get("by")
        if raw_by is not None and not isinstance(raw_by, str):
            raise BadRequest(f"by must be a string, got {_kind(raw_by)}")
        if not any(agent in slots for slots in self.engine.slots.values()):
            return _json({"error": f"unknown agent {agent!r}"}, 404)
        if self.monitor is None:
            return _json({"error": "the alert monitor is not running"}, 503)
        by = " ".join((raw_by or "operator").split())[:64] or "operator"
        resumed = await self.monitor.resume(agent, market, by=by)
        statuses = {m: s[agent].status for m, s in self.engine.slots.items() if agent in s}
        if not resumed:
            return _json({"error": f"agent {agent!r} is not halted", "status": statuses}, 409)
        return _json({"agent": agent, "resumed": resumed, "status": statuses})


    async def _json_body(self, request: web.Request) -> Any:
        """Read the JSON body within ``body_timeout`` (empty body = ``{}``); raise BadRequest."""
        if not request.can_read_body:
            return {}
        try:
            raw = await asyncio.wait_for(request.read(), self.settings.body_timeout)
        except TimeoutError:
            raise BadRequest(f"request body not received within "
                             f"{self.settings.body_timeout:g}s", 408) from None
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body larger than {self.settings.max_body} bytes",
                             413) from None
        if not raw.strip():
            return {}
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadRequest("the body is not UTF-8") from None
        except RecursionError:
            raise BadRequest("the body is nested too deeply") from None
        except ValueError as exc:
            raise BadRequest(f"invalid JSON body: {str(exc).splitlines()[0]}") from None


def _kind(value: Any) -> str:
    """Name a JSON value's type as a user sees it."""
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _own_table(table: str) -> str:
    """Name a table of this process's own store (its scope on a shared store)."""
    return table
