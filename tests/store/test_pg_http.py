"""A live daemon on a shared PostgreSQL store serves its API, page and metrics (issue 19).

A replay (with HTTP on, so the API reads while rounds are written) fills the store; then a live
daemon on the same database serves one leaderboard of every agent and its other endpoints.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import free_port, wait_ready
from tests.mosquitto import requires_broker
from tests.pg import pg_database, requires_pg
from tests.recordings import TINY_CONFIG, make_recording

ROOT = Path(__file__).resolve().parents[2]
pytestmark = requires_pg


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return int(resp.status), resp.read()


def test_api_page_and_metrics_read_one_leaderboard_from_postgresql(tmp_path: Path) -> None:
    make_recording(tmp_path / "rec.jsonl.gz", days=3)
    port = free_port()
    (tmp_path / "replay.toml").write_text(
        TINY_CONFIG + f"\n[http]\nenabled = true\nport = {free_port()}\nreplay = true\n")
    (tmp_path / "live.toml").write_text(
        TINY_CONFIG + f"\n[sources]\nenabled = false\n[http]\nenabled = true\nport = {port}\n")
    with pg_database() as url:
        r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "replay",
                            str(tmp_path / "rec.jsonl.gz"), "--config",
                            str(tmp_path / "replay.toml"), "--db", url, "--no-progress"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        daemon = subprocess.Popen([sys.executable, "-m", "daemon.app.cli", "run", "--config",
                                   str(tmp_path / "live.toml"), "--db", url, "--duration", "60",
                                   "--append"],  # a live daemon over the replayed store
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base)
            status, body = _get(base + "/api/leaderboard")
            board = json.loads(body)
            assert status == 200
            assert {r["agent"] for r in board["rows"]} == {"bh", "ew", "mom", "cash"}
            for path in ("/api/agents", "/api/agents/bh", "/api/agents/bh/decisions",
                         "/api/status", "/", "/metrics"):
                assert _get(base + path)[0] == 200, path
        finally:
            daemon.terminate()
            _, err = daemon.communicate(timeout=60)
        assert daemon.returncode == 0, err[-2000:]
        assert '"http handler failed"' not in err, err[-3000:]


@requires_broker
def test_an_agents_page_is_served_by_any_process_of_the_shared_store(tmp_path: Path) -> None:
    """The leaderboard of an evaluator lists every agent of the store; the agent pages it links
    to (``/api/agents/{id}``, its decisions) work for agents another process owns too."""
    make_recording(tmp_path / "rec.jsonl.gz", days=3)
    port = free_port()
    (tmp_path / "live.toml").write_text(
        TINY_CONFIG + f"\n[sources]\nenabled = false\n[http]\nenabled = true\nport = {port}\n"
        f'[mqtt]\nhost = "127.0.0.1"\nport = 1883\nnamespace = "pg-http-{port}"\n')
    with pg_database() as url:
        r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "replay",
                            str(tmp_path / "rec.jsonl.gz"), "--config", str(tmp_path / "live.toml"),
                            "--db", url, "--no-progress"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        daemon = subprocess.Popen([sys.executable, "-m", "daemon.app.cli", "run", "--role",
                                   "evaluator", "--config", str(tmp_path / "live.toml"), "--db",
                                   url, "--agents", "cash", "--process-id", "viewer",
                                   "--duration", "60"],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base)
            board = json.loads(_get(base + "/api/leaderboard")[1])
            assert {r["agent"] for r in board["rows"]} == {"bh", "ew", "mom", "cash"}
            status, body = _get(base + "/api/agents/bh")
            assert status == 200
            detail = json.loads(body)
            assert detail["current"] == []  # no live figures: another process runs it
            assert detail["equity"] and detail["decisions"] and detail["allocations"]
            status, body = _get(base + "/api/agents/bh/decisions?limit=5")
            assert status == 200 and json.loads(body)["total"] > 0
            assert _get(base + "/api/agents/cash")[0] == 200
            with pytest.raises(urllib.error.HTTPError) as err:
                _get(base + "/api/agents/nobody")
            assert err.value.code == 404
        finally:
            daemon.terminate()
            _, errs = daemon.communicate(timeout=60)
        assert daemon.returncode == 0, errs[-2000:]

