"""Store write throughput and round commit latency at 1,000 agents: SQLite and PostgreSQL.

    python bench/bench_store_backends.py [--json] [--url postgresql://postgres@127.0.0.1/postgres]

Through the real :class:`daemon.store.store.Store` on both backends (PostgreSQL: a fresh database on
the server at ``--url``, dropped after):

- market-event write throughput: 50,000 price events buffered and flushed in batches of 5,000
  (``store.batch_size``), events/s;
- round commit latency: one round of 1,000 agents (1,000 decisions with one model call each,
  1,000 fills, 1,000 equity marks, the book and the checkpoint) in one transaction, p50/p99 of
  30 rounds;
- the merged read of the report (:mod:`daemon.store.pg_snapshot`) after those rounds
  (PostgreSQL only).

The machine's limit beside them, measured in the same run: the same 50,000 rows inserted by
the bare driver (``sqlite3.executemany`` into an in-memory database; ``asyncpg`` ``COPY``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.core.events import PriceEvent  # noqa: E402
from daemon.store.records import DecisionRecord, FillRecord, RoundCommit  # noqa: E402
from daemon.store.store import Store  # noqa: E402

AGENTS = [f"a{k:04d}" for k in range(1000)]
ASSETS = [f"S{j:02d}" for j in range(16)]
EVENTS = 50_000
BATCH = 5_000
ROUNDS = 30
T0 = 1_793_000_000.0


def _round(k: int) -> RoundCommit:
    ts = T0 + 3600 * k
    w = {a: 1 / len(ASSETS) for a in ASSETS}
    return RoundCommit(
        decisions=[DecisionRecord(a, "equity", ts, ts + 1, "ok", input_sha256="x" * 64,
                                  raw_output='{"weights": {}}', allocation=w, attempts=1,
                                  calls=[{"attempt": 1, "ts": ts, "model": "m", "tokens_in": 900,
                                          "tokens_out": 80, "latency_s": 1.0}])
                   for a in AGENTS],
        fills=[FillRecord(a, "equity", ts, ts + 1, {s: 1.0 for s in ASSETS}, 1000.0, 0.5,
                          1000.0, 999.5, w) for a in AGENTS],
        books={"equity": {"agents": AGENTS, "cash": [1.0] * len(AGENTS)}},
        equity=[(a, "equity", ts, "round", 999.5, 10.0) for a in AGENTS],
        checkpoint=(k, ts, {"k": k}))


async def bench_store(db: str) -> dict[str, float]:
    store = await Store.open(db, scope="bench")
    await store.claim_agents(AGENTS)
    await store.begin_run(mode="bench", version="0", config={}, recording=None, started_ts=T0)
    t = time.perf_counter()
    for k in range(EVENTS):
        store.add_event(PriceEvent(ts=T0 + k, recv_ts=T0 + k, market="equity",
                                   asset=ASSETS[k % 16], price=100.0 + k % 7), seq=k)
        if store.pending_events >= BATCH:
            await store.flush()
    await store.flush()
    events_s = EVENTS / (time.perf_counter() - t)
    lat = []
    for k in range(ROUNDS):
        rc = _round(k)
        t = time.perf_counter()
        await store.commit_round(rc)
        lat.append(time.perf_counter() - t)
    await store.close()
    lat.sort()
    return {"events_per_s": round(events_s), "round_commit_p50_ms": round(
        1000 * statistics.median(lat), 1), "round_commit_p99_ms": round(
        1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1)}


def _rows() -> list[tuple[Any, ...]]:
    return [(k, T0 + k, T0 + k, "price", "equity", ASSETS[k % 16], 100.0, None, None, None)
            for k in range(EVENTS)]


def sqlite_limit() -> float:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE e(seq INTEGER, ts REAL, recv_ts REAL, kind TEXT, market TEXT,"
                " asset TEXT, price REAL, bid REAL, ask REAL, payload TEXT)")
    rows = _rows()
    t = time.perf_counter()
    con.executemany("INSERT INTO e VALUES(?,?,?,?,?,?,?,?,?,?)", rows)
    con.commit()
    return EVENTS / (time.perf_counter() - t)


async def pg_limit(url: str) -> float:
    import asyncpg  # type: ignore[import-untyped]

    con = await asyncpg.connect(url)
    await con.execute("CREATE TEMP TABLE e(seq BIGINT, ts DOUBLE PRECISION, recv_ts DOUBLE"
                      " PRECISION, kind TEXT, market TEXT, asset TEXT, price DOUBLE PRECISION,"
                      " bid DOUBLE PRECISION, ask DOUBLE PRECISION, payload TEXT)")
    rows = _rows()
    t = time.perf_counter()
    await con.copy_records_to_table("e", records=rows)
    dt = time.perf_counter() - t
    await con.close()
    return EVENTS / dt


async def main_async(url: str) -> dict[str, Any]:
    import asyncpg  # type: ignore[import-untyped]

    out: dict[str, Any] = {"machine": f"{platform.node()} {platform.machine()}, "
                           f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "agents": len(AGENTS)}
    with tempfile.TemporaryDirectory() as d:
        out["sqlite"] = await bench_store(str(Path(d) / "bench.db"))
    out["sqlite"]["bare_driver_limit_rows_per_s"] = round(sqlite_limit())
    admin = await asyncpg.connect(url)
    name = f"pa_bench_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    db = url.rsplit("/", 1)[0] + f"/{name}"
    try:
        out["postgresql"] = await bench_store(db)
        out["postgresql"]["bare_driver_limit_rows_per_s"] = round(await pg_limit(db))
        out["postgresql"]["server"] = str(await admin.fetchval("SHOW server_version"))
        from daemon.store.pg_snapshot import snapshot

        t = time.perf_counter()
        con = await asyncio.to_thread(snapshot, db)
        n = con.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
        out["postgresql"]["report_snapshot_s"] = round(time.perf_counter() - t, 2)
        out["postgresql"]["report_snapshot_rows"] = int(n) * 4 + EVENTS
        con.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = ap.parse_args()
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    res = asyncio.run(main_async(args.url))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    for k, v in res.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
