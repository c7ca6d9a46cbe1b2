"""Hash chains of the stored rows: one stream per chained table (per scope of a shared store).

Every row of a chained table carries ``chain``, 20 bytes (a BLOB; 40 hex digits where shown):
the first 4 are the *back tag* (the first 4 bytes of the previous row's link; zeros for the first
row of the stream), the last 16 its *link*, the first 128 bits of
``sha256(previous chain + b"\\n" + content)``, where the previous chain is the full ``chain`` of
the row before it in row-id order (empty for the first) and the content is the row's stored
columns (:data:`STREAMS`, in that order, ``chain`` and the row id left out) as a JSON array
(msgspec's encoding; a REAL column's value as a float, an INTEGER one's as an integer, as the
database stores them). Only stored content is hashed, never a clock: a replay writes the same
chain every time. Bytes, not hex text: a replay stores a row per price, and 40 characters a row
grew the sample's store by a quarter.

The back tag lets :mod:`.verify` tell an edited row (its back tag fits, its link does not) from a
deleted one (its back tag names no row) and from one out of order (its back tag names a row found
elsewhere). Rows written before schema v13 have no chain (NULL) and precede every chained row;
the ``runs`` rows (a run's config, as it started) are chained since v14, the rows before it by
the migration to v14 (:func:`chain_existing`). CapitalBench's rounds and submissions
are chained since v15 (:mod:`.capital`); a reload's config and CapitalBench's briefings since
v17 (their tables are new there: every row chained), and the season's rows since v17 (those
before chained by that migration).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

__all__ = ["NO_BACK", "STREAMS", "Chains", "Stream", "chain_existing", "chain_rows",
           "content_bytes", "link_rows", "with_chains"]

#: The back tag of a stream's first row.
NO_BACK: Final[bytes] = bytes(4)

_ENC = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Stream:
    """One chained table: its order column, hashed columns and their types."""

    table: str
    order: str
    """The column giving row order (``id``, or the row id where the table has no ``id``)."""
    columns: tuple[str, ...]
    kinds: str
    """One letter a column: ``f`` REAL, ``i`` INTEGER, ``s`` TEXT (each may be NULL)."""
    key: tuple[str, ...]
    """The columns naming a row in messages."""
    optional: int = 0
    """How many last columns (added after the table was first chained) are left out of the
    content while NULL: the chains of the rows written before them stand."""
    since: int | None = None
    """The schema version from which every row of the table is hashed (its migration chained
    the rows before it, or the table is new there); None: rows written before v13 stay
    unhashed."""

    @property
    def row_type(self) -> Any:
        """Return the msgspec tuple type the content is normalised to."""
        return _tuple_type(self.kinds)


def _tuple_type(kinds: str) -> Any:
    types = {"f": float | None, "i": int | None, "s": str | None}
    return tuple.__class_getitem__(tuple(types[k] for k in kinds))


#: The chained tables, in the order :mod:`.verify` reports them.
STREAMS: Final[dict[str, Stream]] = {s.table: s for s in (
    Stream("decisions", "rowid",
           ("agent", "market", "scheduled_ts", "decided_ts", "outcome", "reason", "input_json",
            "input_sha256", "raw_output", "allocation_json", "template_version", "attempts",
            "duration_s", "run_id", "observation_sha256", "reasoning"),
           "ssffsssssssifiss", ("agent", "market", "scheduled_ts")),
    Stream("llm_calls", "id",
           ("agent", "market", "scheduled_ts", "attempt", "ts", "model", "raw_response",
            "error", "finish_reason", "tokens_in", "tokens_out", "latency_s", "cost_usd", "step",
            "input_sha256", "outcome", "parsed_json"),
           "ssfifssssiiffssss", ("agent", "scheduled_ts", "attempt")),
    Stream("fills", "id",
           ("agent", "market", "scheduled_ts", "ts", "trades_json", "traded_value", "cost",
            "value_before", "value_after", "weights_json", "assets_sha256"),
           "ssffsffffss", ("agent", "market", "scheduled_ts")),
    Stream("market_events", "id",
           ("seq", "ts", "recv_ts", "kind", "market", "asset", "price", "bid", "ask", "payload"),
           "iffsssfffs", ("kind", "market", "ts")),
    Stream("equity", "rowid", ("agent", "market", "ts", "kind", "value", "cash"), "ssfsff",
           ("agent", "market", "kind", "ts")),
    Stream("resolutions", "rowid", ("question_id", "market", "ts", "payouts_json", "source"),
           "ssfss", ("question_id",)),
    # A run's config, as it started (its stop time is written later: not hashed; schema v14).
    Stream("runs", "id", ("started_ts", "mode", "version", "config_json", "recording"),
           "fssss", ("mode", "started_ts"), since=14),
    # A season's start and amendments (schema v13, chained since v17).
    Stream("season", "id",
           ("name", "kind", "ts", "lineup_json", "lineup_sha256", "changes_json"), "ssfsss",
           ("kind", "ts"), since=17),
    # A config taken at a reload while running (schema v17).
    Stream("config_reloads", "id", ("run_id", "ts", "config_json"), "ifs", ("run_id", "ts"),
           since=17),
    # A CapitalBench briefing's text, once per content (schema v17).
    Stream("capital_briefings", "id", ("sha256", "name", "text"), "sss", ("sha256",),
           since=17),
    # CapitalBench (schema v15, :mod:`.capital`): a round as frozen (its status and prices,
    # written later, are chained as rows of capital_round_states; its trailing closes, v16,
    # optional), and every submission.
    Stream("capital_rounds", "rowid",
           ("round_id", "track", "frozen_ts", "deadline_ts", "start_day", "start_ts", "end_day",
            "end_ts", "dir", "manifest_json", "hashes_sha256", "trailing_json"),
           "ssffsfsfssss", ("round_id",), optional=1, since=15),
    Stream("capital_submissions", "rowid",
           ("round_id", "run_id", "agent", "replicate", "official", "ts", "model", "outcome",
            "reason", "holdings_json", "submission_json", "raw_responses_json", "calls_json",
            "tokens_in", "tokens_out", "cost_usd", "template_version"),
           "sssiifsssssssiifs", ("round_id", "run_id", "agent", "replicate"), since=15),
    Stream("capital_round_states", "id",
           ("round_id", "status", "start_prices_json", "end_prices_json"), "ssss",
           ("round_id", "status"), since=15),
)}
_LISTS: Final[dict[str, Any]] = {t: list[s.row_type] for t, s in STREAMS.items()}  # type: ignore[name-defined]
_KINDS: Final[dict[str, str]] = {t: s.kinds for t, s in STREAMS.items()}
_OPTIONAL: Final[dict[str, int]] = {t: s.optional for t, s in STREAMS.items() if s.optional}


def _slow(kinds: str, row: Sequence[Any]) -> tuple[Any, ...]:
    """Normalise one row value by value (numpy numbers, integral floats, numbers as text)."""
    out: list[Any] = []
    for k, v in zip(kinds, row, strict=True):
        if v is None:
            out.append(None)
        elif k == "f" and isinstance(v, int | float):
            out.append(float(v))
        elif k == "i" and isinstance(v, int | float) and float(v).is_integer():
            out.append(int(v))
        elif k == "s" and isinstance(v, int | float) and not isinstance(v, bool):
            out.append(str(v))
        elif hasattr(v, "item"):  # a numpy scalar
            out.append(v.item())
        else:
            out.append(v)
    return tuple(out)


def _normalised(table: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """Return ``rows`` with each value of the type its column stores, a NULL optional column
    left out (:attr:`Stream.optional`)."""
    norm = _typed(table, rows)
    optional = _OPTIONAL.get(table, 0)
    if not optional:
        return norm
    out = []
    for r in norm:
        r = tuple(r)
        n = len(r)
        while n > len(r) - optional and r[n - 1] is None:
            n -= 1
        out.append(r[:n])
    return out


def _typed(table: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """Return ``rows`` with each value of the type its column stores (one C call in general)."""
    try:
        return msgspec.convert(rows, _LISTS[table], strict=False)  # type: ignore[no-any-return]
    except (msgspec.ValidationError, TypeError, ValueError):
        kinds = _KINDS[table]
        norm: list[Any] = []
        for r in rows:
            try:
                norm.append(_slow(kinds, r))
            except (TypeError, ValueError, OverflowError):
                norm.append(tuple(r))
        return norm


def _encode(row: Any) -> bytes:
    try:
        return _ENC.encode(row)
    except (TypeError, msgspec.EncodeError):  # a value JSON has no form for: its repr
        return _ENC.encode([repr(v) for v in row])


def content_bytes(table: str, rows: Sequence[Sequence[Any]]) -> list[bytes]:
    """Return the canonical content of ``rows`` of ``table`` (their hashed columns in order)."""
    return [_encode(r) for r in _normalised(table, rows)]


def link_rows(prev: bytes, contents: Iterable[bytes]) -> list[bytes]:
    """Return the chains of rows of canonical ``contents`` following the chain ``prev``."""
    out: list[bytes] = []
    sha = hashlib.sha256
    back = prev[4:8] if prev else NO_BACK
    for data in contents:
        link = sha(prev + b"\n" + data).digest()[:16]
        prev = back + link
        out.append(prev)
        back = link[:4]
    return out


def chain_rows(table: str, prev: bytes, rows: Sequence[Sequence[Any]]) -> list[bytes]:
    """Return the chains of ``rows`` of ``table`` following ``prev``: :func:`link_rows` of
    :func:`content_bytes`, in one pass (the hot path of a round's commit)."""
    out: list[bytes] = []
    sha = hashlib.sha256
    enc = _ENC.encode
    back = prev[4:8] if prev else NO_BACK
    for row in _normalised(table, rows):
        try:
            data = enc(row)
        except (TypeError, msgspec.EncodeError):
            data = _encode(row)
        link = sha(prev + b"\n" + data).digest()[:16]
        prev = back + link
        out.append(prev)
        back = link[:4]
    return out


class Chains:
    """A store's chain heads: the committed ones, and those the open transaction moved."""

    __slots__ = ("heads", "staged")

    def __init__(self) -> None:
        self.heads: dict[str, bytes] = {}
        """table -> the chain of its last committed row (empty if none has one)."""
        self.staged: dict[str, bytes] = {}
        """The heads the open transaction wrote (committed by :meth:`commit`)."""

    async def load(self, db: Any) -> None:
        """Read every stream's head from the connection ``db`` (aiosqlite or PostgreSQL)."""
        self.staged.clear()
        for table in STREAMS:
            self.heads[table] = await self.read_head(db, table)

    async def reload(self, db: Any, table: str) -> None:
        """Read ``table``'s head again inside the open transaction (after a delete of its
        tail): it counts once the transaction commits."""
        self.staged[table] = await self.read_head(db, table)

    @staticmethod
    async def read_head(db: Any, table: str) -> bytes:
        """Return the chain of ``table``'s last row (empty if none, or it has none)."""
        order = STREAMS[table].order
        async with db.execute(f"SELECT chain FROM {table} ORDER BY {order} DESC LIMIT 1") as cur:
            row = await cur.fetchone()
        return bytes(row[0] or b"") if row else b""

    def link(self, table: str, rows: Sequence[Sequence[Any]]) -> list[bytes]:
        """Return the chains of ``rows`` appended to ``table`` now (in insert order), and move
        the table's head in the open transaction."""
        if not rows:
            return []
        prev = self.staged.get(table)
        if prev is None:
            prev = self.heads.get(table, b"")
        chains = chain_rows(table, prev, rows)
        self.staged[table] = chains[-1]
        return chains

    def commit(self) -> None:
        """Keep the heads the committed transaction wrote."""
        if self.staged:
            self.heads.update(self.staged)
            self.staged.clear()

    def rollback(self) -> None:
        """Forget the heads a rolled-back transaction wrote."""
        self.staged.clear()


def with_chains(rows: Sequence[tuple[Any, ...]],
                chains: Sequence[bytes]) -> list[tuple[Any, ...]]:
    """Return ``rows`` with their chain appended as the last parameter."""
    return [(*r, c) for r, c in zip(rows, chains, strict=True)]


async def chain_existing(db: Any, table: str) -> None:
    """Chain the rows of ``table`` (an ``id``-ordered stream) written before it was chained
    (inside the migration's transaction on the connection ``db``): ``runs`` at schema v14 (a
    season's config, stored before, is covered too), ``season`` at v17."""
    stream = STREAMS[table]
    async with db.execute(f"SELECT id, {', '.join(stream.columns)} FROM {table} ORDER BY id"
                          ) as cur:
        rows = [tuple(r) for r in await cur.fetchall()]
    if rows:
        chains = chain_rows(table, b"", [r[1:] for r in rows])
        await db.executemany(f"UPDATE {table} SET chain=? WHERE id=?",
                             [(c, r[0]) for c, r in zip(chains, rows, strict=True)])
