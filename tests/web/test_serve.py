"""``paperarena serve --db F``: the page and the API over a finished store, read-only, live to
another process's commits; one clear line for a missing or foreign database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path

import aiohttp

from daemon.app.cli import main
from daemon.web.readonly import serve
from tests.web.test_alerts import T0, buy, close_engine, make_config, make_engine, tick

HOUR = 3600.0


async def _write_rounds(db: Path, first: int, n: int) -> None:
    """Open the store for writing, run ``n`` hourly rounds with marks, close it."""
    engine = await make_engine(db, make_config(), T0 + first * HOUR)
    try:
        for i in range(first, first + n):
            ts = T0 + i * HOUR
            await tick(engine, ts, 1.0 + 0.01 * i)
            await buy(engine, ts + 60)
            await engine.mark("equity", ts + 120)
            await engine.bus.drain()
    finally:
        await close_engine(engine)


async def test_serve_answers_the_page_and_api_and_follows_new_commits(tmp_path: Path) -> None:
    db = tmp_path / "done.db"
    await _write_rounds(db, 0, 2)
    ready = asyncio.Event()
    bound: list[str] = []
    task = asyncio.create_task(serve(db, port=0, ready=ready, bound=bound))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        url = bound[0]
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/") as r:
                assert r.status == 200 and "uPlot" in await r.text()
                assert "script-src 'self'" in r.headers["Content-Security-Policy"]
            async with http.get(url + "/api/chart") as r:
                chart = await r.json()
            agents = chart["markets"]["equity"]["agents"]
            assert set(agents) == {"ew", "bh", "cash"}
            with sqlite3.connect(db) as con:
                stored = con.execute("SELECT COUNT(DISTINCT ts) FROM equity WHERE agent='ew'"
                                     " AND market='equity'").fetchone()[0]
            assert len(agents["ew"]) == stored
            async with http.get(url + "/api/agents/ew") as r:
                assert r.status == 200 and (await r.json())["equity"]
            async with http.get(url + "/api/agents/ew/decisions") as r:
                assert (await r.json())["total"] == 2
            async with http.get(url + "/api/agents/nobody") as r:
                assert r.status == 404
            async with http.get(url + "/api/status") as r:
                status = await r.json()
                assert status["read_only"] is True and status["sources"] == []
                assert status["rounds"]["equity"]["last_ts"] == T0 + HOUR + 60
            async with http.get(url + "/readyz") as r:
                assert r.status == 503 and "read-only" in (await r.json())["store"]
            async with http.get(url + "/api/events") as events:
                assert (await events.content.readline()).startswith(b"retry")
                await _write_rounds(db, 2, 1)  # another process commits: the page is told
                async def update() -> dict[str, object]:
                    async for line in events.content:
                        if line.startswith(b"data:") and b'"store"' in line:
                            return dict(json.loads(line[5:]))
                    raise AssertionError("stream ended")

                msg = await asyncio.wait_for(update(), 30)  # hang guard only
                assert msg["counts"] == {"store": 1}
            async with http.get(url + "/api/agents/ew/decisions") as r:
                assert (await r.json())["total"] == 3
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_serve_names_a_missing_or_foreign_database_in_one_line(
        tmp_path: Path, capsys: object) -> None:
    assert main(["serve", "--db", str(tmp_path / "missing.db"), "--port", "0"]) == 2
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as con:
        con.execute("CREATE TABLE t(x)")
    assert main(["serve", "--db", str(foreign), "--port", "0"]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    lines = [ln for ln in err.splitlines() if ln.startswith("paperarena")]
    assert lines == [f"paperarena: --db {tmp_path / 'missing.db'}: no such database",
                     f"paperarena: --db {foreign}: not a paperarena store "
                     "(no alerts, decisions, equity, fills table)"], err


async def test_serve_reads_a_store_from_before_the_reasoning_column(tmp_path: Path) -> None:
    """A v11 store (no decisions.reasoning) served read-only: reasoning derived as before."""
    db = tmp_path / "v11.db"
    await _write_rounds(db, 0, 1)
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT reasoning FROM decisions WHERE agent='ew'").fetchone()[0]
        con.execute("ALTER TABLE decisions DROP COLUMN reasoning")
        con.execute("UPDATE meta SET value='11' WHERE key='schema_version'")
    ready = asyncio.Event()
    bound: list[str] = []
    task = asyncio.create_task(serve(db, port=0, ready=ready, bound=bound))
    try:
        await asyncio.wait_for(ready.wait(), 60)  # hang guard only
        async with (aiohttp.ClientSession() as http,
                    http.get(bound[0] + "/api/agents/ew/decisions") as r):
            body = await r.json()
        assert r.status == 200 and body["total"] == 1
        assert body["decisions"][0]["reasoning"] == []  # derived: a baseline's calls hold none
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
