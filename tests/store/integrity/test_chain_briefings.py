"""CapitalBench's briefings in the store (issue 32, point 3; schema v17): each briefing a round
was frozen from is stored once per content, chained, on SQLite and PostgreSQL alike; ``verify``
names a briefing whose text was edited (its chain recomputed or not) and a round whose briefing
is no longer stored; a store written before v17 (rounds naming no briefing) has nothing to
check."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from daemon.store.integrity.chain import STREAMS, chain_rows
from daemon.store.store import Store
from tests.store.integrity.test_chain import _ids, _sql
from tests.store.integrity.test_chain_capital import _checks

T0 = 1_700_000_000.0
TEXTS = ("Facts: rates unchanged.\n", "Faits : taux inchangés — 2026.\n")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _round(i: int, briefing: str | None) -> tuple[Any, ...]:
    """A round as the runner stores it (``briefing``: the text its manifest names; None: a
    round frozen before v17, whose manifest names none)."""
    ts = T0 + 7 * 86_400 * i
    manifest = {"round_id": f"weekly-{i}"} | ({} if briefing is None
                                              else {"briefing_sha256": _sha(briefing)})
    return (f"weekly-{i}", "weekly", ts, ts + 3600, f"d{i}", ts + 86_400, f"e{i}",
            ts + 8 * 86_400, f"/rounds/weekly-{i}", json.dumps(manifest, sort_keys=True),
            "h" * 64, None)


async def _fill(db: str, briefings: list[str | None]) -> None:
    """Freeze a round per item of ``briefings``, each with its briefing (when it names one)
    in the same transaction, as the runner does; the first briefing also twice in one."""
    store = await Store.open(db)
    try:
        for i, text in enumerate(briefings):
            rows = [] if text is None else [(_sha(text), "briefing.md", text)] * (1 + (i == 0))
            await store.execute_atomic([], appends=[("capital_briefings", rows),
                                                    ("capital_rounds", [_round(i, text)])],
                                       states=[f"weekly-{i}"])
    finally:
        await store.close()


async def _rechain(db: str, table: str) -> None:
    """Recompute every chain of ``table``, as a forger would."""
    stream = STREAMS[table]
    rows = await _sql(db, [(f"SELECT {stream.order}, {', '.join(stream.columns)} FROM {table}"
                            f" ORDER BY {stream.order}", ())])
    chains = chain_rows(table, b"", [r[1:] for r in rows])
    await _sql(db, [(f"UPDATE {table} SET chain=? WHERE {stream.order}=?", (c, r[0]))
                    for c, r in zip(chains, rows, strict=True)])


async def test_a_briefing_is_stored_once_per_content_and_chained(backend: str) -> None:
    await _fill(backend, [TEXTS[0], TEXTS[0], TEXTS[1], TEXTS[0]])
    stored = await _sql(backend, [("SELECT sha256, name, text, chain FROM capital_briefings"
                                   " ORDER BY id", ())])
    assert [(s, n, t) for s, n, t, _ in stored] == [(_sha(t), "briefing.md", t) for t in TEXTS]
    assert chain_rows("capital_briefings", b"", [r[:3] for r in stored]) == [
        bytes(r[3]) for r in stored]  # chained as the stream says, from its first row
    checks = await _checks(backend)
    assert (checks["capital_briefings"].rows, checks["capital_briefings"].problem) == (2, None)
    assert all(c.problem is None for c in checks.values())


async def test_a_store_of_rounds_before_v17_has_no_briefing_to_check(backend: str) -> None:
    await _fill(backend, [None, None])
    checks = await _checks(backend)
    assert checks["capital_briefings"].rows == 0
    assert all(c.problem is None for c in checks.values())


@pytest.mark.parametrize("rechained", [False, True])
async def test_an_edited_briefing_is_named(backend: str, rechained: bool) -> None:
    await _fill(backend, [TEXTS[0], TEXTS[1]])
    first = (await _ids(backend, "capital_briefings"))[0]
    await _sql(backend, [("UPDATE capital_briefings SET text=? WHERE id=?",
                          ("Facts: rates cut.\n", first))])
    if rechained:
        await _rechain(backend, "capital_briefings")
    checks = await _checks(backend)
    problem = checks["capital_briefings"].problem
    assert problem is not None
    why = ("was edited: its text does not hash to its sha256" if rechained
           else "was edited: its content does not match its hash")
    assert problem.split("/")[-1] == (  # a shared store: scope/table
        f"capital_briefings: row {first} (sha256={_sha(TEXTS[0])!r}) {why}"), problem
    assert all(c.problem is None for t, c in checks.items() if t != "capital_briefings")


async def test_a_round_whose_briefing_is_gone_is_named(backend: str) -> None:
    """The last briefing deleted (the stream's tail, which its chain cannot show), or one
    replaced by another text with its own hash and the chain recomputed: the round naming it
    names it."""
    await _fill(backend, [TEXTS[0], TEXTS[1]])
    last = (await _ids(backend, "capital_briefings"))[-1]
    await _sql(backend, [("DELETE FROM capital_briefings WHERE id=?", (last,))])
    problem = (await _checks(backend))["capital_briefings"].problem
    rid = (await _ids(backend, "capital_rounds"))[1]
    assert problem is not None and problem.split("/")[-1] == (
        f"capital_briefings: no row holds the briefing (sha256={_sha(TEXTS[1])!r}) of round"
        f" 'weekly-1' (capital_rounds row {rid}): it was deleted"), problem
    forged = "Facts: rates cut.\n"
    await _sql(backend, [("UPDATE capital_briefings SET sha256=?, text=?",
                          (_sha(forged), forged))])
    await _rechain(backend, "capital_briefings")
    problem = (await _checks(backend))["capital_briefings"].problem
    assert problem is not None and f"sha256={_sha(TEXTS[0])!r}) of round 'weekly-0'" in problem
