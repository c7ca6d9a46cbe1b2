"""The live leaderboard page: static files, a server-sent event stream, status and audit routes.

Routes added to the daemon's HTTP server (:class:`daemon.web.http.HttpServer`):

- ``GET /`` and ``GET /agent/{id}``: the leaderboard page and one agent's page (plain HTML and
  JavaScript from ``daemon/web/``, no build step); ``GET /static/{name}`` serves the rest of
  that directory (a fixed list of files, nothing else). Every page response carries a
  Content-Security-Policy that allows scripts, styles and requests from the daemon only (no
  inline script), and the scripts insert every text from the API with ``textContent``.
- ``GET /api/events``: a server-sent event stream. The page subscribes once and refetches the
  leaderboard when told something changed; the stream coalesces the bus's decision, fill,
  resolution, alert, source-status and price (mark) events into at most one ``update`` message
  per :data:`MIN_INTERVAL` seconds, so a replay at full speed costs each page one refetch per
  interval, never one per event. A comment line every :data:`KEEPALIVE` seconds keeps proxies
  from closing an idle stream; at most :data:`MAX_CLIENTS` streams are open at once, and never
  more than half of ``[http] max_connections`` (503 beyond).
- ``GET /api/status``: sources (state, market, last data and its age), rounds per market (last
  round, outcome counts including ``missed`` and ``skipped``, ``next_ts``: the next scheduled
  decision after the engine clock's now, from the engine's triggers), agents (live status, halted,
  provisional with its reason when the leaderboard says so), the engine clock, and ``sandbox``:
  the strategy sandbox of this process ("on", "degraded" with the missing layers, or "unused").
- ``GET /api/chart``: every agent's value per market and the benchmark, for the page's combined
  chart (:mod:`daemon.web.chart`; uPlot, vendored with its licence in ``static/vendor/``).
- ``GET /api/agents/{id}/decisions?offset=&limit=``: one page of an agent's decisions, newest
  first, with the full audit trail (reason, the model's ``reasoning`` per step, raw answer, input
  hash, the headlines the agent saw, every model call with tokens, cost and latency) and the
  total count.
- ``GET /api/agents/{id}/positions`` and ``/trades``: open positions and completed trades
  (:mod:`daemon.web.positions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from aiohttp import web

from daemon.alerts.rules import market_open, source_market, state_name
from daemon.web.chart import ChartApi
from daemon.web.decisions import DecisionsApi
from daemon.web.metrics import portfolio_rows
from daemon.web.positions import PositionsApi
from daemon.web.prompts import PromptsApi

if TYPE_CHECKING:
    from daemon.alerts.rules import AlertMonitor
    from daemon.config.runtime import HttpConfig
    from daemon.core.events import Event, PriceEvent
    from daemon.core.price_columns import PriceColumns
    from daemon.engine.engine import Engine
    from daemon.web.board_cache import BoardCache
    from daemon.web.labels import AssetLabels

log = structlog.get_logger(__name__)

#: Directory of the page's files (package data).
WEB_DIR = Path(__file__).with_name("static")
#: Content types of the files the page serves, by suffix (other suffixes are not served).
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                 ".svg": "image/svg+xml", ".txt": "text/plain"}
#: Scripts, styles, images and requests from the daemon only; no inline script, no framing.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: Seconds between two ``update`` messages at most (events in between are coalesced).
MIN_INTERVAL = 1.0
#: Seconds between keep-alive comments on an idle stream.
KEEPALIVE = 15.0
#: Open event streams at most (each holds one of ``[http] max_connections``).
MAX_CLIENTS = 16
#: Recent decisions and fills carried by one ``update`` message at most.
RECENT = 20
#: Bus patterns the stream listens to (prices count as marks).
PATTERNS = ("decision.#", "fill.#", "resolution.#", "alert.#", "status.#")
"""What the page's subscriber takes; prices are only counted, by a tap (``price.#``) that reads a
burst's columns without making an event per price."""
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def next_rounds(engine: Engine, now: float) -> dict[str, float]:
    """Return market -> epoch seconds of its next decision round after ``now``, from its
    ``decide:<market>`` trigger (a fire time at ``now`` itself: the one after it)."""
    out: dict[str, float] = {}
    for job_id, trigger in engine.triggers():
        kind, _, market = job_id.partition(":")
        if kind != "decide":
            continue
        nxt = trigger.get_next_fire_time(None, datetime.fromtimestamp(now, UTC))
        if nxt is not None and nxt.timestamp() <= now:
            nxt = trigger.get_next_fire_time(nxt, nxt)
        if nxt is not None:
            out[market] = nxt.timestamp()
    return out


def _headers() -> dict[str, str]:
    return {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


class PageHost(Protocol):
    """What the page needs of the daemon's HTTP server (:class:`daemon.web.http.HttpServer`)."""

    engine: Engine
    settings: HttpConfig
    board_cache: BoardCache | None
    monitor: AlertMonitor | None
    feeds: Callable[[], list[Any]]
    _queries: asyncio.Semaphore

    async def _tables_of(self, agent: str) -> Callable[[str], str] | None:
        """Return the table namer of ``agent``'s scope (``None``: unknown agent)."""
        ...

    @property
    def asset_labels(self) -> AssetLabels:
        """Return the Polymarket token names (:mod:`daemon.web.labels`)."""
        ...


class LiveEvents:
    """Coalesce bus events into ``update`` messages fanned out to every open stream."""

    def __init__(self, server: PageHost) -> None:
        """Subscribe to the engine's bus (the flusher starts with :meth:`start`)."""
        self.server = server
        self.seq = 0
        self._counts: Counter[str] = Counter()
        self._markets: set[str] = set()
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self._dirty = asyncio.Event()
        self._clients: set[asyncio.Queue[str | None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        bus = server.engine.bus
        bus.subscribe(PATTERNS, self._on_events, name="page-events", batch=True)
        bus.add_tap("price.#", self._on_price, batch=self._on_prices,  # type: ignore[arg-type]
                    columns=self._on_price_columns)

    @property
    def clients(self) -> int:
        """Return the number of open streams."""
        return len(self._clients)

    @property
    def limit(self) -> int:
        """Return how many streams may be open: :data:`MAX_CLIENTS`, at most half the connections.

        The other half of ``[http] max_connections`` stays for the API, metrics and probes.
        """
        return max(1, min(MAX_CLIENTS, self.server.settings.max_connections // 2))

    def start(self) -> None:
        """Start the flusher task."""
        if self._task is None:
            self._task = asyncio.create_task(self._flush_loop(), name="page-events")

    async def close(self) -> None:
        """End every open stream and stop the flusher."""
        self._closed = True
        for q in list(self._clients):
            _offer(q, None)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def poke(self) -> None:
        """Tell every open page to refetch (``paperarena serve``: another process committed)."""
        if not self._closed:
            self._counts["store"] += 1
            self._dirty.set()

    def _count_marks(self, n: int, market: str) -> None:
        if self._closed or not n:
            return
        self._counts["mark"] += n
        self._markets.add(market)
        self._dirty.set()

    def _on_price(self, ev: PriceEvent) -> None:
        self._count_marks(1, ev.market)

    def _on_prices(self, events: list[PriceEvent]) -> None:
        for market in {ev.market for ev in events}:
            self._count_marks(sum(ev.market == market for ev in events), market)

    def _on_price_columns(self, prices: PriceColumns) -> None:
        self._count_marks(len(prices), prices.market)

    def _on_events(self, events: list[Event]) -> None:
        if self._closed:
            return
        for ev in events:
            cls = "mark" if ev.topic_class == "price" else ev.topic_class
            self._counts[cls] += 1
            market = getattr(ev, "market", None)
            if isinstance(market, str) and market:
                self._markets.add(market)
            if cls in ("decision", "fill", "resolution", "alert"):
                self._recent.append(_summary(cls, ev))
        self._dirty.set()

    async def _flush_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self.seq += 1
            msg = {"seq": self.seq, "clock": self.server.engine.clock.now(),
                   "counts": dict(self._counts), "markets": sorted(self._markets),
                   "recent": list(self._recent)}
            self._counts.clear()
            self._markets.clear()
            self._recent.clear()
            text = f"id: {self.seq}\nevent: update\ndata: {_dumps(msg)}\n\n"
            for q in list(self._clients):
                _offer(q, text)
            await asyncio.sleep(MIN_INTERVAL)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Serve one event stream until the client leaves or the server stops."""
        if self._closed:
            raise web.HTTPServiceUnavailable(text="the server is stopping")
        limit = self.limit
        if len(self._clients) >= limit:
            return web.json_response(
                {"error": f"too many event streams (at most {limit}), retry shortly"},
                status=503)
        resp = web.StreamResponse(headers={**_headers(), "Content-Type": "text/event-stream",
                                           "X-Accel-Buffering": "no"})
        queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=8)
        self._clients.add(queue)
        try:
            await resp.prepare(request)
            hello = {"seq": self.seq, "clock": self.server.engine.clock.now()}
            await resp.write(f"retry: 3000\nevent: hello\ndata: {_dumps(hello)}\n\n".encode())
            while True:
                try:
                    text = await asyncio.wait_for(queue.get(), KEEPALIVE)
                except TimeoutError:
                    text = ": keepalive\n\n"
                if text is None:
                    break
                await resp.write(text.encode())
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self._clients.discard(queue)
        return resp


def _offer(q: asyncio.Queue[str | None], item: str | None) -> None:
    """Queue ``item``; a slow client loses its oldest message (the next refetch catches up)."""
    while True:
        try:
            q.put_nowait(item)
            return
        except asyncio.QueueFull:
            with contextlib.suppress(asyncio.QueueEmpty):
                q.get_nowait()


def _summary(cls: str, ev: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"type": cls, "ts": ev.ts}
    for name in ("agent", "market", "outcome", "reason", "traded_value", "cost", "value_after",
                 "question_id", "kind", "severity", "message", "scheduled_ts"):
        value = getattr(ev, name, None)
        if value is not None and value != "":
            out[name] = value[:300] if isinstance(value, str) else value
    trades = getattr(ev, "trades", None)
    if isinstance(trades, dict):  # a fill: how many assets it bought and sold
        out["bought"] = sum(1 for q in trades.values() if q > 0)
        out["sold"] = sum(1 for q in trades.values() if q < 0)
    return out


def _dumps(data: Any) -> str:
    from daemon.web.json import dumps

    return dumps(data)


class Page:
    """The page's routes on an :class:`~daemon.web.http.HttpServer`."""

    def __init__(self, server: PageHost) -> None:
        """Prepare the routes and the event stream of ``server``."""
        self.server = server
        self.events = LiveEvents(server)
        self.chart = ChartApi(server)
        self.decisions = DecisionsApi(server)
        self.positions = PositionsApi(server)
        self.prompts = PromptsApi(server)
        self.files: dict[str, Path] = {}
        if WEB_DIR.is_dir():
            self.files = {p.name: p for p in WEB_DIR.iterdir()
                          if p.is_file() and p.suffix in CONTENT_TYPES and _NAME.match(p.name)}
            vendor = WEB_DIR / "vendor"  # third-party files kept with their licence
            if vendor.is_dir():
                self.files.update({f"vendor/{p.name}": p for p in vendor.iterdir()
                                   if p.is_file() and p.suffix in CONTENT_TYPES
                                   and _NAME.match(p.name.lower())})
        else:  # a broken install: the API still works, the page answers 404
            log.warning("the page's files are missing; / answers 404", path=str(WEB_DIR))

    def add_routes(self, app: web.Application) -> None:
        """Add the page's routes to ``app``."""
        app.router.add_get("/", self.handle_index)
        app.router.add_get("/agent/{id}", self.handle_agent_page)
        app.router.add_get("/static/{name}", self.handle_static)
        app.router.add_get("/static/vendor/{name}", self.handle_vendor)
        app.router.add_get("/api/events", self.events.handle)
        app.router.add_get("/api/status", self.handle_status)
        app.router.add_get("/api/agents/{id}/decisions", self.decisions.handle_decisions)
        self.chart.add_routes(app)
        self.positions.add_routes(app)
        self.prompts.add_routes(app)

    def start(self) -> None:
        """Start the event stream's flusher."""
        self.events.start()

    async def close(self) -> None:
        """End every open event stream."""
        await self.events.close()

    def _file(self, name: str) -> web.Response:
        path = self.files.get(name)
        if path is None:
            raise web.HTTPNotFound(text=f"no such file {name[:60]!r}")
        return web.Response(body=path.read_bytes(), headers={
            **_headers(), "Content-Type": f"{CONTENT_TYPES[path.suffix]}; charset=utf-8"})

    async def handle_index(self, request: web.Request) -> web.Response:
        """Serve the leaderboard page."""
        return self._file("index.html")

    async def handle_agent_page(self, request: web.Request) -> web.Response:
        """Serve one agent's page (the script reads the id from the address)."""
        return self._file("agent.html")

    async def handle_static(self, request: web.Request) -> web.Response:
        """Serve one file of the page's directory."""
        return self._file(request.match_info["name"])

    async def handle_vendor(self, request: web.Request) -> web.Response:
        """Serve one vendored file (``static/vendor/``)."""
        return self._file(f"vendor/{request.match_info['name']}")

    async def handle_status(self, request: web.Request) -> web.Response:
        """Return sources, rounds per market and agents' status in one JSON object."""
        from daemon.web.json import json_response as _json

        read_only = bool(getattr(self.server.engine, "read_only", False))  # paperarena serve
        return _json({**await self.status(), "read_only": read_only})

    async def status(self) -> dict[str, Any]:
        """Return the daemon's state: sources, rounds per market, agents (see module doc)."""
        srv = self.server
        engine = srv.engine
        now = engine.clock.now()
        sources = []
        for src in srv.feeds():
            market = source_market(src)
            counters = getattr(src, "counters", None)
            last = getattr(counters, "last_data_ts", None)
            sources.append({"name": str(getattr(src, "name", "?")), "state": state_name(src),
                            "market": market, "market_open": market_open(market, now),
                            "last_data_ts": last,
                            "data_age_s": None if last is None else max(0.0, now - last),
                            "reconnects": getattr(counters, "reconnects", None)})
        async with srv._queries:
            rows = await engine.store.fetchall(
                "SELECT market, outcome, COUNT(*), MAX(scheduled_ts) FROM decisions"
                " GROUP BY market, outcome")
            last_rows = await engine.store.fetchall(
                "SELECT d.market, d.scheduled_ts, d.outcome, COUNT(*) FROM decisions d JOIN"
                " (SELECT market, MAX(scheduled_ts) AS ts FROM decisions GROUP BY market) m"
                " ON d.market = m.market AND d.scheduled_ts = m.ts GROUP BY d.market,"
                " d.scheduled_ts, d.outcome")  # portable: every selected column grouped
        rounds: dict[str, dict[str, Any]] = {
            m: {"last_ts": None, "last_outcomes": {}, "outcomes": {}} for m in engine.slots}
        for market, outcome, n, _ in rows:
            rounds.setdefault(market, {"last_ts": None, "last_outcomes": {}, "outcomes": {}})
            rounds[market]["outcomes"][outcome] = n
        for market, ts, outcome, n in last_rows:
            rounds[market]["last_ts"] = ts
            rounds[market]["last_outcomes"][outcome] = n
        for r in rounds.values():
            r["missed"] = r["outcomes"].get("missed", 0)
            r["skipped"] = r["outcomes"].get("skipped", 0)
            r["last_age_s"] = None if r["last_ts"] is None else max(0.0, now - r["last_ts"])
            r["next_ts"] = None
        for market, ts in next_rounds(engine, now).items():
            if market in rounds:
                rounds[market]["next_ts"] = ts
        provisional = await self._provisional()
        agents = []
        for row in portfolio_rows(engine, srv.monitor):
            item = asdict(row)
            reason = provisional.get((row.agent, row.market))
            item["provisional"] = reason is not None
            item["provisional_reason"] = reason or ""
            agents.append(item)
        from agents.alphaforgebench.isolation import sandbox_state
        from daemon.store.integrity.season import store_season

        async with srv._queries:
            season = await store_season(engine.store)  # its lineup and amendments (issue 32)
        return {"clock": now, "wall": time.time(), "sources": sources, "rounds": rounds,
                "agents": agents, "event_streams": self.events.clients,
                "sandbox": sandbox_state(), "season": season}

    async def _provisional(self) -> dict[tuple[str, str], str]:
        """Return (agent, market) -> reason for the leaderboard's provisional rows (if any)."""
        cache = self.server.board_cache
        if cache is None:
            return {}
        try:
            board = await cache.get()
        except Exception:
            return {}
        out = {}
        for row in board.get("rows", []):
            flag = row.get("provisional")
            if flag:
                reason = row.get("provisional_reason") or (flag if isinstance(flag, str) else "")
                out[(str(row.get("agent")), str(row.get("market")))] = str(reason or "provisional")
        return out
