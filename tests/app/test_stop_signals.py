"""Long-running commands stop cleanly on SIGTERM as on SIGINT (issue 11.13).

Real subprocesses of ``python -m daemon.app.cli`` against the real Mosquitto: after SIGTERM each
command unwinds (one line, exit 143), withdraws its retained ownership claim, clears its retained
``status/<id>`` and the replay markers it announced; an evaluator waiting for a publisher gives
up after ``[evaluator] publisher_timeout`` with one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiomqtt
import pytest

from tests.mosquitto import HOST, PORT, requires_broker
from tests.recordings import TINY_CONFIG, make_recording

pytestmark = requires_broker
ROOT = Path(__file__).resolve().parents[2]


def toml(path: Path, namespace: str, extra: str = "") -> Path:
    path.write_text(TINY_CONFIG + "\n[http]\nenabled = false\n" + extra +
                    f'\n[mqtt]\nhost = "{HOST}"\nport = {PORT}\nnamespace = "{namespace}"\n'
                    "reconnect_initial = 0.05\nreconnect_max = 0.3\nkeepalive = 5\n")
    return path


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "daemon.app.cli", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def retained(namespace: str) -> dict[str, bytes]:
    """Return every retained message under our namespace (topic below it → payload)."""
    prefix = f"paperarena/{namespace}/"
    found: dict[str, bytes] = {}
    async with aiomqtt.Client(HOST, PORT) as client:
        await client.subscribe(f"{prefix}#", qos=1)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                async for m in client.messages:
                    if m.retain and isinstance(m.payload, bytes) and m.payload:
                        found[m.topic.value[len(prefix):]] = m.payload
    return found


async def wait_retained(namespace: str, topic: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while topic not in await retained(namespace):
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} never retained")


async def purge(namespace: str) -> None:
    async with aiomqtt.Client(HOST, PORT) as client:
        for topic in await retained(namespace):
            await client.publish(f"paperarena/{namespace}/{topic}", b"", qos=1, retain=True)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


@pytest.fixture
async def namespace() -> object:
    ns = f"s{uuid.uuid4().hex[:12]}"
    yield ns
    await purge(ns)


async def test_replay_evaluate_and_publish_stop_cleanly_on_sigterm(namespace: str,
                                                                   tmp_path: Path) -> None:
    cfg = toml(tmp_path / "c.toml", namespace)
    ev = start("replay-evaluate", "--config", str(cfg), "--db", str(tmp_path / "e.db"),
               "--process-id", "ev1")
    try:
        await wait_retained(namespace, "owners/ev1")
        assert (await retained(namespace)).get("status/ev1") == b"online"
    finally:
        code, err = stop(ev)
    assert code == 143, err
    assert "Traceback" not in err
    assert "paperarena replay-evaluate: stopped by SIGTERM" in err
    left = await retained(namespace)
    assert "owners/ev1" not in left and "status/ev1" not in left, left
    # The publisher waiting for its evaluators: its stream markers and status go too.
    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec, days=1)
    pub = start("replay-publish", str(rec), "--config", str(cfg), "--process-id", "pub1",
                "--wait", "120")
    try:
        await wait_retained(namespace, "replay/begin")
    finally:
        code, err = stop(pub)
    assert code == 143 and "Traceback" not in err, err
    assert "stopped by SIGTERM" in err
    left = await retained(namespace)
    assert "replay/begin" not in left and "status/pub1" not in left, left


async def test_live_evaluator_role_clears_its_status_on_sigterm(namespace: str,
                                                                tmp_path: Path) -> None:
    cfg = toml(tmp_path / "c.toml", namespace)
    proc = start("run", "--role", "evaluator", "--config", str(cfg), "--db",
                 str(tmp_path / "live.db"), "--process-id", "live1", "--agents", "bh")
    try:
        await wait_retained(namespace, "owners/live1")
    finally:
        code, err = stop(proc)
    assert code == 0 and "Traceback" not in err, err
    left = await retained(namespace)
    assert "owners/live1" not in left and "status/live1" not in left, left


async def test_replay_stops_cleanly_on_sigterm_and_resumes(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec, days=3)
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY_CONFIG + "\n[http]\nenabled = false\n")
    db = tmp_path / "r.db"
    args = ("replay", str(rec), "--config", str(cfg), "--db", str(db), "--no-progress")
    proc = start(*args, "--speed", "20000")  # ~13 s of replay: stopped part-way
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not db.exists():
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
    finally:
        code, err = stop(proc)
    assert code == 143, err
    assert "Traceback" not in err and "stopped by SIGTERM" in err
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()
    done = subprocess.run([sys.executable, "-m", "daemon.app.cli", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "replayed" in done.stderr


async def test_an_evaluator_without_publisher_gives_up_with_one_line(namespace: str,
                                                                     tmp_path: Path) -> None:
    cfg = toml(tmp_path / "c.toml", namespace, '\n[evaluator]\npublisher_timeout = "1s"\n'
               '\n[logging]\nlevel = "error"\n')
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "replay-evaluate", "--config",
                        str(cfg), "--db", str(tmp_path / "e.db"), "--process-id", "lonely"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert "no running replay-publish announced a stream within 1s" in r.stderr
    left = await retained(namespace)
    assert "owners/lonely" not in left and "status/lonely" not in left, left
