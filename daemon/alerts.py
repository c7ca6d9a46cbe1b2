"""Drawdown and stale-feed alerts inside the daemon, delivered to webhooks, Slack and Discord.

Drawdown
    Every agent has a drawdown limit per market: ``AgentConfig.max_drawdown`` when given, else its
    risk profile's (:data:`scoring.benchmarks.RISK_PROFILES`: conservative 0.10, balanced 0.20,
    aggressive 0.35). Drawdown is measured on mark-to-market equity (cash + positions at the last
    prices, unrealised P&L included) from the running peak, which is restored from the store's
    ``equity`` table on start. A bus tap on ``price.#`` compares timestamps only; when the engine
    clock has moved ``check_interval`` past a market's last check, that market is evaluated inline
    (a vector read of the book), so a replay raises the same alerts at the same (engine clock) times
    on every run. Live, prices that came inside the interval and were followed by none are evaluated
    once the interval has passed (within a second), so a breach at the end of a burst or in a quiet
    market is not left waiting for the next price. A breach raises one ``drawdown_breach`` alert and
    disarms; the alert is re-armed (with a ``drawdown_recovered`` notice) once the drawdown is back
    at or below ``limit - hysteresis``. With ``halt_on_breach`` the agent is halted in that market
    (the decision round records ``halted`` and holds) and the halt is persisted in ``agent_state``
    until an operator resumes it (``POST /api/agents/{id}/resume``).

Stale feeds
    A source whose state is not ``live`` for ``feed_stale_after`` while its market is open raises
    ``feed_stale``; it is re-armed (``feed_recovered``) once the source has been live again for
    ``feed_recovered_after``.

Delivery
    Alerts are persisted (``alerts`` table), published on the bus (``alert.<kind>``) and handed to
    the notifiers by a background worker: the engine never waits for I/O. Each webhook has its own
    bounded queue and task, retries failed posts with exponential backoff and jitter (bounded
    attempts) and drops the oldest queued alert when its queue is full. Bearer tokens come from
    the environment and are never logged; webhook URLs are logged by host only.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import aiohttp
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from daemon.clock import LiveClock
from daemon.config import AgentConfig, ConfigError, parse_duration
from daemon.events import AlertEvent
from daemon.store_records import RoundCommit
from scoring.benchmarks import RISK_PROFILES
from scoring.metrics import drawdown_series

if TYPE_CHECKING:
    from daemon.engine import Engine

log = structlog.get_logger(__name__)

DRAWDOWN_BREACH = "drawdown_breach"
DRAWDOWN_RECOVERED = "drawdown_recovered"
FEED_STALE = "feed_stale"
FEED_RECOVERED = "feed_recovered"
AGENT_RESUMED = "agent_resumed"
#: Every alert kind this module raises (metrics pre-create a counter per kind).
ALERT_KINDS: tuple[str, ...] = (DRAWDOWN_BREACH, DRAWDOWN_RECOVERED, FEED_STALE, FEED_RECOVERED,
                                AGENT_RESUMED)
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")
#: Limit used for an agent that runs but is no longer in the config.
DEFAULT_LIMIT = RISK_PROFILES["balanced"].max_drawdown
#: Seconds ``stop`` waits for queued alerts and deliveries before giving up on them.
STOP_GRACE = 5.0


# ----------------------------------------------------------------------------------- config


#: How often (seconds, at most) a live monitor looks for markets left unchecked by the rate
#: limit (:meth:`AlertMonitor._trailing_loop`).
TRAILING_POLL = 1.0

class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WebhookConfig(_Frozen):
    """One alert notifier (``[[alerts.webhooks]]``)."""

    url: str = Field(description="http(s) URL the alert is POSTed to")
    kind: Literal["json", "slack", "discord"] = Field(
        default="json",
        description="json = the alert as JSON; slack = {'text': ...}; discord = {'content': ...}",
    )
    name: str | None = Field(default=None, description="label in logs and metrics")
    token_env: str | None = Field(
        default=None, description="environment variable holding a bearer token (never logged)"
    )
    kinds: tuple[str, ...] | None = Field(
        default=None, description="only these alert kinds (default: all)"
    )
    min_severity: Literal["info", "warning", "critical"] = "info"
    timeout: float = Field(default=10.0, description="per-attempt HTTP timeout")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z0-9_.\-]{1,64}$", v):
            raise ValueError("use 1-64 letters, digits, '_', '.' or '-'")
        return v

    @field_validator("token_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("must be an environment variable name")
        return v

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            unknown = sorted(set(v) - set(ALERT_KINDS))
            if unknown:
                raise ValueError(f"unknown alert kind(s) {', '.join(unknown)} "
                                 f"(known: {', '.join(ALERT_KINDS)})")
        return v

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        seconds = parse_duration(v)
        if seconds <= 0:
            raise ValueError("must be > 0")
        return seconds


class AlertsConfig(_Frozen):
    """The ``[alerts]`` table: drawdown/feed alert tuning and notifiers."""

    webhooks: tuple[WebhookConfig, ...] = ()
    hysteresis: float = Field(
        default=0.02, ge=0.0, lt=1.0,
        description="re-arm a drawdown alert once drawdown <= limit - hysteresis",
    )
    check_interval: float = Field(
        default=60.0, description="evaluate drawdowns at most this often (engine clock)"
    )
    feed_stale_after: float = Field(
        default=300.0, description="a source not live this long while its market is open alerts"
    )
    feed_recovered_after: float = Field(
        default=60.0, description="live again this long re-arms the stale-feed alert"
    )
    feed_check_interval: float = Field(default=5.0, description="how often feeds are checked")
    notify_recovery: bool = Field(
        default=True, description="also notify recoveries and operator resumes (info)"
    )
    max_attempts: int = Field(default=5, ge=1, le=20, description="delivery attempts per alert")
    backoff_initial: float = Field(default=1.0, description="first retry delay")
    backoff_max: float = Field(default=60.0, description="longest retry delay")
    queue_size: int = Field(default=1000, ge=1, le=100_000,
                            description="alerts queued per webhook (oldest dropped beyond)")

    @field_validator("check_interval", "feed_stale_after", "feed_recovered_after",
                     "feed_check_interval", "backoff_initial", "backoff_max", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("check_interval", "feed_check_interval", "backoff_initial")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be > 0")
        return v


def parse_alerts_config(data: Mapping[str, Any] | None, source: str = "config") -> AlertsConfig:
    """Validate the ``[alerts]`` mapping or raise :class:`ConfigError` (one line per problem)."""
    try:
        return AlertsConfig.model_validate(dict(data or {}))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in ("alerts", *err["loc"]))
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing":
                msg = "required key is missing"
            elif msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            lines.append(f"{loc}: {msg}")
        raise ConfigError(source, lines) from None


def drawdown_limit(cfg: AgentConfig | None) -> float:
    """Return an agent's drawdown limit: explicit ``max_drawdown``, else its risk profile's."""
    if cfg is None:
        return DEFAULT_LIMIT
    if cfg.max_drawdown is not None:
        return float(cfg.max_drawdown)
    return RISK_PROFILES[cfg.risk_profile].max_drawdown


# ----------------------------------------------------------------------------------- alerts


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert as raised, persisted and delivered."""

    ts: float
    kind: str
    severity: str
    message: str
    agent: str = ""
    market: str = ""
    source: str = ""
    value: float = 0.0
    limit: float = 0.0

    def to_event(self) -> AlertEvent:
        """Return the bus event of this alert."""
        return AlertEvent(ts=self.ts, recv_ts=self.ts, kind=self.kind, severity=self.severity,
                          agent=self.agent, market=self.market, value=self.value,
                          limit=self.limit, message=self.message)

    def to_json(self) -> dict[str, Any]:
        """Return the generic JSON webhook payload."""
        return {
            "app": "paperarena",
            "kind": self.kind,
            "severity": self.severity,
            "ts": self.ts,
            "time": datetime.fromtimestamp(self.ts, UTC).isoformat().replace("+00:00", "Z"),
            "agent": self.agent or None,
            "market": self.market or None,
            "source": self.source or None,
            "value": self.value if math.isfinite(self.value) else None,
            "limit": self.limit if math.isfinite(self.limit) else None,
            "message": self.message,
        }

    def text(self) -> str:
        """Return a one-line human text (Slack/Discord)."""
        icon = {"critical": ":rotating_light:", "warning": ":warning:"}.get(self.severity,
                                                                             ":information_source:")
        return f"{icon} [paperarena {self.severity}] {self.message}"


def source_market(src: Any) -> str | None:
    """Return the market a source feeds (None: not tied to a market's hours, e.g. news)."""
    market = getattr(src, "market", None)
    if isinstance(market, str) and market:
        return market
    name = str(getattr(src, "name", "")).lower()
    if name.startswith("polymarket"):
        return "polymarket"
    if name.startswith(("news", "replay")):
        return None
    return "equity"


def market_open(market: str | None, ts: float) -> bool:
    """Return whether ``market`` trades at ``ts`` (equities: NYSE hours; the rest: always)."""
    if market != "equity":
        return True
    from daemon.schedule import get_nyse_calendar

    return get_nyse_calendar().is_open(ts)


def state_name(src: Any) -> str:
    """Return a source's state as a plain string (``live``, ``stale``...)."""
    st = getattr(src, "state", "live")
    return str(getattr(st, "value", st))


# ----------------------------------------------------------------------------------- notifiers


def safe_url(url: str) -> str:
    """Return ``url`` reduced to scheme://host[:port] (webhook paths often hold secrets)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


ResultHook = Callable[[str, str], None]


class WebhookNotifier:
    """Deliver alerts to one webhook from a bounded queue, with retries and backoff."""

    def __init__(self, cfg: WebhookConfig, *, index: int = 0, max_attempts: int = 5,
                 backoff_initial: float = 1.0, backoff_max: float = 60.0,
                 queue_size: int = 1000, on_result: ResultHook | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rng: random.Random | None = None) -> None:
        """Prepare the notifier; nothing is sent before :meth:`start`."""
        self.cfg = cfg
        self.name = cfg.name or f"{cfg.kind}-{index}"
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_max, backoff_initial)
        self._queue: deque[Alert] = deque()
        self._maxlen = queue_size
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_result = on_result
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self.attempts = 0

    def wants(self, alert: Alert) -> bool:
        """Return whether this notifier takes ``alert`` (kind filter and minimum severity)."""
        if self.cfg.kinds is not None and alert.kind not in self.cfg.kinds:
            return False
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        return rank.get(alert.severity, 0) >= rank[self.cfg.min_severity]

    def offer(self, alert: Alert) -> bool:
        """Queue ``alert`` without waiting; drop the oldest queued one when full."""
        if not self.wants(alert):
            return False
        if len(self._queue) >= self._maxlen:
            old = self._queue.popleft()
            self.dropped += 1
            self._result("dropped")
            log.warning("alert notification dropped (queue full)", notifier=self.name,
                        kind=old.kind, agent=old.agent, market=old.market)
        self._queue.append(alert)
        self._idle.clear()
        self._wake.set()
        return True

    def payload(self, alert: Alert) -> dict[str, Any]:
        """Return the body posted for ``alert`` in this webhook's format."""
        if self.cfg.kind == "slack":
            return {"text": alert.text()}
        if self.cfg.kind == "discord":
            return {"content": alert.text()[:2000]}
        return alert.to_json()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "User-Agent": "paperarena-alerts"}
        if self.cfg.token_env:
            token = os.environ.get(self.cfg.token_env)
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    async def start(self) -> None:
        """Open the HTTP session and start the delivery task."""
        if self.cfg.token_env:
            from daemon.logs import register_secret

            token = os.environ.get(self.cfg.token_env)
            register_secret(token)
            if not token:
                log.warning("alert webhook token variable is not set", notifier=self.name,
                            token_env=self.cfg.token_env)
        if self._session is None:
            self._session = aiohttp.ClientSession()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"alerts-{self.name}")

    async def wait_idle(self) -> None:
        """Wait until every queued alert was delivered or given up."""
        await self._idle.wait()

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Let queued deliveries finish within ``grace`` seconds, then stop."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wait_idle(), grace)
            if self._queue:
                log.warning("alert notifications abandoned at shutdown", notifier=self.name,
                            pending=len(self._queue))
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            alert = self._queue[0]
            try:
                ok = await self.deliver(alert)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let one alert kill the notifier
                ok = False
                log.error("alert delivery crashed", notifier=self.name, error=repr(exc))
            if self._queue and self._queue[0] is alert:
                self._queue.popleft()
            if ok:
                self.delivered += 1
                self._result("delivered")
            else:
                self.failed += 1
                self._result("failed")

    def backoff(self, attempt: int) -> float:
        """Return the wait after failed attempt ``attempt`` (exponential, jittered, capped)."""
        base = min(self.backoff_max, self.backoff_initial * 2.0 ** (attempt - 1))
        return base * (0.5 + 0.5 * self._rng.random())

    async def deliver(self, alert: Alert) -> bool:
        """POST ``alert`` with retries; return whether the webhook accepted it."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        body = self.payload(alert)
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout)
        where = safe_url(self.cfg.url)
        for attempt in range(1, self.max_attempts + 1):
            self.attempts += 1
            retry_after: float | None = None
            try:
                async with self._session.post(self.cfg.url, json=body, headers=self._headers(),
                                              timeout=timeout) as resp:
                    status = resp.status
                    if 200 <= status < 300:
                        log.info("alert delivered", notifier=self.name, kind=alert.kind,
                                 agent=alert.agent, market=alert.market, attempt=attempt)
                        return True
                    if status not in (408, 425, 429) and status < 500:
                        log.error("alert refused by webhook", notifier=self.name, host=where,
                                  status=status, kind=alert.kind)
                        return False
                    retry_after = _retry_after(resp.headers.get("Retry-After"))
                    problem = f"HTTP {status}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                problem = type(exc).__name__
            if attempt == self.max_attempts:
                log.error("alert delivery failed", notifier=self.name, host=where,
                          kind=alert.kind, attempts=attempt, error=problem)
                return False
            delay = self.backoff(attempt)
            if retry_after is not None:
                delay = min(self.backoff_max, max(delay, retry_after))
            self._result("retried")
            log.warning("alert delivery retry", notifier=self.name, host=where, kind=alert.kind,
                        attempt=attempt, error=problem, retry_in_s=round(delay, 3))
            await self._sleep(delay)
        return False

    def _result(self, result: str) -> None:
        if self._on_result is not None:
            self._on_result(self.name, result)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def build_notifiers(cfg: AlertsConfig, on_result: ResultHook | None = None
                    ) -> list[WebhookNotifier]:
    """Return one notifier per configured webhook."""
    return [
        WebhookNotifier(w, index=i, max_attempts=cfg.max_attempts,
                        backoff_initial=cfg.backoff_initial, backoff_max=cfg.backoff_max,
                        queue_size=cfg.queue_size, on_result=on_result)
        for i, w in enumerate(cfg.webhooks)
    ]


# ----------------------------------------------------------------------------------- monitor


@dataclass(slots=True)
class DrawdownTrack:
    """Drawdown state of one agent in one market."""

    limit: float
    peak: float = 0.0
    drawdown: float = 0.0
    max_drawdown: float = 0.0
    armed: bool = True
    checked_ts: float | None = None


@dataclass(slots=True)
class _FeedTrack:
    bad_since: float | None = None
    live_since: float | None = None
    armed: bool = True


@dataclass(slots=True)
class _Work:
    alert: Alert
    agent_states: list[tuple[str, str, str, str, float]] = field(default_factory=list)
    done: asyncio.Future[None] | None = None


class AlertMonitor:
    """Watch drawdowns (on price events) and feeds (periodically); raise and deliver alerts."""

    def __init__(self, engine: Engine, config: AlertsConfig, *, sources: Sequence[Any] = (),
                 notifiers: Sequence[WebhookNotifier] = ()) -> None:
        """Prepare the monitor; :meth:`start` restores state and hooks it to the bus."""
        self.engine = engine
        self.config = config
        self.sources = list(sources)
        self.notifiers = list(notifiers)
        self.agent_configs: dict[str, AgentConfig] = {a.id: a for a in engine.config.agents}
        self.tracks: dict[tuple[str, str], DrawdownTrack] = {}
        self._feeds: dict[str, _FeedTrack] = {}
        self._last_check: dict[str, float] = {}
        self._unchecked: set[str] = set()
        """Markets with prices that arrived within ``check_interval`` of their last check."""
        self._outbox: deque[_Work] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._active = False
        self._tapped = False
        self.raised: list[Alert] = []
        """Every alert raised since start (bounded to the last 1000)."""

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Restore peaks and arming from the store, tap prices, start the workers."""
        self._refresh_limits()
        await self._restore()
        now = self.engine.clock.now()
        for market in self.engine.books:  # first check one interval in: prices settle first
            self._last_check.setdefault(market, now)
        self._active = True
        if not self._tapped:
            self.engine.bus.add_tap("price.#", self.on_price,  # type: ignore[arg-type]
                                    batch=self.on_prices)
            self._tapped = True
        for n in self.notifiers:
            await n.start()
        self._tasks.append(asyncio.create_task(self._worker(), name="alerts-worker"))
        if self.sources:
            self._tasks.append(asyncio.create_task(self._feed_loop(), name="alerts-feeds"))
        if isinstance(self.engine.clock, LiveClock):
            self._tasks.append(asyncio.create_task(self._trailing_loop(), name="alerts-trailing"))
        log.info("alert monitor started", agents=len(self.tracks),
                 notifiers=[n.name for n in self.notifiers],
                 check_interval_s=self.config.check_interval)

    async def stop(self) -> None:
        """Stop checking, persist and deliver what is queued (bounded), stop the workers."""
        self._active = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain(), STOP_GRACE)
        if self._outbox:
            log.warning("alerts not persisted at shutdown", pending=len(self._outbox))
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        for n in self.notifiers:
            await n.stop()

    async def reload(self, config: AlertsConfig, notifiers: Sequence[WebhookNotifier],
                     agents: Sequence[AgentConfig] | None = None) -> None:
        """Apply a new alerts config and agent limits (``agents``); swap the notifiers."""
        old = self.notifiers
        self.config = config
        if agents is not None:
            self.agent_configs = {a.id: a for a in agents}
        self.notifiers = list(notifiers)
        for n in self.notifiers:
            await n.start()
        for n in old:
            await n.stop()
        self._refresh_limits()

    async def drain(self) -> None:
        """Wait until every raised alert is persisted, published and delivered (or given up)."""
        await self._idle.wait()
        for n in self.notifiers:
            await n.wait_idle()

    def _refresh_limits(self) -> None:
        cfgs = self.agent_configs
        for market, slots in self.engine.slots.items():
            book = self.engine.books[market]
            for agent in slots:
                limit = drawdown_limit(cfgs.get(agent))
                tr = self.tracks.get((market, agent))
                if tr is None:
                    self.tracks[(market, agent)] = DrawdownTrack(limit=limit,
                                                                 peak=book.initial_cash)
                else:
                    tr.limit = limit

    async def _restore(self) -> None:
        store = self.engine.store
        series: dict[tuple[str, str], list[float]] = {}
        for agent, market, value in await store.fetchall(
            "SELECT agent, market, value FROM equity ORDER BY agent, market, ts"
        ):
            if (market, agent) in self.tracks:
                series.setdefault((market, agent), []).append(float(value))
        for key, values in series.items():
            tr = self.tracks[key]
            start = self.engine.books[key[0]].initial_cash
            dd = drawdown_series([start, *values])
            tr.peak = max(start, *values)
            tr.max_drawdown = float(max(0.0, *(d for d in dd if d == d)))
            tr.drawdown = float(dd[-1]) if dd[-1] == dd[-1] else 0.0
        last: dict[tuple[str, str], str] = {}
        for agent, market, kind in await store.fetchall(
            "SELECT agent, market, kind FROM alerts WHERE kind IN (?, ?) ORDER BY id",
            (DRAWDOWN_BREACH, DRAWDOWN_RECOVERED),
        ):
            last[(market, agent)] = kind
        for key, tr in self.tracks.items():
            slot = self.engine.slots[key[0]].get(key[1])
            tr.armed = last.get(key) != DRAWDOWN_BREACH and not (
                slot is not None and slot.status == "halted")

    # -- drawdown -----------------------------------------------------------------------------
    def on_price(self, ev: Any) -> None:
        """Bus tap: evaluate the event's market when ``check_interval`` has elapsed (cheap)."""
        if not self._active:
            return
        market = ev.market
        now = self.engine.clock.now()
        last = self._last_check.get(market)
        if last is not None and now - last < self.config.check_interval:
            self._unchecked.add(market)
            return
        self._last_check[market] = now
        self._unchecked.discard(market)
        self.check_market(market, now)

    async def _trailing_loop(self) -> None:
        """Live only: evaluate a market whose last prices came within ``check_interval`` of its
        last check once the interval has passed, even if no price follows them (a breach at the
        end of a burst was not raised until the next price). A replay is left as it was: its
        checks stay on the prices' engine times, the same on every run."""
        while True:
            await asyncio.sleep(min(self.config.check_interval, TRAILING_POLL))
            if not self._active or not self._unchecked:
                continue
            now = self.engine.clock.now()
            for market in sorted(self._unchecked):
                if now - self._last_check.get(market, now) >= self.config.check_interval:
                    self._last_check[market] = now
                    self._unchecked.discard(market)
                    try:
                        self.check_market(market, now)
                    except Exception:
                        log.exception("drawdown check failed", market=market)

    def on_prices(self, events: list[Any]) -> None:
        """Batch bus tap: :meth:`on_price` once per market of the batch."""
        if not self._active:
            return
        first = events[0].market if events else ""
        markets = {ev.market for ev in events} if len(events) > 1 else {first}
        for ev in events:  # in the order markets first appear
            if ev.market in markets:
                markets.discard(ev.market)
                self.on_price(ev)
                if not markets:
                    break

    def check_market(self, market: str, now: float) -> list[Alert]:
        """Evaluate every agent of ``market`` at engine time ``now``; return the alerts raised."""
        book = self.engine.books.get(market)
        if book is None:
            return []
        values = book.values()
        cfgs = self.agent_configs
        raised: list[Alert] = []
        hyst = self.config.hysteresis
        for agent, slot in self.engine.slots.get(market, {}).items():
            tr = self.tracks.get((market, agent))
            if tr is None:
                tr = self.tracks[(market, agent)] = DrawdownTrack(
                    limit=drawdown_limit(cfgs.get(agent)), peak=book.initial_cash)
            v = float(values[book.agent_index(agent)])
            if not math.isfinite(v):
                continue
            tr.peak = max(tr.peak, v)
            tr.checked_ts = now
            if tr.peak <= 0:
                continue
            dd = max(0.0, 1.0 - v / tr.peak)
            tr.drawdown = dd
            tr.max_drawdown = max(tr.max_drawdown, dd)
            if tr.armed and dd >= tr.limit:
                tr.armed = False
                raised.append(self._breach(market, agent, slot, cfgs.get(agent), tr, v, now))
            elif not tr.armed and dd <= tr.limit - hyst and slot.status != "halted":
                tr.armed = True
                alert = Alert(
                    ts=now, kind=DRAWDOWN_RECOVERED, severity="info", agent=agent,
                    market=market, value=dd, limit=tr.limit,
                    message=(f"agent {agent} in {market}: drawdown back to {dd:.1%} "
                             f"(limit {tr.limit:.0%}); drawdown alert re-armed"),
                )
                self._emit(_Work(alert))
                raised.append(alert)
        return raised

    def _breach(self, market: str, agent: str, slot: Any, cfg: AgentConfig | None,
                tr: DrawdownTrack, value: float, now: float) -> Alert:
        profile = ("explicit max_drawdown" if cfg is not None and cfg.max_drawdown is not None
                   else f"{cfg.risk_profile if cfg else 'balanced'} profile")
        message = (f"agent {agent} in {market}: drawdown {tr.drawdown:.1%} breached its limit "
                   f"{tr.limit:.0%} ({profile}); value {value:,.2f} USD, peak {tr.peak:,.2f} USD")
        work_states: list[tuple[str, str, str, str, float]] = []
        if cfg is not None and cfg.halt_on_breach and slot.status == "active":
            slot.status = "halted"
            slot.reason = (f"drawdown {tr.drawdown:.1%} breached limit {tr.limit:.0%} at "
                           f"{_iso(now)}; resume with POST /api/agents/{agent}/resume")
            work_states.append((agent, market, "halted", slot.reason, now))
            message += "; agent halted until an operator resumes it"
        alert = Alert(ts=now, kind=DRAWDOWN_BREACH, severity="critical", agent=agent,
                      market=market, value=tr.drawdown, limit=tr.limit, message=message)
        log.warning("drawdown limit breached", agent=agent, market=market,
                    drawdown=round(tr.drawdown, 6), limit=tr.limit,
                    halted=bool(work_states))
        self._emit(_Work(alert, work_states))
        return alert

    def drawdown_figures(self, market: str, agent: str, value: float
                         ) -> tuple[float, float, float] | None:
        """Return (current drawdown, max drawdown, limit) for ``value`` now (no state change)."""
        tr = self.tracks.get((market, agent))
        if tr is None:
            return None
        peak = max(tr.peak, value)
        dd = max(0.0, 1.0 - value / peak) if peak > 0 and math.isfinite(value) else 0.0
        return dd, max(tr.max_drawdown, dd), tr.limit

    # -- feeds --------------------------------------------------------------------------------
    async def _feed_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.feed_check_interval)
            if not self._active:
                continue
            try:
                self.check_feeds(self.engine.clock.now())
            except Exception:
                log.exception("feed check failed")

    def check_feeds(self, now: float) -> list[Alert]:
        """Evaluate every source at engine time ``now``; return the alerts raised."""
        raised: list[Alert] = []
        cfg = self.config
        for src in self.sources:
            name = str(src.name)
            tr = self._feeds.setdefault(name, _FeedTrack())
            state = state_name(src)
            market = source_market(src)
            is_open = market_open(market, now)
            if state == "live":
                tr.bad_since = None
                if tr.live_since is None:
                    tr.live_since = now
            else:
                tr.live_since = None
                if not is_open:
                    tr.bad_since = None
                elif tr.bad_since is None:
                    tr.bad_since = now
            if tr.armed and tr.bad_since is not None and now - tr.bad_since >= cfg.feed_stale_after:
                tr.armed = False
                age = now - tr.bad_since
                alert = Alert(
                    ts=now, kind=FEED_STALE, severity="warning", market=market or "",
                    source=name, value=age, limit=cfg.feed_stale_after,
                    message=(f"feed {name} has been {state} for {age:.0f}s while "
                             f"{market or 'its market'} is open"),
                )
                log.warning("feed stale", source=name, state=state, for_s=round(age, 1))
                self._emit(_Work(alert))
                raised.append(alert)
            elif (not tr.armed and tr.live_since is not None
                  and now - tr.live_since >= cfg.feed_recovered_after):
                tr.armed = True
                alert = Alert(ts=now, kind=FEED_RECOVERED, severity="info", market=market or "",
                              source=name, message=f"feed {name} is live again")
                self._emit(_Work(alert))
                raised.append(alert)
        return raised

    # -- operator -----------------------------------------------------------------------------
    async def resume(self, agent: str, market: str | None = None, *, by: str = "operator"
                     ) -> list[str]:
        """Resume ``agent`` where it is halted (one market or all); return the markets resumed."""
        eng = self.engine
        markets = [market] if market else [m for m in eng.slots if agent in eng.slots[m]]
        now = eng.clock.now()
        resumed = []
        states = []
        for m in markets:
            slot = eng.slots.get(m, {}).get(agent)
            if slot is None or slot.status != "halted":
                continue
            slot.status, slot.reason = "active", ""
            resumed.append(m)
            states.append((agent, m, "active", f"resumed by {by} at {_iso(now)}", now))
        if not resumed:
            return []
        last: _Work | None = None
        for m, state in zip(resumed, states, strict=True):
            tr = self.tracks.get((m, agent))
            dd = tr.drawdown if tr else 0.0
            limit = tr.limit if tr else 0.0
            # Through the outbox, so it is persisted after any halt queued before it.
            last = _Work(Alert(
                ts=now, kind=AGENT_RESUMED, severity="info", agent=agent, market=m, value=dd,
                limit=limit,
                message=(f"agent {agent} in {m} resumed by {by} (drawdown {dd:.1%}, "
                         f"limit {limit:.0%}); it is halted again only after recovering below "
                         f"{max(limit - self.config.hysteresis, 0):.0%} and breaching anew"),
            ), [state], asyncio.get_running_loop().create_future())
            self._emit(last)
        log.warning("agent resumed", agent=agent, markets=resumed, by=by)
        if last is not None and last.done is not None and self._tasks:
            await last.done
        return resumed

    # -- delivery -----------------------------------------------------------------------------
    def _emit(self, work: _Work) -> None:
        self.raised.append(work.alert)
        if len(self.raised) > 1000:
            del self.raised[:-1000]
        self._outbox.append(work)
        self._idle.clear()
        self._wake.set()

    async def _worker(self) -> None:
        while True:
            if not self._outbox:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            work = self._outbox.popleft()
            try:
                await self._process(work)
            finally:
                if work.done is not None and not work.done.done():
                    work.done.set_result(None)

    async def _process(self, work: _Work) -> None:
        a = work.alert
        store = self.engine.store
        if work.agent_states:
            try:
                await store.commit_round(RoundCommit(agent_states=work.agent_states))
            except Exception:
                log.exception("persisting agent state failed", agent=a.agent, market=a.market)
        try:
            await store.record_alert(a.ts, a.kind, a.severity, a.agent, a.market,
                                     a.value, a.limit, a.message)
        except Exception:
            log.exception("persisting alert failed", kind=a.kind)
        try:
            await self.engine.bus.publish(a.to_event())
        except Exception:
            log.exception("publishing alert failed", kind=a.kind)
        if a.severity == "info" and not self.config.notify_recovery:
            return
        for n in self.notifiers:
            n.offer(a)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

