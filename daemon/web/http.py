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

Every error answers JSON ``{"error": "<one line>"}``: 503 while the store cannot be read (its
server gone: one log line, counted as fault ``http_store``), 400 for a malformed request (bad JSON,
wrong types, unknown keys, bad query values), 404/405 for an unknown route or method, 408 when a
body is not sent within ``[http] body_timeout``, 413 beyond ``[http] max_body``, 415 without
JSON. A client gets ``[http] header_timeout`` to send its headers (and as keep-alive idle time)
before its connection is closed; beyond ``[http] max_connections`` open connections a new one is
answered 503 and closed, except ``GET /healthz``, still answered there (a busy daemon is alive);
an event stream beyond its share is answered 503 before it takes a connection; every refusal is
a 503 with a JSON body, never a reset; at most ``[http] max_queries`` API requests read the
database at once.

This module owns the application, its routes, middleware and lifecycle; the connection-level
plumbing (bounded site, one-line protocol errors, busy answers) is :mod:`daemon.web.server`, the
``/api/agents`` handlers :mod:`daemon.web.agent_api`, the loop's heartbeat
:mod:`daemon.web.loop_lag`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from daemon.alerts.rules import market_open, source_market, state_name
from daemon.config.runtime import HttpConfig
from daemon.core.faults import one_line, report_fault
from daemon.store.dbfile import StoreOpenError
from daemon.web.agent_api import AgentApi
from daemon.web.board_cache import BoardCache
from daemon.web.json import BadRequest
from daemon.web.json import dumps as _dumps
from daemon.web.json import json_response as _json
from daemon.web.metrics import portfolio_rows
from daemon.web.page import Page
from daemon.web.server import PROTOCOL_LOG, BoundedSite, HttpBindError

if TYPE_CHECKING:
    from daemon.alerts.rules import AlertMonitor
    from daemon.engine.engine import Engine
    from daemon.web.loop_lag import LoopLagMonitor
    from daemon.web.metrics import Metrics, PerformanceCache

log = structlog.get_logger(__name__)

#: How long /readyz waits for the store write probe.
PROBE_TIMEOUT = 2.0


class HttpServer(AgentApi):
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
        except (sqlite3.Error, StoreOpenError) as exc:  # the store went away (PgError...)
            report_fault(log, "http_store", "http request could not read the store", exc,
                         path=request.path)
            self._inc(name, 503)
            resp = _json({"error": f"store unavailable, retry shortly: {one_line(exc)}"}, 503)
            resp.force_close()
            return resp
        except Exception:
            log.exception("http handler failed", path=request.path)
            self._inc(name, 500)
            return _json({"error": "internal error"}, 500)
        self._inc(name, resp.status)
        if resp.status == 503 and not resp.prepared:
            resp.force_close()  # a refusal frees its connection at once (a storm retries)
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
                               logger=PROTOCOL_LOG)
        await runner.setup()
        site = BoundedSite(runner, self.host, self.port,
                           max_connections=self.settings.max_connections,
                           health=self.health, header_timeout=self.settings.header_timeout,
                           streams=self._stream_refusal)
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

    def _stream_refusal(self) -> str | None:
        """Return why a new event stream would be refused now (None: it would be served)."""
        events = self.page.events
        if events.clients >= events.limit:
            return f"too many event streams (at most {events.limit}), retry shortly"
        return None

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

    async def handle_alphaforge(self, request: web.Request) -> web.Response:
        """Return AlphaForgeBench's figures per strategy version and the latest instability."""
        from agents.alphaforgebench.report import load_async

        return _json(await load_async(self.engine.store.fetchall))


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
