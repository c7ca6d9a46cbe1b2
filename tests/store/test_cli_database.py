"""Bad databases and bad arguments: one line naming the argument, exit 2, nothing touched, no hang.

Every command runs in a subprocess with a timeout, so a start-up that hangs fails the test.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.store.schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"
QUIET = "[sources]\nenabled = false\n[http]\nenabled = false\n"


def cli(*args: str, timeout: float = 20, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``paperarena ARGS`` in a subprocess; a hang fails after ``timeout`` seconds."""
    return subprocess.run([sys.executable, "-m", "daemon.app.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]


def quiet_run_db(d: Path) -> Path:
    """Return a database in ``d`` written by a short, quiet ``run`` (schema, a run row, books;
    WAL mode, closed cleanly, so no -wal or -shm)."""
    cfg = d / "quiet.toml"
    cfg.write_text(QUIET)
    db = d / "made.db"
    r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3")
    assert r.returncode == 0, r.stderr[-2000:]
    return db


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    """Assert exit 2 with exactly one stderr line and no traceback; return the line."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    return lines[0]


def snapshot(path: Path) -> object:
    """Return what must not change: a file's bytes hash, a directory's listing, or absence."""
    if path.is_dir():
        return sorted(p.name for p in path.iterdir())
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return None


def _text(tmp: Path) -> Path:
    p = tmp / "notes.db"
    p.write_text("these are my notes, not a database\n" * 50)
    return p


def _binary(tmp: Path) -> Path:
    p = tmp / "blob.db"
    p.write_bytes(bytes(range(256)) * 64)
    return p


def _directory(tmp: Path) -> Path:
    p = tmp / "dir.db"
    p.mkdir()
    (p / "keep").write_text("x")
    return p


def _under_file(tmp: Path) -> Path:
    f = tmp / "plain.txt"
    f.write_text("a file, not a directory\n")
    return f / "x.db"


def _newer_schema(tmp: Path) -> Path:
    p = tmp / "newer.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES('schema_version', ?)", (str(SCHEMA_VERSION + 5),))
    con.execute("CREATE TABLE future(x)")
    con.commit()
    con.close()
    return p


def _foreign(tmp: Path) -> Path:
    p = tmp / "foreign.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers(name) VALUES('ada')")
    con.commit()
    con.close()
    return p


BAD_DBS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "text": (_text, "not a SQLite database"),
    "binary": (_binary, "not a SQLite database"),
    "directory": (_directory, "directory"),
    "under-a-file": (_under_file, "not a directory"),
    "newer-schema": (_newer_schema, "newer than this paperarena"),
    "foreign": (_foreign, "not a paperarena database"),
}


def _command(cmd: str, tmp: Path, db: Path) -> list[str]:
    cfg = tmp / "quiet.toml"
    cfg.write_text(QUIET)
    if cmd == "run":
        return ["run", "--config", str(cfg), "--db", str(db), "--duration", "5"]
    if cmd == "replay":
        return ["replay", str(SAMPLE), "--config", str(cfg), "--db", str(db), "--no-progress"]
    return ["report", "--db", str(db)]


@pytest.mark.parametrize("cmd", ["run", "replay", "report"])
@pytest.mark.parametrize("kind", sorted(BAD_DBS))
def test_bad_database_is_one_line_and_untouched(tmp_path: Path, cmd: str, kind: str) -> None:
    make, expect = BAD_DBS[kind]
    db = make(tmp_path)
    guarded = db if db.parent.is_dir() else db.parent
    args = _command(cmd, tmp_path, db)
    before = snapshot(guarded)
    siblings = sorted(p.name for p in tmp_path.iterdir())
    line = one_line(cli(*args))
    assert f"--db {db}" in line, line
    assert expect in line, line
    assert snapshot(guarded) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == siblings  # no -wal, -shm or .lock left


def test_report_on_an_empty_file(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    line = one_line(cli("report", "--db", str(db)))
    assert f"--db {db}" in line and "empty" in line
    assert db.read_bytes() == b""


def test_report_on_a_missing_database(tmp_path: Path) -> None:
    line = one_line(cli("report", "--db", str(tmp_path / "nope.db")))
    assert "no such database" in line and not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("cmd", ["replay", "report"])
def test_start_after_end_is_refused(tmp_path: Path, cmd: str) -> None:
    args = _command(cmd, tmp_path, tmp_path / "w.db")
    line = one_line(cli(*args, "--start", "2026-11-05", "--end", "2026-11-02"))
    assert "--start" in line and "--end" in line
    assert not (tmp_path / "w.db").exists()


@pytest.mark.parametrize("value", ["-5", "0", "inf", "nan"])
def test_record_duration_must_be_positive(tmp_path: Path, value: str) -> None:
    out = tmp_path / "r.jsonl.gz"
    line = one_line(cli("record", "--out", str(out), f"--duration={value}"))
    assert "--duration" in line
    assert not out.exists() and not Path(f"{out}.db").exists()


def test_run_duration_must_be_positive(tmp_path: Path) -> None:
    line = one_line(cli(*_command("run", tmp_path, tmp_path / "d.db")[:-2], "--duration=-1"))
    assert "--duration" in line and not (tmp_path / "d.db").exists()


def test_directory_as_recording_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(QUIET)
    rec = tmp_path / "rec"
    rec.mkdir()
    for cmd in (["replay", str(rec), "--config", str(cfg), "--db", str(tmp_path / "a.db")],
                ["replay-publish", str(rec), "--config", str(cfg)]):
        line = one_line(cli(*cmd))
        assert str(rec) in line and "directory" in line
    assert not (tmp_path / "a.db").exists()


def test_record_out_directory_is_refused(tmp_path: Path) -> None:
    line = one_line(cli("record", "--out", str(tmp_path), "--duration", "1"))
    assert "--out" in line and "directory" in line


def test_good_database_still_works(tmp_path: Path) -> None:
    """The checks refuse only bad input: a fresh database runs, and its report reads it."""
    db = tmp_path / "fresh.db"
    r = cli(*_command("run", tmp_path, db)[:-1], "0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("report", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.path.getsize(db) > 0


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    """``paperarena verify --db S | head -0``: the pipe's reader is gone before the first
    line; the command exits 141 (128 + SIGPIPE) with nothing on stderr."""
    db = quiet_run_db(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "daemon.app.cli", "verify", "--db", str(db)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes anything
    try:
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141, err
    finally:
        proc.kill()
        proc.stderr.close()
    assert err == ""
