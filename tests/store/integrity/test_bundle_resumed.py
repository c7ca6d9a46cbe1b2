"""The bundle of a season played by a ``paperarena replay`` stopped and resumed (issue 32): its
store holds one ``runs`` row per invocation, and the bundle check replays them as one run."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.store.integrity.test_bundle import _members
from tests.store.test_cli_database import ROOT, cli

#: ``paperarena replay ARGS`` killed (SIGKILL) right after the third job named ``sys.argv[1]``
#: is committed (with the books and a checkpoint): an equity round, or a daily mark (whose
#: checkpoint's clock is the mark's time, so the resume meets that mark again and must not
#: store it twice: its rows replaced would break the equity chain).
_KILLED = """
import os, signal, sys
from daemon.app.cli import main
from daemon.engine.engine import Engine

on_job, done, kill_after = Engine.on_job, [], sys.argv.pop(1)

async def killed_after(self, job_id, fire_ts, missed):
    await on_job(self, job_id, fire_ts, missed)
    if job_id == kill_after:
        done.append(fire_ts)
        if len(done) == 3:
            os.kill(os.getpid(), signal.SIGKILL)

Engine.on_job = killed_after
sys.exit(main(sys.argv[1:]))
"""


def _count(db: Path, sql: str) -> int:
    """Return the number ``sql`` counts in ``db``."""
    con = sqlite3.connect(db)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def _season_config(d: Path) -> Path:
    """Write the sample replay's config as season S1 into ``d``; return its path."""
    cfg = d / "season.toml"
    cfg.write_text((ROOT / "examples" / "sample-replay.toml").read_text()
                   + '\n[season]\nname = "S1"\n')
    return cfg


def _replay_args(cfg: Path, db: Path) -> tuple[str, ...]:
    """Return ``paperarena replay``'s arguments: the sample season into ``db``."""
    return ("replay", str(ROOT / "examples" / "sample.jsonl.gz"), "--config", str(cfg),
            "--db", str(db), "--no-progress")


@pytest.fixture(scope="module")
def whole_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Return ``report --json`` of the season replayed uninterrupted: every kill point's
    resumed season must report it (replayed once for them all: it is only read)."""
    d = tmp_path_factory.mktemp("whole")
    whole = d / "whole.db"
    assert cli(*_replay_args(_season_config(d), whole), timeout=120).returncode == 0
    r = cli("report", "--db", str(whole), "--json", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.parametrize("kill_after", ["decide:equity", "mark:polymarket", "mark:equity"])
def test_a_resumed_replay_season_replays_from_its_bundle(tmp_path: Path, kill_after: str,
                                                         whole_report: str) -> None:
    db = tmp_path / "s.db"
    args = _replay_args(_season_config(tmp_path), db)
    r = subprocess.run([sys.executable, "-c", _KILLED, kill_after, *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr[-2000:]  # killed part-way, not finished
    if kill_after == "decide:equity":
        assert _count(db, "SELECT COUNT(DISTINCT scheduled_ts) FROM decisions"
                          " WHERE market = 'equity'") == 3
    else:
        assert _count(db, "SELECT COUNT(DISTINCT ts) FROM equity WHERE kind = 'daily' AND"
                          f" market = '{kill_after.split(':')[1]}'") == 3
    r = cli(*args, timeout=120)  # the same command again: it resumes
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resumed at 0)" not in r.stderr and "(resumed at " in r.stderr, r.stderr[-500:]
    assert _count(db, "SELECT COUNT(*) FROM runs") == _count(
        db, "SELECT COUNT(*) FROM runs WHERE mode = 'replay'") == 2
    assert _count(db, "SELECT COUNT(DISTINCT run_id) FROM decisions") == 2

    r = cli("verify", "--db", str(db), timeout=120)  # every chain holds: nothing stored twice
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    bundle = tmp_path / "b.tar"
    r = cli("export", "--db", str(db), "--bundle", str(bundle), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(_members(bundle)["manifest.json"])["season"]["name"] == "S1"
    # verify-bundle's whole check with the replay (assert_rebuilds says why once is enough):
    # exit 0 with nothing on stderr is its "ok", the season replayed from its stored answers.
    r = cli("report", "--bundle", str(bundle), "--json", timeout=180)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-2000:]
    assert r.stdout.encode() == _members(bundle)["report.json"]
    assert r.stdout == whole_report  # the resumed season's report is the uninterrupted one's
