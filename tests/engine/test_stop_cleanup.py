"""A failure while stopping still closes the store: its SQLite thread must not outlive the stop
(it is not a daemon thread, so the process would hang at exit) and its lock must be released."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from daemon.app.live import LiveDaemon
from daemon.app.replay import engine_stop
from daemon.config.settings import Config, parse_config
from daemon.engine.engine import Engine
from daemon.store.store import Store

ROOT = Path(__file__).resolve().parents[2]
CONFIG: dict[str, Any] = {
    "sources": {"enabled": False}, "http": {"enabled": False},
    "markets": {"polymarket": {"enabled": False}},
    "agents": [{"id": "bh", "kind": "buy_and_hold"}, {"id": "cash", "kind": "cash"}],
}


def _config() -> Config:
    return parse_config(CONFIG)


def _live_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.daemon and t.is_alive()}


def _assert_no_new_threads(before: set[threading.Thread]) -> None:
    new = _live_threads() - before
    for t in new:
        t.join(5)
    assert not [t.name for t in new if t.is_alive()], "a store thread outlived the stop"


async def _stop_fails(d: LiveDaemon, match: str, before: set[threading.Thread]) -> None:
    """Stop ``d``, which raises ``match``; its store thread must be gone."""
    assert d.engine is not None
    store = d.engine.store
    try:
        with pytest.raises(RuntimeError, match=match):
            await d.stop()
        _assert_no_new_threads(before)
    finally:
        await store.close()  # idempotent; a failing test must not hang the run at exit


async def _started(tmp_path: Path, **kw: Any) -> tuple[LiveDaemon, Path, set[threading.Thread]]:
    """Start a daemon on ``tmp_path/d.db``; return it, its database and the threads before."""
    db = tmp_path / "d.db"
    before = _live_threads()
    d = LiveDaemon(_config(), db=str(db), **kw)
    await d.start()
    assert d.engine is not None
    return d, db, before


async def _assert_db_free(db: Path) -> None:
    """The daemon's lock on ``db`` is released: another store opens it."""
    again = await Store.open(str(db))
    await again.close()


class _ClosingAgent:
    """Stands in for an agent holding a process: counts its ``aclose`` calls."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.closed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    async def aclose(self) -> None:
        self.closed += 1


async def _boom() -> None:
    raise RuntimeError("close exploded")


async def test_stop_closes_the_store_when_closing_agents_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, db, before = await _started(tmp_path)
    assert d.engine is not None
    monkeypatch.setattr(d.engine, "close_agents", _boom)
    await _stop_fails(d, "close exploded", before)
    await _assert_db_free(db)


async def test_stop_closes_agents_and_store_when_the_bus_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, db, before = await _started(tmp_path)
    assert d.engine is not None
    slot = d.engine.slots["equity"]["bh"]
    agent = slot.agent = _ClosingAgent(slot.agent)  # type: ignore[assignment]
    monkeypatch.setattr(d.engine.bus, "stop", _boom)
    await _stop_fails(d, "close exploded", before)
    assert agent.closed == 1
    await _assert_db_free(db)


async def test_stop_closes_the_store_when_a_stopping_hook_fails(tmp_path: Path) -> None:
    class Sealer:
        name = "sealer"

        async def start(self, engine: Engine, *, sources: list[Any]) -> None:
            pass

        def on_stopping(self, ts: float) -> None:
            raise RuntimeError("seal exploded")

        async def stop(self) -> None:
            pass

    d, db, before = await _started(tmp_path, components=[Sealer()])
    await _stop_fails(d, "seal exploded", before)
    await _assert_db_free(db)


async def test_abort_start_closes_the_store_when_closing_agents_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, db, before = await _started(tmp_path)
    assert d.engine is not None
    monkeypatch.setattr(d.engine, "close_agents", _boom)
    store = d.engine.store
    try:
        await d.abort_start()  # never raises
        _assert_no_new_threads(before)
    finally:
        await store.close()
    await _assert_db_free(db)


async def test_replay_engine_stop_closes_agents_when_the_bus_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.timing.clock import SimClock

    store = await Store.open(str(tmp_path / "r.db"))
    try:
        engine = Engine(_config(), clock=SimClock(0.0), store=store)
        engine.build_agents()
        slot = engine.slots["equity"]["cash"]
        agent = slot.agent = _ClosingAgent(slot.agent)  # type: ignore[assignment]
        await engine.bus.start()
        monkeypatch.setattr(engine.bus, "stop", _boom)
        with pytest.raises(RuntimeError, match="close exploded"):
            await engine_stop(engine)
        assert agent.closed == 1
    finally:
        await store.close()


def test_a_daemon_whose_stop_fails_still_exits(tmp_path: Path) -> None:
    """The whole process: the error is reported and the interpreter exits instead of hanging."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        from daemon.config.settings import parse_config
        from daemon.app.live import LiveDaemon

        async def boom():
            raise RuntimeError("close exploded")

        async def main():
            d = LiveDaemon(parse_config({CONFIG!r}), db=sys.argv[1])
            await d.start()
            d.engine.close_agents = boom
            await d.stop()

        asyncio.run(main())
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "d.db")],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the process hung after a failed stop:\n{exc.stderr!r}") from None
    assert proc.returncode == 1
    assert "RuntimeError: close exploded" in proc.stderr
