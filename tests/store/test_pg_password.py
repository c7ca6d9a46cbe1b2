"""The password of a shared store comes from the variable ``store.password_env`` names, for the
writers AND the readers (report, API, page, metrics), and never shows in their output (issue 19).

The test server trusts everyone, so a proxy in front of it (tests/pgproxy.py) asks for the
password and refuses clients that do not send it, as a password-protected server does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.helpers import free_port, wait_ready
from tests.pg import pg_database, requires_pg
from tests.pgproxy import password_proxy
from tests.recordings import TINY_CONFIG, make_recording

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-V19-pw"
ENV = "PAPERARENA_TEST_DB_PASSWORD"
pytestmark = requires_pg


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
    env[ENV] = SECRET
    return env


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.app.cli", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=120)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def test_report_and_a_live_daemons_readers_use_the_password_env(tmp_path: Path) -> None:
    make_recording(tmp_path / "rec.jsonl.gz", days=3)
    store = f'\n[store]\npassword_env = "{ENV}"\n'
    (tmp_path / "replay.toml").write_text(TINY_CONFIG + store)
    port = free_port()
    (tmp_path / "live.toml").write_text(
        TINY_CONFIG + store + f"\n[sources]\nenabled = false\n[http]\nenabled = true\n"
        f"port = {port}\n")
    with pg_database() as real, password_proxy(real, SECRET) as (url, proxy):
        r = _cli("replay", str(tmp_path / "rec.jsonl.gz"), "--config",
                 str(tmp_path / "replay.toml"), "--db", url, "--no-progress")
        assert r.returncode == 0, r.stderr[-2000:]
        outputs = [r.stdout + r.stderr]
        # The report has no config: it takes the variable's name on the command line.
        r = _cli("report", "--db", url, "--json", "--password-env", ENV)
        assert r.returncode == 0, r.stderr[-2000:]
        assert {row["agent"] for row in json.loads(r.stdout)["rows"]} == {"bh", "ew", "mom",
                                                                          "cash"}
        outputs.append(r.stdout + r.stderr)
        # Without it (PGPASSWORD unset) the server refuses: one line, exit 2.
        r = _cli("report", "--db", url)
        assert r.returncode == 2
        assert len(r.stderr.strip().splitlines()) == 1 and "password" in r.stderr, r.stderr
        # A live daemon's API and metrics read the merged store with its store.password_env.
        daemon = subprocess.Popen([sys.executable, "-m", "daemon.app.cli", "run", "--config",
                                   str(tmp_path / "live.toml"), "--db", url, "--duration", "60",
                                   "--append"],  # a live daemon over the replayed store
                                  cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base)
            status, body = _get(base + "/api/leaderboard")
            assert status == 200, body[:500]
            assert {r["agent"] for r in json.loads(body)["rows"]} == {"bh", "ew", "mom", "cash"}
            status, body = _get(base + "/metrics")
            assert status == 200
            assert b'paperarena_leaderboard_figure{agent="mom"' in body
        finally:
            daemon.terminate()
            out, err = daemon.communicate(timeout=60)
        assert daemon.returncode == 0, err[-2000:]
        outputs.append(out + err)
        assert "leaderboard refresh failed" not in err, err[-2000:]
        assert proxy.accepted > 0
        assert all(SECRET not in text for text in outputs)
