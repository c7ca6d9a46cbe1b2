"""CapitalBench's chains (issue 32, point 2; schema v15; a round's trailing closes: v16): an
edited, deleted or reordered round, submission or round state is named by ``verify``, on SQLite
and PostgreSQL alike, and so is a round whose status or prices are no longer those of its last
chained state."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.store.integrity.chain import STREAMS
from daemon.store.integrity.verify import StreamCheck, verify
from daemon.store.store import Store
from tests.store.integrity.test_chain import _ids, _sql

T0 = 1_700_000_000.0
CAPITAL = ("capital_rounds", "capital_submissions", "capital_round_states")


def _round(i: int) -> tuple[Any, ...]:
    ts = T0 + 86_400 * i
    return (f"2023-11-{14 + i}-weekly", "weekly", ts, ts + 3600, f"2023-11-{15 + i}", ts + 86_400,
            f"2023-11-{22 + i}", ts + 8 * 86_400, f"/rounds/r{i}", json.dumps({"i": i}), "h" * 64,
            json.dumps({"QQQ": [["2023-11-13", 100.0 + i]]}) if i % 2 else None)  # v16's


def _submission(i: int, agent: str, rep: int) -> tuple[Any, ...]:
    ok = rep % 2 == 0
    return (f"2023-11-{14 + i}-weekly", "official" if rep == 0 else "consistency", agent, rep,
            int(rep == 0), T0 + 86_400 * i + 60, "m", "ok" if ok else "invalid", "",
            json.dumps({"AAPL": 50, "MSFT": 50}) if ok else None, json.dumps({"h": rep}),
            json.dumps([f"answer {i} {rep}"]), json.dumps([{"attempt": 1, "raw": "x"}]),
            100 + rep, 20, 0.001 * (rep + 1), "v1")


async def _fill(db: str) -> None:
    """Freeze three rounds and collect two submissions each, as the runner writes them; start
    two of them and resolve the first (each change appends the round's state)."""
    store = await Store.open(db)
    try:
        await store.claim_agents(["a", "b"])
        for i in range(3):
            rid = _round(i)[0]
            await store.execute_atomic([], appends=[("capital_rounds", [_round(i)])],
                                       states=[rid])
            await store.execute_atomic(
                [("UPDATE capital_rounds SET status='collected' WHERE round_id=?", (rid,))],
                appends=[("capital_submissions", [_submission(i, "a", 0),
                                                  _submission(i, "b", 1)])], states=[rid])
        writes = [("UPDATE capital_rounds SET start_prices_json=?, status='started'"
                   " WHERE round_id=?", (json.dumps({"AAPL": 100.0 + i}), _round(i)[0]))
                  for i in range(2)]
        await store.execute_atomic(writes, states=[p[-1] for _, p in writes])
        await store.execute_atomic(
            [("UPDATE capital_rounds SET end_prices_json=?, status='resolved' WHERE round_id=?",
              (json.dumps({"AAPL": 104.5}), _round(0)[0]))], states=[_round(0)[0]])
    finally:
        await store.close()


async def _checks(db: str) -> dict[str, StreamCheck]:
    return {c.name.split("/")[-1]: c for c in await asyncio.to_thread(verify, db)}


async def test_the_capital_chains_hold_and_count_their_rows(backend: str) -> None:
    await _fill(backend)
    checks = await _checks(backend)
    assert {t: (checks[t].rows, checks[t].problem) for t in CAPITAL} == {
        "capital_rounds": (3, None), "capital_submissions": (6, None),
        "capital_round_states": (9, None)}  # frozen, collected x3; started x2; resolved
    assert all(c.problem is None for c in checks.values())
    states = await _sql(backend, [("SELECT status FROM capital_round_states ORDER BY id", ())])
    assert [s for (s,) in states] == ["frozen", "collected"] * 3 + ["started"] * 2 + ["resolved"]


EDITS = [("capital_submissions", "calls_json", "[]", "was edited: its content"),
         ("capital_submissions", "raw_responses_json", '["forged"]', "was edited: its content"),
         ("capital_submissions", "holdings_json", '{"AAPL": 100}', "was edited: its content"),
         ("capital_rounds", "manifest_json", "{}", "was edited: its content"),
         ("capital_rounds", "trailing_json", '{"QQQ": []}', "was edited: its content"),
         ("capital_rounds", "start_prices_json", '{"AAPL": 1.0}', "status or prices"),
         ("capital_rounds", "end_prices_json", '{"AAPL": 1.0}', "status or prices"),
         ("capital_rounds", "status", "frozen", "status or prices"),
         ("capital_round_states", "start_prices_json", '{"AAPL": 1.0}',
          "was edited: its content")]


@pytest.mark.parametrize(("table", "column", "value", "why"), EDITS)
async def test_an_edited_capital_row_is_named(backend: str, table: str, column: str,
                                              value: str, why: str) -> None:
    await _fill(backend)
    order = STREAMS[table].order
    target = (await _ids(backend, table))[0 if table == "capital_rounds" else 2]
    await _sql(backend, [(f"UPDATE {table} SET {column}=? WHERE {order}=?", (value, target))])
    checks = await _checks(backend)
    problem = checks[table].problem
    assert problem is not None and f"row {target} (" in problem and why in problem, problem
    assert all(c.problem is None for t, c in checks.items() if t != table)


@pytest.mark.parametrize("table", CAPITAL)
async def test_a_deleted_capital_row_is_named_by_the_row_after_it(backend: str,
                                                                  table: str) -> None:
    await _fill(backend)
    order = STREAMS[table].order
    ids = await _ids(backend, table)
    await _sql(backend, [(f"DELETE FROM {table} WHERE {order}=?", (ids[1],))])
    problem = (await _checks(backend))[table].problem
    assert problem is not None and f"a row was deleted before row {ids[2]} (" in problem


async def test_a_cut_last_state_is_named_by_its_round(backend: str) -> None:
    """The last state of a round deleted (the stream's tail, which its chain cannot show):
    the round's present status is not its last chained state's."""
    await _fill(backend)
    last = (await _ids(backend, "capital_round_states"))[-1]
    await _sql(backend, [("DELETE FROM capital_round_states WHERE id=?", (last,))])
    problem = (await _checks(backend))["capital_rounds"].problem
    first = (await _ids(backend, "capital_rounds"))[0]
    assert problem is not None and problem.split("/")[-1] == (  # a shared store: scope/table
        f"capital_rounds: row {first} (round_id='2023-11-14-weekly') was edited: its status or"
        " prices are not those of its last chained state (capital_round_states)"), problem


@pytest.mark.parametrize("table", ["capital_rounds", "capital_submissions"])
async def test_a_capital_row_written_again_at_the_end_is_out_of_order(backend: str,
                                                                      table: str) -> None:
    """A row deleted and inserted again, whole with its chain, after the others."""
    await _fill(backend)
    order = STREAMS[table].order
    ids = await _ids(backend, table)
    cols = [*STREAMS[table].columns, "chain"] + (
        ["status", "start_prices_json", "end_prices_json"] if table == "capital_rounds" else [])
    row = (await _sql(backend, [(f"SELECT {', '.join(cols)} FROM {table} WHERE {order}=?",
                                 (ids[0],))]))[0]
    await _sql(backend, [(f"DELETE FROM {table} WHERE {order}=?", (ids[0],)),
                         (f"INSERT INTO {table}({', '.join(cols)})"
                          f" VALUES({', '.join('?' * len(cols))})", row)])
    moved = (await _ids(backend, table))[-1]
    problem = (await _checks(backend))[table].problem
    assert problem is not None and f"row {ids[1]} (" in problem
    assert f"is out of order: it was written after row {moved}" in problem, problem


async def test_capital_rows_stored_before_v15_are_chained_by_the_migration(
        tmp_path: Path) -> None:
    """A v14 store's rounds and submissions (unchained) are chained by its first open with
    v15, each round's present state written; an edit of either is named after."""
    db = str(tmp_path / "s.db")
    await _fill(db)
    await _sql(db, [("ALTER TABLE season DROP COLUMN chain", ()),  # v17's
                    ("ALTER TABLE capital_rounds DROP COLUMN trailing_json", ()),  # v16's
                    ("ALTER TABLE capital_rounds DROP COLUMN chain", ()),
                    ("ALTER TABLE capital_submissions DROP COLUMN chain", ()),
                    ("DROP TABLE capital_round_states", ()),
                    ("UPDATE meta SET value='14' WHERE key='schema_version'", ())])
    checks = await _checks(db)
    assert [(checks[t].rows, checks[t].legacy, checks[t].problem) for t in CAPITAL] == [
        (0, 3, None), (0, 6, None), (0, 0, None)]
    store = await Store.open(db)  # the migrations to v15 and v16
    try:
        assert await store.schema_version() == 17
        await store.execute_atomic([], appends=[("capital_rounds", [_round(3)])],
                                   states=[_round(3)[0]])
    finally:
        await store.close()
    checks = await _checks(db)
    assert [(checks[t].rows, checks[t].legacy, checks[t].problem) for t in CAPITAL] == [
        (4, 0, None), (6, 0, None), (4, 0, None)]
    states = await _sql(db, [("SELECT round_id, status FROM capital_round_states ORDER BY id",
                              ())])
    assert states == [(_round(0)[0], "resolved"), (_round(1)[0], "started"),
                      (_round(2)[0], "collected"), (_round(3)[0], "frozen")]
    await _sql(db, [("UPDATE capital_submissions SET calls_json='[]' WHERE rowid=3", ())])
    problem = (await _checks(db))["capital_submissions"].problem
    assert problem is not None and problem.startswith("capital_submissions: row 3 (round_id=")
    assert "was edited" in problem


async def test_rounds_chained_before_v16_keep_their_chains(tmp_path: Path) -> None:
    """A v15 store's chained rounds (no ``trailing_json``) verify as they are and, after the
    migration to v16 (the column added, NULL), with the same chains; a round's stored trailing
    closes are chained with it: dropping them is named as an edit."""
    db = str(tmp_path / "s.db")
    store = await Store.open(db)
    try:
        for i in (0, 2):
            await store.execute_atomic([], appends=[("capital_rounds", [(*_round(i)[:-1], None)])],
                                       states=[_round(i)[0]])
    finally:
        await store.close()
    await _sql(db, [("ALTER TABLE season DROP COLUMN chain", ()),  # v17's
                    ("ALTER TABLE capital_rounds DROP COLUMN trailing_json", ()),
                    ("UPDATE meta SET value='15' WHERE key='schema_version'", ())])
    before = await _sql(db, [("SELECT chain FROM capital_rounds ORDER BY rowid", ())])
    checks = await _checks(db)
    assert (checks["capital_rounds"].rows, checks["capital_rounds"].problem) == (2, None)
    store = await Store.open(db)  # the migration to v16
    try:
        assert await store.schema_version() == 17
        await store.execute_atomic([], appends=[("capital_rounds", [_round(1)])],
                                   states=[_round(1)[0]])
    finally:
        await store.close()
    after = await _sql(db, [("SELECT chain FROM capital_rounds ORDER BY rowid", ())])
    assert after[:2] == before and len(after) == 3
    assert all(c.problem is None for c in (await _checks(db)).values())
    await _sql(db, [("UPDATE capital_rounds SET trailing_json=NULL WHERE rowid=3", ())])
    problem = (await _checks(db))["capital_rounds"].problem
    assert problem is not None and problem.startswith("capital_rounds: row 3 (round_id=")
    assert "was edited: its content" in problem, problem
