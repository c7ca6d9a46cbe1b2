"""Replay a bundle's season from its stored answers (issue 32, point 3): no model, no key.

The bundle's store holds every market event the season saw, every model answer and the lineup
(the run's config). :func:`replay_store` runs the season again through the replay's own engine
code (:func:`~daemon.app.replay.replay_session`, :class:`~daemon.app.replay.ReplayDriver`,
one simulated clock) into a fresh store, from the stored rows
(:mod:`daemon.app.bundle_replay.rows`):

- the market events are read back from ``market_events`` in stored (arrival) order, each
  keeping its source time; a live event is applied when the live run received it (``recv_ts``,
  never earlier than the one before), a live burst of prices as one batch (as the source
  published it: the books' incremental marks round as they did live), a replayed event at its
  own time;
- each round runs with the clock at the time the live round read it (the decision's stored
  ``decided_ts``: a live round starts a little after its scheduled time), after every live
  event received by then (a round that started late saw them), the daily marks at
  their scheduled times, up to the last stored round or mark; a live event received while the
  round's agents were answering (by ``decided_ts`` plus the round's stored ``duration_s``)
  reaches the books before the round's fills, as it did live; a round stored ``missed`` is
  missed again, one stored ``abandoned`` (the run stopped during it) is stored so again;
- each LLM agent (LiveTradeBench, StockBench, PortBench, AlphaForgeBench) is its protocol's
  own agent whose model calls are answered, in order, by the calls stored for that agent and
  decision (:func:`agents.prompt_replay.answer_from_store`): every answer is parsed again by
  the protocol's code, as a live answer is (an AlphaForgeBench strategy runs again in the
  sandbox); usage and latency are the stored ones. The protocols' state (StockBench's past
  actions, PortBench's views, AlphaForgeBench's strategy version) is rebuilt by the replayed
  decisions themselves. Baselines run as they did;
- CapitalBench rounds run the season's own round code at their stored freeze times, each
  agent's calls answered by the calls stored with its submission
  (:mod:`daemon.app.bundle_replay.capital`);
- an HTTP or plugin agent (its answer is its decision) is a stand-in answering each round with
  its stored decision (:class:`agents.prompt_replay.StoredDecisionAgent`): the engine
  validates and fills it again, and hashes the observation it is given.

:func:`rebuilt_report` then computes ``report --json`` of the replayed store (with the bundle's
season record, which the replay does not recompute); the bundle check compares it byte for byte
with ``report.json``, and every replayed decision (its time, outcome, reason, input hash, raw
answer, allocation) and fill with the stored one (:func:`first_decision_difference`), and every
CapitalBench round and submission
(:func:`~daemon.app.bundle_replay.capital.first_capital_difference`).

A store written by several live runs (a restart) is replayed run after run into the same
output store, each run with its stored config, resuming from the checkpoint the run before
left, as the daemon does at a restart (the rounds due while it was down settled first). A
config reloaded while running (SIGHUP; stored in ``config_reloads`` since schema v17) is
applied again inside its run at its stored time, after the events the live run had received
by then and the rounds due before it (but one that read the clock only after it: that round
took the reloaded agents live), by the replayed engine's own reload; the agents it built
answer from the stored rows as the others do (:mod:`daemon.app.bundle_replay.reloads`).

The runs of one ``paperarena replay`` stopped and run again (all ``replay``, one config) are
replayed as one run (:func:`~daemon.app.bundle_replay.runs.merged_runs`): a resumed replay ends
as an uninterrupted one. What cannot be replayed is refused in one line
(:class:`BundleReplayRefused`): CapitalBench rounds whose briefing is neither stored nor here,
a store of live and replay runs, or of replay runs with different configs, and a season
amendment that neither a run's start nor a stored reload took (a reload by a daemon before
schema v17, which stored no config). An event received within a millisecond or so of the
moment the live round read the clock (or reloaded) may have reached the books on the other side
of it (the stored rows do not say which came first): the check then names the round.
"""

from __future__ import annotations

import json
import math
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.llm import LlmAgent
from daemon.app.bundle_replay.agents import answer_llm, stand_ins, wait_for_events
from daemon.app.bundle_replay.capital import (
    StoredCapital,
    capital_refusal,
    first_capital_difference,
    replay_capital,
    stored_capital,
)
from daemon.app.bundle_replay.reloads import (
    StoredReload,
    apply_reload,
    first_season_difference,
    stored_reloads,
    unmatched_amendment,
)
from daemon.app.bundle_replay.rows import (
    StoredRound,
    failed_bars,
    first_decision_difference,
    stored_calls,
    stored_decisions,
    stored_events,
    stored_rounds,
)
from daemon.app.bundle_replay.runs import forget_replay, merged_runs
from daemon.app.replay import (
    JobCallback,
    ReplayDriver,
    ReplayError,
    replay_session,
)
from daemon.config.settings import Config, ConfigError, parse_config
from daemon.core.events import Event
from daemon.engine.engine import Engine
from daemon.store.dbfile import connect_readonly
from daemon.store.records import DecisionRecord, RoundCommit
from daemon.store.store import StoreWriteError
from daemon.timing.clock import SimClock

__all__ = ["BundleReplayError", "BundleReplayRefused", "first_decision_difference",
           "rebuilt_report", "refusal", "replay_store"]

#: The agent kinds a replay runs as they are (they call no model).
BASELINES = frozenset({"cash", "equal_weight", "buy_and_hold", "momentum", "random_guess",
                       "sixty_forty", "risk_parity", "equal_risk_contribution", "min_variance"})


#: The LLM protocols a replay answers from the stored calls (CapitalBench's with its rounds).
REPLAYED_PROTOCOLS = frozenset({"livetradebench", "stockbench", "portbench", "alphaforgebench",
                                "capitalbench"})


class BundleReplayError(Exception):
    """The season cannot be replayed (one line)."""


class BundleReplayRefused(BundleReplayError):
    """The season holds what a replay from stored answers does not support yet (one line)."""


class StoredTimesClock(SimClock):
    """A simulated clock that reads :attr:`at` while a live round's time is being replayed."""

    def __init__(self, start: float) -> None:
        """Create the clock at ``start``."""
        super().__init__(start)
        self.at: float | None = None

    def now(self) -> float:
        """Return the replayed round's live time inside a round, else the simulated time."""
        return super().now() if self.at is None else self.at


def refusal(config: Config, capital: StoredCapital | None = None) -> str | None:
    """Return why ``config``'s season cannot be replayed from stored answers (None: it can);
    ``capital``: the store's CapitalBench rounds (a round whose briefing is neither here nor
    stored cannot be)."""
    if config.capitalbench is not None and (
            why := capital_refusal(config.capitalbench, capital)):
        return why
    for a in config.agents:
        if a.kind == "llm" and a.protocol not in REPLAYED_PROTOCOLS:
            return (f"agent {a.id}: protocol {a.protocol} cannot be replayed from stored "
                    "answers yet")
    return None


@dataclass(frozen=True, slots=True)
class _Run:
    """One run that wrote the store (a ``runs`` row; a resumed replay's rows as one), with the
    reloads applied in it."""

    id: int
    started: float
    stopped: float | None
    mode: str
    config: Config
    reloads: tuple[StoredReload, ...] = ()

    def remote(self) -> list[str]:
        """Return the HTTP and plugin agents of the run's configs (its start's and reloads')."""
        return sorted({a.id for c in (self.config, *(r.config for r in self.reloads))
                       for a in c.agents if a.kind != "llm" and a.kind not in BASELINES})


def _parse(text: str, name: str, capital: StoredCapital | None = None) -> Config:
    """Return the stored config ``text`` (``name``: what it is) if it can be replayed
    (``capital``: the store's CapitalBench rounds)."""
    try:
        config = parse_config(json.loads(text), name)
    except (ConfigError, ValueError) as exc:
        raise BundleReplayError(f"{name} cannot be read: "
                                f"{' '.join(str(exc).split())[:200]}") from None
    why = refusal(config, capital)
    if why:
        raise BundleReplayRefused(why)
    return config


def _season_runs(con: sqlite3.Connection) -> list[_Run]:
    """Return the runs that wrote the store, in order, each with its config."""
    stored = con.execute("SELECT id, started_ts, stopped_ts, mode, config_json FROM runs"
                         " ORDER BY id").fetchall()
    if not stored:
        raise BundleReplayError("the store holds no run to replay")
    rows, why = merged_runs(stored)  # a resumed replay's runs as one
    if why:
        raise BundleReplayRefused(why)
    capital = stored_capital(con)

    def parse(text: str, name: str) -> Config:
        return _parse(text, name, capital)

    reloads = stored_reloads(con, parse)
    runs = []
    for ids, started, stopped, mode, config_json in rows:
        name = ("the stored run's config" if len(rows) == 1
                else f"the config of stored run {ids[0]}")
        runs.append(_Run(ids[-1], started, stopped, mode, parse(config_json, name),
                         tuple(r for r in reloads if r.run in ids)))
    if any(r.run not in {i for ids, *_ in rows for i in ids} for r in reloads):
        raise BundleReplayError("a stored reload names a run the store does not hold")
    why = unmatched_amendment(con, [r.started for r in runs], [r.ts for r in reloads])
    if why:
        raise BundleReplayRefused(why)
    return runs


class _Feed:
    """The stored events in order, applied by the driver between rounds and, for an event the
    live run received while a round's agents were still answering, inside that round before
    its fills (as live, where the books took it before the round's trades)."""

    def __init__(self, clock: StoredTimesClock,
                 events: Iterator[tuple[float | None, Event | list[Event]]]) -> None:
        self.driver: ReplayDriver
        self.clock = clock
        self._events = enumerate(events)
        self._next: tuple[int, tuple[float | None, Event | list[Event]]] | None = None
        self.done = False
        self.before = math.inf
        """The start of the next run: its events are not this run's."""

    def _peek(self) -> tuple[int, tuple[float | None, Event | list[Event]]] | None:
        if self._next is None and not self.done:
            self._next = next(self._events, None)
            self.done = self._next is None
        return self._next

    async def run(self, before: float | None = None, pause: float | None = None) -> None:
        """Apply every event (``before``: every one the live run received before then), the
        rounds due before it first (a round may take it); ``pause``: return at the first one
        applied at ``pause`` or later (a reload is applied there), ``before`` still the
        run's bound."""
        driver = self.driver
        self.before = math.inf if before is None else before
        while (got := self._peek()) is not None:
            i, (at, ev) = got
            if at is not None and at >= self.before:
                return
            ts = at if at is not None else ev[0].ts if isinstance(ev, list) else ev.ts
            if pause is not None and ts >= pause:
                return
            if driver.start <= ts <= driver.end and ts > self.clock.now():
                driver.decisions += await driver.sched.run_until(ts, inclusive=False)
                if self._next is not got:  # applied inside a round
                    continue
            self._next = None
            if not await driver.step(i, ev, at):
                return

    async def catch_up(self, until: float) -> None:
        """Apply now every live event received by ``until`` (inside a round, no job runs)."""
        round_at = self.clock.at
        engine = self.driver.engine
        while (got := self._peek()) is not None and got[1][0] is not None \
                and got[1][0] <= min(until, self.driver.end) and got[1][0] < self.before:
            self._next = None
            i, (at, ev) = got
            self.clock.at = at
            engine.seq = i
            if isinstance(ev, list):
                engine.bus.publish_batch(ev)
            elif ev.topic_class in engine.bus.conflating:
                engine.bus.publish_nowait(ev)
            else:
                await engine.bus.publish(ev)
            engine.state.offset = i + 1
            self.driver.events += 1
        self.clock.at = round_at


async def replay_store(src: str, out: str) -> None:
    """Replay the season of the SQLite store ``src`` from its stored answers into ``out``;
    a store written by several live runs (a restart) run after run, each with its config,
    resuming from the checkpoint the one before left, as the daemon does.

    Raise :class:`BundleReplayRefused` for what is not supported and
    :class:`BundleReplayError` when the replay cannot run (one line each).
    """
    con = connect_readonly(Path(src))
    rounds_dir = tempfile.TemporaryDirectory(prefix="capitalbench-rounds-")
    try:
        runs = _season_runs(con)
        rounds, last = stored_rounds(con)
        clock = StoredTimesClock(runs[0].started)
        feed = _Feed(clock, stored_events(con, runs[0].mode == "live", runs[0].started))
        stored = _Stored(con, rounds, Path(rounds_dir.name))
        for k, run in enumerate(runs):
            if k:
                forget_replay(out)
                clock.advance(max(clock.now(), run.started))
            nxt = runs[k + 1] if k + 1 < len(runs) else None
            await _replay_run(run, nxt, out, Path(src).name, clock, feed, stored, last)
    finally:
        con.close()
        rounds_dir.cleanup()


class _Stored:
    """What every run's replay reads of the stored rows."""

    def __init__(self, con: sqlite3.Connection,
                 rounds: dict[tuple[str, float], StoredRound], rounds_dir: Path) -> None:
        self.calls = stored_calls(con)
        self.capital = stored_capital(con)
        self.rounds_dir = rounds_dir
        """Where the replay freezes its CapitalBench rounds (never the live ones' directory)."""
        self.rounds = rounds
        self.ends = {(m, r.decided): r.end for (m, _), r in rounds.items()}
        self.bars = failed_bars(con)
        self.con = con
        self.marks = [t for (t,) in con.execute(
            "SELECT DISTINCT ts FROM equity WHERE kind='daily' ORDER BY ts")]


async def _replay_run(run: _Run, nxt: _Run | None, out: str, name: str,
                      clock: StoredTimesClock, feed: _Feed, stored: _Stored,
                      last: float) -> None:
    """Replay the events and rounds of one stored run into ``out``."""
    config = run.config
    remote = run.remote()
    decisions = stored_decisions(stored.con, remote, stored.calls)
    # A run followed by another: up to its stop (its last round or daily mark).
    stop = None if nxt is None else run.stopped if run.stopped is not None else nxt.started
    end = last if stop is None else max(
        [run.started, *(s for (_, s), r in stored.rounds.items() if r.run == run.id),
         *(t for t in stored.marks if t <= stop)])
    engines: list[Engine] = []
    jobs: list[JobCallback] = []

    def wrap(cb: JobCallback) -> JobCallback:
        jobs.append(_at_live_times(cb, clock, stored.rounds, engines, feed.catch_up))
        return jobs[-1]

    try:
        async with replay_session(config, out, recording_name=f"bundle:{name}",
                                  start=run.started, clock=clock, wrap_job=wrap) as ctx:
            driver = feed.driver = ReplayDriver(ctx, start=run.started,
                                                end=end if stop is None else stop)
            engines.append(ctx.engine)
            hooked: dict[int, object] = {}

            def hook() -> None:
                _answer_stored(ctx.engine, remote, decisions, stored, feed, run.mode == "live",
                               hooked)

            hook()
            replay_capital(ctx.engine, ctx.sched, jobs[0], clock, stored.capital,
                           stored.rounds_dir, run.mode == "live")
            # The rounds a restart settled before anything else (missed during the downtime).
            for (market, scheduled), r in sorted(stored.rounds.items(), key=lambda x: x[0][1]):
                if r.run == run.id and scheduled < run.started:
                    await jobs[0](f"decide:{market}", scheduled, False)
            before = None if nxt is None else nxt.started
            for reload in run.reloads:  # each at its time, after what the live run had by then
                at = _reload_point(reload, stored.rounds)
                await feed.run(before, pause=at)
                await _reload(driver, reload, at, out)
                hook()
            await feed.run(before)
            if stop is None:
                await driver.finish(last)
            else:
                await _stop(driver, end, stop)
    except ReplayError as exc:
        raise BundleReplayError(str(exc)) from None


def _answer_stored(engine: Engine, remote: list[str], decisions: Any, stored: _Stored,
                   feed: _Feed, live: bool, hooked: dict[int, object]) -> None:
    """Make each agent of ``engine`` not ``hooked`` yet (the run's first, or one a reload
    built) answer from the stored rows, and wait for the live events in a live run."""
    slots = [s for ss in engine.slots.values() for s in ss.values()]
    stand_ins(engine, sorted({s.agent.id for s in slots
                              if s.agent.id in remote and id(s.agent) not in hooked}), decisions)
    agents = {id(s.agent): s.agent for ss in engine.slots.values()
              for s in ss.values()}  # an agent trading two markets is one
    for key, agent in agents.items():
        if key in hooked:
            continue
        hooked[key] = agent  # held: its id is not reused
        if isinstance(agent, LlmAgent):
            answer_llm(agent, stored.calls, stored.bars)
        if live:
            wait_for_events(agent, feed.catch_up, stored.ends)


def _reload_point(reload: StoredReload, rounds: dict[tuple[str, float], StoredRound]) -> float:
    """Return the time before which the rounds run before ``reload`` is applied: its own, or
    the scheduled time of a round of its run due before it that read the clock only after it
    (a round that started late took the reloaded agents, as live)."""
    late = [s for (_, s), r in rounds.items()
            if r.run == reload.run and s < reload.ts <= r.decided]
    return min([reload.ts, *late])


async def _reload(driver: ReplayDriver, reload: StoredReload, at: float, out: str) -> None:
    """Run the rounds due before ``at`` (up to the run's end), then apply ``reload`` at its
    time (``out``: the replayed store)."""
    if at > driver.end:
        driver.decisions += await driver.sched.run_until(driver.end, inclusive=True)
    else:
        driver.decisions += await driver.sched.run_until(at, inclusive=False)
    try:
        await apply_reload(driver.engine, driver.clock, reload, out)
    except (ValueError, StoreWriteError) as exc:
        raise BundleReplayError(f"the reload of run {reload.run} cannot be applied again: "
                                f"{' '.join(str(exc).split())[:200]}") from None


async def _stop(driver: ReplayDriver, end: float, stop: float) -> None:
    """End a run as the daemon does when stopped: its rounds up to ``end`` run, then the books
    and a checkpoint committed and the run ended at ``stop``."""
    driver.decisions += await driver.sched.run_until(end, inclusive=True)
    if stop > driver.clock.now():
        driver.clock.advance(stop)
    engine = driver.engine
    await engine.bus.drain()
    try:
        await engine.commit(RoundCommit())
        await engine.store.end_run(stop)
    except StoreWriteError as exc:
        raise BundleReplayError(str(exc)) from None


async def _abandoned(engine: Engine, got: StoredRound) -> None:
    """Store the round's decisions as the live run did when it stopped during the round."""
    rc = RoundCommit()
    for agent, market, scheduled, outcome, reason in got.rows:
        rc.decisions.append(DecisionRecord(agent, market, scheduled, got.decided, outcome,
                                           reason=reason))
    await engine.commit(rc)


def _at_live_times(on_job: JobCallback, clock: StoredTimesClock,
                   rounds: dict[tuple[str, float], StoredRound], engine: list[Engine],
                   catch_up: Callable[[float], Awaitable[None]]) -> JobCallback:
    """Return ``on_job`` running each decision round as the live round ran: with the clock at
    its live time, after the live events received by then (a round that started late saw
    them), missed when it was, abandoned when the live run stopped during it."""

    async def job(job_id: str, fire_ts: float, missed: bool) -> None:
        kind, market = job_id.split(":", 1)
        got = rounds.get((market, fire_ts)) if kind == "decide" else None
        clock.at = None if got is None else got.decided
        try:
            if got is not None and got.outcomes == {"abandoned"}:
                await _abandoned(engine[-1], got)
            else:
                if got is not None and not missed and got.outcomes != {"missed"}:
                    await catch_up(got.decided)
                await on_job(job_id, fire_ts, missed or (
                    got is not None and got.outcomes == {"missed"}))
        finally:
            clock.at = None

    return job


def rebuilt_report(src: str, report_json: Callable[[str, str], str]) -> tuple[str, str | None]:
    """Return ``report --json`` of the season of ``src`` replayed from its stored answers, and
    the first replayed decision or fill that is not the stored one (None: none).

    ``report_json(db, season_db)``: the report of the store ``db`` with the season record of
    ``season_db``.
    """
    import asyncio

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "replayed.db")
        asyncio.run(replay_store(src, out))
        return report_json(out, src), (first_decision_difference(src, out)
                                       or first_capital_difference(src, out)
                                       or first_season_difference(src, out))
