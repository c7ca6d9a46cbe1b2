"""One scheduled decision round: observe, ask every agent, validate, rebalance, commit, publish.

Outcomes stored per decision:
- ``ok``: a valid allocation was applied (a fill is stored, possibly with zero trades);
- ``hold``: the agent chose to keep its portfolio as it is (no fill);
- ``invalid``: the answer failed validation (the agent holds its current portfolio);
- ``rejected``: the ledger refused it (e.g. no price) — holds;
- ``error``: the agent raised or timed out — holds;
- ``paused`` / ``halted``: the agent is not asked (budget, drawdown halt) — holds;
- ``skipped``: too few tradable assets had a fresh price (``min_price_coverage`` of the market,
  staleness ``stale_after``): no agent was asked, nothing was filled; the reason names the assets
  without a fresh price and the age of their last one;
- ``missed``: the round came later than the misfire grace and was not run;
- ``abandoned``: the daemon stopped before the round finished (see :func:`record_abandoned`).
The whole round, with every buffered market event and the books, is one store transaction, and
one log line per round gives the outcome counts and the price coverage (fresh / universe).
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import structlog

from agents.base import (
    AGENT_DEADLINE,
    Agent,
    AgentDecision,
    LookAheadError,
    MarketView,
    Observation,
    PricePoint,
    assert_no_lookahead,
)
from agents.reasoning import reasoning_json
from agents.stored_input import agent_row
from agents.validation import InvalidAllocation, validate_allocation
from daemon.core.bus import Bus
from daemon.core.events import DecisionEvent, FillEvent, Market
from daemon.core.logs import redact_text
from daemon.core.sparse_rows import asset_list, encode_allocation, fill_columns
from daemon.engine.next_fill import NEXT_PRICE_REASON, NextPriceFills
from daemon.engine.round_gc import no_full_collection
from daemon.engine.round_release import release
from daemon.market.coverage import PriceCoverage, format_age
from daemon.market.open_fill import at_prices, missing_open_reason
from daemon.market.state import MarketState
from daemon.store.records import DecisionRecord, FillRecord, RoundCommit
from daemon.store.store import Store
from daemon.timing.clock import Clock
from scoring.ledger.batch import rebalance_many
from scoring.ledger.ledger import Book
from scoring.ledger.types import RebalanceRejected

if TYPE_CHECKING:
    from daemon.config.settings import Config

log = structlog.get_logger(__name__)


#: A round yields to the event loop after this much work (seconds), so a round of many agents
#: does not hold back prices on the bus.
YIELD_EVERY = 0.002


@dataclass(slots=True)
class AgentSlot:
    """An agent as the engine runs it in one market."""

    agent: Agent
    news_window: float = 172_800.0
    news_per_key: int = 5
    memory: int = 5
    status: str = "active"
    """``active``, ``halted`` (drawdown) or ``paused`` (budget)."""
    reason: str = ""


class RoundHost(Protocol):
    """What a round needs from its engine (:class:`daemon.engine.engine.Engine` is one)."""

    config: Config
    clock: Clock
    store: Store
    bus: Bus
    books: dict[str, Book]
    state: MarketState
    slots: dict[str, dict[str, AgentSlot]]
    book_lock: asyncio.Lock
    """Held from a round's first rebalance until its commit is stored or rolled back."""

    @property
    def rounds(self) -> Mapping[str, DecisionRound]:
        """Return the round runner of every market."""
        ...

    async def commit(self, rc: RoundCommit, *, locked: bool = False) -> None:
        """Commit ``rc`` with the books and a checkpoint, atomically (``locked``: the caller
        holds :attr:`book_lock`)."""
        ...

    def add_equity_rows(self, rc: RoundCommit, market: str, ts: float, kind: str) -> None:
        """Append a (value, cash) snapshot of every agent in ``market`` to ``rc``."""
        ...


class _Pauser:
    """Yield to the event loop once ``every`` seconds of work have passed (prices keep flowing
    through the bus during a long round)."""

    __slots__ = ("_clock", "_every", "_last")

    def __init__(self, clock: Callable[[], float], every: float = YIELD_EVERY) -> None:
        self._clock = clock
        self._every = every
        self._last = clock()

    async def __call__(self) -> None:
        now = self._clock()
        if now - self._last >= self._every:
            # Two turns of the loop: a source's read loop publishes what arrived meanwhile in
            # the first, the subscribers it woke take it in the second (with one turn they
            # waited for the round's next stretch of work).
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            self._last = self._clock()


@dataclass(slots=True)
class RoundResult:
    """What a round did, for callers and tests."""

    market: str
    scheduled_ts: float
    outcomes: dict[str, str] = field(default_factory=dict)
    coverage: PriceCoverage | None = None
    """Fresh prices / tradable assets at the decision time (``None`` for a missed round)."""


class DecisionRound:
    """Run one market's decision rounds for its agents."""

    def __init__(self, engine: RoundHost, market: str,
                 monotonic: Callable[[], float] = time.perf_counter) -> None:
        self.engine = engine
        self.market: Market = cast(Market, market)  # a configured market name
        self._monotonic = monotonic
        self.in_flight: dict[float, tuple[str, ...]] = {}
        """scheduled_ts -> agents of rounds started and not finished (kept when cancelled)."""
        self._recent_fills: dict[str, list[tuple[float, tuple[float, dict[str, float], float]]]]
        self._recent_fills = {}
        """Agent -> its last fills as (scheduled_ts, (ts, weights, value after)), oldest first."""
        self._recent_limit: dict[str, int] = {}
        """Agent -> how many fills :attr:`_recent_fills` holds at most."""
        self.next_fills: NextPriceFills | None = None
        """The targets waiting for their next prices (``fill_at = "next_price"``; issue 29)."""

    async def run(self, scheduled_ts: float, *, missed: bool = False) -> RoundResult:
        """Run (or record as missed) the round scheduled at ``scheduled_ts``."""
        self.in_flight[scheduled_ts] = tuple(self.engine.slots[self.market])
        try:
            with no_full_collection():  # no full GC scan stalls prices mid-round
                result = await self._run(scheduled_ts, missed=missed)
        except Exception:
            self.in_flight.pop(scheduled_ts, None)
            raise
        # A cancelled round (shutdown) stays in flight for record_abandoned().
        self.in_flight.pop(scheduled_ts, None)
        return result

    async def _run(self, scheduled_ts: float, *, missed: bool = False) -> RoundResult:
        eng = self.engine
        market = self.market
        result = RoundResult(market, scheduled_ts)
        slots = eng.slots[market]
        done = await eng.store.decided(market, scheduled_ts)
        todo = [a for a in slots if a not in done]
        if not todo:
            return result
        now = eng.clock.now()
        book = eng.books[market]
        rc = RoundCommit()
        events: list[DecisionEvent | FillEvent] = []
        if missed:
            for agent_id in todo:
                rc.decisions.append(DecisionRecord(agent_id, market, scheduled_ts, now, "missed",
                                                   reason="later than the misfire grace"))
                result.outcomes[agent_id] = "missed"
                events.append(DecisionEvent(ts=now, recv_ts=now, agent=agent_id, market=market,
                                            scheduled_ts=scheduled_ts, outcome="missed"))
            await eng.commit(rc)
            await self._publish(events)
            self._log(result)
            return result

        mc = getattr(eng.config.markets, market)
        result.coverage = cov = eng.state.price_coverage(market, now, mc.stale_after)
        opens: dict[str, PricePoint] | None = None
        reason = ""
        if not cov.enough(mc.min_price_coverage):
            limit = format_age(mc.stale_after)
            if market == "equity":
                limit += " of NYSE open time"
            reason = cov.reason(mc.min_price_coverage, limit)
        elif mc.schedule.fill_at == "session_open":  # StockBench: at the opening prices
            opens, missing = eng.state.opening_prices(market, now)
            if missing:
                reason = missing_open_reason(missing)
        if reason:
            for agent_id in todo:
                rc.decisions.append(DecisionRecord(agent_id, market, scheduled_ts, now, "skipped",
                                                   reason=reason))
                result.outcomes[agent_id] = "skipped"
                events.append(DecisionEvent(ts=now, recv_ts=now, agent=agent_id,
                                            market=market,
                                            scheduled_ts=scheduled_ts, outcome="skipped",
                                            reason=reason))
            await eng.commit(rc)
            await self._publish(events)
            self._log(result, reason)
            return result

        observations: dict[str, Observation] = {}
        inputs: dict[str, tuple[str, bytes, str]] = {}
        """agent -> (SHA-256 of its whole input, its own part, the market-wide part's hash)"""
        market_shas: dict[int, str] = {}
        asset_index: dict[str, dict[str, int]] = {}
        """market-wide part's hash -> asset -> its index in the round's asset list"""
        calls: list[tuple[str, asyncio.Future[AgentDecision] | AgentDecision]] = []
        recents = await self._recent(todo, slots)
        # The market-wide part once per (news window, news per key), every agent's position
        # from one snapshot: prices arriving while the round yields change neither.
        views: dict[tuple[float, int], MarketView] = {}
        with at_prices(book, opens):
            snapshot = book.snapshot()
        pause = _Pauser(self._monotonic)
        for agent_id in todo:
            slot = slots[agent_id]
            key = (slot.news_window, slot.news_per_key)
            view = views.get(key)
            if view is None:
                view = views[key] = eng.state.market_view(
                    market, now, news_window=slot.news_window, news_per_key=slot.news_per_key,
                    prices_at=opens)
                assert_no_lookahead(view.observation(
                    agent_id, holdings={}, cash=0.0, value=0.0, initial_value=0.0, weights={}))
            obs = eng.state.agent_observation(view, agent_id, recents[agent_id], snapshot)
            for past in obs.recent_allocations:  # the rest is the view's, checked above
                if past.ts > now:
                    raise LookAheadError(f"past allocation at {past.ts} is after decision "
                                         f"time {now}")
            observations[agent_id] = obs
            # Encoded before the agent is asked: stored and hashed as given, whatever it does.
            # The market-wide part is stored once per round, each agent's part in its row
            # (its past allocations as the times of the fills they are).
            whole, own = view.encode_parts(obs)
            msha = market_shas.get(id(view))
            if msha is None:
                mjson = view.market_json()
                msha = market_shas[id(view)] = hashlib.sha256(mjson).hexdigest()
                rc.observations[msha] = (market, now, mjson.decode())
                # Allocations name assets by index into the round's asset list (v11).
                asha, ajson, asset_index[msha] = asset_list(view.assets)
                rc.observation_assets[msha] = (asha, ajson)
            inputs[agent_id] = (hashlib.sha256(whole).hexdigest(), agent_row(own, obs), msha)
            await pause()
            if slot.status != "active":
                calls.append((agent_id, AgentDecision(None, outcome=slot.status,
                                                      reason=slot.reason)))
            else:
                calls.append((agent_id, asyncio.ensure_future(self._ask(slot.agent, obs))))
        started = eng.clock.now()  # the engine clock: simulated (not moving) in a replay
        decisions: dict[str, AgentDecision] = {}
        for agent_id, c in calls:
            decisions[agent_id] = c if isinstance(c, AgentDecision) else await c
        duration = max(0.0, eng.clock.now() - started)

        # The book lock spans the rebalances and their commit: no other commit may store this
        # book while it holds trades that are not stored yet. On a failed commit the engine
        # rolls the book back before anything else runs (Engine.on_job).
        async with eng.book_lock:
            # Every answer validated first, then the valid ones applied in one vectorised call
            # (all at the same prices); each fill is built from its arrays when reached below.
            checked: dict[str, dict[str, float] | InvalidAllocation] = {}
            for agent_id, _ in calls:
                dec = decisions[agent_id]
                if dec.allocation is not None and dec.outcome == "ok":
                    await pause()
                    try:
                        checked[agent_id] = validate_allocation(dec.allocation,
                                                                observations[agent_id])
                    except InvalidAllocation as exc:
                        checked[agent_id] = exc
            targets = [(a, t) for a, t in checked.items() if not isinstance(t, InvalidAllocation)]
            later = mc.schedule.fill_at == "next_price"  # filled by NextPriceFills
            with at_prices(book, opens):  # the session's opening prices, if so scheduled
                applied = rebalance_many(book, [] if later else targets)
            slot_of = {a: i for i, (a, _) in enumerate(targets)}
            for agent_id, _ in calls:
                await pause()
                dec = decisions[agent_id]
                outcome, reason, allocation = dec.outcome, dec.reason, None
                fill_rec = None
                if dec.allocation is not None and outcome == "ok":
                    got = checked[agent_id]
                    if isinstance(got, InvalidAllocation):
                        outcome, reason = "invalid", str(got)
                    else:
                        allocation = got
                        res = None if later else applied[slot_of[agent_id]]
                        if res is None:
                            reason = NEXT_PRICE_REASON
                        elif isinstance(res, RebalanceRejected):
                            outcome, reason = "rejected", str(res)
                        else:
                            trades = {a: q for a, q in zip(res.assets, res.trades.tolist(),
                                                           strict=True) if q != 0.0}
                            # Encoded here, between pauses, not all at once in the commit.
                            wjson, wsha, wassets, tjson = fill_columns(res.weights_after,
                                                                       trades)
                            fill_rec = FillRecord(
                                agent_id, market, scheduled_ts, now, trades,
                                res.traded_value, res.cost, res.value_before, res.value_after,
                                res.weights_after, trades_json=tjson,
                                weights_json=wjson, assets_sha256=wsha, assets_json=wassets,
                            )
                elif outcome == "ok":
                    outcome, reason = "invalid", reason or "no allocation"
                if outcome == "hold":
                    allocation = None
                if fill_rec is not None:
                    rc.fills.append(fill_rec)
                    events.append(FillEvent(
                        ts=now, recv_ts=now, agent=agent_id, market=market,
                        scheduled_ts=scheduled_ts, trades=fill_rec.trades,
                        traded_value=fill_rec.traded_value,
                        cost=fill_rec.cost, value_before=fill_rec.value_before,
                        value_after=fill_rec.value_after, weights=fill_rec.weights,
                    ))
                answer = (json.dumps(dict(dec.allocation), sort_keys=True)
                          if dec.allocation is not None else "")
                raw = redact_text(dec.raw_output or answer)
                reason = redact_text(reason)  # provider errors can echo credentials
                sha, row, msha = inputs[agent_id]
                stored_calls = [_redacted_call(c) for c in dec.calls]
                rc.decisions.append(DecisionRecord(
                    agent_id, market, scheduled_ts, now, outcome, reason=reason,
                    input_json=row.decode(), input_sha256=sha, observation_sha256=msha,
                    raw_output=raw, allocation=allocation, template_version=dec.template_version,
                    allocation_json=encode_allocation(allocation, asset_index.get(msha)),
                    attempts=dec.attempts, duration_s=duration, calls=stored_calls,
                    reasoning=reasoning_json(stored_calls, raw, redact_text(dec.reasoning or "")),
                ))
                result.outcomes[agent_id] = outcome
                events.append(DecisionEvent(
                    ts=now, recv_ts=now, agent=agent_id, market=market, scheduled_ts=scheduled_ts,
                    outcome=outcome, allocation=allocation, reason=reason, duration_s=duration,
                ))
                if outcome not in ("ok", "hold", "paused", "halted"):
                    log.warning("decision not applied", agent=agent_id, market=market,
                                outcome=outcome, reason=reason)
            eng.add_equity_rows(rc, market, now, "decision")
            await eng.commit(rc, locked=True)
            if later:
                if self.next_fills is None:
                    self.next_fills = NextPriceFills(eng, market, self.fill_next_prices)
                self.next_fills.defer(now, scheduled_ts, [
                    (a, t, observations[a].holdings) for a, t in targets])
        pause = _Pauser(self._monotonic)  # from the commit's end: what follows yields too
        await self._remember(rc.fills, pause)
        await self._publish(events, pause)
        self._log(result)
        # Freed a slice at a time, not in one turn as the frame ends (issue 31 point 3).
        await release(pause, events, rc.decisions, rc.fills, rc.equity, calls,
                      observations, inputs, decisions, checked, slot_of, recents)
        return result

    async def fill_next_prices(self) -> None:
        """Fill the targets waiting for their next prices (``fill_at = "next_price"``), keep
        the fills in the agents' memory and publish them."""
        if self.next_fills is None or not self.next_fills.pending:
            return
        fills, events = await self.next_fills.settle_or_roll_back()
        pause = _Pauser(self._monotonic)
        await self._remember(fills, pause)
        await self._publish(list(events), pause)

    async def _recent(self, agents: list[str], slots: Mapping[str, AgentSlot]
                      ) -> dict[str, list[tuple[float, dict[str, float], float]]]:
        """Return each agent's last ``memory`` fills (ts, weights, value after), oldest first.

        Read from the store in one query the first time (or when an agent's memory grows),
        then kept up to date from the fills this runner commits.
        """
        need = [a for a in agents if self._recent_limit.get(a, 0) < max(slots[a].memory, 1)]
        if need:
            limit = max(max(slots[a].memory, 1) for a in need)
            got = await self.engine.store.recent_allocations_of(self.market, need, limit)
            for a in need:
                self._recent_fills[a] = [(ts, (ts, w, v)) for ts, w, v in got[a]]
                self._recent_limit[a] = limit
        out = {}
        for a in agents:
            n = max(slots[a].memory, 1)
            out[a] = [e for _, e in self._recent_fills[a][-n:]]
        return out

    async def _remember(self, fills: list[FillRecord], pause: _Pauser) -> None:
        """Add committed fills to the recent allocations kept (as the store returns them)."""
        for f in fills:
            await pause()
            kept = self._recent_fills.get(f.agent)
            if kept is None or f.market != self.market:
                continue
            weights = dict(sorted(f.weights.items()))  # as stored: sorted keys, floats
            # A batch fill's weights are floats already (its JSON was encoded from them).
            if f.weights_json is None and not all(type(v) is float for v in weights.values()):
                weights = json.loads(json.dumps(weights))
            bisect.insort(kept, (f.scheduled_ts, (float(f.ts), weights, float(f.value_after))),
                          key=lambda e: e[0])
            del kept[:-self._recent_limit[f.agent]]

    def _log(self, result: RoundResult, reason: str = "") -> None:
        """Log the round in one line: outcome counts and price coverage."""
        counts = dict(sorted(Counter(result.outcomes.values()).items()))
        cov = None if result.coverage is None else result.coverage.text
        kw: dict[str, Any] = {"market": self.market, "scheduled_ts": result.scheduled_ts,
                              "outcomes": counts, "coverage": cov}
        if "skipped" in counts:
            log.warning("round skipped", **kw, reason=reason)
        elif "missed" in counts:
            log.warning("round missed", **kw)
        else:
            log.info("round decided", **kw)

    async def _ask(self, agent: Agent, obs: Observation) -> AgentDecision:
        try:
            return await asyncio.wait_for(agent.decide(obs), AGENT_DEADLINE)
        except TimeoutError:
            return AgentDecision(None, outcome="error", reason="agent deadline exceeded")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return AgentDecision(None, outcome="error", reason=f"agent raised {exc!r}"[:500])

    async def _publish(self, events: list[DecisionEvent | FillEvent],
                       pause: _Pauser | None = None) -> None:
        pause = pause or _Pauser(self._monotonic)
        for ev in events:
            await self.engine.bus.publish(ev)
            await pause()


async def record_abandoned(engine: RoundHost) -> int:
    """Record every undecided agent of a cancelled, in-flight round as ``abandoned``."""
    n = 0
    for rnd in engine.rounds.values():
        for scheduled_ts, agents in sorted(rnd.in_flight.items()):
            done = await engine.store.decided(rnd.market, scheduled_ts)
            now = engine.clock.now()
            rc = RoundCommit()
            events: list[DecisionEvent | FillEvent] = []
            for agent_id in agents:
                if agent_id in done:
                    continue
                rc.decisions.append(DecisionRecord(
                    agent_id, rnd.market, scheduled_ts, now, "abandoned",
                    reason="daemon stopped before the decision finished"))
                events.append(DecisionEvent(ts=now, recv_ts=now, agent=agent_id,
                                            market=rnd.market, scheduled_ts=scheduled_ts,
                                            outcome="abandoned"))
            if rc.decisions:
                await engine.commit(rc)
                await rnd._publish(events)
                n += len(rc.decisions)
                log.warning("decisions abandoned at shutdown", market=rnd.market,
                            scheduled_ts=scheduled_ts, agents=[d.agent for d in rc.decisions])
        rnd.in_flight.clear()
    return n


def _redacted_call(call: Any) -> dict[str, Any]:
    """Return a model-call record with credentials removed from every text (response, error)."""
    return {k: redact_text(v) if isinstance(v, str) else v for k, v in dict(call).items()}
