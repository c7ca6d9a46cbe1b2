"""Market events the store could not write yet: a cap in memory and a spill file at stop.

Policy (docs/operations.md, "Faults"):

- The buffer holds at most ``store.max_buffered_events`` events. Beyond it, the oldest ones not
  in the transaction being written are dropped, down to 90 % of the cap (so dropping is rare
  and cheap), counted in ``paperarena_store_events_dropped_total`` and logged once per fault.
  The newest are kept: they are the market's current state and what a restart needs.
- A store that closes with events still unwritten (a stop while faulted, after its last
  attempt to write them) appends them to ``<database>.spill.jsonl`` next to the resolved
  database file (one JSON array per event: the row the store would have inserted) and fsyncs
  it. The next open of that database stores them in one transaction together with the SHA-256
  of the file (meta ``spill_ingested``), then removes the file: a crash between the two never
  stores them twice. If even the spill cannot be written (a full disk), the events are counted
  in :attr:`Store.events_lost` and one error line says how many were lost.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import structlog

from daemon.core.price_bursts import BURST_FIELDS

log = structlog.get_logger(__name__)

#: Default cap on buffered market events (about 100 bytes each: ~100 MB).
DEFAULT_MAX_BUFFERED_EVENTS = 1_000_000


def spill_path(db_path: str) -> Path:
    """Return the spill file of the database at ``db_path`` (next to the resolved file)."""
    return Path(f"{os.path.realpath(db_path)}.spill.jsonl")


def row_events(row: tuple[Any, ...]) -> int:
    """Return how many events a buffered row holds (a burst of prices holds its count)."""
    return int(row[0]) if len(row) == BURST_FIELDS else 1


def drop_oldest(pending: list[tuple[Any, ...]], writing: int, cap: int, events: int) -> int:
    """Drop the oldest rows of ``pending`` after its first ``writing`` ones (being written)
    once its ``events`` are more than ``cap``, down to 90 % of ``cap`` (a burst of prices goes
    whole); return how many events were dropped."""
    if events <= cap:
        return 0
    excess = events - (cap - cap // 10)
    dropped = 0
    end = writing
    while end < len(pending) and dropped < excess:
        dropped += row_events(pending[end])
        end += 1
    del pending[writing:end]
    return dropped


def write_spill(db_path: str, rows: list[tuple[Any, ...]]) -> Path:
    """Append ``rows`` to the spill file of ``db_path`` and fsync it; raise OSError if not.
    A burst of prices carries its asset list's JSON on the first line naming it only."""
    path = spill_path(db_path)
    seen: set[str] = set()
    lines = []
    for r in rows:
        if len(r) == BURST_FIELDS:  # its asset list's versions: each text once per call
            r = (*r[:5], [[key, None if key in seen else text] for key, text in r[5]])
            seen.update(key for key, _ in r[5])
        lines.append(json.dumps(list(r), separators=(",", ":"), allow_nan=False) + "\n")
    data = "".join(lines).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # never leave a half-written spill behind
            if not size:
                path.unlink(missing_ok=True)
            raise
    finally:
        os.close(fd)
    return path


def read_spill(db_path: str) -> tuple[str, list[tuple[Any, ...]]] | None:
    """Return the SHA-256 and rows of the spill file of ``db_path`` (None: there is none).

    A line cut short (a crash while spilling) or not a row is skipped with a warning.
    """
    path = spill_path(db_path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    rows: list[tuple[Any, ...]] = []
    bad = 0
    sets: dict[str, str] = {}
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(row, list) and len(row) == BURST_FIELDS:
            chain = _chain(row[5], sets)
            if chain is None:
                bad += 1  # its asset list was on a line cut short
                continue
            rows.append((*row[:5], chain))
        elif isinstance(row, list) and len(row) in (7, 8, 10):
            rows.append(tuple(row))
        else:
            bad += 1
    if bad:
        log.warning("spilled market events: lines skipped (not an event row)", path=str(path),
                    skipped=bad)
    return hashlib.sha256(data).hexdigest(), rows


def _chain(value: Any, sets: dict[str, str]) -> tuple[tuple[str, str], ...] | None:
    """Return a spilled burst's asset-list versions, texts filled in from earlier lines."""
    if not isinstance(value, list) or not value:
        return None
    out = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            return None
        key, text = item
        if isinstance(text, str):
            sets.setdefault(key, text)
        text = sets.get(key)
        if text is None:
            return None
        out.append((key, text))
    return tuple(out)


async def ingest_spill(store: Any) -> int:
    """Store the events spilled by the last stop of ``store``'s database; return how many.

    Runs inside :meth:`Store.open` (no other writer yet); the rows and the spill's SHA-256
    are one transaction, and the file is removed only after it committed.
    """
    spill = read_spill(store.path)
    if spill is None:
        return 0
    digest, rows = spill
    if await store.get_meta("spill_ingested") != digest:
        await store.db.execute("BEGIN IMMEDIATE")
        try:
            await store._insert_events(rows)
            await store.db.execute(
                "INSERT INTO meta(key, value) VALUES('spill_ingested', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (digest,))
            await store.db.execute("COMMIT")
        except BaseException:
            store.chains.rollback()
            if store.db.in_transaction:
                await store.db.execute("ROLLBACK")
            raise
        store.chains.commit()
        n = sum(map(row_events, rows))
        store.events_written += n
        log.warning("stored market events spilled by the last stop", path=str(spill_path(
            store.path)), events=n)
    else:
        n = 0
    spill_path(store.path).unlink(missing_ok=True)
    return n


def spill_unwritten(store: Any) -> None:
    """Spill the events ``store`` still buffers (it is closing); count and log any loss."""
    rows = store._pending
    if not rows:
        return
    n = sum(map(row_events, rows))
    if store.path == ":memory:" or "://" in store.path:
        store.events_lost += n
        log.error("store closed with market events not written: market events lost",
                  path=store.path, events=n, reason=store.fault)
        return
    try:
        path = write_spill(store.path, rows)
    except OSError as exc:
        store.events_lost += n
        log.error("store closed with market events not written and no room to spill them:"
                  " market events lost", path=store.path, events=n,
                  error=exc.strerror or str(exc), reason=store.fault)
        return
    rows.clear()
    store._buffered = 0
    log.warning("store closed with market events not written: spilled; the next start "
                "stores them", path=str(path), events=n, reason=store.fault)


def note_dropped(store: Any, n: int) -> None:
    """Count ``n`` dropped events; log once until a write succeeds again."""
    store.events_dropped += n
    if store._drop_logged_at != store.events_written:
        store._drop_logged_at = store.events_written
        log.error("store event buffer full: dropping the oldest buffered market events",
                  path=store.path, max_buffered_events=store.max_buffered_events,
                  dropped=store.events_dropped, reason=store.fault)
