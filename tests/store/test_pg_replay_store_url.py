"""``paperarena replay`` and ``replay-evaluate`` write into the config's ``[store] url`` (issue 28).

With ``[store] url`` set and no ``--db``, a replay writes into that PostgreSQL database (its
password from ``[store] password_env``, as ``run`` does) and no ``replay.db`` appears in the
working directory; ``--db`` wins and says so in one line; with neither, the default stays
``replay.db``. The report of the PostgreSQL replay equals the report of the same replay into
SQLite.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from daemon.app.replay_publish import ReplayPublisher
from daemon.store.pg import scope_schema
from daemon.store.reports import leaderboard
from scoring.board.text import to_json
from tests.app.test_roles import TEST_CONFIG, Broker, Rec, _close, broker, rec  # noqa: F401
from tests.mosquitto import requires_broker
from tests.pg import pg_database, requires_pg
from tests.pgproxy import password_proxy
from tests.recordings import make_recording

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-V28-pw"
ENV = "PAPERARENA_TEST_REPLAY_PASSWORD"
pytestmark = requires_pg


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
    env |= {ENV: SECRET, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return env


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.app.cli", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=180)


def _store(url: str) -> str:
    return f'\n[store]\nurl = "{url}"\npassword_env = "{ENV}"\n'


async def _count(url: str, scope: str, table: str) -> int:
    con = await asyncpg.connect(url)
    try:
        return int(await con.fetchval(f'SELECT COUNT(*) FROM "{scope_schema(scope)}".{table}'))
    except asyncpg.UndefinedTableError:
        return 0
    finally:
        await con.close()


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rec") / "rec.jsonl.gz"
    make_recording(path, days=3)
    return path


def test_replay_writes_into_the_store_url_and_db_overrides_it(recording: Path,
                                                               tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with pg_database() as real, password_proxy(real, SECRET) as (url, _proxy):
        # The server asks for the password: the replay only succeeds with store.password_env.
        config = tmp_path / "pg.toml"
        config.write_text(TEST_CONFIG + _store(url))
        r = _cli("replay", str(recording), "--config", str(config), "--no-progress", cwd=work)
        assert r.returncode == 0, r.stderr[-2000:]
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("replayed ") and last.endswith(f" into {url}"), last
        assert "overrides" not in r.stderr and SECRET not in r.stdout + r.stderr
        assert list(work.iterdir()) == []  # no replay.db in the working directory
        decisions = asyncio.run(_count(real, "all", "decisions"))
        assert decisions > 0 and asyncio.run(_count(real, "all", "fills")) > 0
        assert asyncio.run(_count(real, "all", "market_events")) > 0

        # --db wins over [store] url and says so in one line; PostgreSQL is left as it was.
        db = tmp_path / "file.db"
        r = _cli("replay", str(recording), "--config", str(config), "--db", str(db),
                 "--no-progress", cwd=work)
        assert r.returncode == 0, r.stderr[-2000:]
        overrides = [line for line in r.stderr.splitlines() if "overrides" in line]
        assert overrides == [f"paperarena: --db {db} overrides [store] url {url}"], r.stderr
        assert r.stderr.strip().splitlines()[-1].endswith(f" into {db}")
        assert db.is_file() and list(work.iterdir()) == []
        assert asyncio.run(_count(real, "all", "decisions")) == decisions

        # The PostgreSQL replay's report is the SQLite replay's.
        pg = _cli("report", "--db", url, "--json", "--password-env", ENV, cwd=work)
        assert pg.returncode == 0, pg.stderr[-2000:]
        lite = _cli("report", "--db", str(db), "--json", cwd=work)
        assert lite.returncode == 0, lite.stderr[-2000:]
        assert {row["agent"] for row in json.loads(pg.stdout)["rows"]} == {"bh", "ew", "mom",
                                                                           "cash"}
        assert pg.stdout == lite.stdout


def test_without_url_nor_db_the_replay_goes_to_replay_db(recording: Path, tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(TEST_CONFIG)
    r = _cli("replay", str(recording), "--config", str(tmp_path / "c.toml"), "--no-progress",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].endswith(" into replay.db")
    assert (tmp_path / "replay.db").is_file()


def test_an_unreachable_store_url_is_named_in_one_line(recording: Path, tmp_path: Path) -> None:
    url = "postgresql://postgres@127.0.0.1:1/none"
    (tmp_path / "c.toml").write_text(TEST_CONFIG + _store(url))
    r = _cli("replay", str(recording), "--config", str(tmp_path / "c.toml"), "--no-progress",
             cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith(f"paperarena: store.url {url}: cannot connect"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "replay.db").exists()


@requires_broker
async def test_replay_evaluate_writes_into_the_store_url(
    rec: Rec, broker: Broker, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    broker.process_ids.update({"pub", "ev"})
    with pg_database() as real, password_proxy(real, SECRET) as (url, _proxy):
        config = broker.toml(tmp_path / "split.toml", _store(url))
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon.app.cli", "replay-evaluate", "--config", str(config),
             "--process-id", "ev"],
            cwd=work, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            publisher = ReplayPublisher(rec.path, broker.settings(), process_id="pub",
                                        evaluators=1, wait_timeout=30.0, retransmit_after=0.5)
            published = await asyncio.wait_for(publisher.run(), 120)
            out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, out[-3000:]
        assert published.events == rec.count
        last = out.strip().splitlines()[-1]
        assert last.startswith("evaluated ") and last.endswith(f" into {url}"), last
        assert "overrides" not in out and SECRET not in out
        assert list(work.iterdir()) == []  # no replay.db in the working directory
        assert await _count(real, "ev", "fills") == len(rec.fills[None])
        got, want = json.loads(to_json(leaderboard(real))), json.loads(rec.reports[None])
        problems = list(_close(want, got, "report"))
        assert not problems, problems[:5]
