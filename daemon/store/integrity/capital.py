"""CapitalBench's chained rows (schema v15): rounds, submissions and each round's later states.

A ``capital_rounds`` row is written as its round is frozen and updated twice or three times later
(status ``collected``, ``started``, ``resolved``; the start and end closes). Re-chaining an
updated row would change the chain of every row after it (and every head published before), so
its chain covers only the columns fixed at the freeze, and each later change appends a row to
``capital_round_states`` (the round's status and prices after it, read back from the round in
the same transaction), a stream of its own. :func:`state_problem` holds each round's present
status and prices to its last state: an edit of either is named as an edit of the round.
``capital_submissions`` rows are never updated: each is chained whole.

``capital_briefings`` (schema v17) holds each briefing a round was frozen from, once per content:
:func:`append_chained` leaves out a briefing already stored (same SHA-256), inside the
transaction, so two rounds frozen together store it once. :func:`briefing_problem` names a
briefing whose text does not hash to its ``sha256`` (edited, and its chain recomputed) and a
round whose manifest names a briefing (``briefing_sha256``, the rounds frozen since v17) that
no row holds; a store written before v17 has neither.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from daemon.store.integrity.chain import STREAMS, Chains, chain_rows, with_chains

__all__ = ["BRIEFINGS_SQL", "STATE_SQL", "append_chained", "append_states", "briefing_problem",
           "chain_existing_capital", "round_briefing", "state_problem"]

#: A round's present state, as :data:`STREAMS` ``capital_round_states`` hashes it.
STATE_SQL = "SELECT round_id, status, start_prices_json, end_prices_json FROM capital_rounds"


#: The stored briefings, as :func:`briefing_problem` reads them.
BRIEFINGS_SQL = "SELECT id, sha256, name, text FROM capital_briefings ORDER BY id"

#: Columns set as a row is inserted that its chain leaves out (a round is inserted frozen).
_INSERTED: dict[str, dict[str, Any]] = {"capital_rounds": {"status": "frozen"}}
#: Tables stored once per key (its first hashed column): a row whose key is stored is left out.
_ONCE = ("capital_briefings",)


async def append_chained(db: Any, chains: Chains, table: str,
                         rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows`` (the hashed columns of ``table``, in order) with their chains."""
    if table in _ONCE:
        rows = await _new_only(db, table, rows)
    if not rows:
        return
    extra = _INSERTED.get(table, {})
    cols = [*STREAMS[table].columns, *extra, "chain"]
    await db.executemany(
        f"INSERT INTO {table}({', '.join(cols)}) VALUES({', '.join('?' * len(cols))})",
        [(*r, *extra.values(), c) for r, c in zip(rows, chains.link(table, rows), strict=True)])


async def _new_only(db: Any, table: str, rows: Sequence[tuple[Any, ...]]
                    ) -> list[tuple[Any, ...]]:
    """Return the rows whose key (first hashed column) is neither stored nor repeated."""
    key = STREAMS[table].columns[0]
    out: dict[Any, tuple[Any, ...]] = {}
    for r in rows:
        if r[0] in out:
            continue
        async with db.execute(f"SELECT 1 FROM {table} WHERE {key}=?", (r[0],)) as cur:
            if await cur.fetchone() is None:
                out[r[0]] = tuple(r)
    return list(out.values())


async def append_states(db: Any, chains: Chains, round_ids: Iterable[str]) -> None:
    """Append the present state of each round of ``round_ids`` (after the transaction's
    updates) to ``capital_round_states``."""
    rows: list[tuple[Any, ...]] = []
    for rid in dict.fromkeys(round_ids):
        async with db.execute(f"{STATE_SQL} WHERE round_id=?", (rid,)) as cur:
            row = await cur.fetchone()
        if row is not None:
            rows.append(tuple(row))
    await append_chained(db, chains, "capital_round_states", rows)


async def chain_existing_capital(db: Any) -> None:
    """Chain the rounds and submissions stored before schema v15 and write each round's
    present state (inside the migration's transaction on the connection ``db``)."""
    for table in ("capital_rounds", "capital_submissions"):
        stream = STREAMS[table]
        cols = stream.columns[:len(stream.columns) - stream.optional]  # later ones: NULL here
        async with db.execute(f"SELECT rowid, {', '.join(cols)} FROM {table} ORDER BY rowid"
                              ) as cur:
            rows = [(*r, *(None,) * stream.optional) for r in await cur.fetchall()]
        if rows:
            chains = chain_rows(table, b"", [r[1:] for r in rows])
            await db.executemany(f"UPDATE {table} SET chain=? WHERE rowid=?",
                                 [(c, r[0]) for c, r in zip(chains, rows, strict=True)])
    async with db.execute(f"{STATE_SQL} ORDER BY rowid") as cur:
        states = [tuple(r) for r in await cur.fetchall()]
    if states:
        chains = chain_rows("capital_round_states", b"", states)
        await db.executemany(
            "INSERT INTO capital_round_states(round_id, status, start_prices_json,"
            " end_prices_json, chain) VALUES(?,?,?,?,?)", with_chains(states, chains))


def state_problem(name: str, rounds: Iterable[Sequence[Any]],
                  states: Iterable[Sequence[Any]]) -> str | None:
    """Return why a round's present state (``rounds``: row id, then :data:`STATE_SQL`'s
    columns, in row order) is not its last chained one (``states``: its hashed columns in row
    order), naming the first such round; None if none."""
    last: dict[str, tuple[Any, ...]] = {}
    for st in states:
        last[st[0]] = tuple(st)
    for rid, *state in rounds:
        if last.get(state[0]) != tuple(state):
            return (f"{name}: row {rid} (round_id={state[0]!r}) was edited: its status or "
                    "prices are not those of its last chained state (capital_round_states)")
    return None


def round_briefing(manifest_json: str | None) -> str | None:
    """Return the briefing SHA-256 a round's stored manifest names (None: a round frozen
    before schema v17, or a manifest that is not a JSON object)."""
    try:
        manifest = json.loads(manifest_json or "null")
    except ValueError:
        return None
    sha = manifest.get("briefing_sha256") if isinstance(manifest, dict) else None
    return sha if isinstance(sha, str) else None


def briefing_problem(name: str, briefings: Iterable[Sequence[Any]],
                     rounds: Iterable[Sequence[Any]]) -> str | None:
    """Return why the stored briefings do not hold, naming the first bad one; None if they do.

    ``briefings``: :data:`BRIEFINGS_SQL`'s rows; ``rounds``: (row id, round id, manifest JSON)
    of every round in row order. A briefing's text must hash (UTF-8, SHA-256) to its
    ``sha256``; every briefing a round's manifest names must be stored.
    """
    held = set()
    for bid, sha, _, text in briefings:
        if hashlib.sha256(str(text).encode("utf-8")).hexdigest() != sha:
            return (f"{name}: row {bid} (sha256={sha!r}) was edited: its text does not hash "
                    "to its sha256")
        held.add(sha)
    for rid, round_id, manifest_json in rounds:
        sha = round_briefing(manifest_json)
        if sha is not None and sha not in held:
            return (f"{name}: no row holds the briefing (sha256={sha!r}) of round "
                    f"{round_id!r} (capital_rounds row {rid}): it was deleted")
    return None
