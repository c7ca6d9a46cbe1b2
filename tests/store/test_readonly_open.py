"""A database refused for writing (read-only file, directory or file system) leaves its
directory exactly as it was: same names, bytes, modes and mtimes (the directory's own mtime
too, so nothing was created and removed again), and the refusal is one line.

Read-only modes need a user other than root (root ignores them): the commands run as nobody.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store.test_cli_database import QUIET, ROOT, SAMPLE, cli, one_line, quiet_run_db

NOBODY = 65534


def snapshot(d: Path) -> dict[str, tuple[int, int, int, str]]:
    """Return every entry of ``d`` (and ``d`` itself as '.') with its mode, size, mtime, hash."""
    out: dict[str, tuple[int, int, int, str]] = {}
    for p in [d, *sorted(d.iterdir())]:
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out["." if p == d else p.name] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


@pytest.fixture(scope="module")
def made_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database written by a short ``run`` (WAL mode; closed cleanly, so no -wal or -shm)."""
    return quiet_run_db(tmp_path_factory.mktemp("made"))


@pytest.fixture
def work(made_db: Path) -> Iterator[Path]:
    """A directory outside /tmp's sticky rules holding a copy of the database and a config."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to run as nobody")
    d = Path(tempfile.mkdtemp(prefix="pa-ro-open-"))
    try:
        d.chmod(0o777)
        shutil.copyfile(made_db, d / "p.db")
        (d / "quiet.toml").write_text(QUIET)
        (d / "quiet.toml").chmod(0o644)
        yield d
    finally:
        d.chmod(0o755)
        shutil.rmtree(d, ignore_errors=True)


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         sys.executable, "-m", "daemon.app.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=30, env={**os.environ, "HOME": "/tmp"})


def writers(d: Path, db: Path) -> list[list[str]]:
    cfg = str(d / "quiet.toml")
    return [["run", "--config", cfg, "--db", str(db), "--duration", "5"],
            ["replay", str(SAMPLE), "--config", cfg, "--db", str(db), "--no-progress"]]


@pytest.mark.parametrize("stale_lock", [False, True], ids=["no-lock", "stale-lock"])
def test_read_only_file_in_a_writable_directory(work: Path, stale_lock: bool) -> None:
    db = work / "p.db"
    db.chmod(0o444)
    if stale_lock:  # left by an earlier daemon (a clean stop keeps it)
        (work / "p.db.lock").write_text("12345")
        (work / "p.db.lock").chmod(0o666)
    for args in writers(work, db):
        before = snapshot(work)
        line = one_line(as_nobody(*args))
        assert f"--db {db}" in line and "read-only" in line, line
        assert snapshot(work) == before, args[0]


def test_read_only_directory(work: Path) -> None:
    db = work / "p.db"
    db.chmod(0o666)
    work.chmod(0o555)
    for args in writers(work, db):
        before = snapshot(work)
        line = one_line(as_nobody(*args))
        assert f"--db {db}" in line and "read-only" in line, line
        assert snapshot(work) == before, args[0]


def test_new_database_in_a_read_only_directory(work: Path) -> None:
    work.chmod(0o555)
    for db in (work / "new.db", work / "sub" / "new.db"):
        before = snapshot(work)
        line = one_line(as_nobody(*writers(work, db)[0]))
        assert f"--db {db}" in line and "read-only" in line, line
        assert snapshot(work) == before, db


def test_unwritable_wal_file_of_a_writable_database(work: Path) -> None:
    """A ``-wal`` left by root (mode 0644) makes the database read-only for nobody."""
    db = work / "p.db"
    db.chmod(0o666)
    (work / "p.db-wal").write_bytes(b"")
    (work / "p.db-wal").chmod(0o644)
    before = snapshot(work)
    line = one_line(as_nobody(*writers(work, db)[0]))
    assert f"--db {db}" in line and "read-only" in line, line
    assert snapshot(work) == before


def test_refused_after_the_lock_leaves_no_lock_file(made_db: Path, tmp_path: Path) -> None:
    """A foreign write lock refuses the open after the lock file was taken: it is removed."""
    import sqlite3

    db = tmp_path / "p.db"
    shutil.copyfile(made_db, db)
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(QUIET)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        names = sorted(p.name for p in tmp_path.iterdir())
        line = one_line(cli("run", "--config", str(cfg), "--db", str(db), "--duration", "5"))
        assert "locked" in line
        assert sorted(p.name for p in tmp_path.iterdir()) == names
    finally:
        holder.execute("ROLLBACK")
        holder.close()
