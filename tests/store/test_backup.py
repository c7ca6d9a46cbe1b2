"""Online backups under concurrent writes, restore, and CSV/Parquet exports."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from daemon.app.cli import main
from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.store.backup import BackupError, backup, export
from daemon.store.store import Store
from tests.recordings import TINY_CONFIG, make_recording


async def _empty_db(path: Path) -> None:
    store = await Store.open(path)
    await store.close()


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    d = tmp_path_factory.mktemp("replayed")
    make_recording(d / "rec.jsonl.gz", days=3)
    (d / "tiny.toml").write_text(TINY_CONFIG)
    asyncio.run(replay(d / "rec.jsonl.gz", load_config(d / "tiny.toml"), d / "r.db",
                       progress=False))
    return d / "r.db"


async def test_backup_is_consistent_under_concurrent_writes(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    await _empty_db(db)
    # The "daemon" holds the paperarena lock; the backup must not need it.
    lock_fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    stop = threading.Event()
    written: list[int] = []
    payload = "x" * 500  # enough pages for the copy to take a while

    def writer() -> None:
        con = sqlite3.connect(db, isolation_level=None, timeout=30)
        con.execute("PRAGMA journal_mode=WAL")
        i = 0
        while not stop.is_set():
            con.execute("BEGIN IMMEDIATE")
            con.executemany(
                "INSERT INTO market_events(seq, ts, recv_ts, kind, market, asset, price, payload)"
                " VALUES(?,?,?,?,?,?,?,?)",
                [(i + k, float(i + k), float(i + k), "price", "equity", "AAPL", 1.0, payload)
                 for k in range(50)])
            con.execute("COMMIT")
            i += 50
            written.append(i)
        con.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while not written or written[-1] < 20_000:
            time.sleep(0.01)
        results = []
        for k in range(3):
            out = tmp_path / f"b{k}.db"
            info = backup(db, out)
            results.append((out, info, written[-1]))
    finally:
        stop.set()
        thread.join()
        os.close(lock_fd)
    counts = []
    for out, info, _seen in results:
        assert info["integrity"] == "ok"
        con = sqlite3.connect(out)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one file
        n, lo, hi = con.execute(
            "SELECT COUNT(*), MIN(seq), MAX(seq) FROM market_events").fetchone()
        # A prefix of the writes, whole transactions only.
        assert n > 0 and n % 50 == 0 and lo == 0 and hi == n - 1
        assert n == info["tables"]["market_events"]
        assert info["schema_version"] >= 1
        counts.append(n)
        con.close()
        assert not any(p.name.startswith(f".{out.name}.tmp") for p in tmp_path.iterdir())
    assert counts == sorted(counts) and counts[-1] > counts[0]  # writes went on meanwhile


def test_restore_procedure(replayed: Path, tmp_path: Path) -> None:
    info = backup(replayed, tmp_path / "snap.db")
    # Restore: daemon stopped; copy the backup over the database (drop stale WAL files).
    target = tmp_path / "paperarena.db"
    shutil.copyfile(tmp_path / "snap.db", target)
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    con = sqlite3.connect(target)
    for table, n in info["tables"].items():
        assert con.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0] == n
    assert info["tables"]["decisions"] > 0 and info["tables"]["fills"] > 0


def test_backup_errors(tmp_path: Path, replayed: Path) -> None:
    with pytest.raises(BackupError, match="no such database"):
        backup(tmp_path / "missing.db", tmp_path / "x.db")
    assert not (tmp_path / "missing.db").exists()  # never created
    with pytest.raises(BackupError, match="must not overwrite"):
        backup(replayed, replayed)
    with pytest.raises(BackupError, match="no such directory"):
        backup(replayed, tmp_path / "nope" / "x.db")
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    with pytest.raises(BackupError, match=r"junk\.db"):
        backup(tmp_path / "junk.db", tmp_path / "y.db")


def test_backup_cli(replayed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backup", "--db", str(replayed), "--out", str(tmp_path / "c.db")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["integrity"] == "ok" and info["out"] == str(tmp_path / "c.db")
    assert main(["backup", "--db", str(tmp_path / "nope.db"), "--out", str(tmp_path / "d.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such database" in err


def test_export_csv(replayed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = export(replayed, tmp_path / "out", "csv", ["decisions", "fills", "equity"])
    assert [p.name for p in paths] == ["decisions.csv", "fills.csv", "equity.csv"]
    con = sqlite3.connect(replayed)
    for p in paths:
        df = pd.read_csv(p)
        n = con.execute(f"SELECT COUNT(*) FROM {p.stem}").fetchone()[0]
        assert len(df) == n > 0
    dec = pd.read_csv(tmp_path / "out" / "decisions.csv")
    assert {"agent", "market", "scheduled_ts", "scheduled_time", "outcome"} <= set(dec.columns)
    assert dec["scheduled_time"].iloc[0].endswith("+00:00")
    assert "input_json" not in dec.columns  # observations stay in the database
    assert main(["export", "--db", str(replayed), "--out", str(tmp_path / "o2"),
                 "--what", "fills"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "o2" / "fills.csv")
    assert main(["export", "--db", str(replayed), "--out", str(tmp_path / "o3"),
                 "--what", "fills,trades"]) == 2
    assert "cannot export trades" in capsys.readouterr().err


def test_export_parquet(replayed: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("pyarrow") is None:
        assert main(["export", "--db", str(replayed), "--out", str(tmp_path / "p"),
                     "--format", "parquet"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "pip install pyarrow" in err
        assert not (tmp_path / "p").exists()
    else:
        paths = export(replayed, tmp_path / "p", "parquet", ["equity"])
        assert len(pd.read_parquet(paths[0])) > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown)")
async def test_backup_as_root_gives_wal_files_back_to_the_db_owner(tmp_path: Path) -> None:
    db = tmp_path / "owned.db"
    await _empty_db(db)
    os.chown(db, 4321, 4321)  # the service's (dynamic) user
    keep = sqlite3.connect(db)  # a root connection keeps -wal/-shm alive past the backup
    keep.execute("SELECT COUNT(*) FROM runs").fetchone()
    try:
        backup(db, tmp_path / "copy.db")
        for suffix in ("-wal", "-shm"):
            st = os.stat(f"{db}{suffix}")
            assert (st.st_uid, st.st_gid) == (4321, 4321), suffix
    finally:
        keep.close()
