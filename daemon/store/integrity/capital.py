"""CapitalBench's chained rows (schema v15): rounds, submissions and each round's later states.

A ``capital_rounds`` row is written as its round is frozen and updated twice or three times later
(status ``collected``, ``started``, ``resolved``; the start and end closes). Re-chaining an
updated row would change the chain of every row after it (and every head published before), so
its chain covers only the columns fixed at the freeze, and each later change appends a row to
``capital_round_states`` (the round's status and prices after it, read back from the round in
the same transaction), a stream of its own. :func:`state_problem` holds each round's present
status and prices to its last state: an edit of either is named as an edit of the round.
``capital_submissions`` rows are never updated: each is chained whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from daemon.store.integrity.chain import STREAMS, Chains, chain_rows, with_chains

__all__ = ["STATE_SQL", "append_chained", "append_states", "chain_existing_capital",
           "state_problem"]

#: A round's present state, as :data:`STREAMS` ``capital_round_states`` hashes it.
STATE_SQL = "SELECT round_id, status, start_prices_json, end_prices_json FROM capital_rounds"


#: Columns set as a row is inserted that its chain leaves out (a round is inserted frozen).
_INSERTED: dict[str, dict[str, Any]] = {"capital_rounds": {"status": "frozen"}}


async def append_chained(db: Any, chains: Chains, table: str,
                         rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows`` (the hashed columns of ``table``, in order) with their chains."""
    if not rows:
        return
    extra = _INSERTED.get(table, {})
    cols = [*STREAMS[table].columns, *extra, "chain"]
    await db.executemany(
        f"INSERT INTO {table}({', '.join(cols)}) VALUES({', '.join('?' * len(cols))})",
        [(*r, *extra.values(), c) for r, c in zip(rows, chains.link(table, rows), strict=True)])


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
