"""Drawdown and stale-feed alerts inside the daemon, delivered to webhooks, Slack and Discord.

Drawdown
    Every agent has a drawdown limit per market: ``AgentConfig.max_drawdown`` when given, else its
    risk profile's (:data:`scoring.stats.benchmarks.RISK_PROFILES`: conservative 0.10, balanced
    0.20, aggressive 0.35). Drawdown is measured on mark-to-market equity (cash + positions at the
    last prices, unrealised P&L included) from the running peak, which is restored from the store's
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

Why one module over 500 lines: the monitor's rules share one state per agent and market (hysteresis,
halts, the episode of a stale feed) that the checks read and write together; the kinds, the
``[alerts]`` table and the delivery are modules of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from agents.config import AgentConfig
from daemon.alerts.config import AlertsConfig, drawdown_limit
from daemon.alerts.delivery import STOP_GRACE, WebhookNotifier
from daemon.alerts.kinds import (
    AGENT_RESUMED,
    DRAWDOWN_BREACH,
    DRAWDOWN_RECOVERED,
    FEED_RECOVERED,
    FEED_STALE,
    Alert,
)
from daemon.core.faults import report_fault
from daemon.core.price_columns import PriceColumns
from daemon.store.records import RoundCommit
from daemon.timing.clock import LiveClock
from scoring.stats.metrics import drawdown_series

if TYPE_CHECKING:
    from daemon.engine.engine import Engine

log = structlog.get_logger(__name__)

#: How often (seconds, at most) a live monitor looks for markets left unchecked by the rate
#: limit (:meth:`AlertMonitor._trailing_loop`).
TRAILING_POLL = 1.0


# ----------------------------------------------------------------------------------- feeds


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
    from daemon.timing.nyse import get_nyse_calendar

    return get_nyse_calendar().is_open(ts)


def state_name(src: Any) -> str:
    """Return a source's state as a plain string (``live``, ``stale``...)."""
    st = getattr(src, "state", "live")
    return str(getattr(st, "value", st))



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
                                    batch=self.on_prices, columns=self.on_price_columns)
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
        if self._active:
            self._on_market(ev.market)

    def on_price_columns(self, prices: PriceColumns) -> None:
        """Columns tap: :meth:`on_price` once for the batch's market."""
        if self._active and len(prices):
            self._on_market(prices.market)

    def _on_market(self, market: str) -> None:
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
            except Exception as exc:  # the store is faulted or gone: one line, counted
                report_fault(log, "alert_store", "persisting agent state failed", exc,
                             agent=a.agent, market=a.market)
        try:
            await store.record_alert(a.ts, a.kind, a.severity, a.agent, a.market,
                                     a.value, a.limit, a.message)
        except Exception as exc:
            report_fault(log, "alert_store", "persisting alert failed", exc, alert=a.kind)
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

