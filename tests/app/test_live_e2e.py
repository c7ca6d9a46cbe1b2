"""End to end (issue 3, "done when"): ``paperarena run`` against the fake servers, then a replay.

One in-process :class:`~daemon.app.live.LiveDaemon` runs with a config that points every source at
local fakes (Polymarket WS + Gamma/CLOB REST, Yahoo streamer + chart REST, Google News RSS, all
on random 127.0.0.1 ports), the four baseline agents and a :class:`~daemon.app.record.Recorder`.

Choices that keep the test deterministic on any day and at any hour:

- Both markets decide on a 24/7 ``interval`` schedule of 2 s (anchored at the epoch, so rounds
  fire at even wall-clock seconds). The NYSE-session schedule itself is covered by
  ``test_schedule.py``; the NYSE calendar must not decide whether this test trades equities.
  The Yahoo stream's staleness watchdog (and the REST fallback) only act while the NYSE is open,
  so its ``stale_after`` is longer than the test: the same code paths run on a Sunday and on a
  Tuesday. The silent freeze is therefore injected on Polymarket (24/7, PING/PONG heartbeat).
- Every price is streamed by the test in *bursts* at odd wall-clock seconds (the middle of the
  quiet gap between two rounds), stamped with the wall clock, as the real feeds do. Start-up
  data (the first books and quotes) is held back by the fakes and sent in a gap too. Snapshots
  that reconnections trigger arrive at unscripted times, but the fakes' server-side state is
  kept in step with what was streamed, so they carry no new price ("value-neutral").
- The start-up history backfill is on: the fakes serve daily closes (Yahoo chart, Polymarket
  prices-history), so the momentum agent trades from the first round, and the replay must get
  the same history from the recording (HistoryEvents).
- The run stops in a quiet gap right after the last burst, so no round boundary falls between
  the moment the scheduler stops and the recording's final ClockEvent.

Faults: abrupt close (TCP abort) of both WebSockets, a Polymarket freeze (socket open, PONGs
answered, no data) caught by data staleness, garbage / truncated / unknown frames on both
WebSockets, and two resolutions, each signalled twice: one found by the Gamma poll and then
repeated over the WebSocket, one sent over the WebSocket and then closed in Gamma. Each is paid
exactly once.

Then the recording is replayed (same config, fresh database): the books must match the live
run's for every market and agent (holdings, cash, prices), and so must every decision. The
recorder stamps events with their arrival time; ``test_a_quote_made_before_a_round_...`` checks
that a quote stamped by its source before a round but received after it is replayed after it.

Why one module over 500 lines: the end-to-end tests of one scenario (the live daemon against the
fake servers, then its replay) share its fixtures and checks.
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agents.base import AgentDecision, Observation
from daemon.app.live import LiveDaemon
from daemon.app.record import Recorder
from daemon.app.replay import replay
from daemon.app.sources import build_sources
from daemon.config.settings import Config, parse_config
from daemon.core.events import (
    ClockEvent,
    DecisionEvent,
    Event,
    HistoryEvent,
    NewsEvent,
    PriceEvent,
    ResolutionEvent,
    SourceStatus,
)
from daemon.core.sparse_rows import DECISIONS, fill_map
from daemon.engine.engine import Engine
from daemon.timing.nyse import get_nyse_calendar
from feeds.recording import iter_events, read_header
from feeds.source_contract import SourceState
from scoring.ledger.ledger import Book
from tests.fakes.scenario import Scenario, wait_until
from tests.helpers import HANG_GUARD

pytestmark = pytest.mark.slow

PERIOD = 2.0
AGENTS = [
    {"id": "equal_weight", "kind": "equal_weight"},
    {"id": "buy_and_hold", "kind": "buy_and_hold"},
    {"id": "momentum", "kind": "momentum"},
    {"id": "cash", "kind": "cash"},
]
REL = 1e-9


#: A local port nothing listens on (the fundamentals poll fails there, one logged line).
CLOSED_PORT = "http://127.0.0.1:9/v7/finance/quote"


def make_config(sc: Scenario, db: Path, *, agents: list[dict[str, Any]] = AGENTS,
                polymarket: bool = True, backfill: bool = False,
                fundamentals_url: str = CLOSED_PORT) -> Config:
    """Return the daemon config: every source at the fakes, 2 s rounds in both markets
    (``fundamentals_url``: the quote endpoint a StockBench agent's fundamentals are polled from;
    by default a closed local port, never the internet)."""
    schedule = {"kind": "interval", "every": PERIOD, "timezone": "UTC"}
    return parse_config({
        "markets": {
            "equity": {
                "assets": list(sc.equities),
                "initial_cash": 10_000.0,
                "cost": {"preset": "realistic"},
                "schedule": schedule,
                "stale_after": "10s",
            },
            "polymarket": {"enabled": polymarket, "initial_cash": 500.0, "schedule": schedule,
                           "stale_after": "10s"},
        },
        "agents": agents,
        "store": {"path": str(db), "flush_interval": 0.2},
        "http": {"enabled": False},
        "sources": {**sc.sources_config(), "backfill": backfill,
                    "fundamentals": {"yahoo_url": fundamentals_url}},
    })


@pytest.fixture
async def scenario() -> AsyncIterator[Scenario]:
    sc = Scenario()
    await sc.start()
    try:
        yield sc
    finally:
        await sc.stop()


class Tape:
    """Every event the live bus carried (a tap: inline, in publish order)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, ev: Event) -> None:
        self.events.append(ev)

    def of(self, cls: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    def states(self, source: str) -> list[str]:
        return [e.state for e in self.of(SourceStatus) if e.source == source]


def source(d: LiveDaemon, name: str) -> Any:
    return next(s for s in d.sources if s.name == name)


def price_of(eng: Engine, market: str, asset: str) -> float:
    book = eng.books[market]
    return float(book.prices[book.asset_index(asset)])


def equities_applied(eng: Engine, sc: Scenario) -> bool:
    """Return whether the equity book holds the quotes the scenario streamed last."""
    return all(math.isclose(price_of(eng, "equity", sym), px, rel_tol=1e-6)
               for sym, px in sc.equities.items())


def prices_applied(eng: Engine, sc: Scenario) -> bool:
    """Return whether the engine's books hold the prices the scenario streamed last."""
    if not equities_applied(eng, sc):
        return False
    book = eng.books.get("polymarket")
    if book is None:
        return True
    for tok, mark in sc.expected_marks().items():
        if not book.has_asset(tok) or price_of(eng, "polymarket", tok) != mark:
            return False
    return True


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def decisions(db: Path) -> dict[tuple[str, str, float], tuple[str, dict[str, float] | None]]:
    out = {}
    for agent, market, ts, outcome, alloc, assets in rows(
        db, "SELECT d.agent, d.market, d.scheduled_ts, d.outcome, d.allocation_json,"
        f" s.assets_json FROM {DECISIONS}"
    ):
        out[agent, market, ts] = (outcome, None if alloc is None else fill_map(alloc, assets))
    return out


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def assert_books_equal(live: dict[str, Any], replayed: dict[str, Any]) -> None:
    """Same agents, assets, holdings and cash (to 1e-9 relative), prices and resolutions."""
    m = live["market"]
    assert replayed["agents"] == live["agents"], m
    assert sorted(replayed["assets"]) == sorted(live["assets"]), m
    assert replayed["resolved"] == live["resolved"], m
    for i, agent in enumerate(live["agents"]):
        assert close(replayed["cash"][i], live["cash"][i]), (m, agent, "cash")
        for j, asset in enumerate(live["assets"]):
            k = replayed["assets"].index(asset)
            q_live, q_rep = live["holdings"][i][j], replayed["holdings"][i][k]
            assert close(q_rep, q_live), (m, agent, asset, q_live, q_rep)
    for j, asset in enumerate(live["assets"]):
        k = replayed["assets"].index(asset)
        assert replayed["prices"][k] == live["prices"][j], (m, asset)
        assert replayed["tradable"][k] == live["tradable"][j], (m, asset)


def holdings_and_cash(book: Book, token: str) -> dict[str, tuple[float, float]]:
    """Return {agent: (units of ``token``, cash)}."""
    j = book.asset_index(token)
    return {a: (float(book.holdings[i, j]), float(book.cash[i]))
            for i, a in enumerate(book.agents)}


def assert_paid(book: Book, token: str, payout: float,
                before: dict[str, tuple[float, float]]) -> None:
    """Every holder's cash grew by units x payout, once; the token is no longer tradable."""
    assert before["equal_weight"][0] > 0 and before["buy_and_hold"][0] > 0, before
    for i, a in enumerate(book.agents):
        units, cash = before[a]
        assert close(float(book.cash[i]) - cash, units * payout), (a, token, units)
    j = book.asset_index(token)
    assert not book.tradable[j] and float(book.holdings[:, j].sum()) == 0.0


async def subscribed(sc: Scenario, *, yahoo: bool = True) -> None:
    """Wait until the daemon subscribed to the fakes' six Polymarket tokens (and three stocks)."""
    await wait_until(lambda: any(c.subscribed.is_set() and len(c.assets) == 6
                                 for c in sc.pm.open_conns), 10, "the Polymarket subscription")
    if yahoo:
        await wait_until(lambda: any(len(c.symbols) == 3 for c in sc.yahoo.open_conns), 10,
                         "the Yahoo subscription")


async def next_round(eng: Engine, tape: Tape, after: float, timeout: float = 10.0) -> None:
    """Wait until every market's decision round scheduled after ``after`` was published."""
    slots = sum(len(s) for s in eng.slots.values())

    def done() -> bool:
        decided = {(e.market, e.agent) for e in tape.of(DecisionEvent) if e.scheduled_ts > after}
        return len(decided) == slots

    await wait_until(done, timeout, f"the decision round after {after}")


async def test_live_run_with_faults_then_replay_reproduces_the_books(
    scenario: Scenario, tmp_path: Path
) -> None:
    sc = scenario
    db, rec = tmp_path / "live.db", tmp_path / "live.jsonl"
    sc.serve_daily_history()
    cfg = make_config(sc, db, backfill=True)
    get_nyse_calendar()  # built once per process: not inside the daemon's start-up below
    recorder = Recorder(rec, cfg, description="e2e")
    daemon = LiveDaemon(cfg, db=str(db), version="e2e",
                        sources=lambda eng: build_sources(cfg, eng), components=[recorder])
    tape = Tape()
    t0 = time.monotonic()
    await sc.wait_phase(0.2)  # start just after a round boundary
    await daemon.start()
    stopped = False
    try:
        eng = daemon.engine
        assert eng is not None
        eng.bus.add_tap("#", tape)
        pm, yahoo = source(daemon, "polymarket"), source(daemon, "yahoo")
        news = source(daemon, "news-google")
        # -- start-up: discovery, subscriptions (data held back by the fakes) -----------------
        await wait_until(lambda: len(eng.books["polymarket"].questions()) == 3, 10,
                         "the three questions listed")
        await subscribed(sc)
        # -- cycle 1: first books and quotes, garbage frames --------------------------------
        t = await sc.wait_phase(1.0)
        await sc.send_initial()
        await sc.send_garbage()
        await wait_until(lambda: prices_applied(eng, sc), 5, "the first prices")
        await wait_until(lambda: pm.counters.decode_errors >= 2 and pm.counters.unknown >= 1
                         and yahoo.counters.decode_errors >= 3 and yahoo.counters.unknown >= 1,
                         5, "the garbage frames counted")
        await next_round(eng, tape, t)
        # -- cycle 2: a burst, then both WebSockets dropped without a close frame --------------
        t = await sc.wait_phase(1.0)
        await sc.burst()
        await wait_until(lambda: prices_applied(eng, sc), 5, "burst 2")
        pm_conns, y_conns = len(sc.pm.conns), len(sc.yahoo.conns)
        sc.pm.abort_all()
        sc.yahoo.abort_all()
        await wait_until(lambda: pm.counters.reconnects >= 1 and yahoo.counters.reconnects >= 1,
                         10, "both sources reconnecting")
        await wait_until(lambda: any(c.subscribed.is_set() for c in sc.pm.conns[pm_conns:])
                         and any(c.subscribed.is_set() for c in sc.yahoo.conns[y_conns:]),
                         10, "both sources resubscribed")
        new_pm = next(c for c in sc.pm.conns[pm_conns:] if c.subscribed.is_set())
        assert sorted(new_pm.assets) == sorted(sc.token_mids())  # every token resubscribed
        new_y = next(c for c in sc.yahoo.conns[y_conns:] if c.subscribed.is_set())
        assert sorted(new_y.symbols) == sorted(sc.equities)
        # the books were rebuilt from the fresh snapshot
        await wait_until(lambda: all(t_ in pm.decoder.books for t_ in sc.token_mids()), 5,
                         "Polymarket books rebuilt from the snapshot")
        await next_round(eng, tape, t)
        # -- cycle 3: deltas on the rebuilt books; question 101 resolves YES in Gamma (the poll
        #    pays), then the WS repeats it ----------------------------------------------------
        t = await sc.wait_phase(1.0)
        await sc.burst()
        await wait_until(lambda: prices_applied(eng, sc), 5, "burst 3 (after reconnecting)")
        book = eng.books["polymarket"]
        before = holdings_and_cash(book, "Y101")
        sc.resolve_gamma("101", yes_wins=True)
        await wait_until(lambda: "101" in eng.state.resolved, 5, "the Gamma resolution of 101")
        await sc.resolve_ws("101", yes_wins=True)  # the same resolution, seen again: not paid
        await sc.resolve_ws("101", yes_wins=True)
        assert_paid(book, "Y101", 1.0, before)
        await next_round(eng, tape, t)
        # -- cycle 4: question 103 resolves NO over the WS (Gamma closes it later) ------------
        t = await sc.wait_phase(1.0)
        await sc.burst()
        await wait_until(lambda: prices_applied(eng, sc), 5, "burst 4")
        before = holdings_and_cash(book, "N103")
        await sc.resolve_ws("103", yes_wins=False)
        await wait_until(lambda: "103" in eng.state.resolved, 5, "the WS resolution of 103")
        polls = sc.gamma_resolution_polls()
        sc.resolve_gamma("103", yes_wins=False)
        await wait_until(lambda: sc.gamma_resolution_polls() >= polls + 2, 5, "Gamma polls")
        assert_paid(book, "N103", 1.0, before)
        await wait_until(lambda: all(sorted(c.assets) == ["N102", "Y102"]
                                     for c in sc.pm.open_conns), 5,
                         "the resolved tokens unsubscribed")
        await next_round(eng, tape, t)
        # -- cycles 5-6: Polymarket freezes (PONGs only) until the data watchdog reconnects -----
        t = await sc.wait_phase(1.0)
        await sc.burst()
        await wait_until(lambda: prices_applied(eng, sc), 5, "burst 5")
        frozen = sc.pm.open_conns[0]
        pings, reconnects = frozen.pings, pm.counters.reconnects
        await sc.wait_phase(1.0)
        await sc.burst(polymarket=False)  # equities keep flowing
        await wait_until(lambda: pm.counters.reconnects > reconnects, 10,
                         "the frozen Polymarket feed reconnected")
        assert frozen.pings > pings  # the heartbeat went on while frozen...
        assert frozen.close_code == 1000  # ...and the client closed the socket itself
        assert "stale" in tape.states("polymarket")
        await wait_until(lambda: pm.state is SourceState.LIVE and len(sc.pm.open_conns) == 1,
                         10, "Polymarket live again")
        # -- last cycle: everything flows again; stop in the gap -----------------------------
        # The stop must come before the next round boundary (t + 1 s). On a busy machine a
        # burst may take longer to apply: then the next gap gets another one (the replay
        # reproduces whatever was recorded), never a failure for being slow.
        for _ in range(30):  # a hang guard
            t = await sc.wait_phase(1.0)
            await sc.burst()
            await wait_until(lambda: prices_applied(eng, sc), 5, "the last burst")
            if time.time() < t + 0.8:
                break
        else:
            raise AssertionError("no burst was applied within a quiet gap in 30 tries")
        assert daemon.scheduler is not None and daemon.scheduler.running
        died = [t_.get_name() for t_ in daemon._tasks if t_.done()]
        assert died == ["source-equity-backfill"], died  # a one-shot source; nothing else ended
        await daemon.stop()
        stopped = True
    finally:
        if not stopped:
            await daemon.stop()
    live_s = time.monotonic() - t0

    # -- the live run ----------------------------------------------------------------------------
    assert all(t_.done() for t_ in daemon._tasks) and recorder.writer is None
    assert rows(db, "SELECT COUNT(*) FROM runs WHERE stopped_ts IS NOT NULL") == [(1,)]
    fills = rows(db, "SELECT agent, market, trades_json FROM fills WHERE traded_value > 0")
    traded = {(a, m) for a, m, _ in fills}
    assert {(a, m) for a in ("equal_weight", "buy_and_hold", "momentum")
            for m in ("equity", "polymarket")} <= traded
    assert not {("cash", "equity"), ("cash", "polymarket")} & traded
    outcomes = {o for (o,) in rows(db, "SELECT outcome FROM decisions")}
    assert outcomes <= {"ok", "hold"}, outcomes
    res = rows(db, "SELECT question_id, payouts_json, source FROM resolutions ORDER BY 1")
    assert [(r[0], json.loads(r[1]), r[2]) for r in res] == [
        ("101", {"Y101": 1.0, "N101": 0.0}, "polymarket.gamma"),
        ("103", {"Y103": 0.0, "N103": 1.0}, "polymarket.ws"),
    ]
    assert sorted(e.question_id for e in tape.of(ResolutionEvent)) == ["101", "103"]
    for src in (pm, yahoo):
        assert src.counters.reconnects >= 1, src.name
        assert src.counters.decode_errors >= 1 and src.counters.unknown >= 1, src.name
    assert pm.counters.reconnects >= 2  # the abort and the freeze
    assert pm.decoder.ignored_text > 0  # PONGs
    assert news.published >= 2 and tape.of(NewsEvent)
    assert SourceState.BACKING_OFF.value in tape.states("yahoo")

    # -- the recording, replayed ----------------------------------------------------------------
    header = read_header(rec)
    recorded = [ev for _, ev in iter_events(rec)]
    assert len(recorded) == recorder.written
    assert sum(isinstance(ev, PriceEvent) for ev in recorded) == len(tape.of(PriceEvent))
    histories = {(ev.market, ev.asset) for ev in recorded if isinstance(ev, HistoryEvent)}
    assert histories == {("equity", s_) for s_ in sc.equities} | {
        ("polymarket", tok) for q in sc.questions.values() for tok in (q.yes, q.no)}
    assert isinstance(recorded[-1], ClockEvent)  # the recording says when it ended
    t1 = time.monotonic()
    summary = await replay(rec, cfg, tmp_path / "replay.db", progress=False)
    replay_s = time.monotonic() - t1
    assert summary.events == len(recorded)
    replayed = {m: json.loads(s) for m, s in rows(tmp_path / "replay.db",
                                                 "SELECT market, state_json FROM books")}
    assert sorted(replayed) == sorted(eng.books)
    for m, book in eng.books.items():
        assert_books_equal(book.state(), replayed[m])
    live_dec, rep_dec = decisions(db), decisions(tmp_path / "replay.db")
    assert set(rep_dec) == set(live_dec)
    for key, (outcome, alloc) in live_dec.items():
        r_outcome, r_alloc = rep_dec[key]
        assert r_outcome == outcome, key
        if alloc is None:
            assert r_alloc is None, key
        else:
            assert r_alloc is not None and r_alloc.keys() == alloc.keys(), key
            assert all(close(r_alloc[a], w) for a, w in alloc.items()), key
    assert rows(tmp_path / "replay.db", "SELECT question_id FROM resolutions ORDER BY 1") == [
        ("101",), ("103",)]
    print(f"\nlive run {live_s:.1f}s, {len(live_dec)} decisions, {len(recorded)} events "
          f"recorded from {header.start:.3f}; replay {replay_s:.2f}s")


# --------------------------------------------------------------------------------------------
# Live vs replay, focused cases
# --------------------------------------------------------------------------------------------

Script = Callable[[LiveDaemon, Tape], Awaitable[None]]
DuringStop = Callable[[LiveDaemon, Recorder], Awaitable[None]]


async def live_then_replay(
    sc: Scenario, tmp_path: Path, cfg: Config, script: Script,
    during_stop: DuringStop | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Run the daemon (with a Recorder) through ``script``, replay; return both sets of books.

    ``during_stop`` runs while ``LiveDaemon.stop()`` is in progress.
    """
    db, rec = tmp_path / "live.db", tmp_path / "live.jsonl"
    get_nyse_calendar()
    recorder = Recorder(rec, cfg)
    daemon = LiveDaemon(cfg, db=str(db), sources=lambda eng: build_sources(cfg, eng),
                        components=[recorder])
    tape = Tape()
    await daemon.start()  # a round before any data may fire live only: it trades nothing
    try:
        assert daemon.engine is not None
        daemon.engine.bus.add_tap("#", tape)
        await wait_until(lambda: any(len(c.symbols) == len(sc.equities)
                                     for c in sc.yahoo.open_conns), 10, "the Yahoo subscription")
        await script(daemon, tape)
    finally:
        stopping = asyncio.ensure_future(daemon.stop())
        try:
            if during_stop is not None:
                await during_stop(daemon, recorder)
        finally:
            await stopping
    live = {m: b.state() for m, b in daemon.engine.books.items()}
    await replay(rec, cfg, tmp_path / "replay.db", progress=False)
    replayed = {m: json.loads(s) for m, s in rows(tmp_path / "replay.db",
                                                 "SELECT market, state_json FROM books")}
    return live, replayed


async def fresh_ticks(sc: Scenario, tape: Tape) -> None:
    """Stream the current quotes again, so the recording goes on past the last round."""
    n = len(tape.of(PriceEvent))
    await sc.send_equities()
    await wait_until(lambda: len(tape.of(PriceEvent)) >= n + len(sc.equities), 5, "ticks")


async def test_a_quote_made_before_a_round_but_received_after_it_is_replayed_after_it(
    scenario: Scenario, tmp_path: Path
) -> None:
    """The live round did not see the late quote, so the replayed round must not see it either.

    The recording stamps events with their arrival time, not the source's clock.
    """
    sc = scenario
    cfg = make_config(sc, tmp_path / "live.db", polymarket=False,
                      agents=[{"id": "buy_and_hold", "kind": "buy_and_hold"}])

    async def script(d: LiveDaemon, tape: Tape) -> None:
        eng = d.engine
        assert eng is not None
        t = await sc.wait_phase(1.0)
        await sc.send_equities()
        await wait_until(lambda: prices_applied(eng, sc), 5, "the first quotes")
        await next_round(eng, tape, t)  # buy_and_hold buys at these prices at t + 1
        sc.step()
        sc.yahoo.prices.update(sc.equities)
        made = int((t + PERIOD / 2 - 0.4) * 1000)  # made 0.4 s before the round...
        for sym, px in sc.equities.items():
            await sc.yahoo.push(sym, px, made)  # ...received after it (network, conflation)
        await wait_until(lambda: prices_applied(eng, sc), 5, "the late quotes")
        await fresh_ticks(sc, tape)
        if time.time() > t + PERIOD / 2 + 1.5:
            pytest.fail("too slow: the next round may have run")

    live, replayed = await live_then_replay(sc, tmp_path, cfg, script)
    if not any(q > 0 for q in live["equity"]["holdings"][0]):
        pytest.fail("buy_and_hold did not buy in the live run")
    assert_books_equal(live["equity"], replayed["equity"])


# Gaps this file found, now fixed: a recording's end (ClockEvent), start-up history through the
# bus (HistoryEvent), the final commit on stop.


async def test_rounds_after_the_last_recorded_event_are_replayed(
    scenario: Scenario, tmp_path: Path
) -> None:
    """The live run stops after a round with no market data after it (the final ClockEvent)."""
    sc = scenario
    cfg = make_config(sc, tmp_path / "live.db", polymarket=False,
                      agents=[{"id": "buy_and_hold", "kind": "buy_and_hold"}])

    async def script(d: LiveDaemon, tape: Tape) -> None:
        eng = d.engine
        assert eng is not None
        t = await sc.wait_phase(1.0)
        await sc.send_equities()
        await wait_until(lambda: prices_applied(eng, sc), 5, "the first quotes")
        await next_round(eng, tape, t)  # the daemon stops before any further market data

    live, replayed = await live_then_replay(sc, tmp_path, cfg, script)
    if not any(q > 0 for q in live["equity"]["holdings"][0]):
        pytest.fail("buy_and_hold did not buy in the live run")
    assert_books_equal(live["equity"], replayed["equity"])


async def test_backfilled_history_reaches_the_recording(
    scenario: Scenario, tmp_path: Path
) -> None:
    """Momentum ranks on backfilled closes: the replay must have them too (HistoryEvents)."""
    sc = scenario
    sc.serve_daily_history()
    cfg = make_config(sc, tmp_path / "live.db", polymarket=False, backfill=True,
                      agents=[{"id": "momentum", "kind": "momentum", "top_k": 1}])

    async def script(d: LiveDaemon, tape: Tape) -> None:
        eng = d.engine
        assert eng is not None
        await wait_until(lambda: source(d, "equity-backfill").state is SourceState.LIVE, 10,
                         "the history backfill")
        t = await sc.wait_phase(1.0)
        await sc.send_equities()
        await wait_until(lambda: prices_applied(eng, sc), 5, "the first quotes")
        await next_round(eng, tape, t)
        await fresh_ticks(sc, tape)

    live, replayed = await live_then_replay(sc, tmp_path, cfg, script)
    if not any(q > 0 for q in live["equity"]["holdings"][0]):
        pytest.fail("momentum did not buy in the live run")
    assert_books_equal(live["equity"], replayed["equity"])


async def test_a_resolution_paid_after_the_last_round_survives_a_restart(
    scenario: Scenario, tmp_path: Path
) -> None:
    """Paid, then stopped before the next round commits: the restart keeps the payout."""
    sc = scenario
    db = tmp_path / "live.db"
    cfg = make_config(sc, db, agents=[{"id": "equal_weight", "kind": "equal_weight"}])
    get_nyse_calendar()
    daemon = LiveDaemon(cfg, db=str(db), sources=lambda eng: build_sources(cfg, eng))
    tape = Tape()
    await sc.wait_phase(0.2)
    await daemon.start()
    try:
        eng = daemon.engine
        assert eng is not None
        eng.bus.add_tap("#", tape)
        await subscribed(sc)
        t = await sc.wait_phase(1.0)
        await sc.send_initial()
        await wait_until(lambda: prices_applied(eng, sc), 5, "the first prices")
        await next_round(eng, tape, t)
        book = eng.books["polymarket"]
        before = holdings_and_cash(book, "Y101")
        await sc.resolve_ws("101", yes_wins=True)
        await wait_until(lambda: "101" in eng.state.resolved, 5, "the resolution")
        if time.time() > t + PERIOD / 2 + 1.5:
            pytest.fail("too slow: the next round may have run")
        live = book.state()
    finally:
        await daemon.stop()  # stopped before the next round
    if not before["equal_weight"][0] > 0:
        pytest.fail("equal_weight did not hold the winning token")
    again = LiveDaemon(cfg, db=str(db))  # restart on the same database (no sources)
    await again.start()
    try:
        assert again.engine is not None
        restored = again.engine.books["polymarket"].state()
    finally:
        await again.stop()
    assert rows(db, "SELECT question_id FROM resolutions") == [("101",)]
    assert restored["resolved"] == ["101"]
    assert restored["cash"] == live["cash"] and restored["holdings"] == live["holdings"]


# Found by this test and fixed: sealing the recording when scheduling stops; cancellation-safe
# store transactions.


class Slow:
    """An agent that answers like ``inner``, ``delay`` seconds later (as an LLM agent would)."""

    def __init__(self, inner: Any, delay: float) -> None:
        self.inner = inner
        self.id: str = inner.id
        self.delay = delay
        self.started = asyncio.Event()
        self.finished = 0.0

    async def decide(self, obs: Observation) -> AgentDecision:
        self.started.set()
        await asyncio.sleep(self.delay)
        self.finished = time.time()
        decision: AgentDecision = await self.inner.decide(obs)
        return decision


async def test_a_round_boundary_passed_while_stopping_is_not_replayed(
    scenario: Scenario, tmp_path: Path
) -> None:
    """Stop while a slow round is in flight; the next boundary passes before the daemon exits."""
    sc = scenario
    cfg = make_config(sc, tmp_path / "live.db", agents=[
        {"id": "equal_weight", "kind": "equal_weight", "markets": ["equity"]},
        {"id": "slow", "kind": "cash", "markets": ["polymarket"]},
    ])
    slow: list[Slow] = []
    stop_at: list[float] = []

    async def script(d: LiveDaemon, tape: Tape) -> None:
        eng = d.engine
        assert eng is not None
        slot = eng.slots["polymarket"]["slow"]
        slot.agent = Slow(slot.agent, 1.25 * PERIOD)
        slow.append(slot.agent)
        # Polymarket books too: a round without fresh prices is skipped, never asks the agent.
        await subscribed(sc, yahoo=False)
        t = await sc.wait_phase(1.0)
        await sc.send_initial()
        await wait_until(lambda: prices_applied(eng, sc), 5, "the first prices")
        await wait_until(lambda: any(e.market == "equity" and e.scheduled_ts > t
                                     for e in tape.of(DecisionEvent)), 10, "the equity round")
        await wait_until(slow[0].started.is_set, 5, "the slow Polymarket round")
        t = await sc.wait_phase(1.0)
        await sc.burst(polymarket=False)  # the next equity round would rebalance
        await wait_until(lambda: equities_applied(eng, sc), 5, "the burst")
        stop_at.append(t + PERIOD / 2)  # the next boundary; stop() starts before it

    live, replayed = await live_then_replay(sc, tmp_path, cfg, script)
    if not slow[0].finished > stop_at[0]:
        pytest.fail("the slow round did not outlast the next round boundary")
    assert_books_equal(live["equity"], replayed["equity"])


async def test_stop_while_the_store_is_writing_stops_cleanly(tmp_path: Path) -> None:
    """A slow write (here: another writer holds the database's write lock) during a stop."""
    db = tmp_path / "live.db"
    cfg = parse_config({
        "markets": {"polymarket": {"enabled": False}, "equity": {"assets": ["AAPL"]}},
        "agents": [], "sources": {"enabled": False}, "http": {"enabled": False},
        "store": {"path": str(db), "flush_interval": 0.05},
    })
    daemon = LiveDaemon(cfg, db=str(db))
    await daemon.start()
    assert daemon.engine is not None
    store = daemon.engine.store
    other = sqlite3.connect(db, isolation_level=None, timeout=0)
    locked = True
    stopping: asyncio.Future[None] | None = None
    try:
        flusher = next(t_ for t_ in daemon._tasks if t_.get_name() == "store-flusher")
        other.execute("BEGIN IMMEDIATE")  # the write lock: the next flush waits in BEGIN
        now = time.time()
        daemon.engine.bus.publish_nowait(
            PriceEvent(ts=now, recv_ts=now, market="equity", asset="AAPL", price=190.0))
        await wait_until(store._tx.locked, 5, "the flusher waiting for the write lock")
        stopping = asyncio.ensure_future(daemon.stop())
        await wait_until(lambda: flusher.cancelling() > 0, 5, "stop() cancelling the flusher")
        other.execute("ROLLBACK")  # the slow write can proceed now
        locked = False
        await asyncio.wait_for(stopping, HANG_GUARD)
    finally:
        if locked:
            other.execute("ROLLBACK")
        other.close()
        if stopping is None or not stopping.done() or stopping.cancelled() or stopping.exception():
            await store.close()  # whatever the failure, release the database
    assert rows(db, "SELECT COUNT(*) FROM runs WHERE stopped_ts IS NOT NULL") == [(1,)]
    assert rows(db, "SELECT COUNT(*) FROM market_events") == [(1,)]


async def test_nothing_reaches_the_books_after_the_recording_is_sealed(
    scenario: Scenario, tmp_path: Path
) -> None:
    """Quotes arrive while stop() waits for a slow round; the replay must end on the same books.

    Either the daemon stops its sources when it stops scheduling, or the recording keeps what
    arrives until the end (and the replay schedules no round after scheduling stopped).
    """
    sc = scenario
    cfg = make_config(sc, tmp_path / "live.db", agents=[
        {"id": "equal_weight", "kind": "equal_weight", "markets": ["equity"]},
        {"id": "slow", "kind": "cash", "markets": ["polymarket"]},
    ])
    slow: list[Slow] = []

    async def script(d: LiveDaemon, tape: Tape) -> None:
        eng = d.engine
        assert eng is not None
        slot = eng.slots["polymarket"]["slow"]
        slot.agent = Slow(slot.agent, 0.75 * PERIOD)
        slow.append(slot.agent)
        # Polymarket books too: a round without fresh prices is skipped, never asks the agent.
        await subscribed(sc, yahoo=False)
        await sc.wait_phase(1.0)
        await sc.send_initial()
        await wait_until(lambda: prices_applied(eng, sc), 5, "the first prices")
        await wait_until(slow[0].started.is_set, 5, "the slow Polymarket round")

    async def during_stop(d: LiveDaemon, recorder: Recorder) -> None:
        eng = d.engine
        assert eng is not None
        sched = d.scheduler
        assert sched is not None
        await wait_until(lambda: not sched.running, 5, "scheduling stopped")
        if slow[0].finished:
            pytest.fail("the slow round finished before scheduling stopped")
        sc.step()
        await sc.send_equities()
        sources = [t_ for t_ in d._tasks if t_.get_name().startswith("source-yahoo")]
        await wait_until(lambda: equities_applied(eng, sc) or all(t_.done() for t_ in sources),
                         5, "the quotes applied, or the sources stopped")

    live, replayed = await live_then_replay(sc, tmp_path, cfg, script, during_stop)
    assert_books_equal(live["equity"], replayed["equity"])


# Fixed: stop() mutes market data on the bus in the same step as the seal, so a frame a source's
# sub-task still holds cannot reach the books.


async def test_quotes_in_flight_when_stop_begins_end_up_in_both_or_neither(
    scenario: Scenario, tmp_path: Path
) -> None:
    """Quotes sent just before stop(): the live books and the replay must agree either way."""
    sc = scenario
    cfg = make_config(sc, tmp_path / "live.db", polymarket=False,
                      agents=[{"id": "equal_weight", "kind": "equal_weight"}])

    async def script(d: LiveDaemon, tape: Tape) -> None:
        eng = d.engine
        assert eng is not None
        t = await sc.wait_phase(1.0)
        await sc.send_equities()
        await wait_until(lambda: equities_applied(eng, sc), 5, "the first quotes")
        await next_round(eng, tape, t)
        sc.step()
        await sc.send_equities()  # on the wire...
        await asyncio.sleep(0)  # ...and read by the client when stop() begins

    live, replayed = await live_then_replay(sc, tmp_path, cfg, script)
    assert_books_equal(live["equity"], replayed["equity"])
