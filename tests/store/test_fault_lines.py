"""Faults the daemon survives are one log line each and a count (issue 28, point 3).

- the metrics' refresh of the risk-adjusted figures while PostgreSQL is unreachable (a cut
  :class:`~tests.pgproxy.CutProxy`): "performance refresh failed", no traceback;
- a store write whose caller was cancelled (a SIGTERM while the disk is full or the database
  locked) and that then fails: one line, never asyncio's "Task exception was never retrieved";
- a round whose reads fail is the outage test's (tests/store/test_pg_outage.py).

Each counts in ``paperarena_faults_total{kind=...}`` (daemon/core/faults.py).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import daemon.web.observability as observability
from daemon.core.faults import FAULTS
from daemon.engine.engine import Engine
from daemon.store.store import Store
from daemon.timing.clock import SimClock
from daemon.web.observability import Observability
from tests.pg import pg_database, requires_pg
from tests.pgproxy import cut_proxy
from tests.web.test_alerts import T0, make_config

#: Hang guard of every wait (never reached unless something hangs).
HANG = 60.0


def _no_traceback(logs: Sequence[Mapping[str, Any]]) -> None:
    for entry in logs:
        assert "exc_info" not in entry and "exception" not in entry, entry


async def _until(pred: Any) -> None:
    async with asyncio.timeout(HANG):
        while not pred():
            await asyncio.sleep(0.02)


@requires_pg
async def test_a_failed_performance_refresh_is_one_line_and_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observability, "PERFORMANCE_REFRESH", 3600.0)  # only after marks
    cfg = make_config()
    with pg_database() as real, cut_proxy(real) as (url, proxy):
        store = await Store.open(url)
        engine = Engine(cfg, clock=SimClock(T0), store=store)
        engine.build_agents()
        obs = Observability(cfg, mode="live", http=False, process_metrics=False)
        await obs.start(engine, sources=[])
        try:
            before = FAULTS["performance_refresh"]
            with capture_logs() as logs:
                proxy.cut()
                for listener in engine.mark_listeners:  # a daily mark: refresh at once
                    listener("equity", T0)
                await _until(lambda: FAULTS["performance_refresh"] > before)
            assert FAULTS["performance_refresh"] == before + 1
            lines = [e for e in logs if e["event"] == "performance refresh failed"]
            assert len(lines) == 1 and "PgError" in lines[0]["error"], logs
            assert "\n" not in lines[0]["error"]
            _no_traceback(logs)
            text = "".join(m.name for m in obs.registry.collect())
            assert "paperarena_faults" in text
            proxy.restore()
        finally:
            await obs.stop()
            await store.close()


async def test_a_write_whose_caller_was_cancelled_fails_in_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "s.db"
    store = await Store.open(db, busy_timeout=0.3)
    foreign = sqlite3.connect(db, timeout=0)
    try:
        foreign.execute("BEGIN IMMEDIATE")  # the write lock: the store's write waits, then fails
        before = FAULTS["background_write"]
        with capture_logs() as logs, caplog.at_level(logging.ERROR, logger="asyncio"):
            caller = asyncio.ensure_future(store.set_meta({"k": "v"}))
            await asyncio.sleep(0.05)  # the write is waiting for the lock
            caller.cancel()  # as a SIGTERM cancels the daemon's main task
            with pytest.raises(asyncio.CancelledError):
                await caller
            await _until(lambda: FAULTS["background_write"] > before)
            gc.collect()
            await asyncio.sleep(0)
        assert FAULTS["background_write"] == before + 1
        lines = [e for e in logs if e.get("fault") == "background_write"]
        assert len(lines) == 1 and "locked" in lines[0]["error"], logs
        _no_traceback(logs)
        assert "never retrieved" not in caplog.text
    finally:
        foreign.rollback()
        foreign.close()
        await store.close()


async def test_an_alert_that_cannot_be_stored_is_one_line_and_counted(tmp_path: Path) -> None:
    from daemon.alerts.config import AlertsConfig
    from daemon.alerts.rules import AlertMonitor
    from tests.web.test_alerts import PATH, buy, tick

    db = tmp_path / "a.db"
    store = await Store.open(db, busy_timeout=0.2)
    engine = Engine(make_config(), clock=SimClock(T0), store=store)
    engine.add_equity_universe(make_config().markets.equity.assets)
    engine.build_agents()
    await engine.restore()
    await engine.bus.start()
    monitor = AlertMonitor(engine, AlertsConfig(check_interval=60, hysteresis=0.02))
    await monitor.start()
    foreign = sqlite3.connect(db, timeout=0)
    try:
        await tick(engine, T0, 1.0)
        await buy(engine, T0 + 1)
        before = FAULTS["alert_store"]
        foreign.execute("BEGIN IMMEDIATE")  # the store cannot write: a full disk alike
        with capture_logs() as logs:
            for dt, f in PATH[:3]:  # ew breaches its 10 % limit
                await tick(engine, T0 + dt, f)
                await tick(engine, T0 + dt + 10, f)
            await monitor.drain()
        assert monitor.raised, "no breach on the path"
        assert FAULTS["alert_store"] > before
        lines = [e for e in logs if e.get("fault") == "alert_store"]
        assert lines and all("\n" not in e["error"] for e in lines), logs
        _no_traceback(logs)
    finally:
        foreign.rollback()
        foreign.close()
        await monitor.stop()
        await engine.bus.stop()
        await store.close()
