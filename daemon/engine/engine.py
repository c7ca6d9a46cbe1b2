"""The evaluation engine: books, market state, store and agents wired to one bus and one clock.

Live (``paperarena run``) and replay (``paperarena replay``) build the same :class:`Engine`; only
the clock, the scheduler driving :meth:`Engine.on_job` and the event source differ.

Data flow: event -> bus -> taps (price cache / history / book mark / store buffer) -> subscribers
(metrics, alerts). Decision rounds and daily marks are scheduler jobs; each commits one store
transaction that also carries the books and a checkpoint of the market state.

Store faults: a round whose commit fails (:class:`~daemon.store.store.StoreWriteError`: disk full,
foreign write lock beyond ``store.busy_timeout``) leaves no trace in the books (the market's
book is rolled back to its state before the round, re-marked with the current prices) and its
agents are recorded with outcome ``error`` and the reason by the next commit that succeeds.
While the store is faulted, no agent is asked: each due round first retries a write, and is
recorded as ``error`` too if that fails; so is a round that cannot read the store (PostgreSQL
gone). Every fault is one log line and a count (:mod:`daemon.core.faults`).

Why one module over 500 lines: the engine is one class whose methods share the books, slots, jobs
and checkpoint it restores and commits together; a round is :mod:`.rounds`, protocol work lives in
the protocols' homes.
"""

from __future__ import annotations

import asyncio
import gc
import math
import sqlite3
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from agents.factory import build_agent
from agents.portbench.stage_scoring import score_engine
from daemon.config.markets import CostConfig, ScheduleConfig
from daemon.config.settings import Config
from daemon.core.bus import Bus
from daemon.core.events import DecisionEvent, Event, ResolutionEvent
from daemon.core.faults import one_line, report_fault
from daemon.core.price_columns import PriceColumns
from daemon.engine.rounds import AgentSlot, DecisionRound
from daemon.market.state import HISTORY_DAYS, MarketState
from daemon.store.records import DecisionRecord, RoundCommit
from daemon.store.store import Store, StoreWriteError
from daemon.timing.clock import Clock, SimClock
from daemon.timing.triggers import ScheduleSpec, make_trigger
from scoring.ledger.ledger import Book
from scoring.ledger.types import CostModel

if TYPE_CHECKING:
    from agents.capitalbench.runner import CapitalRunner

log = structlog.get_logger(__name__)

#: When each market's daily equity snapshot (used for daily returns and scoring) is taken.
MARK_SCHEDULES: dict[str, ScheduleSpec] = {
    "equity": ScheduleSpec(kind="nyse", times=("close",)),
    "polymarket": ScheduleSpec(kind="daily", at="00:00", timezone="UTC"),
}


def cost_model(cfg: CostConfig) -> CostModel:
    """Build the ledger cost model of a market's config."""
    fee, slip = cfg.rates()
    return CostModel(fee_bps=fee, slippage_bps=slip)


def schedule_spec(cfg: ScheduleConfig) -> ScheduleSpec:
    """Translate a market's schedule config into a trigger spec."""
    return ScheduleSpec(kind=cfg.kind, times=tuple(cfg.times), every_seconds=cfg.every,
                        at=cfg.at, timezone=cfg.timezone)


#: Agent kinds whose rolling covariance window (``cov_window``) is read from the history.
_WINDOWED_KINDS = frozenset({"risk_parity", "equal_risk_contribution", "min_variance"})


def history_days(config: Config) -> int:
    """Return the daily closes kept per asset: 30, or more when an agent's window needs them.

    An AlphaForgeBench strategy's frame is its lookback's closes plus the current price; a
    PortBench agent's or covariance baseline's ``cov_window`` returns need ``cov_window + 1``
    closes, a momentum baseline its ``lookback_days`` (issue 29: no window is capped by the
    history kept).
    """
    need = [a.strategy.lookback - 1 for a in config.agents if a.protocol == "alphaforgebench"]
    need += [a.cov_window + 1 for a in config.agents
             if a.protocol == "portbench" or a.kind in _WINDOWED_KINDS]
    need += [a.lookback_days for a in config.agents if a.kind == "momentum"]
    return max([HISTORY_DAYS, *need])


def freeze_heap() -> None:
    """Collect once, then keep every object alive now out of the cyclic collector's scans.

    Called once a daemon or replay has built its engine and agents: the start-up heap (modules,
    litellm's tables, config, agents) never becomes garbage, and full collections that re-scan
    it stalled the event loop for 100 ms and more in the middle of a round of 1,000 agents.
    """
    gc.collect()
    gc.freeze()


class Engine:
    """Everything between the bus and the store for every enabled market."""

    def __init__(self, config: Config, *, clock: Clock, store: Store, bus: Bus | None = None
                 ) -> None:
        self.config = config
        self.clock = clock
        self.store = store
        self.bus = bus or Bus()
        self.markets = config.enabled_markets()
        self.books: dict[str, Book] = {}
        for m in self.markets:
            mc = getattr(config.markets, m)
            # Lazy marking: ticks only record prices; values are re-marked when read (rounds,
            # daily marks, alert checks, scrapes), which happens far less often than ticks.
            self.books[m] = Book(m, cost=cost_model(mc.cost), initial_cash=mc.initial_cash,
                                 lazy_mark=True)
        self.state = MarketState(self.books, on_resolved=self._on_resolved,
                                 history_days=history_days(config))
        self.slots: dict[str, dict[str, AgentSlot]] = {m: {} for m in self.markets}
        self.rounds = {m: DecisionRound(self, m) for m in self.markets}
        self.seq: int | None = None
        self._pending_resolutions: list[tuple[ResolutionEvent, Any]] = []
        self._resolution_log: list[ResolutionEvent] = []
        self.book_lock = asyncio.Lock()
        """Held from a round's first rebalance until its commit is stored or rolled back, and
        by every other commit: a commit never writes a book holding another round's
        uncommitted trades."""
        self._failed_slots: dict[tuple[str, float], tuple[tuple[str, ...], str]] = {}
        """(market, scheduled_ts) -> (agents, reason) of rounds whose commit failed."""
        self._retry_equity: list[tuple[str, str, float, str, float, float]] = []
        """Daily marks whose commit failed, written with the next commit."""
        self.stop_on_store_fault = False
        """Replay: skip every job once a job's write failed (the driver stops the replay)."""
        self.job_write_failed: str | None = None
        """Why the last job could not be stored; cleared by the next successful commit
        (never with :attr:`stop_on_store_fault`)."""
        self.mark_listeners: list[Callable[[str, float], None]] = []
        """Called with (market, ts) after each daily mark is stored (e.g. to refresh metrics)."""
        self._agents_built = False
        self.agent_ids: frozenset[str] | None = None
        """The agents this engine runs (``build_agents``' ``agent_ids``; None: every agent)."""
        self.capital: CapitalRunner | None = None
        if config.capitalbench is not None:
            from agents.capitalbench.runner import (
                CapitalRunner,  # agents' code, only when configured
            )

            self.capital = CapitalRunner(  # a replay's rounds are built from history
                self, build=lambda acfg: build_agent(acfg, clock=self.clock.now),
                retrospective=isinstance(clock, SimClock))
        """CapitalBench rounds (``[capitalbench]``): jobs ``capital:<track>``, fed by marks."""
        self._wire_taps()

    # -- setup ----------------------------------------------------------------------------------
    def _wire_taps(self) -> None:
        st = self.state
        self.bus.add_tap("price.#", st.on_price, batch=st.on_prices,  # type: ignore[arg-type]
                         columns=st.on_price_columns)
        self.bus.add_tap("news.#", st.on_news)  # type: ignore[arg-type]
        self.bus.add_tap("market.#", st.on_listed)  # type: ignore[arg-type]
        self.bus.add_tap("resolution.#", st.on_resolution)  # type: ignore[arg-type]
        self.bus.add_tap("history.#", st.on_history)  # type: ignore[arg-type]
        self.bus.add_tap("fundamentals.#", st.on_fundamentals)  # type: ignore[arg-type]
        self.bus.add_tap("bar.#", st.on_bar)  # type: ignore[arg-type]
        self.bus.add_tap("price.#", self._store_tap, batch=self._store_batch,
                         columns=self._store_columns)
        for pattern in ("news.#", "market.#", "resolution.#", "history.#", "fundamentals.#",
                        "bar.#"):
            self.bus.add_tap(pattern, self._store_tap)

    def _store_tap(self, ev: Event) -> None:
        self.store.add_event(ev, self.seq)

    def _store_batch(self, events: list[Event]) -> None:
        self.store.add_prices(events, self.seq)

    def _store_columns(self, prices: PriceColumns) -> None:
        if self.seq is None:
            self.store.add_price_columns(prices)
        else:  # a replay stores a row per price with its recording offset
            self.store.add_prices(prices.events(), self.seq)

    def build_agents(self, agent_ids: Iterable[str] | None = None) -> None:
        """Create the configured agents (optionally only ``agent_ids``) in their markets."""
        wanted = None if agent_ids is None else set(agent_ids)
        self.agent_ids = None if wanted is None else frozenset(wanted)
        for acfg in self.config.agents:
            if wanted is not None and acfg.id not in wanted:
                continue
            if acfg.protocol == "capitalbench":
                continue  # answers CapitalBench rounds only (self.capital), never trades
            agent = build_agent(acfg, clock=self.clock.now)
            for m in acfg.markets:
                if m not in self.books:
                    continue
                self.books[m].add_agent(acfg.id)
                self.slots[m][acfg.id] = AgentSlot(
                    agent, news_window=acfg.news_window, news_per_key=acfg.news_per_asset,
                    memory=max(acfg.memory, 1),
                )
        self._agents_built = True

    async def reload(self, new_config: Config) -> list[str]:
        """Apply the agents and alerts of ``new_config`` (SIGHUP); return what changed.

        Every new or changed agent is built before anything is touched, so a failing reload
        changes nothing. Removed agents leave the slots (their books stay); slot parameters
        follow the config; a halted agent stays halted (resume it through the API), and an agent
        added back gets its persisted status. Changes to any other section raise
        ``ValueError("restart required for: ...")``.
        """
        old, new = self.config.model_dump(), new_config.model_dump()
        fixed = sorted(k for k in old if k not in ("agents", "alerts") and old[k] != new.get(k))
        if fixed:
            raise ValueError(f"restart required for: {', '.join(fixed)}")
        old_cfgs = {a.id: a for a in self.config.agents}
        current = {aid: slot.agent for ss in self.slots.values() for aid, slot in ss.items()}
        built: dict[str, Any] = {}
        # CapitalBench agents answer rounds only (self.capital rebuilds them), never trade.
        trading = [a for a in new_config.agents if a.protocol != "capitalbench"]
        # Built in a worker thread: a constructor may take seconds (the first LLM agent imports
        # LiteLLM; a plugin's module and factory are its author's code) and the loop keeps
        # serving prices meanwhile. No agent's constructor needs the loop.
        for acfg in trading:
            prev = old_cfgs.get(acfg.id)
            if (acfg.id not in current or prev is None
                    or prev.model_copy(update={"markets": acfg.markets}) != acfg):
                # may raise: nothing changed yet
                built[acfg.id] = await asyncio.to_thread(build_agent, acfg, clock=self.clock.now)
        if self.capital is not None and any(a.kind == "llm" and a.protocol == "capitalbench"
                                            for a in new_config.agents):
            # CapitalBench agents are rebuilt on their next round, on the loop: import LiteLLM
            # (seconds, once per process) here, off the loop, before that.
            from agents.llm import load_litellm

            await asyncio.to_thread(load_litellm)
        day = datetime.fromtimestamp(self.clock.now(), UTC).date().isoformat()
        for aid, agent in built.items():  # carry today's LLM spend over to the rebuilt agent
            prev_agent: Any = current.get(aid)
            if hasattr(prev_agent, "spent") and hasattr(agent, "restore_usage"):
                agent.restore_usage(day, *prev_agent.spent(day))
        # A shared store refuses rows of agents this process does not own: claim new ones first.
        await self.store.claim_agents([aid for aid in built if aid not in current]
                                      + self._capital_agent_ids(new_config))
        persisted = {(a, m): (st, r) for a, m, st, r in await self.store.fetchall(
            "SELECT agent, market, status, reason FROM agent_state")}
        wanted = {a.id: a for a in trading}
        changes: list[str] = []
        for m in self.markets:
            slots = dict(self.slots[m])  # copy on write: running rounds keep their snapshot
            for aid in list(slots):
                if aid not in wanted or m not in wanted[aid].markets:
                    del slots[aid]
                    changes.append(f"removed {aid} from {m}")
            for acfg in trading:
                if m not in acfg.markets:
                    continue
                prev_slot = slots.get(acfg.id)
                if prev_slot is not None and acfg.id not in built:
                    slot = prev_slot  # same object: status changes made elsewhere are kept
                else:
                    slot = AgentSlot(built.get(acfg.id) or current[acfg.id])
                    if prev_slot is not None:
                        slot.status, slot.reason = prev_slot.status, prev_slot.reason
                        changes.append(f"updated {acfg.id} in {m}")
                    else:
                        slot.status, slot.reason = persisted.get((acfg.id, m), ("active", ""))
                        self.books[m].add_agent(acfg.id)
                        changes.append(f"added {acfg.id} to {m}")
                slot.news_window, slot.news_per_key = acfg.news_window, acfg.news_per_asset
                slot.memory = max(acfg.memory, 1)
                slots[acfg.id] = slot
            self.slots[m] = slots
        if old["alerts"] != new["alerts"]:
            changes.append("alerts")
        self.config = new_config
        if self.capital is not None:
            self.capital.reload()
        for aid in built:  # replaced agents release their processes (strategy workers)
            close = getattr(current.get(aid), "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.exception("agent close failed", agent=aid)
        return changes

    async def close_agents(self) -> None:
        """Let agents that hold processes release them (their ``aclose``, when they have one)."""
        seen: set[int] = set()
        for slots in self.slots.values():
            for slot in slots.values():
                close = getattr(slot.agent, "aclose", None)
                if close is None or id(slot.agent) in seen:
                    continue
                seen.add(id(slot.agent))
                try:
                    await close()
                except Exception:
                    log.exception("agent close failed", agent=getattr(slot.agent, "id", "?"))

    def _capital_agent_ids(self, config: Config) -> list[str]:
        """Return the CapitalBench agents of ``config`` this engine answers rounds for (their
        submissions are their rows: a shared store refuses them unless they are claimed)."""
        if self.capital is None:
            return []
        return [a.id for a in config.agents if a.protocol == "capitalbench"
                and (self.agent_ids is None or a.id in self.agent_ids)]

    def add_equity_universe(self, assets: Iterable[str]) -> None:
        """Add the configured equities to the equity book."""
        book = self.books.get("equity")
        if book is not None:
            for a in assets:
                book.add_asset(a)

    async def restore(self) -> int:
        """Rebuild books and market state from the store; return the replay offset to resume."""
        await self.store.claim_agents(sorted({a for ss in self.slots.values() for a in ss}
                                             | set(self._capital_agent_ids(self.config))))
        books = await self.store.load_books()
        for m, st in books.items():
            if m not in self.books:
                continue
            old = self.books[m]
            book = Book.from_state(st, cost=old.cost, lazy_mark=True)
            for a in old.agents:
                book.add_agent(a)
            for a in old.assets:
                book.add_asset(a)
            self.books[m] = book
        cp = await self.store.load_checkpoint()
        if cp is not None:
            self.state.restore(cp[2])
            if self.capital is not None:  # hook: CapitalBench's year of daily closes
                self.capital.restore(cp[2].get("capital_closes", {}))
        rows = await self.store.fetchall("SELECT agent, market, status, reason FROM agent_state")
        for agent, market, status, reason in rows:
            slot = self.slots.get(market, {}).get(agent)
            if slot is not None:
                slot.status, slot.reason = status, reason
        await self._restore_llm_usage()
        await self._restore_agent_state()
        if books:
            log.info("books restored from store", markets=sorted(books),
                     offset=self.state.offset)
        return self.state.offset

    async def _restore_agent_state(self) -> None:
        """Let agents with state kept in the store take it up (``restore_from_store``)."""
        for slots in self.slots.values():
            for agent_id, slot in slots.items():
                restore = getattr(slot.agent, "restore_from_store", None)
                if restore is not None:
                    try:
                        await restore(self.store.fetchall)
                    except Exception:
                        log.exception("agent state not restored", agent=agent_id)

    async def _restore_llm_usage(self) -> None:
        """Give LLM agents today's (UTC) spend from the store so budgets survive restarts."""
        day = datetime.fromtimestamp(self.clock.now(), UTC).date().isoformat()
        seen: set[str] = set()
        for slots in self.slots.values():
            for agent_id, slot in slots.items():
                restore = getattr(slot.agent, "restore_usage", None)
                if restore is None or agent_id in seen:
                    continue
                seen.add(agent_id)
                rows = await self.store.fetchall(
                    "SELECT COALESCE(SUM(COALESCE(tokens_in,0)+COALESCE(tokens_out,0)),0),"
                    " COALESCE(SUM(cost_usd),0) FROM llm_calls WHERE agent=?"
                    " AND date(scheduled_ts,'unixepoch')=?",
                    (agent_id, day),
                )
                tokens, cost = rows[0]
                restore(day, int(tokens), float(cost))

    def jobs(self) -> list[tuple[str, ScheduleSpec]]:
        """Return (job id, schedule) of every decision and daily-mark job."""
        out = []
        for m in self.markets:
            out.append((f"decide:{m}", schedule_spec(getattr(self.config.markets, m).schedule)))
            out.append((f"mark:{m}", MARK_SCHEDULES[m]))
        return out

    def triggers(self) -> list[tuple[str, Any]]:
        """Return (job id, APScheduler trigger) for every job."""
        out: list[tuple[str, Any]] = [(job_id, make_trigger(spec))
                                      for job_id, spec in self.jobs()]
        if self.capital is not None:
            out.extend(self.capital.triggers())
        return out

    # -- jobs -----------------------------------------------------------------------------------
    async def on_job(self, job_id: str, fire_ts: float, missed: bool) -> None:
        """Scheduler callback: run a decision round or take a daily equity mark.

        A store fault halts trading: the round is not run (or its effect on the book is undone)
        and its agents are recorded as ``error`` once the store is writable again.
        """
        kind, market = job_id.split(":", 1)
        store = self.store
        if kind == "capital" and self.capital is not None:
            try:
                await self.capital.on_job(market, fire_ts, missed)
            except Exception as exc:
                report_fault(log, "job", "capitalbench job failed", exc, job=job_id,
                             fire_ts=fire_ts)
            return
        if self.stop_on_store_fault and self.job_write_failed is not None:
            return
        if store.fault is not None:
            try:
                await store.probe_writable()  # retries the write; clears the fault
            except StoreWriteError as exc:
                self.job_write_failed = str(exc)
                if kind == "decide":
                    await self._hold_failed(market, fire_ts, str(exc))
                else:
                    self._retry_equity.extend(self._equity_rows(market, fire_ts, "daily"))
                return
        if market in self.rounds:  # issue 29: fills due at the next prices
            await self.rounds[market].fill_next_prices()
        before = self.books[market].state() if kind == "decide" else None
        resolved_before = set(self.state.resolved)
        try:
            if kind == "decide":
                await self.rounds[market].run(fire_ts, missed=missed)
            elif kind == "mark":
                await self.mark(market, fire_ts)
        except StoreWriteError as exc:
            self.job_write_failed = str(exc)
            if before is not None:
                self._roll_back_book(market, before, resolved_before)
                await self._hold_failed(market, fire_ts, str(exc))
            report_fault(log, "round_store", "round not stored: trading halted until the store "
                         "is writable again", job=job_id, fire_ts=fire_ts, error=str(exc))
        except (sqlite3.Error, OSError) as exc:  # a read the store could not answer (PgError)
            self.job_write_failed = f"{store.path}: store unreadable: {one_line(exc)}"
            if before is not None:  # reads come before any rebalance: the book is unchanged
                await self._hold_failed(market, fire_ts, f"store unreadable: {one_line(exc)}")
            report_fault(log, "round_store", "job could not read the store; its agents are "
                         "recorded as error once the store answers", exc, job=job_id,
                         fire_ts=fire_ts)
        except Exception as exc:
            if before is not None:
                self._roll_back_book(market, before, resolved_before)
                await self._hold_failed(market, fire_ts, f"round failed: {one_line(exc)}")
            report_fault(log, "job", "job failed", exc, job=job_id, fire_ts=fire_ts)
            log.debug("job failure traceback", job=job_id, exc_info=True)

    async def _hold_failed(self, market: str, scheduled_ts: float, reason: str) -> None:
        """Remember the undecided agents of a round that could not be stored."""
        try:
            done = await self.store.decided(market, scheduled_ts)
        except Exception:
            done = set()
        agents = tuple(a for a in self.slots[market] if a not in done)
        if agents:
            self._failed_slots[(market, scheduled_ts)] = (agents, reason)

    def _roll_back_book(self, market: str, before: dict[str, Any],
                        resolved_before: set[str]) -> None:
        """Restore ``market``'s book to ``before`` (its state when the round started), keeping
        what happened meanwhile that the round did not do: new agents and assets, the current
        prices and resolutions paid out."""
        old = self.books[market]
        book = Book.from_state(before, cost=old.cost, lazy_mark=True)
        for agent in old.agents:
            book.add_agent(agent)
        question_of = {a: q for q, members in old.questions().items() for a in members}
        for asset in old.assets:
            if not book.has_asset(asset):
                book.add_asset(asset, question=question_of.get(asset))
        for asset, price, ts in zip(old.assets, old.prices.tolist(), old.price_times.tolist(),
                                    strict=True):
            if math.isfinite(price) and math.isfinite(ts):
                book.set_price(asset, price, ts)
        for ev in self._resolution_log:
            if ev.market == market and ev.question_id not in resolved_before:
                book.resolve(ev.question_id, ev.payouts, ev.ts)
        self.books[market] = book
        log.warning("book rolled back to its state before the failed round", market=market)

    async def mark(self, market: str, ts: float) -> None:
        """Record every agent's mark-to-market equity (daily snapshot) in one commit.

        CASH first accrues the market's risk-free rate of one period (issue 27, point 6). A
        mark already stored (a resume from the checkpoint its commit wrote, whose clock is the
        mark's time) is not made again: its books, accrual included, are the checkpoint's, and
        writing its rows again would replace stored rows (breaking their hash chain). The hooks
        after it run as after any mark.
        """
        if await self._marked(market, ts):
            log.info("daily mark already stored: not made again", market=market, ts=ts)
        else:
            mc = getattr(self.config.markets, market)
            if mc.risk_free_rate:
                async with self.book_lock:
                    self.books[market].accrue(mc.risk_free_rate / mc.periods_per_year)
            rc = RoundCommit()
            self.add_equity_rows(rc, market, ts, "daily")
            await self.commit(rc)
        if market == "equity" and self.capital is not None:
            try:
                await self.capital.on_mark(ts)
            except Exception:
                log.exception("capitalbench prices not stored", ts=ts)
        if market == "equity":  # PortBench's delayed scoring (issue 13, point 6)
            await score_engine(self, ts)
        for listener in self.mark_listeners:
            listener(market, ts)

    async def _marked(self, market: str, ts: float) -> bool:
        """Tell whether the daily mark of ``market`` at ``ts`` is stored (its first agent's
        row: a key lookup)."""
        agents = self.books[market].agents
        if not agents:
            return False
        rows = await self.store.fetchall(
            "SELECT 1 FROM equity WHERE agent=? AND market=? AND kind='daily' AND ts=?",
            (agents[0], market, ts))
        return bool(rows)

    def add_equity_rows(self, rc: RoundCommit, market: str, ts: float, kind: str) -> None:
        """Append a (value, cash) snapshot of every agent in ``market`` to ``rc``."""
        rc.equity.extend(self._equity_rows(market, ts, kind))

    def _equity_rows(self, market: str, ts: float, kind: str
                     ) -> list[tuple[str, str, float, str, float, float]]:
        book = self.books[market]
        values = book.mark()
        cash = book.cash
        return [(agent, market, ts, kind, float(values[i]), float(cash[i]))
                for i, agent in enumerate(book.agents)]

    def checkpoint(self) -> tuple[int, float, dict[str, Any]]:
        """Return (offset, clock, market state) for a consistent restart point."""
        self.state.clock = self.clock.now()
        st = self.state.state()
        if self.capital is not None:  # hook: CapitalBench's year of daily closes
            st["capital_closes"] = self.capital.state()
        return self.state.offset, self.state.clock, st

    async def commit(self, rc: RoundCommit, *, locked: bool = False) -> None:
        """Commit ``rc`` with every book, pending resolutions and a checkpoint, atomically.

        Rounds that could not be stored earlier are added as ``error`` decisions, and daily
        marks that could not be stored are retried. On :class:`StoreWriteError` nothing is
        written and everything pending stays pending. ``locked``: the caller holds
        :attr:`book_lock` (a round between its rebalances and their commit).
        """
        if locked:
            await self._commit(rc)
            return
        async with self.book_lock:
            await self._commit(rc)

    async def _commit(self, rc: RoundCommit) -> None:
        # Take the failed slots now: another job may add some while this commit awaits.
        slots, self._failed_slots = self._failed_slots, {}
        slots = await self._undecided(slots)
        rc.books = {m: b.state() for m, b in self.books.items()}
        rc.checkpoint = self.checkpoint()
        resolutions, self._pending_resolutions = self._pending_resolutions, []
        rc.resolutions = [
            (ev.question_id, ev.market, ev.ts, dict(ev.payouts), ev.source)
            for ev, _ in resolutions
        ]
        held = self._failed_decisions(rc, slots)
        retried = self._retry_equity
        self._retry_equity = []
        rc.decisions.extend(held)
        rc.equity.extend(retried)
        try:
            await self.store.commit_round(rc)
        except StoreWriteError:
            self._pending_resolutions = resolutions + self._pending_resolutions
            for key, value in slots.items():
                self._failed_slots.setdefault(key, value)
            if held:
                del rc.decisions[-len(held):]
            self._retry_equity = [e for e in rc.equity if e[3] == "daily"]
            raise
        if held:
            log.warning("rounds not stored during the store fault recorded as error",
                        decisions=len(held))
            for d in held:
                await self.bus.publish(DecisionEvent(
                    ts=d.decided_ts, recv_ts=d.decided_ts, agent=d.agent,
                    market=d.market,  # type: ignore[arg-type]
                    scheduled_ts=d.scheduled_ts, outcome=d.outcome, reason=d.reason))
        if not self.stop_on_store_fault:
            self.job_write_failed = None

    async def _undecided(self, slots: dict[tuple[str, float], tuple[tuple[str, ...], str]]
                         ) -> dict[tuple[str, float], tuple[tuple[str, ...], str]]:
        """Return the failed slots without the agents the store has a decision of (a commit
        whose answer was lost with the connection may have been stored after all).

        A read that fails puts the slots back and raises :class:`StoreWriteError`.
        """
        out = {}
        try:
            for (market, ts), (agents, reason) in slots.items():
                done = await self.store.decided(market, ts) if agents else set()
                left = tuple(a for a in agents if a not in done)
                if left:
                    out[(market, ts)] = (left, reason)
        except (sqlite3.Error, OSError) as exc:
            for key, value in slots.items():
                self._failed_slots.setdefault(key, value)
            raise StoreWriteError(f"{self.store.path}: store unreadable: {one_line(exc)}"
                                  ) from None
        return out

    def _failed_decisions(self, rc: RoundCommit,
                          slots: dict[tuple[str, float], tuple[tuple[str, ...], str]]
                          ) -> list[DecisionRecord]:
        now = self.clock.now()
        keys = {(d.agent, d.market, d.scheduled_ts) for d in rc.decisions}
        return [
            DecisionRecord(agent, market, ts, now, "error",
                           reason=f"round not stored: {reason}"[:500])
            for (market, ts), (agents, reason) in sorted(slots.items())
            for agent in agents if (agent, market, ts) not in keys
        ]

    def _on_resolved(self, ev: ResolutionEvent, paid: Any) -> None:
        self._resolution_log.append(ev)
        self._pending_resolutions.append((ev, paid))
        log.info("question resolved", question=ev.question_id, payouts=dict(ev.payouts))
