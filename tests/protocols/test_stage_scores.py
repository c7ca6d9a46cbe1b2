"""PortBench's delayed scoring: stage scores stored by the daemon once the horizon has passed."""

from __future__ import annotations

import math
import shutil
import sqlite3
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agents.portbench.scores import HORIZON, STAGES, score_connection, summarise
from agents.portbench.stage_scoring import score_due
from daemon.app.replay import replay
from daemon.config.settings import parse_config
from daemon.store.store import Store
from tests.pg import pg_database, requires_pg
from tests.protocols.test_portbench import PortBenchModel

ROOT = Path(__file__).resolve().parents[2]
DAY = 86_400.0


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: Any) -> Path:
    """The PortBench preset replayed over the sample's first 15 sessions (fake local model)."""
    import asyncio

    db = tmp_path_factory.mktemp("stage") / "pb.db"
    data = tomllib.loads((ROOT / "examples" / "portbench.toml").read_text())
    mp = pytest.MonkeyPatch()
    mp.setenv("LOCAL_LLM_KEY", "sk-local")

    async def run() -> None:
        async with PortBenchModel() as model:
            data["agents"][0].update(api_base=model.api_base, timeout=10)
            end = datetime(2026, 5, 22, tzinfo=UTC).timestamp()
            await replay(ROOT / "examples" / "portbench-sample.jsonl.gz", parse_config(data), db,
                         progress=False, window=(None, end))

    try:
        asyncio.run(run())
    finally:
        mp.undo()
    return db


def test_stored_scores_equal_the_on_the_fly_ones(replayed: Path) -> None:
    con = sqlite3.connect(replayed)
    try:
        stored = score_connection(con)["portbench"]
        fresh = score_connection(con, stored=False)["portbench"]
        rows = con.execute("SELECT agent, scheduled_ts, stage, horizon, scored_ts"
                           " FROM stage_scores ORDER BY scheduled_ts, stage").fetchall()
        final = con.execute("SELECT MAX(scheduled_ts) FROM decisions").fetchone()[0]
    finally:
        con.close()
    assert [r.ts for r in stored] == [r.ts for r in fresh]
    for a, b in zip(stored, fresh, strict=True):
        assert all(_same(a.scores[s], b.scores[s]) for s in STAGES), (a, b)
        assert _same(a.ceps, b.ceps) and a.failed == b.failed and a.pending == b.pending
    assert summarise(stored) == summarise(fresh)
    scored = [r for r in fresh if r.ceps is not None]
    assert scored and any(r.pending for r in fresh)
    # Six rows (S1..S5, CEPS) per scored decision, only for the portbench agent, horizon 5.
    assert len(rows) == 6 * len(scored)
    assert {r[0] for r in rows} == {"portbench"} and {r[3] for r in rows} == {HORIZON}
    # Delayed: each decision is scored after its horizon's closes, most of them by a daily
    # mark of the replay (before its last decision), not all at its end.
    assert all(r[4] - r[1] >= (HORIZON - 1) * DAY for r in rows)
    assert any(r[4] < final for r in rows)


def test_the_report_reads_the_stored_rows(replayed: Path, tmp_path: Path) -> None:
    db = tmp_path / "copy.db"
    shutil.copy(replayed, db)
    con = sqlite3.connect(db)
    try:
        ts = con.execute("SELECT MIN(scheduled_ts) FROM stage_scores").fetchone()[0]
        with con:
            con.execute("UPDATE stage_scores SET score=0.125 WHERE stage='S1' AND scheduled_ts=?",
                        (ts,))
        first = next(r for r in score_connection(con)["portbench"] if r.ts == ts)
        assert first.scores["S1"] == 0.125
        fresh = next(r for r in score_connection(con, stored=False)["portbench"] if r.ts == ts)
        assert fresh.scores["S1"] != 0.125
        # A decision without its rows (not scored yet) is pending, S5 too: its ground truth
        # is the oracle's (issue 29), which needs the horizon's closes.
        with con:
            con.execute("DELETE FROM stage_scores WHERE scheduled_ts=?", (ts,))
        first = next(r for r in score_connection(con)["portbench"] if r.ts == ts)
        assert first.pending and first.scores["S1"] is None
        assert first.scores["S5"] is None
        # A store from before the table (v8) is scored on the fly, as before.
        with con:
            con.execute("DROP TABLE stage_scores")
        first = next(r for r in score_connection(con)["portbench"] if r.ts == ts)
        assert first.scores["S1"] == fresh.scores["S1"]
    finally:
        con.close()


async def test_a_restart_scores_nothing_twice(replayed: Path, tmp_path: Path) -> None:
    db = tmp_path / "again.db"
    shutil.copy(replayed, db)
    con = sqlite3.connect(db)
    try:
        before = con.execute("SELECT * FROM stage_scores ORDER BY 1, 2, 3, 4").fetchall()
        last = con.execute("SELECT MAX(ts) FROM market_events").fetchone()[0]
        with con:  # the daemon stopped before scoring the latest decisions
            con.execute("DELETE FROM stage_scores WHERE scheduled_ts=(SELECT MAX(scheduled_ts)"
                        " FROM stage_scores)")
    finally:
        con.close()
    store = await Store.open(str(db))
    try:
        assert await score_due(store, None, last + DAY, final=True) == 6
        assert await score_due(store, None, last + DAY, final=True) == 0
        after = await store.fetchall("SELECT * FROM stage_scores ORDER BY 1, 2, 3, 4")
    finally:
        await store.close()
    assert [r[:6] for r in after] == [r[:6] for r in before]


async def test_a_mark_scores_only_complete_days(replayed: Path, tmp_path: Path) -> None:
    db = tmp_path / "mark.db"
    shutil.copy(replayed, db)
    con = sqlite3.connect(db)
    try:
        with con:
            con.execute("DELETE FROM stage_scores")
        days = sorted({int(ts // DAY) for (ts,) in con.execute(
            "SELECT ts FROM market_events WHERE kind='price'")})
    finally:
        con.close()
    store = await Store.open(str(db))
    try:
        # A mark during the last day: that day's closes are not final, so fewer decisions are
        # scored than at the end of the replay (every close final).
        n_mark = await score_due(store, None, days[-1] * DAY + 72_000.0)
        n_final = await score_due(store, None, days[-1] * DAY + 72_000.0, final=True)
    finally:
        await store.close()
    assert n_mark > 0 and n_final > 0


@requires_pg
async def test_on_postgresql_the_owner_stores_its_scores(monkeypatch: Any) -> None:
    from daemon.store.reports import portbench_scores

    data = tomllib.loads((ROOT / "examples" / "portbench.toml").read_text())
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    with pg_database() as url:
        async with PortBenchModel() as model:
            data["agents"][0].update(api_base=model.api_base, timeout=10)
            end = datetime(2026, 5, 16, tzinfo=UTC).timestamp()  # 11 sessions
            await replay(ROOT / "examples" / "portbench-sample.jsonl.gz", parse_config(data),
                         url, progress=False, window=(None, end), agent_ids=["portbench"])
        stored = portbench_scores(url)["portbench"]
        fresh = portbench_scores(url, stored=False)["portbench"]
        assert summarise(stored) == summarise(fresh)
        assert any(r.ceps is not None for r in stored) and any(r.pending for r in stored)
        store = await Store.open(url)  # the owner's scope: everything is scored already
        try:
            assert await score_due(store, {"portbench"}, end, final=True) == 0
            (n,) = (await store.fetchall("SELECT COUNT(*) FROM stage_scores"))[0]
        finally:
            await store.close()
        assert n == 6 * sum(r.ceps is not None for r in fresh)


def test_the_cli_reads_or_recomputes(replayed: Path, tmp_path: Path, capsys: Any) -> None:
    from daemon.app.cli import main as cli

    def main(argv: list[str]) -> int:
        return cli(["stage-scores", *argv])

    db = tmp_path / "cli.db"
    shutil.copy(replayed, db)
    assert main(["--db", str(db)]) == 0
    stored = capsys.readouterr().out
    assert main(["--db", str(db), "--recompute"]) == 0
    assert capsys.readouterr().out == stored
    con = sqlite3.connect(db)
    with con:  # every stored S2 set to 0: the stored table shows it, --recompute does not
        con.execute("UPDATE stage_scores SET score=0 WHERE stage='S2'")
    con.close()
    assert main(["--db", str(db)]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[0] == "portbench" and row[2] == "0.000"
    assert main(["--db", str(db), "--recompute"]) == 0
    assert capsys.readouterr().out == stored
