"""Prometheus metrics of one daemon (its own ``CollectorRegistry``, prefix ``paperarena_``).

Two kinds of figures:

- read at scrape time by :class:`EngineCollector` from the engine's state (portfolios, drawdown
  against limits, risk-adjusted figures, agent status, feeds, bus, store, clock): nothing is
  computed per tick;
- counted from bus events by :class:`Metrics` (decisions by outcome, decision durations, alerts)
  and by :class:`LlmUsage` (model tokens and cost, read from the ``llm_calls`` rows of each
  decision, and today's share of each agent's daily budget).

Cardinality is bounded: labels are agents, markets, outcomes, alert kinds, feed sources and bus
topic classes; never a Polymarket question, an asset or a news item.

Why one module over 500 lines: the collectors of one Prometheus registry share its bounded label
sets and the snapshot of the books they read at scrape time.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from daemon.alerts.kinds import ALERT_KINDS
from daemon.alerts.rules import market_open, source_market, state_name
from daemon.core.events import ALERT, DECISION, FILL, MARKET, NEWS, PRICE, RESOLUTION, STATUS
from daemon.core.faults import FAULTS, KINDS
from scoring.stats.metrics import (
    PerformanceSummary,
    periods_per_year,
    starts_at_initial,
    summarise,
)

if TYPE_CHECKING:
    from agents.config import AgentConfig
    from daemon.alerts.rules import AlertMonitor
    from daemon.core.events import AlertEvent, DecisionEvent
    from daemon.engine.engine import Engine

log = structlog.get_logger(__name__)

PREFIX = "paperarena"
#: Decision outcomes (see daemon.engine.rounds); counters are created at 0 for each agent and
#: market.
OUTCOMES: tuple[str, ...] = ("ok", "hold", "invalid", "rejected", "error", "paused", "halted",
                             "skipped", "missed", "abandoned")
#: Outcomes that count as a failed decision (the agent was asked and gave nothing usable).
FAILED_OUTCOMES: tuple[str, ...] = ("invalid", "rejected", "error")
AGENT_STATUSES: tuple[str, ...] = ("active", "halted", "paused")
FEED_STATES: tuple[str, ...] = ("connecting", "live", "stale", "backing_off", "down")
TOPIC_CLASSES: tuple[str, ...] = (PRICE, NEWS, MARKET, RESOLUTION, DECISION, FILL, ALERT, STATUS)
DURATION_BUCKETS: tuple[float, ...] = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                                       30.0, 60.0, 120.0, 300.0, 600.0)
#: Risk-adjusted figures exported per agent and market: (summary field, metric suffix, help).
RISK_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("sharpe", "sharpe", "Annualised Sharpe ratio of daily returns (NaN until 2 daily returns)"),
    ("sortino", "sortino", "Annualised standard Sortino ratio of daily returns (downside below the "
     "risk-free rate over all days; NaN without such a day)"),
    ("calmar", "calmar", "Calmar ratio: annualised return over max drawdown of daily marks"),
    ("volatility", "volatility_ratio", "Annualised volatility of daily returns"),
    ("annualised_return", "annualised_return_ratio", "Annualised return of daily marks"),
    ("win_rate", "win_ratio", "Share of daily returns above zero"),
)


def _utc_day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


class Metrics:
    """The event-driven instruments and the registry every collector is added to."""

    def __init__(self, *, version: str = "", registry: CollectorRegistry | None = None) -> None:
        """Create the instruments in ``registry`` (a fresh one by default)."""
        reg = self.registry = registry if registry is not None else CollectorRegistry()
        self.decisions = Counter(
            f"{PREFIX}_decisions", "Decisions by outcome (ok, hold, invalid, error, halted...)",
            ["agent", "market", "outcome"], registry=reg)
        self.decision_duration = Histogram(
            f"{PREFIX}_decision_duration_seconds",
            "Wall time of a decision round (all agents of the market asked in parallel)",
            ["market"], buckets=DURATION_BUCKETS, registry=reg)
        self.llm_tokens = Counter(
            f"{PREFIX}_llm_tokens", "Model tokens used by an agent (direction: in = prompt, "
            "out = completion)", ["agent", "direction"], registry=reg)
        self.llm_cost = Counter(f"{PREFIX}_llm_cost_usd", "Model cost of an agent in USD",
                                ["agent"], registry=reg)
        self.llm_calls = Counter(f"{PREFIX}_llm_calls", "Model calls of an agent by result",
                                 ["agent", "result"], registry=reg)
        self.alerts = Counter(f"{PREFIX}_alerts", "Alerts raised by the daemon, by kind",
                              ["kind"], registry=reg)
        self.notifications = Counter(
            f"{PREFIX}_alert_notifications", "Alert deliveries by notifier and result "
            "(delivered, retried, failed, dropped)", ["notifier", "result"], registry=reg)
        self.build_info = Gauge(f"{PREFIX}_build_info", "Always 1; the running version",
                                ["version"], registry=reg)
        self.build_info.labels(version or "unknown").set(1)
        self.loop_lag = Gauge(f"{PREFIX}_event_loop_lag_seconds",
                              "How late the last event-loop heartbeat woke up", registry=reg)
        self.loop_lag_max = Gauge(f"{PREFIX}_event_loop_lag_max_seconds",
                                  "Largest event-loop lag over the last minute", registry=reg)
        self.http_requests = Counter(f"{PREFIX}_http_requests", "HTTP requests served",
                                     ["handler", "code"], registry=reg)
        for kind in ALERT_KINDS:
            self.alerts.labels(kind)
        self._observed_rounds: deque[tuple[str, float]] = deque(maxlen=256)
        self._observed_set: set[tuple[str, float]] = set()

    def init_agents(self, agents: Iterable[tuple[str, str]]) -> None:
        """Create every (agent, market) decision counter and every agent's LLM counters at 0."""
        pairs = list(agents)
        seen = set()
        for agent, market in pairs:
            for outcome in OUTCOMES:
                self.decisions.labels(agent, market, outcome)
            if agent not in seen:
                seen.add(agent)
                self.llm_tokens.labels(agent, "in")
                self.llm_tokens.labels(agent, "out")
                self.llm_cost.labels(agent)
                self.llm_calls.labels(agent, "ok")
                self.llm_calls.labels(agent, "error")
        for market in sorted({m for _, m in pairs}):
            self.decision_duration.labels(market)

    def on_decision(self, ev: DecisionEvent) -> None:
        """Count one decision; observe its round's duration once per round."""
        self.decisions.labels(ev.agent, ev.market, ev.outcome).inc()
        if ev.outcome in ("skipped", "missed", "abandoned", "halted", "paused"):
            return
        key = (ev.market, ev.scheduled_ts)
        if key in self._observed_set:
            return
        if len(self._observed_rounds) == self._observed_rounds.maxlen:
            self._observed_set.discard(self._observed_rounds[0])
        self._observed_rounds.append(key)
        self._observed_set.add(key)
        self.decision_duration.labels(ev.market).observe(max(ev.duration_s, 0.0))

    def on_alert(self, ev: AlertEvent) -> None:
        """Count one alert."""
        self.alerts.labels(ev.kind).inc()

    def on_notification(self, notifier: str, result: str) -> None:
        """Count one notifier result."""
        self.notifications.labels(notifier, result).inc()


# ----------------------------------------------------------------------------------- LLM usage


class LlmUsage:
    """Model usage per agent: counters from ``llm_calls`` rows and today's budget share."""

    def __init__(self, engine: Engine, metrics: Metrics) -> None:
        """Track the LLM agents of ``engine``'s config."""
        self.engine = engine
        self.metrics = metrics
        self.agent_configs: tuple[AgentConfig, ...] = ()
        self.llm_agents: frozenset[str] = frozenset()
        self.set_agents(engine.config.agents)
        self._day: dict[str, tuple[str, int, float]] = {}  # agent -> (day, tokens, usd)
        self._seen: deque[tuple[str, str, float]] = deque(maxlen=4096)
        self._seen_set: set[tuple[str, str, float]] = set()

    def set_agents(self, agents: Iterable[AgentConfig]) -> None:
        """Use ``agents`` (the config's, e.g. after a reload) for kinds and budgets."""
        self.agent_configs = tuple(agents)
        self.llm_agents = frozenset(a.id for a in self.agent_configs if a.kind == "llm")

    async def restore(self) -> None:
        """Load today's (UTC, by scheduled time) usage per agent from the store."""
        day = _utc_day(self.engine.clock.now())
        rows = await self.engine.store.fetchall(
            "SELECT agent, COALESCE(SUM(COALESCE(tokens_in,0)+COALESCE(tokens_out,0)),0),"
            " COALESCE(SUM(cost_usd),0) FROM llm_calls WHERE date(scheduled_ts,'unixepoch')=?"
            " GROUP BY agent", (day,))
        for agent, tokens, cost in rows:
            self._day[str(agent)] = (day, int(tokens), float(cost))

    async def on_decision(self, ev: DecisionEvent) -> None:
        """Count the model calls stored with this decision (LLM agents only, once)."""
        if ev.agent not in self.llm_agents:
            return
        key = (ev.agent, ev.market, ev.scheduled_ts)
        if key in self._seen_set:
            return
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(key)
        self._seen_set.add(key)
        rows = await self.engine.store.fetchall(
            "SELECT tokens_in, tokens_out, cost_usd, error FROM llm_calls"
            " WHERE agent=? AND market=? AND scheduled_ts=?", key)
        self.add(ev.agent, ev.scheduled_ts, rows)

    def add(self, agent: str, scheduled_ts: float,
            rows: Sequence[tuple[Any, Any, Any, Any]]) -> None:
        """Add call rows (tokens_in, tokens_out, cost_usd, error) of ``agent``."""
        m = self.metrics
        t_in = t_out = 0
        cost = 0.0
        for tokens_in, tokens_out, cost_usd, error in rows:
            t_in += int(_num(tokens_in))
            t_out += int(_num(tokens_out))
            c = _num(cost_usd)
            cost += c if math.isfinite(c) and c > 0 else 0.0
            m.llm_calls.labels(agent, "error" if error else "ok").inc()
        if t_in:
            m.llm_tokens.labels(agent, "in").inc(t_in)
        if t_out:
            m.llm_tokens.labels(agent, "out").inc(t_out)
        if cost:
            m.llm_cost.labels(agent).inc(cost)
        day = _utc_day(scheduled_ts)
        prev_day, tokens, usd = self._day.get(agent, (day, 0, 0.0))
        if prev_day != day:
            if prev_day > day:
                return  # a late decision of a past day does not count against today
            tokens, usd = 0, 0.0
        self._day[agent] = (day, tokens + t_in + t_out, usd + cost)

    def budget_ratios(self, now: float) -> dict[str, float]:
        """Return today's used share of the daily budget of every agent that has one."""
        day = _utc_day(now)
        out: dict[str, float] = {}
        for cfg in self.agent_configs:
            if cfg.daily_budget_usd is None and cfg.daily_budget_tokens is None:
                continue
            d, tokens, usd = self._day.get(cfg.id, (day, 0, 0.0))
            if d != day:
                tokens, usd = 0, 0.0
            ratios = [0.0]
            if cfg.daily_budget_tokens is not None:
                ratios.append(tokens / cfg.daily_budget_tokens if cfg.daily_budget_tokens
                              else (math.inf if tokens else 0.0))
            if cfg.daily_budget_usd is not None:
                ratios.append(usd / cfg.daily_budget_usd if cfg.daily_budget_usd
                              else (math.inf if usd else 0.0))
            out[cfg.id] = max(ratios)
        return out


# ----------------------------------------------------------------------------------- performance


class PerformanceCache:
    """Risk-adjusted figures per agent and market over the daily equity marks (as the board)."""

    def __init__(self, engine: Engine) -> None:
        """Start empty; :meth:`refresh` reads new daily marks incrementally."""
        self.engine = engine
        self._series: dict[tuple[str, str], dict[float, float]] = {}
        self._rowid = 0
        self._summaries: dict[tuple[str, str], PerformanceSummary] = {}
        self._first_fill: dict[tuple[str, str], float] = {}

    async def refresh(self) -> None:
        """Read daily marks added since the last refresh and recompute what changed."""
        rows = await self.engine.store.fetchall(
            "SELECT rowid, agent, market, ts, value FROM equity WHERE kind='daily' AND rowid > ?"
            " ORDER BY rowid", (self._rowid,))
        changed = set()
        for rowid, agent, market, ts, value in rows:
            self._rowid = max(self._rowid, int(rowid))
            self._series.setdefault((market, agent), {})[float(ts)] = float(value)
            changed.add((market, agent))
        for key in changed:
            if key not in self._first_fill:
                await self._read_first_fill(key)
            self._summaries[key] = self._summarise(key)

    async def _read_first_fill(self, key: tuple[str, str]) -> None:
        """Remember the time of the agent's first fill in the market (the report's first fill)."""
        market, agent = key
        rows = await self.engine.store.fetchall(
            "SELECT ts FROM fills WHERE agent = ? AND market = ? ORDER BY scheduled_ts LIMIT 1",
            (agent, market))
        if rows:
            self._first_fill[key] = float(rows[0][0])

    def _summarise(self, key: tuple[str, str]) -> PerformanceSummary:
        """Summarise the key's daily marks, starting as the report does (issue 27, point 9).

        The initial cash starts the series only when the first fill comes strictly before the
        first mark (:func:`scoring.stats.metrics.starts_at_initial`); otherwise the first mark
        does, so no zero-length first period repeats the starting value.
        """
        market, _ = key
        pts = self._series.get(key, {})
        marks = [pts[t] for t in sorted(pts)]
        book = self.engine.books.get(market)
        start = book.initial_cash if book is not None else (min(pts.values()) if pts else 0.0)
        first = min(pts) if pts else None
        values = ([start, *marks] if starts_at_initial(first, self._first_fill.get(key))
                  else marks)
        cfg = getattr(self.engine.config.markets, market, None)
        rf = float(getattr(cfg, "risk_free_rate", 0.0) or 0.0)  # what cash accrues (issue 27)
        periods = int(getattr(cfg, "periods_per_year", 0) or periods_per_year(market))
        return summarise(values, periods, rf)

    def summary(self, market: str, agent: str) -> PerformanceSummary:
        """Return the figures of ``agent`` in ``market`` (NaN where too short)."""
        s = self._summaries.get((market, agent))
        if s is None:
            s = self._summaries[(market, agent)] = self._summarise((market, agent))
        return s

    def days(self, market: str, agent: str) -> int:
        """Return how many daily marks ``agent`` has in ``market``."""
        return len(self._series.get((market, agent), {}))


class LeaderboardFigures(Collector):
    """The leaderboard's benchmark figures per agent and market, as one bounded metric family.

    ``paperarena_leaderboard_figure{agent,market,figure}``: ``figure`` is one of
    :data:`scoring.board.leaderboard.LIVE_FIELDS` (rolling-k deltas, composite score, CapitalBench
    score and regret, diversification, VaR, profile alignment, bootstrap bounds...). The
    valid-decision rate and the provisional flag also get their own families,
    ``paperarena_valid_decision_ratio`` and ``paperarena_agent_provisional``. Computing them
    reads the whole store, so they are refreshed in a thread, only after new daily marks.
    """

    def __init__(self, engine: Engine) -> None:
        """Start empty."""
        self.engine = engine
        self._figures: dict[tuple[str, str], dict[str, float]] = {}
        self._marks: object = -1

    async def refresh(self) -> None:
        """Recompute the figures if daily marks were added since the last refresh."""
        from daemon.store.reports import live_figures

        path = str(self.engine.store.path)
        marks: object
        if path.startswith(("postgresql://", "postgres://")):
            from daemon.store.pg_snapshot import (
                daily_marks,  # a shared store: every process's marks
            )

            marks = await asyncio.to_thread(daily_marks, path)
        else:
            rows = await self.engine.store.fetchall(
                "SELECT COALESCE(MAX(rowid), 0) FROM equity WHERE kind='daily'")
            marks = int(rows[0][0])
        if marks == self._marks or path == ":memory:":
            return
        self._figures = await asyncio.to_thread(live_figures, self.engine.store.path)
        self._marks = marks

    def describe(self) -> Iterable[Metric]:
        """Return nothing (names are checked at collect time)."""
        return ()

    def collect(self) -> Iterable[Metric]:
        """Yield the figures."""
        fam = GaugeMetricFamily(
            f"{PREFIX}_leaderboard_figure",
            "Leaderboard figure per agent and market (see docs/scoring.md), from daily marks",
            labels=["agent", "market", "figure"],
        )
        rate = GaugeMetricFamily(
            f"{PREFIX}_valid_decision_ratio",
            "Share of valid decisions (ok or hold) among the rounds the agent was asked "
            "(skipped, missed, abandoned, paused and halted rounds left out)",
            labels=["agent", "market"])
        provisional = GaugeMetricFamily(
            f"{PREFIX}_agent_provisional",
            "1 if the agent is provisional on the leaderboard (valid-decision rate under "
            "[leaderboard] min_valid_rate or fewer than min_days scored days): not ranked",
            labels=["agent", "market"])
        for (agent, market), figs in sorted(self._figures.items()):
            for name, value in sorted(figs.items()):
                fam.add_metric([agent, market, name], value)
            if "valid_decision_rate" in figs:
                rate.add_metric([agent, market], figs["valid_decision_rate"])
            if "provisional" in figs:
                provisional.add_metric([agent, market], figs["provisional"])
        yield fam
        yield rate
        yield provisional


# ----------------------------------------------------------------------------------- scrape


@dataclass(frozen=True, slots=True)
class PortfolioRow:
    """One agent's live figures in one market."""

    agent: str
    market: str
    value: float
    cash: float
    return_ratio: float
    cash_ratio: float
    drawdown: float
    max_drawdown: float
    limit: float
    status: str
    reason: str


def portfolio_rows(engine: Engine, monitor: AlertMonitor | None) -> list[PortfolioRow]:
    """Return the live figures of every running agent in every market (sorted)."""
    from daemon.alerts.config import drawdown_limit

    cfgs = {a.id: a for a in engine.config.agents}
    out = []
    for market in sorted(engine.books):
        book = engine.books[market]
        slots = engine.slots.get(market, {})
        if not slots:
            continue
        values = book.values()
        cash = book.cash
        init = book.initial_cash
        for agent in sorted(slots):
            i = book.agent_index(agent)
            v = float(values[i])
            c = float(cash[i])
            figs = monitor.drawdown_figures(market, agent, v) if monitor is not None else None
            if figs is None:
                dd = mdd = math.nan
                limit = drawdown_limit(cfgs.get(agent))
            else:
                dd, mdd, limit = figs
            slot = slots[agent]
            out.append(PortfolioRow(
                agent=agent, market=market, value=v, cash=c,
                return_ratio=v / init - 1.0 if init > 0 else math.nan,
                cash_ratio=c / v if v > 0 else math.nan,
                drawdown=dd, max_drawdown=mdd, limit=limit,
                status=slot.status, reason=slot.reason,
            ))
    return out


class EngineCollector(Collector):
    """Read portfolios, limits, agent status, feeds, bus, store and clock at scrape time."""

    def __init__(self, engine: Engine, *, monitor: AlertMonitor | None = None,
                 performance: PerformanceCache | None = None, llm: LlmUsage | None = None,
                 feeds: Callable[[], Sequence[Any]] = tuple) -> None:
        """Collect from ``engine`` and the optional helpers."""
        self.engine = engine
        self.monitor = monitor
        self.performance = performance
        self.llm = llm
        self.feeds = feeds

    def describe(self) -> Iterable[Metric]:
        """Return nothing (names are checked at collect time)."""
        return ()

    def collect(self) -> Iterable[Metric]:
        """Yield every scrape-time metric family."""
        try:
            yield from self._portfolios()
            yield from self._feeds()
            yield from self._bus()
            yield from self._system()
        except Exception:  # a scrape must never take the daemon down
            log.exception("metrics collection failed")

    def _portfolios(self) -> Iterator[Metric]:
        lab = ["agent", "market"]

        def gauge(name: str, doc: str, labels: list[str] = lab) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=labels)

        value = gauge("portfolio_value_usd", "Mark-to-market value (cash + positions at the "
                      "last prices, unrealised P&L included)")
        ret = gauge("portfolio_return_ratio", "Cumulative return since the start (value / "
                    "initial cash - 1)")
        dd = gauge("portfolio_drawdown_ratio", "Current drawdown from the running peak (0..1)")
        mdd = gauge("portfolio_max_drawdown_ratio", "Largest drawdown so far (0..1)")
        limit = gauge("portfolio_drawdown_limit_ratio", "Drawdown limit (risk profile or "
                      "max_drawdown); a breach raises an alert")
        cash = gauge("portfolio_cash_ratio", "Share of the portfolio held in cash")
        status = gauge("agent_status", "1 for the agent's current status (active, halted, "
                       "paused) in the market", ["agent", "market", "status"])
        days = gauge("portfolio_daily_marks", "Daily equity marks the risk figures use")
        risk = {f: gauge(f"portfolio_{suffix}", doc) for f, suffix, doc in RISK_FIGURES}
        for row in portfolio_rows(self.engine, self.monitor):
            key = [row.agent, row.market]
            value.add_metric(key, row.value)
            ret.add_metric(key, row.return_ratio)
            cash.add_metric(key, row.cash_ratio)
            limit.add_metric(key, row.limit)
            if math.isfinite(row.drawdown):
                dd.add_metric(key, row.drawdown)
                mdd.add_metric(key, row.max_drawdown)
            statuses = AGENT_STATUSES if row.status in AGENT_STATUSES else (
                *AGENT_STATUSES, row.status)
            for st in statuses:
                status.add_metric([*key, st], 1.0 if st == row.status else 0.0)
            if self.performance is not None:
                s = self.performance.summary(row.market, row.agent)
                for f, _, _ in RISK_FIGURES:
                    risk[f].add_metric(key, float(getattr(s, f)))
                days.add_metric(key, float(self.performance.days(row.market, row.agent)))
        yield from (value, ret, dd, mdd, limit, cash, status)
        if self.performance is not None:
            yield days
            yield from risk.values()
        budget = GaugeMetricFamily(f"{PREFIX}_llm_budget_used_ratio",
                                   "Share of today's (UTC) daily LLM budget used (max of the "
                                   "token and USD budgets)", labels=["agent"])
        if self.llm is not None:
            for agent, ratio in sorted(self.llm.budget_ratios(self.engine.clock.now()).items()):
                budget.add_metric([agent], ratio)
        yield budget

    def _feeds(self) -> Iterator[Metric]:
        now = self.engine.clock.now()
        lab = ["source"]
        up = GaugeMetricFamily(f"{PREFIX}_feed_up", "1 if the source is live", labels=lab)
        state = GaugeMetricFamily(f"{PREFIX}_feed_state", "1 for the source's current state",
                                  labels=["source", "state"])
        is_open = GaugeMetricFamily(f"{PREFIX}_feed_market_open",
                                    "1 if the source's market is open (stale feeds matter then)",
                                    labels=lab)
        counters = {
            attr: CounterMetricFamily(f"{PREFIX}_feed_{name}_total", doc, labels=lab)
            for attr, name, doc in (
                ("messages", "messages", "Frames received from the source"),
                ("data_messages", "data_messages", "Frames that carried market data"),
                ("reconnects", "reconnects", "Reconnections of the source"),
                ("decode_errors", "decode_errors", "Frames that failed to decode"),
                ("rejected", "rejected_messages", "Decoded messages rejected as invalid"),
                ("unknown", "unknown_events", "Feed events of an unknown type (ignored)"),
            )
        }
        last_msg = GaugeMetricFamily(f"{PREFIX}_feed_last_message_timestamp_seconds",
                                     "When the source's last frame arrived", labels=lab)
        last_data = GaugeMetricFamily(f"{PREFIX}_feed_last_data_timestamp_seconds",
                                      "When the source's last market data arrived", labels=lab)
        age = GaugeMetricFamily(f"{PREFIX}_feed_data_age_seconds",
                                "Engine-clock seconds since the source's last market data",
                                labels=lab)
        for src in self.feeds():
            name = str(getattr(src, "name", "?"))
            st = state_name(src)
            up.add_metric([name], 1.0 if st == "live" else 0.0)
            states = FEED_STATES if st in FEED_STATES else (*FEED_STATES, st)
            for s in states:
                state.add_metric([name, s], 1.0 if s == st else 0.0)
            is_open.add_metric([name], 1.0 if market_open(source_market(src), now) else 0.0)
            c = getattr(src, "counters", None)
            for attr, fam in counters.items():
                fam.add_metric([name], _num(getattr(c, attr, 0)))
            lm = getattr(c, "last_message_ts", None)
            if lm is not None:
                last_msg.add_metric([name], float(lm))
            ld = getattr(c, "last_data_ts", None)
            if ld is not None:
                last_data.add_metric([name], float(ld))
                age.add_metric([name], max(0.0, now - float(ld)))
        yield from (up, state, is_open, *counters.values(), last_msg, last_data, age)
        mopen = GaugeMetricFamily(f"{PREFIX}_market_open", "1 if the market trades now",
                                  labels=["market"])
        for m in self.engine.markets:
            mopen.add_metric([m], 1.0 if market_open(m, now) else 0.0)
        yield mopen

    def _bus(self) -> Iterator[Metric]:
        bus = self.engine.bus
        counts = bus.counters()
        lab = ["topic_class"]
        published = CounterMetricFamily(f"{PREFIX}_bus_published_events_total",
                                        "Events published on the bus", labels=lab)
        dropped = CounterMetricFamily(f"{PREFIX}_bus_dropped_events_total",
                                      "Events dropped for a slow subscriber (conflating classes "
                                      "beyond max_keys)", labels=lab)
        conflated = CounterMetricFamily(f"{PREFIX}_bus_conflated_events_total",
                                        "Events replaced by a newer one for a slow subscriber",
                                        labels=lab)
        classes = sorted(set(TOPIC_CLASSES) | set(bus.published_by_class)
                         | set(counts["dropped"]) | set(counts["conflated"]))
        for cls in classes:
            published.add_metric([cls], float(bus.published_by_class.get(cls, 0)))
            dropped.add_metric([cls], float(counts["dropped"].get(cls, 0)))
            conflated.add_metric([cls], float(counts["conflated"].get(cls, 0)))
        depth = GaugeMetricFamily(f"{PREFIX}_bus_queue_depth",
                                  "Events waiting for a subscriber", labels=["subscriber"])
        failed = CounterMetricFamily(f"{PREFIX}_bus_handler_failures_total",
                                     "Subscriber handler exceptions", labels=["subscriber"])
        merged: dict[str, tuple[int, int]] = {}
        for sub in bus.subscriptions:
            d, f = merged.get(sub.name, (0, 0))
            merged[sub.name] = (d + sub.depth, f + sub.stats.failed)
        for name, (d, f) in sorted(merged.items()):
            depth.add_metric([name], float(d))
            failed.add_metric([name], float(f))
        invalid = CounterMetricFamily(f"{PREFIX}_bus_invalid_prices_total",
                                      "Price events dropped by the bus guard (NaN, inf, < 0)",
                                      value=float(getattr(bus, "invalid_prices", 0)))
        yield from (published, dropped, conflated, depth, failed, invalid)

    def _system(self) -> Iterator[Metric]:
        eng = self.engine
        store = eng.store
        yield CounterMetricFamily(f"{PREFIX}_store_events_written_total",
                                  "Market events written to the store",
                                  value=float(store.events_written))
        yield GaugeMetricFamily(f"{PREFIX}_store_pending_events",
                                "Market events buffered and not yet written",
                                value=float(store.pending_events))
        yield CounterMetricFamily(f"{PREFIX}_store_events_dropped_total",
                                  "Buffered market events dropped (oldest first): the buffer"
                                  " was full during a store fault (store.max_buffered_events)",
                                  value=float(getattr(store, "events_dropped", 0)))
        faults = CounterMetricFamily(f"{PREFIX}_faults",
                                     "Faults the daemon survived, logged in one line each, by "
                                     "kind (daemon/core/faults.py)", labels=["kind"])
        for kind in KINDS:
            faults.add_metric([kind], float(FAULTS[kind]))
        yield faults
        yield GaugeMetricFamily(f"{PREFIX}_clock_timestamp_seconds",
                                "Engine clock (wall time live, simulated time in a replay)",
                                value=eng.clock.now())
        yield GaugeMetricFamily(f"{PREFIX}_agents", "Agents running (all markets)",
                                value=float(len({a for s in eng.slots.values() for a in s})))
