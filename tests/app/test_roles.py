"""Split roles over a real Mosquitto: replay through roles, broker restarts, duplicates, ownership.

Every test on the system broker (127.0.0.1:1883) uses its own namespace and purges the retained
topics and persistent sessions it leaves behind; the restart test runs a private Mosquitto with
persistence on a free port. References are single-process ``replay()`` runs of the same recording
and config.

Why two kinds of reference: the books mark with one BLAS matrix-vector product over all agents of
a market, whose rounding depends on how many agents share the book. An agent's equity therefore
differs by about one ULP between an engine holding every agent and one holding a subset, whatever
the transport (a single-process ``replay(agent_ids=...)`` shows the same difference). So a split
evaluator's report is compared byte for byte with a single-process replay of the same agents,
an evaluator owning every agent byte for byte with the full single-process report, and against
the full report fills and decisions are identical and per-agent figures equal to float rounding.

Why one module over 500 lines: the split-role tests share one real Mosquitto broker and the
replay-through-roles fixtures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from daemon.app.replay import ReplayError, replay
from daemon.app.replay_publish import PublishSummary, ReplayPublisher
from daemon.app.replay_roles import EvaluateSummary, ReplayStream, replay_evaluate
from daemon.app.roles import OwnershipError, role_daemon
from daemon.config.settings import Config, load_config, parse_config
from daemon.core.events import DecisionEvent, Event, MarketListed, PriceEvent
from daemon.mqtt.bridge import MqttBridge
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import default_client_id
from daemon.store.reports import leaderboard
from scoring.board.text import to_json
from tests.helpers import HANG_GUARD
from tests.mosquitto import HOST, PORT, PrivateBroker, listening, requires_broker, until
from tests.recordings import TINY_CONFIG, make_recording

pytestmark = requires_broker

ROOT = Path(__file__).resolve().parents[2]
GROUPS = (("bh", "ew"), ("mom", "cash"))
#: Leaderboard fields computed across the agents of one database (rank, composite, ties; since
#: issue 27 the Deflated Sharpe Ratio's trials, rank stability, the Model Confidence Set and the
#: intervals, whose block length is the market's: the median over its agents).
CROSS_AGENT = frozenset({"rank", "tied_with_next", "composite_score", "composite_rank",
                         "vs_next", "vs_baselines", "dsr", "rank_stability", "in_mcs",
                         "mcs_p_value", "cumulative_return_ci", "mean_daily_return_ci",
                         "sharpe_ci"})
TEST_CONFIG = TINY_CONFIG + "\n[http]\nenabled = false\n"


# ------------------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class Rec:
    """The test recording, its config and the single-process reference reports."""

    path: Path
    config_path: Path
    config: Config
    count: int
    reports: dict[tuple[str, ...] | None, str]
    fills: dict[tuple[str, ...] | None, list[tuple[Any, ...]]]


def _fills(db: Path) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT agent, market, scheduled_ts, trades_json, traded_value, cost, value_before,"
            " value_after, weights_json FROM fills ORDER BY agent, market, scheduled_ts"
        ).fetchall()
    finally:
        con.close()


def build_rec(d: Path, extra: Sequence[Event] = ()) -> Rec:
    """Write the test recording (with ``extra`` events) into ``d`` and its references."""
    path = d / "rec.jsonl.gz"
    count = make_recording(path, days=4, extra=extra)
    cfg_path = d / "tiny.toml"
    cfg_path.write_text(TEST_CONFIG)
    cfg = load_config(cfg_path)
    reports: dict[tuple[str, ...] | None, str] = {}
    fills: dict[tuple[str, ...] | None, list[tuple[Any, ...]]] = {}
    for agents in (None, *GROUPS):
        db = d / f"ref-{'-'.join(agents or ('all',))}.db"
        asyncio.run(replay(path, cfg, db, progress=False,
                           agent_ids=None if agents is None else list(agents)))
        reports[agents] = to_json(leaderboard(db))
        fills[agents] = _fills(db)
    return Rec(path, cfg_path, cfg, count, reports, fills)


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Rec:
    return build_rec(tmp_path_factory.mktemp("roles"))


@dataclass
class Broker:
    """Broker coordinates of one test, and the clean-up of what the test leaves on it."""

    namespace: str
    port: int = PORT
    process_ids: set[str] = field(default_factory=set)

    def settings(self, **overrides: Any) -> MqttSettings:
        base: dict[str, Any] = {"namespace": self.namespace, "port": self.port,
                                "reconnect_initial": 0.05, "reconnect_max": 0.3, "keepalive": 5}
        return MqttSettings(**(base | overrides))

    def config(self, rec: Rec, **mqtt: Any) -> Config:
        return rec.config.model_copy(update={"mqtt": self.settings(**mqtt)})

    def toml(self, path: Path, extra: str = "") -> Path:
        path.write_text(TEST_CONFIG + extra + f'\n[mqtt]\nhost = "{HOST}"\nport = {self.port}\n'
                        f'namespace = "{self.namespace}"\nreconnect_initial = 0.05\n'
                        "reconnect_max = 0.3\nkeepalive = 5\n")
        return path

    async def purge(self) -> None:
        """Drop the persistent sessions and retained topics left in our namespace."""
        if not listening(self.port):
            return
        for pid in self.process_ids:
            async with aiomqtt.Client(HOST, self.port,
                                      identifier=default_client_id(self.namespace, pid),
                                      clean_session=True):
                pass
        retained: set[str] = set()
        async with aiomqtt.Client(HOST, self.port) as client:
            await client.subscribe(f"paperarena/{self.namespace}/#", qos=1)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    async for message in client.messages:
                        if message.retain:
                            retained.add(message.topic.value)
            for topic in retained:
                await client.publish(topic, b"", qos=1, retain=True)


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    b = Broker(namespace=f"r{uuid.uuid4().hex[:12]}")
    try:
        yield b
    finally:
        await b.purge()


# ------------------------------------------------------------------------------------- helpers


@dataclass
class SplitRun:
    """One replay through roles: a publisher and evaluators as tasks of this event loop."""

    publisher: ReplayPublisher
    evaluators: list[asyncio.Task[EvaluateSummary]]
    publisher_task: asyncio.Task[PublishSummary]
    dbs: list[Path]

    def applied(self) -> int:
        """Return the lowest offset acknowledged as applied by every evaluator (0 if none)."""
        acks = self.publisher.acks
        return min((a.applied for a in acks.values()), default=0) if acks else 0

    async def results(self, timeout: float = 40.0) -> tuple[PublishSummary, list[EvaluateSummary]]:
        async with asyncio.timeout(timeout):
            summaries = [await t for t in self.evaluators]
            return await self.publisher_task, summaries


@contextlib.asynccontextmanager
async def split_run(rec: Rec, broker: Broker, tmp: Path, groups: tuple[tuple[str, ...], ...], *,
                    window: int = 500, evaluator_settings: dict[int, MqttSettings] | None = None,
                    stall_timeout: float = 15.0, wait_timeout: float = 15.0
                    ) -> AsyncIterator[SplitRun]:
    """Start a publisher and one evaluator per agent group; cancel what is left on exit."""
    settings = broker.settings()
    loop = asyncio.get_running_loop()
    dbs = [tmp / f"e{k}.db" for k in range(len(groups))]
    broker.process_ids.update({"pub", *(f"e{k}" for k in range(len(groups)))})
    evaluators = [
        loop.create_task(replay_evaluate(
            rec.config, dbs[k], agent_ids=list(agents),
            settings=(evaluator_settings or {}).get(k, settings), process_id=f"e{k}",
            stall_timeout=stall_timeout, connect_timeout=5.0))
        for k, agents in enumerate(groups)
    ]
    publisher = ReplayPublisher(rec.path, settings, process_id="pub", evaluators=len(groups),
                                window=window, wait_timeout=wait_timeout, retransmit_after=0.5)
    run = SplitRun(publisher, evaluators, loop.create_task(publisher.run()), dbs)
    try:
        yield run
    finally:
        for task in (*evaluators, run.publisher_task):
            task.cancel()
        for task in (*evaluators, run.publisher_task):
            with contextlib.suppress(BaseException):
                await task


def _rows(db: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["agent"], r["market"]): r for r in json.loads(to_json(leaderboard(db)))["rows"]}


def _close(a: Any, b: Any, where: str) -> Iterator[str]:
    """Yield the places where ``a`` and ``b`` differ beyond float rounding."""
    if isinstance(a, float) and isinstance(b, float):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            yield f"{where}: {a!r} != {b!r}"
    elif isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            yield f"{where}: keys {sorted(set(a) ^ set(b))}"
        for k in set(a) & set(b):
            yield from _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _close(x, y, f"{where}[{i}]")
    elif a != b:
        yield f"{where}: {a!r} != {b!r}"


def assert_matches_references(rec: Rec, dbs: list[Path], groups: tuple[tuple[str, ...], ...]
                              ) -> None:
    """Compare the evaluators' databases with the single-process references (module docs)."""
    for db, agents in zip(dbs, groups, strict=True):
        reference = rec.reports[None] if set(agents) == {a.id for a in rec.config.agents} \
            else rec.reports[agents]
        assert to_json(leaderboard(db)) == reference, f"{db.name}: report differs"
    full = rec.reports[None]
    if len(groups) == 1:
        return
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    fills: list[tuple[Any, ...]] = []
    for db in dbs:
        merged |= _rows(db)
        fills += _fills(db)
    assert sorted(fills) == sorted(rec.fills[None])
    ref_rows = {(r["agent"], r["market"]): r for r in json.loads(full)["rows"]}
    assert set(merged) == set(ref_rows)
    problems = [
        p for key, row in ref_rows.items()
        for p in _close({k: v for k, v in row.items() if k not in CROSS_AGENT},
                        {k: v for k, v in merged[key].items() if k not in CROSS_AGENT}, str(key))
    ]
    assert not problems, problems[:5]


# ------------------------------------------------------------------------------------- tests


async def test_two_evaluators_split_the_agents_and_match_the_single_process(
    rec: Rec, broker: Broker, tmp_path: Path
) -> None:
    async with split_run(rec, broker, tmp_path, GROUPS) as run:
        published, evaluated = await run.results()
    assert published.events == rec.count and published.evaluators == ("e0", "e1")
    assert published.bridge["lost"] == 0
    for summary, agents in zip(evaluated, GROUPS, strict=True):
        assert summary.agents == agents and summary.events == rec.count
        assert summary.stream.applied == rec.count and summary.resumed_from == 0
    assert_matches_references(rec, run.dbs, GROUPS)
    # Disjoint: each database holds only its own agents' decisions.
    for db, agents in zip(run.dbs, GROUPS, strict=True):
        con = sqlite3.connect(db)
        assert {a for (a,) in con.execute("SELECT DISTINCT agent FROM decisions")} == set(agents)
        con.close()


async def test_a_recording_with_bars_fundamentals_and_clock_splits_like_one_process(
    broker: Broker, tmp_path: Path
) -> None:
    """Every event class a recording can hold crosses the broker: a history recording's daily
    bars and closing clock tick, a StockBench recording's fundamentals (a class the evaluators
    did not subscribe to left a gap the stream waited on forever)."""
    from datetime import UTC, date, datetime, timedelta

    from daemon.core.events import BarEvent, ClockEvent, FundamentalsEvent
    from daemon.timing.nyse import get_nyse_calendar
    from tests.recordings import TICKERS

    cal = get_nyse_calendar()
    extra: list[Event] = []
    for k in range(4):
        day = date(2026, 11, 2) + timedelta(days=k)
        bounds = cal.session_bounds(day)
        if bounds is None:
            continue
        close = bounds[1].timestamp() + 1
        for n, s in enumerate(TICKERS):
            extra.append(BarEvent(ts=close, recv_ts=close, asset=s, day=day.isoformat(),
                                  open=100.0 + n, high=103.0 + n, low=98.0 + n, close=101.0 + n,
                                  volume=1e6 * (n + 1), source="test"))
            extra.append(FundamentalsEvent(ts=close, recv_ts=close, asset=s,
                                           metrics={"pe_ratio": 20.0 + n}, source="test"))
    end = datetime(2026, 11, 6, tzinfo=UTC).timestamp() + 7200
    extra.append(ClockEvent(ts=end, recv_ts=end, reason="end of recording"))
    rec = await asyncio.to_thread(build_rec, tmp_path, extra)  # asyncio.run: not on this loop
    async with split_run(rec, broker, tmp_path, GROUPS) as run:
        published, evaluated = await run.results()
    assert published.events == rec.count
    for summary in evaluated:
        assert summary.events == rec.count and summary.stream.applied == rec.count
    assert_matches_references(rec, run.dbs, GROUPS)


@pytest.mark.skipif(shutil.which("mosquitto") is None, reason="mosquitto binary not installed")
async def test_broker_restart_and_crash_mid_run_are_survived(
    rec: Rec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The evaluator waits at a quarter and at half of the stream while the broker restarts, so
    # both happen mid-run however fast the machine applies events (polling for progress raced:
    # on a busy machine the whole stream could be applied before the poll saw a quarter).
    gates = {rec.count // 4: (asyncio.Event(), asyncio.Event()),
             rec.count // 2: (asyncio.Event(), asyncio.Event())}
    next_event = ReplayStream.next_event

    async def waits_at_gates(stream: ReplayStream) -> tuple[int, Event] | None:
        item = await next_event(stream)
        if item is not None and item[0] in gates:
            reached, go_on = gates[item[0]]
            reached.set()
            await go_on.wait()
        return item

    monkeypatch.setattr(ReplayStream, "next_event", waits_at_gates)
    private = PrivateBroker(tmp_path)
    await private.start()
    try:
        b = Broker(namespace="restart", port=private.port)
        everyone = (tuple(a.id for a in rec.config.agents),)
        (q_reached, q_go), (h_reached, h_go) = gates[rec.count // 4], gates[rec.count // 2]
        async with split_run(rec, b, tmp_path, everyone, window=100) as run:
            # Graceful restart: sessions, queued QoS 1 messages and retained state are saved.
            await asyncio.wait_for(q_reached.wait(), HANG_GUARD)
            await private.stop()
            await private.start()
            q_go.set()
            # Crash: what the broker held since its last save is gone; the publisher re-sends.
            await asyncio.wait_for(h_reached.wait(), HANG_GUARD)
            private.kill()
            await private.start()
            h_go.set()
            published, (evaluated,) = await run.results()
        assert published.bridge["reconnects"] == 2 and published.bridge["lost"] == 0
        assert evaluated.bridge["reconnects"] >= 2
        assert evaluated.events == rec.count and evaluated.resumed_from == 0
        assert_matches_references(rec, run.dbs, everyone)  # byte-identical full report
    finally:
        private.kill()


async def test_an_evaluator_restarted_mid_run_resumes_from_its_database(
    rec: Rec, broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    everyone = (tuple(a.id for a in rec.config.agents),)
    # The evaluator dies (cancelled) as the stream hands it the event halfway: its last round
    # commit is its checkpoint. Killing it from here on a polled ack instead raced it: on a
    # busy machine it had applied the whole stream before the poll saw half of it acked.
    killed = asyncio.Event()
    next_event = ReplayStream.next_event

    async def dies_halfway(stream: ReplayStream) -> tuple[int, Event] | None:
        item = await next_event(stream)
        if item is not None and item[0] >= rec.count // 2 and not killed.is_set():
            killed.set()
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)  # raises CancelledError: the event is never applied
        return item

    monkeypatch.setattr(ReplayStream, "next_event", dies_halfway)
    async with split_run(rec, broker, tmp_path, everyone, window=100) as run:
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(40):
                await run.evaluators[0]
        assert killed.is_set() and run.evaluators[0].cancelled()
        run.evaluators[0] = asyncio.get_running_loop().create_task(replay_evaluate(
            rec.config, run.dbs[0], agent_ids=list(everyone[0]), settings=broker.settings(),
            process_id="e0", stall_timeout=15.0))
        published, (evaluated,) = await run.results()
    assert 0 < evaluated.resumed_from < rec.count
    assert evaluated.events == rec.count - evaluated.resumed_from
    assert published.rewinds >= 1  # the stream was re-sent from the resume offset
    assert_matches_references(rec, run.dbs, everyone)


async def test_duplicated_deliveries_are_applied_once(
    rec: Rec, broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doubled: set[int] = set()
    later: list[tuple[Event, str | None, int]] = []
    send = MqttBridge.send

    def send_twice(self: MqttBridge, event: Event, *, run: str | None = None,
                   seq: int | None = None) -> None:
        send(self, event, run=run, seq=seq)
        if seq is None:
            return
        while later and later[0][2] <= seq - 3:  # a second QoS 1 message, 3 events later
            copy, copy_run, copy_seq = later.pop(0)
            send(self, copy, run=copy_run, seq=copy_seq)
            doubled.add(copy_seq)
        if seq % 7 == 0:
            later.append((event, run, seq))

    monkeypatch.setattr(MqttBridge, "send", send_twice)
    # Evaluator 1 remembers a single id, so its reorder buffer (by offset) drops the copies.
    forgetful = {1: broker.settings(dedupe_window=1)}
    async with split_run(rec, broker, tmp_path, GROUPS, evaluator_settings=forgetful) as run:
        published, (e0, e1) = await run.results()
    assert len(doubled) >= rec.count // 7
    assert e0.bridge["duplicates"] >= len(doubled)  # dropped by envelope (run, seq)
    assert e1.stream.duplicates >= len(doubled)  # dropped by the reorder buffer
    assert e0.events == e1.events == published.events == rec.count
    assert_matches_references(rec, run.dbs, GROUPS)  # fills count and report unchanged


async def test_overlapping_evaluators_refuse_to_start(
    rec: Rec, broker: Broker, tmp_path: Path
) -> None:
    broker.process_ids.update({"first", "second", "live-second"})
    first = asyncio.get_running_loop().create_task(replay_evaluate(
        rec.config, tmp_path / "first.db", agent_ids=["bh", "ew"], settings=broker.settings(),
        process_id="first"))
    try:
        async with aiomqtt.Client(HOST, PORT) as client:  # wait until the claim is retained
            await client.subscribe(f"paperarena/{broker.namespace}/owners/first", qos=1)
            async with asyncio.timeout(10):
                async for message in client.messages:
                    if message.payload:
                        break
        with pytest.raises(OwnershipError, match=r"ew owned by first"):
            await replay_evaluate(rec.config, tmp_path / "second.db", agent_ids=["ew", "mom"],
                                  settings=broker.settings(), process_id="second")
        cfg = broker.toml(tmp_path / "split.toml", '\n[logging]\nlevel = "error"\n')
        for args in (
            ["replay-evaluate", "--db", str(tmp_path / "cli.db"), "--agents", "mom,bh"],
            ["run", "--role", "evaluator", "--db", str(tmp_path / "live.db"), "--agents", "bh",
             "--duration", "5"],
        ):
            # in a thread: the first evaluator shares this loop and must keep its MQTT keepalive
            # (5 s here; a loop blocked longer lets the broker declare it offline: no conflict)
            r = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "daemon.app.cli", *args, "--config", str(cfg),
                 "--process-id", "live-second"],
                cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert r.returncode == 2, r.stderr
            assert r.stderr.count("\n") == 1, r.stderr
            assert "bh owned by first" in r.stderr and "disjoint --agents" in r.stderr
        assert not first.done()  # the first evaluator is unaffected
        r = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "daemon.app.cli", "replay-evaluate", "--config", str(cfg),
             "--agents", "nobody"],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nobody" in r.stderr
    finally:
        first.cancel()
        with contextlib.suppress(BaseException):
            await first


async def test_an_event_that_never_arrives_is_reported_as_a_gap(
    rec: Rec, broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    send = MqttBridge.send

    def lose_ten(self: MqttBridge, event: Event, *, run: str | None = None,
                 seq: int | None = None) -> None:
        if seq != 10:  # lost every time, re-sends included
            send(self, event, run=run, seq=seq)

    monkeypatch.setattr(MqttBridge, "send", lose_ten)
    async with split_run(rec, broker, tmp_path, (("bh",),), stall_timeout=1.5,
                         wait_timeout=3.0) as run:
        with pytest.raises(ReplayError) as evaluator_error:
            await asyncio.wait_for(run.evaluators[0], HANG_GUARD)
        message = str(evaluator_error.value)
        assert f"event(s) 10 of {rec.count} never arrived" in message
        assert "\n" not in message
        with pytest.raises(ReplayError, match=r"offline .* before the end of the stream: e0"):
            await asyncio.wait_for(run.publisher_task, HANG_GUARD)
    assert run.publisher.acks["e0"].applied == 10 and run.publisher.acks["e0"].received == 10


async def test_live_feeds_and_evaluator_roles_share_market_data(
    broker: Broker, tmp_path: Path
) -> None:
    cfg = parse_config({
        "http": {"enabled": False},
        "sources": {"enabled": False},
        "agents": [{"id": "bh", "kind": "buy_and_hold"}, {"id": "cash", "kind": "cash"}],
        "mqtt": broker.settings().model_dump(exclude_defaults=True),
    })
    broker.process_ids.update({"feeds", "eval"})
    feeds = role_daemon(with_pid(cfg, "feeds"), "feeds", db=str(tmp_path / "feeds.db"))
    evaluator = role_daemon(with_pid(cfg, "eval", agents=("bh",)), "evaluator",
                            db=str(tmp_path / "eval.db"))
    async with contextlib.AsyncExitStack() as stack:
        await feeds.start()
        stack.push_async_callback(feeds.stop)
        assert feeds.engine is not None and not any(feeds.engine.slots.values())
        listed = MarketListed(ts=1.0, question_id="q1", question="Rain?", yes_asset="y1",
                              no_asset="n1")
        await feeds.engine.bus.publish(listed)  # before the evaluator exists
        async with observe(broker, "decision/#") as decisions:
            await evaluator.start()
            stack.push_async_callback(evaluator.stop)
            eng = evaluator.engine
            assert eng is not None and {a for s in eng.slots.values() for a in s} == {"bh"}
            # A late joiner still learns the open question (re-announced when it came online).
            await until(lambda: "q1" in eng.state.questions, what="re-announced listing")
            for i in range(50):  # prices: QoS 0, latest per asset
                feeds.engine.bus.publish_nowait(PriceEvent(ts=10.0 + i, market="polymarket",
                                                           asset="y1", price=0.4 + i / 1000))
            book = eng.books["polymarket"]
            await until(lambda: book.prices[book.asset_index("y1")] == 0.4 + 49 / 1000,
                        what="the latest price")
            # A burst decoded into columns (the Polymarket read loop's path) crosses the
            # broker as its price events too.
            from daemon.core.price_columns import PriceColumns

            cols = PriceColumns("polymarket", "polymarket")
            for i in range(50):
                cols.append("y1", 100.0 + i, 100.0 + i, 0.5 + i / 1000, None, None)
            feeds.engine.bus.publish_columns(cols)
            await until(lambda: book.prices[book.asset_index("y1")] == 0.5 + 49 / 1000,
                        what="the latest price of a columnar burst")
            await eng.rounds["polymarket"].run(eng.clock.now())
            await until(lambda: len(decisions) == 1, what="decision on the broker")
        assert decisions[0].agent == "bh"  # type: ignore[attr-defined]


def with_pid(cfg: Config, pid: str, *, agents: tuple[str, ...] = ()) -> Config:
    """Return ``cfg`` with a process id and an evaluator agent set."""
    assert cfg.mqtt is not None
    return cfg.model_copy(update={
        "mqtt": cfg.mqtt.model_copy(update={"process_id": pid}),
        "evaluator": cfg.evaluator.model_copy(update={"agents": agents}),
    })


@contextlib.asynccontextmanager
async def observe(broker: Broker, subtopic: str) -> AsyncIterator[list[DecisionEvent]]:
    """Collect the events published under ``paperarena/<ns>/<subtopic>``."""
    from daemon.core.events import decode_event
    from daemon.mqtt.wire import Envelope

    got: list[DecisionEvent] = []
    async with aiomqtt.Client(HOST, broker.port) as client:
        await client.subscribe(f"paperarena/{broker.namespace}/{subtopic}", qos=1)

        async def pump() -> None:
            import msgspec

            async for message in client.messages:
                env = msgspec.json.decode(message.payload, type=Envelope)  # type: ignore[arg-type]
                ev = decode_event(bytes(env.event))
                if isinstance(ev, DecisionEvent):
                    got.append(ev)

        task = asyncio.get_running_loop().create_task(pump())
        try:
            yield got
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

