"""Replay end to end: determinism, crash recovery, look-ahead guard, misfires, idempotence."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.store.reports import leaderboard
from scoring.board.text import to_json
from tests.recordings import TINY_CONFIG, make_recording

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("rec")
    path = d / "rec.jsonl.gz"
    make_recording(path)
    cfg = d / "tiny.toml"
    cfg.write_text(TINY_CONFIG)
    return path, cfg


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.app.cli", *args],
                          cwd=ROOT, timeout=timeout,
                          capture_output=True, text=True)


async def test_same_recording_and_config_give_byte_identical_report(
    rec: tuple[Path, Path], tmp_path: Path
) -> None:
    path, cfg_path = rec
    cfg = load_config(cfg_path)
    s1 = await replay(path, cfg, tmp_path / "a.db", progress=False)
    s2 = await replay(path, cfg, tmp_path / "b.db", progress=False)
    assert s1.events == s2.events > 1000
    a = to_json(leaderboard(tmp_path / "a.db"))
    b = to_json(leaderboard(tmp_path / "b.db"))
    assert a == b
    board = json.loads(a)
    agents = {(r["agent"], r["market"]) for r in board["rows"]}
    assert ("bh", "equity") in agents and ("ew", "polymarket") in agents
    # Costs were charged (realistic preset) and buy-and-hold traded once per market.
    ew = next(r for r in board["rows"] if r["agent"] == "ew" and r["market"] == "equity")
    assert ew["costs"] > 0
    con = sqlite3.connect(tmp_path / "a.db")
    n_bh_trades = con.execute(
        "SELECT COUNT(*) FROM fills WHERE agent='bh' AND traded_value > 0").fetchone()[0]
    assert n_bh_trades == 2  # one buy per market, then holds
    # The resolution was paid exactly once and persisted.
    assert con.execute("SELECT COUNT(*) FROM resolutions").fetchone()[0] == 1
    # Every decision stored its input hash and raw output.
    bad = con.execute("SELECT COUNT(*) FROM decisions WHERE outcome='ok' AND "
                      "(length(input_sha256) != 64 OR raw_output = '')").fetchone()[0]
    assert bad == 0


async def test_replaying_again_on_the_same_db_applies_nothing_twice(
    rec: tuple[Path, Path], tmp_path: Path
) -> None:
    path, cfg_path = rec
    cfg = load_config(cfg_path)
    db = tmp_path / "same.db"
    await replay(path, cfg, db, progress=False)
    before = to_json(leaderboard(db))
    con = sqlite3.connect(db)
    fills = con.execute("SELECT COUNT(*) FROM fills").fetchone()[0]
    second = await replay(path, cfg, db, progress=False)
    assert second.resumed_from == second.events + second.resumed_from - second.events
    assert con.execute("SELECT COUNT(*) FROM fills").fetchone()[0] == fills
    assert to_json(leaderboard(db)) == before


def test_sigkill_mid_replay_then_restart_gives_identical_report(
    rec: tuple[Path, Path], tmp_path: Path
) -> None:
    path, cfg_path = rec
    ref_db = tmp_path / "ref.db"
    r = cli("replay", str(path), "--config", str(cfg_path), "--db", str(ref_db), "--no-progress")
    assert r.returncode == 0, r.stderr
    reference = cli("report", "--db", str(ref_db), "--json").stdout

    db = tmp_path / "crash.db"
    # A slow replay (speed factor) so the kill lands mid-run, after a few commits.
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.app.cli", "replay", str(path), "--config", str(cfg_path),
         "--db", str(db), "--no-progress", "--speed", "400000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    offset = 0
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
            row = con.execute("SELECT offset FROM checkpoint").fetchone()
            con.close()
        except sqlite3.Error:
            continue
        if row and row[0] > 0:
            offset = row[0]
            break
    assert proc.poll() is None, "replay finished before it could be killed: slow it down"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert offset > 0
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM runs WHERE stopped_ts IS NULL").fetchone()[0] >= 1
    con.close()
    r = cli("replay", str(path), "--config", str(cfg_path), "--db", str(db), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "resumed at 0)" not in r.stderr
    assert cli("report", "--db", str(db), "--json").stdout == reference


def test_replay_cli_rejects_bad_arguments_with_one_line(tmp_path: Path) -> None:
    r = cli("replay", str(tmp_path / "nope.jsonl.gz"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such recording" in r.stderr
    r = cli("replay", "x", "--speed", "fast")
    assert r.returncode == 2 and "invalid speed" in r.stderr
    r = cli("report", "--db", str(tmp_path / "none.db"))
    assert r.returncode == 2 and "no such database" in r.stderr


def _clean_report(rec: tuple[Path, Path], tmp_path: Path) -> str:
    path, cfg_path = rec
    db = tmp_path / "clean.db"
    r = cli("replay", str(path), "--config", str(cfg_path), "--db", str(db), "--no-progress")
    assert r.returncode == 0, r.stderr
    return cli("report", "--db", str(db), "--json").stdout


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("{")]


def test_cut_gzip_recording_is_damaged_and_a_resume_with_the_full_one_converges(
    rec: tuple[Path, Path], tmp_path: Path
) -> None:
    path, cfg_path = rec
    reference = _clean_report(rec, tmp_path)
    cut_dir = tmp_path / "cut"
    cut_dir.mkdir()
    cut = cut_dir / path.name  # same name: the download that stopped at 60 %
    data = path.read_bytes()
    cut.write_bytes(data[: len(data) * 6 // 10])
    db = tmp_path / "resumed.db"
    r = cli("replay", str(cut), "--config", str(cfg_path), "--db", str(db), "--no-progress")
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and "recording is damaged" in lines[0], r.stderr
    assert "gzip stream ends before its trailer" in lines[0] and "events read" in lines[0]
    r = cli("replay", str(path), "--config", str(cfg_path), "--db", str(db), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert cli("report", "--db", str(db), "--json").stdout == reference


def test_recording_whose_last_line_is_cut_is_damaged(rec: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    import gzip

    path, cfg_path = rec
    text = gzip.decompress(path.read_bytes())
    plain = tmp_path / "rec.jsonl"
    plain.write_bytes(text[:-25])  # the last event cut mid-JSON, no final newline
    n_lines = text.count(b"\n")
    r = cli("replay", str(plain), "--config", str(cfg_path), "--db", str(tmp_path / "c.db"),
            "--no-progress")
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert f"line {n_lines} is cut mid-event; {n_lines - 2} events read" in lines[0]
    r = cli("replay", str(plain), "--config", str(cfg_path), "--db", str(tmp_path / "d.db"),
            "--no-progress", "--accept-damaged")
    assert r.returncode == 0 and f"replayed {n_lines - 2} events" in r.stderr, r.stderr


def test_finished_database_says_so_and_a_different_run_is_refused(
    rec: tuple[Path, Path], tmp_path: Path
) -> None:
    path, cfg_path = rec
    db = tmp_path / "done.db"
    args = ("--db", str(db), "--no-progress")
    assert cli("replay", str(path), "--config", str(cfg_path), *args).returncode == 0
    before = cli("report", "--db", str(db), "--json").stdout
    r = cli("replay", str(path), "--config", str(cfg_path), *args)
    assert r.returncode == 0, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and "already complete (2475 events)" in lines[0], r.stderr
    assert f"paperarena report --db {db}" in lines[0]
    # Another config: refused, naming what differs.
    other = tmp_path / "other.toml"
    other.write_text(cfg_path.read_text().replace('preset = "realistic"', 'preset = "none"'))
    r = cli("replay", str(path), "--config", str(other), *args)
    assert r.returncode == 2
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and "markets.equity.cost.preset" in lines[0], r.stderr
    assert "use a new --db" in lines[0]
    # Another recording under the same name: refused too.
    again = tmp_path / "again"
    again.mkdir()
    make_recording(again / path.name, seed=2, days=6)
    r = cli("replay", str(again / path.name), "--config", str(cfg_path), *args)
    assert r.returncode == 2 and "recording header" in r.stderr and "new --db" in r.stderr
    # Another window: refused.
    r = cli("replay", str(path), "--config", str(cfg_path), *args, "--end", "2026-11-05")
    assert r.returncode == 2 and "window" in r.stderr
    assert cli("report", "--db", str(db), "--json").stdout == before


def test_a_recording_is_known_by_its_content_not_its_name_and_header(
    rec: tuple[Path, Path], tmp_path: Path
) -> None:
    """A header-only file and the full file share name and header: the full one is not
    "already complete" after the header-only one (issue 28, point 5)."""
    import gzip

    path, cfg_path = rec
    text = gzip.decompress(path.read_bytes())
    head_dir = tmp_path / "head"
    head_dir.mkdir()
    head_only = head_dir / path.name
    head_only.write_bytes(gzip.compress(text[: text.index(b"\n") + 1]))
    db = tmp_path / "h.db"
    args = ("--config", str(cfg_path), "--db", str(db), "--no-progress")
    r = cli("replay", str(head_only), *args)
    assert r.returncode == 0, r.stderr
    r = cli("replay", str(path), *args)
    assert r.returncode == 2, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert f"replay of {path.name} with other content" in lines[0], lines
    # The content's hash: what the gzip stream decompresses to (a cut file is a prefix of it).
    assert f"this file: sha256 {hashlib.sha256(text).hexdigest()[:12]}, {len(text)} bytes" in (
        lines[0])
    assert "already complete" not in r.stderr and "use a new --db" in lines[0]
    # The same file again is the same replay: already complete.
    r = cli("replay", str(head_only), *args)
    assert r.returncode == 0 and "already complete (0 events)" in r.stderr, r.stderr
