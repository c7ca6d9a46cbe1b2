"""A PostgreSQL outage under a live daemon (issue 28, points 2 and 3).

The daemon (a subprocess, Polymarket deciding every second) writes into the real test server
through a :class:`~tests.pgproxy.CutProxy`. The proxy is cut (every session aborted, new
connections refused: a server that died) and restored while rounds are due. Then every scheduled
slot of every agent has exactly one decision row (the slots of the outage ``error``, written
when the store answered again), the log has no traceback and no asyncio "never retrieved"
line, and ``/metrics`` counts the faults.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

from tests.helpers import free_port, wait_ready
from tests.pg import pg_database, requires_pg
from tests.pgproxy import cut_proxy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = requires_pg

#: Hang guard of every wait (never reached unless something hangs).
HANG = 120.0

CONFIG = """
[markets.polymarket.schedule]
kind = "interval"
every = "1s"
timezone = "UTC"

[sources]
enabled = false

[store]
flush_interval = 0.2

[[agents]]
id = "bh"
kind = "buy_and_hold"
[[agents]]
id = "cash"
kind = "cash"
"""


def _rows(url: str) -> list[tuple[str, float, str, str]]:
    """Return every Polymarket decision row (agent, scheduled_ts, outcome, reason)."""
    async def read() -> list[tuple[str, float, str, str]]:
        con = await asyncpg.connect(url)
        try:
            schemas = [r[0] for r in await con.fetch(
                "SELECT table_schema FROM information_schema.tables"
                " WHERE table_name = 'decisions' AND table_schema LIKE 'pa_%'")]
            out = []
            for schema in schemas:
                out += [tuple(r) for r in await con.fetch(
                    f'SELECT agent, scheduled_ts, outcome, reason FROM "{schema}".decisions'
                    " WHERE market = 'polymarket'")]
            return out
        finally:
            await con.close()

    return asyncio.run(read())


def _wait(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG
    while not pred():
        assert time.monotonic() < deadline, f"hang guard: {what}"
        time.sleep(0.1)


#: API paths asked during the outage.
API = ("/api/status", "/api/leaderboard", "/api/agents", "/api/agents/bh",
       "/api/agents/bh/decisions", "/healthz", "/metrics")


def _status(url: str) -> tuple[int, str]:
    """Return the status and the error (if any) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=HANG) as resp:
            return int(resp.status), ""
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())["error"]


def _metric(base: str, name: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    out = {}
    for m in re.finditer(rf'^{name}\{{kind="(\w+)"\}} ([0-9.e+]+)$', text, re.M):
        out[m[1]] = float(m[2])
    return out


def test_every_slot_has_one_row_through_a_postgresql_outage(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "c.toml").write_text(CONFIG + f"\n[http]\nenabled = true\nport = {port}\n")
    log_path = tmp_path / "daemon.log"
    base = f"http://127.0.0.1:{port}"
    with pg_database() as real, cut_proxy(real) as (url, proxy), open(log_path, "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "daemon.app.cli", "run", "--config",
                                   str(tmp_path / "c.toml"), "--db", url],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(base, timeout=HANG)
            _wait(lambda: len({r[1] for r in _rows(real)}) >= 2, "two slots before the outage")
            proxy.cut()
            cut_at = time.time()
            _wait(lambda: "store write failed" in log_path.read_text()
                  or "could not read the store" in log_path.read_text(), "the fault is logged")
            # The API answers during the outage (200 from what it holds, or 503 with a body).
            during = {path: _status(base + path) for path in API}
            # Slots fall due during the outage (on a slow machine more of them: one row each).
            _wait(lambda: time.time() > cut_at + 3, "three slots in the outage")
            proxy.restore()
            back_at = time.time()
            _wait(lambda: any(ts > back_at + 1 for _, ts, _, _ in _rows(real)),
                  "a round after the outage")
            faults = _metric(base, "paperarena_faults_total")
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(HANG)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
        rows = _rows(real)
    text = log_path.read_text()
    assert "Traceback" not in text, text[-4000:]
    assert "never retrieved" not in text, text[-4000:]
    assert text.count("postgresql connection lost") == 1, text[-4000:]  # one per outage
    assert all(code in (200, 503) and (code == 200 or err) for code, err in during.values()), \
        during
    assert during["/healthz"] == (200, "") and during["/metrics"] == (200, ""), during
    assert faults.get("store_write", 0) + faults.get("round_store", 0) >= 1, faults
    by_agent: dict[str, list[float]] = {}
    for agent, ts, _, _ in rows:
        by_agent.setdefault(agent, []).append(ts)
    assert set(by_agent) == {"bh", "cash"}
    for agent, stamps in by_agent.items():
        stamps.sort()
        assert len(stamps) == len(set(stamps)), agent  # never two rows of one slot
        gaps = [b - a for a, b in itertools.pairwise(stamps) if b - a != 1.0]
        assert not gaps, (agent, gaps)  # every slot from the first to the last has its row
    errors = [r for r in rows if r[2] == "error"]
    assert errors and all("store" in r[3] for r in errors), rows  # the outage's slots
    assert all(r[1] < back_at for r in errors), (back_at, errors)  # none once it answers
    assert {r[2] for r in rows} <= {"skipped", "error", "missed", "abandoned"}, rows


def test_a_stop_during_the_outage_logs_no_traceback(tmp_path: Path) -> None:
    """SIGTERM while PostgreSQL is unreachable: the stop says what it could not store in one
    line each (the rounds since the last stored one are the next start's ``missed``)."""
    port = free_port()
    (tmp_path / "c.toml").write_text(CONFIG + f"\n[http]\nenabled = true\nport = {port}\n")
    log_path = tmp_path / "daemon.log"
    with pg_database() as real, cut_proxy(real) as (url, proxy), open(log_path, "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "daemon.app.cli", "run", "--config",
                                   str(tmp_path / "c.toml"), "--db", url],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(f"http://127.0.0.1:{port}", timeout=HANG)
            _wait(lambda: len({r[1] for r in _rows(real)}) >= 1, "a slot before the outage")
            proxy.cut()
            _wait(lambda: "store write failed" in log_path.read_text()
                  or "could not read the store" in log_path.read_text(), "the fault is logged")
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(HANG)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
    text = log_path.read_text()
    assert code != 0, text[-3000:]  # it could not commit its end: said, not hidden
    assert "Traceback" not in text, text[-4000:]
    assert "never retrieved" not in text, text[-4000:]
    assert "daemon stopping" in text
