"""``paperarena migrate --from SQLITE --to URL`` and ``report --db URL`` (issue 19, point 4)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.store.pg import scope_schema
from daemon.store.reports import leaderboard
from scoring.board.text import to_json
from tests.pg import pg_database, requires_pg
from tests.recordings import TINY_CONFIG, make_recording

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.app.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("migrate")
    make_recording(d / "rec.jsonl.gz", days=3)
    (d / "c.toml").write_text(TINY_CONFIG + "\n[http]\nenabled = false\n")
    db = d / "run.db"
    asyncio.run(replay(d / "rec.jsonl.gz", load_config(d / "c.toml"), db, progress=False))
    return db


async def _count(url: str, scope: str, table: str) -> int:
    con = await asyncpg.connect(url)
    try:
        return int(await con.fetchval(f'SELECT COUNT(*) FROM "{scope_schema(scope)}".{table}'))
    finally:
        await con.close()


@requires_pg
def test_migrate_copies_a_run_and_its_report_is_unchanged(replayed: Path) -> None:
    import sqlite3

    with pg_database() as url:
        r = cli("migrate", "--from", str(replayed), "--to", url)
        assert r.returncode == 0, r.stderr
        assert "counts verified" in r.stdout and "decisions" in r.stdout
        assert len(r.stdout.strip().splitlines()) == 1, r.stdout  # logs go to stderr
        src = sqlite3.connect(replayed)
        for table in ("decisions", "fills", "equity", "market_events", "runs", "llm_calls"):
            want = src.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            assert asyncio.run(_count(url, f"migrated-{replayed.name}", table)) == want
        src.close()
        assert to_json(leaderboard(url)) == to_json(leaderboard(replayed))
        r = cli("report", "--db", url, "--json")
        assert r.returncode == 0, r.stderr
        assert {row["agent"] for row in json.loads(r.stdout)["rows"]} == {"bh", "ew", "mom",
                                                                          "cash"}
        table = cli("report", "--db", url)
        assert table.returncode == 0 and "bh" in table.stdout, table.stderr
        # A second copy into the same (now full) scope is refused with one line.
        again = cli("migrate", "--from", str(replayed), "--to", url)
        assert again.returncode == 2 and "already holds" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1


@requires_pg
def test_two_scopes_holding_the_same_run_read_as_one(replayed: Path) -> None:
    """The same decisions and fills in two scopes (a run migrated twice, an agent moved to a
    new scope with its history) appear once in the merged read, not as a UNIQUE failure."""
    with pg_database() as url:
        for scope in ("first", "second"):
            r = cli("migrate", "--from", str(replayed), "--to", url, "--scope", scope)
            assert r.returncode == 0, r.stderr
        assert to_json(leaderboard(url)) == to_json(leaderboard(replayed))
        r = cli("report", "--db", url)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--from", "nope.db", "--to", "postgresql://postgres@127.0.0.1/x"), "no such SQLite"),
    (("--from", "x.db", "--to", "sqlite:///x.db"), "must start with postgresql://"),
    (("--from", "x.db", "--to", "postgresql://u:s3cr3t@127.0.0.1/x"),
     "must not contain a password"),
    (("--from", "x.db", "--to", "postgresql://u@127.0.0.1/x?password=s3cr3t"),
     "must not contain a password"),
    (("--from", "x.db", "--to", "postgresql://u@127.0.0.1/x?sslmode=disable&Password=s3cr3t"),
     "must not contain a password"),
])
def test_bad_migrate_arguments_fail_with_one_line(args: tuple[str, ...], message: str) -> None:
    r = cli("migrate", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "s3cr3t" not in r.stderr


def test_an_unreachable_server_fails_with_one_line(replayed: Path) -> None:
    r = cli("migrate", "--from", str(replayed), "--to", "postgresql://postgres@127.0.0.1:1/x")
    assert r.returncode == 2 and "cannot connect to PostgreSQL" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli("report", "--db", "postgresql://postgres@127.0.0.1:1/x")
    assert r.returncode == 2 and "cannot connect to PostgreSQL" in r.stderr, r.stderr
