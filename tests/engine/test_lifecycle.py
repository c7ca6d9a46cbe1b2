"""Daemon lifecycle: SIGTERM, one daemon per database, SIGHUP reloads, abandoned rounds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import daemon.app.live as live
from agents.base import AgentDecision, Observation
from daemon.app.live import LiveDaemon
from daemon.config.settings import parse_config
from daemon.engine.engine import Engine
from daemon.store.records import RoundCommit
from daemon.store.store import Store
from daemon.timing.clock import SimClock

ROOT = Path(__file__).resolve().parents[2]
BASE = """
[sources]
enabled = false
[http]
enabled = false
[markets.polymarket]
enabled = false
"""
AGENTS_A = """
[[agents]]
id = "bh"
kind = "buy_and_hold"
[[agents]]
id = "cash"
kind = "cash"
"""
AGENTS_B = """
[[agents]]
id = "bh"
kind = "buy_and_hold"
[[agents]]
id = "ew"
kind = "equal_weight"
"""


class DaemonProc:
    """``paperarena run`` in a subprocess, its JSON log lines collected by a thread."""

    def __init__(self, config: Path, db: Path) -> None:
        env = {**os.environ, "INVOCATION_ID": "test"}  # JSON logs
        env.pop("NOTIFY_SOCKET", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.app.cli", "run", "--config", str(config),
             "--db", str(db)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in list(self.lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def wait_event(self, name: str, count: int = 1, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = [e for e in self.events() if e.get("event") == name]
            if len(hits) >= count:
                return hits[count - 1]
            if self.proc.poll() is not None and not self._thread.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no {name!r} log line; got:\n" + "\n".join(self.lines))

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._thread.join(5)
        return rc


def test_sigterm_exits_0_with_the_run_stopped(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE + AGENTS_A)
    db = tmp_path / "d.db"
    d = DaemonProc(cfg, db)
    try:
        d.wait_event("daemon ready")
        # A second daemon on the same database refuses to start, clearly, with exit 2.
        second = subprocess.run(
            [sys.executable, "-m", "daemon.app.cli", "run", "--config", str(cfg), "--db", str(db)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert "in use by another paperarena daemon" in second.stderr
        assert f"pid {d.proc.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        rc = d.stop()
    assert rc == 0, "\n".join(d.lines)
    assert [e["event"] for e in d.events()][-2:] == ["daemon stopped", "daemon exited"]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT mode, started_ts, stopped_ts FROM runs").fetchall()
    assert len(rows) == 1 and rows[0][0] == "live"
    assert rows[0][2] is not None and rows[0][2] >= rows[0][1]


def test_sighup_reloads_agents_and_refuses_bad_configs(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE + AGENTS_A)
    d = DaemonProc(cfg, tmp_path / "d.db")
    try:
        ready = d.wait_event("daemon ready")
        assert ready["agents"] == ["bh", "cash"]
        cfg.write_text(BASE + AGENTS_B)
        d.proc.send_signal(signal.SIGHUP)
        ok = d.wait_event("config reloaded")
        assert set(ok["changes"]) == {"added ew to equity", "removed cash from equity"}
        # An invalid file is refused with one line; the running config stays.
        cfg.write_text(BASE + AGENTS_B + "\n[[agents]]\nid = \"x\"\nkind = \"nope\"\n")
        d.proc.send_signal(signal.SIGHUP)
        bad = d.wait_event("config reload refused, running config kept")
        assert bad["level"] == "error" and "agents.2.kind" in bad["error"]
        assert "\n" not in bad["error"]
        # An invalid [alerts] table is refused before any agent change is applied.
        cfg.write_text(BASE + AGENTS_A + "\n[alerts]\nhysteresis = 7\n")
        d.proc.send_signal(signal.SIGHUP)
        bad = d.wait_event("config reload refused, running config kept", count=2)
        assert "alerts.hysteresis" in bad["error"]
        # Markets, store and sources need a restart.
        cfg.write_text(BASE.replace("[markets.polymarket]\nenabled = false",
                                    "[markets.polymarket]\nenabled = true")
                       + "[store]\nbatch_size = 10\n" + AGENTS_B)
        d.proc.send_signal(signal.SIGHUP)
        bad = d.wait_event("config reload refused, running config kept", count=3)
        assert bad["error"].startswith("restart required for: ")
        assert "markets" in bad["error"] and "store" in bad["error"]
        # Back to a good file: applied again (nothing left to change).
        cfg.write_text(BASE + AGENTS_B)
        d.proc.send_signal(signal.SIGHUP)
        assert d.wait_event("config reloaded", count=2)["changes"] == []
    finally:
        rc = d.stop()
    assert rc == 0, "\n".join(d.lines)


# -- in process --------------------------------------------------------------------------------


async def _engine(tmp_path: Path, toml_agents: list[dict[str, Any]]) -> Engine:
    cfg = parse_config({"markets": {"polymarket": {"enabled": False}}, "agents": toml_agents})
    store = await Store.open(tmp_path / "e.db")
    eng = Engine(cfg, clock=SimClock(1_800_000_000.0), store=store)
    eng.add_equity_universe(cfg.markets.equity.assets)
    eng.build_agents()
    return eng


async def test_engine_reload(tmp_path: Path) -> None:
    eng = await _engine(tmp_path, [
        {"id": "bh", "kind": "buy_and_hold"},
        {"id": "mom", "kind": "momentum", "halt_on_breach": True, "max_drawdown": 0.2},
    ])
    try:
        mom_slot = eng.slots["equity"]["mom"]
        mom_slot.status, mom_slot.reason = "halted", "drawdown 25% > 20%"
        await eng.store.commit_round(RoundCommit(agent_states=[
            ("mom", "equity", "halted", "drawdown 25% > 20%", 1.0)]))
        bh_slot = eng.slots["equity"]["bh"]
        new = eng.config.model_copy(update={"agents": parse_config({"agents": [
            {"id": "bh", "kind": "buy_and_hold", "memory": 9},
            {"id": "mom", "kind": "momentum", "halt_on_breach": True, "max_drawdown": 0.2},
            {"id": "ew", "kind": "equal_weight"},
        ]}).agents})
        changes = await eng.reload(new)
        assert changes == ["updated bh in equity", "added ew to equity"]
        slots = eng.slots["equity"]
        assert slots["bh"].memory == 9 and slots["bh"] is not bh_slot  # rebuilt
        assert slots["mom"] is mom_slot and mom_slot.status == "halted"  # untouched
        assert slots["ew"].status == "active"
        assert "ew" in eng.books["equity"].agents
        # Removing an agent drops its slot but keeps its book.
        only_bh = new.model_copy(update={"agents": new.agents[:1]})
        assert await eng.reload(only_bh) == ["removed mom from equity", "removed ew from equity"]
        assert list(eng.slots["equity"]) == ["bh"]
        assert {"mom", "ew", "bh"} <= set(eng.books["equity"].agents)
        # Added back, a halted agent is still halted (resume goes through the API).
        assert await eng.reload(new) == ["added mom to equity", "added ew to equity"]
        assert eng.slots["equity"]["mom"].status == "halted"
        # Anything but agents and alerts needs a restart; nothing changes.
        bad = new.model_copy(update={"scheduler": parse_config(
            {"scheduler": {"misfire_grace": "1m"}}).scheduler})
        with pytest.raises(ValueError, match="restart required for: scheduler"):
            await eng.reload(bad)
        assert eng.config is new
    finally:
        await eng.store.close()


async def test_engine_reload_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eng = await _engine(tmp_path, [{"id": "bh", "kind": "buy_and_hold"}])
    try:
        import daemon.engine.engine as engine_mod

        def boom(acfg: Any, **_: Any) -> Any:
            raise RuntimeError(f"cannot build {acfg.id}")

        monkeypatch.setattr(engine_mod, "build_agent", boom)
        new = eng.config.model_copy(update={"agents": parse_config({"agents": [
            {"id": "ew", "kind": "equal_weight"}]}).agents})
        with pytest.raises(RuntimeError, match="cannot build ew"):
            await eng.reload(new)
        assert list(eng.slots["equity"]) == ["bh"]
    finally:
        await eng.store.close()


async def test_engine_reload_builds_agents_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = await _engine(tmp_path, [{"id": "bh", "kind": "buy_and_hold"}])
    try:
        import daemon.engine.engine as engine_mod

        real = engine_mod.build_agent
        threads: list[threading.Thread] = []

        def slow(acfg: Any, **kw: Any) -> Any:  # a constructor taking long (LiteLLM's import)
            threads.append(threading.current_thread())
            time.sleep(2.0)
            return real(acfg, **kw)

        monkeypatch.setattr(engine_mod, "build_agent", slow)
        new = eng.config.model_copy(update={"agents": parse_config({"agents": [
            {"id": "bh", "kind": "buy_and_hold"}, {"id": "ew", "kind": "equal_weight"}]}).agents})
        worst, done = 0.0, asyncio.Event()

        async def probe() -> None:
            nonlocal worst
            while not done.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(0.01)
                worst = max(worst, time.perf_counter() - t0 - 0.01)

        task = asyncio.create_task(probe())
        try:
            assert await eng.reload(new) == ["added ew to equity"]
        finally:
            done.set()
            await task
        assert len(threads) == 1 and threads[0] is not threading.main_thread()
        # The construction took 2 s in its thread; on the loop it would hold it that long.
        assert worst < 1.5, f"the loop was held {worst:.3f}s"
    finally:
        await eng.store.close()


class _Stuck:
    """An agent whose decision never comes."""

    def __init__(self, agent_id: str) -> None:
        self.id = agent_id
        self.started = asyncio.Event()

    async def decide(self, obs: Observation) -> AgentDecision:
        self.started.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_rounds_in_flight_at_shutdown_are_recorded_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "STOP_GRACE", 0.3)
    cfg = parse_config({
        "sources": {"enabled": False}, "http": {"enabled": False},
        "markets": {"equity": {"enabled": False},
                    "polymarket": {"schedule": {"kind": "interval", "every": "1s"}}},
        "agents": [{"id": "slow", "kind": "cash", "markets": ["polymarket"]},
                   {"id": "c2", "kind": "cash", "markets": ["polymarket"]}],
    })
    db = tmp_path / "a.db"
    d = LiveDaemon(cfg, db=str(db))
    await d.start()
    try:
        assert d.engine is not None
        stuck = _Stuck("slow")
        d.engine.slots["polymarket"]["slow"].agent = stuck  # type: ignore[assignment]
        # A round needs a tradable, freshly priced question to ask its agents.
        from daemon.core.events import MarketListed, PriceEvent

        now = time.time()
        await d.engine.bus.publish(MarketListed(ts=now, recv_ts=now, question_id="q",
                                                question="Q?", yes_asset="y", no_asset="n"))
        for asset, p in (("y", 0.4), ("n", 0.6)):
            await d.engine.bus.publish(PriceEvent(ts=now, recv_ts=now, market="polymarket",
                                                  asset=asset, price=p))
        await asyncio.wait_for(stuck.started.wait(), 10)
        in_flight = dict(d.engine.rounds["polymarket"].in_flight)
        assert len(in_flight) == 1
    finally:
        await d.stop()
    (ts, agents), = in_flight.items()
    assert set(agents) == {"slow", "c2"}
    con = sqlite3.connect(db)
    rows = con.execute("SELECT agent, outcome, reason FROM decisions WHERE scheduled_ts=?",
                       (ts,)).fetchall()
    assert sorted(rows) == [
        ("c2", "abandoned", "daemon stopped before the decision finished"),
        ("slow", "abandoned", "daemon stopped before the decision finished"),
    ]
    assert con.execute("SELECT stopped_ts FROM runs").fetchone()[0] is not None


async def test_record_abandoned_skips_decided_agents(tmp_path: Path) -> None:
    from daemon.engine.rounds import record_abandoned
    from daemon.store.records import DecisionRecord

    eng = await _engine(tmp_path, [{"id": "a", "kind": "cash"}, {"id": "b", "kind": "cash"}])
    try:
        rnd = eng.rounds["equity"]
        rnd.in_flight[100.0] = ("a", "b")
        await eng.store.commit_round(RoundCommit(decisions=[
            DecisionRecord("a", "equity", 100.0, 101.0, "ok")]))
        assert await record_abandoned(eng) == 1
        assert rnd.in_flight == {}
        rows = await eng.store.fetchall(
            "SELECT agent, outcome FROM decisions ORDER BY agent")
        assert rows == [("a", "ok"), ("b", "abandoned")]
        assert await record_abandoned(eng) == 0
    finally:
        await eng.store.close()
