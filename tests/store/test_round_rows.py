"""A round's commit stores the rows and hash chains it stored when they were built on the event
loop (issue 31 point 3: they are built in a worker thread now), on SQLite and PostgreSQL.

The expected rows are built here column by column from the records, as the commit built them
inline before, and their chains by :func:`link_rows` over :func:`content_bytes` (not the
commit's one-pass :func:`chain_rows`); two commits show the chains going on from the heads.
"""

from __future__ import annotations

from typing import Any

import msgspec

from daemon.core.sparse_rows import asset_list, encode_allocation, fill_columns
from daemon.store.integrity.chain import content_bytes, link_rows
from daemon.store.records import DecisionRecord, FillRecord, RoundCommit
from daemon.store.store import Store

T0 = 1_700_000_000.0
ASSETS = ["AAPL", "MSFT", "NVDA"]


def _round(i: int) -> RoundCommit:
    """A round of three agents: calls with and without a parsed answer, an allocation encoded
    by the round and one left to the commit, a fill encoded by the round and one not."""
    ts = T0 + 60 * i
    rc = RoundCommit()
    asha, ajson, index = asset_list(ASSETS)
    rc.observations["o" * 63 + str(i)] = ("equity", ts, f'{{"round": {i}}}')
    rc.observation_assets["o" * 63 + str(i)] = (asha, ajson)
    for k, agent in enumerate(("a", "b", "c")):
        alloc = {ASSETS[k]: 0.25 * (k + 1), "CASH": 1 - 0.25 * (k + 1)}
        rc.decisions.append(DecisionRecord(
            agent, "equity", ts, ts + 1.5, "ok" if k < 2 else "hold", reason=f"r{i}{k}",
            input_json=f'{{"k": {k}}}', input_sha256=str(k) * 64, raw_output=f"out {k}",
            allocation=alloc, template_version="v1", attempts=k, duration_s=0.25 * k,
            allocation_json=encode_allocation(alloc, index) if k == 0 else None,
            observation_sha256="o" * 63 + str(i), reasoning=None if k else '["think"]',
            calls=[{"attempt": a, "ts": ts + a, "model": "m", "raw_response": f"{i}{k}{a}",
                    "tokens_in": 10 + a, "tokens_out": 5, "latency_s": 0.5, "cost_usd": 0.001,
                    "step": "decide", "outcome": "ok",
                    **({"parsed": {"CASH": 1.0}} if a else {})} for a in range(k)]))
        weights = {ASSETS[k]: 0.1 * (k + 1), "CASH": 1 - 0.1 * (k + 1)}
        trades = {ASSETS[k]: float(k + 1)}
        encoded: dict[str, Any] = {}
        if k == 1:
            wjson, wsha, wassets, tjson = fill_columns(weights, trades)
            encoded = {"trades_json": tjson, "weights_json": wjson, "assets_sha256": wsha,
                       "assets_json": wassets}
        rc.fills.append(FillRecord(agent, "equity", ts, ts + 1.5, trades, 10.0 * k, 0.01 * k,
                                   1000.0 + i, 999.0 + i, weights, **encoded))
        rc.equity.append((agent, "equity", ts, "decision", 1000 + k, 500 - k))  # ints: REAL
    rc.books["equity"] = {"market": "equity", "cash": [1.5, 2], "prices": [None, 3.25]}
    return rc


def _expected(rc: RoundCommit, run_id: int | None) -> dict[str, list[tuple[Any, ...]]]:
    """Return the chained rows of ``rc`` as the commit built them before, column by column."""
    decisions, calls, fills = [], [], []
    for d in rc.decisions:
        decisions.append((d.agent, d.market, d.scheduled_ts, d.decided_ts, d.outcome, d.reason,
                          d.input_json, d.input_sha256, d.raw_output,
                          d.allocation_json or encode_allocation(d.allocation),
                          d.template_version, d.attempts, d.duration_s, run_id,
                          d.observation_sha256, d.reasoning))
        for c in d.calls:
            calls.append((d.agent, d.market, d.scheduled_ts, c["attempt"], c["ts"], c["model"],
                          c["raw_response"], None, None, c["tokens_in"], c["tokens_out"],
                          c["latency_s"], c["cost_usd"], c["step"], None, c["outcome"],
                          msgspec.json.encode(c["parsed"], order="sorted").decode()
                          if "parsed" in c else None))
    for f in rc.fills:
        wjson, wsha, _, tjson = fill_columns(f.weights, f.trades)
        fills.append((f.agent, f.market, f.scheduled_ts, f.ts, tjson, f.traded_value, f.cost,
                      f.value_before, f.value_after, wjson, wsha))
    return {"decisions": decisions, "llm_calls": calls, "fills": fills, "equity": rc.equity}


COLUMNS = {
    "decisions": ("rowid", "agent, market, scheduled_ts, decided_ts, outcome, reason,"
                  " input_json, input_sha256, raw_output, allocation_json, template_version,"
                  " attempts, duration_s, run_id, observation_sha256, reasoning"),
    "llm_calls": ("id", "agent, market, scheduled_ts, attempt, ts, model, raw_response, error,"
                  " finish_reason, tokens_in, tokens_out, latency_s, cost_usd, step,"
                  " input_sha256, outcome, parsed_json"),
    "fills": ("id", "agent, market, scheduled_ts, ts, trades_json, traded_value, cost,"
              " value_before, value_after, weights_json, assets_sha256"),
    "equity": ("rowid", "agent, market, ts, kind, value, cash"),
}


async def test_a_round_commit_stores_the_rows_and_chains_built_before(backend: str) -> None:
    store = await Store.open(backend)
    try:
        await store.claim_agents(["a", "b", "c"])
        await store.begin_run(mode="test", version="t", config={}, recording=None,
                              started_ts=T0)
        want: dict[str, list[tuple[Any, ...]]] = {t: [] for t in COLUMNS}
        for i in range(2):
            rc = _round(i)
            for table, rows in _expected(rc, store.run_id).items():
                want[table] += rows
            await store.commit_round(rc)
        for table, (order, columns) in COLUMNS.items():
            got = await store.fetchall(f"SELECT {columns}, chain FROM {table} ORDER BY {order}")
            assert content_bytes(table, [r[:-1] for r in got]) == content_bytes(
                table, want[table]), table
            chains = link_rows(b"", content_bytes(table, want[table]))
            assert [bytes(r[-1]) for r in got] == chains, table
            assert store.chains.heads[table] == chains[-1] and not store.chains.staged
        books = await store.fetchall("SELECT market, state_json, updated_ts FROM books")
        assert books == [("equity", '{"cash":[1.5,2],"market":"equity","prices":[null,3.25]}',
                          T0 + 60 + 1.5)]
        sets = await store.fetchall("SELECT sha256, assets_json FROM asset_sets")
        assert asset_list(ASSETS)[:2] in [tuple(s) for s in sets]
        obs = await store.fetchall("SELECT sha256, market, decision_ts, market_json,"
                                   " assets_sha256 FROM observations ORDER BY sha256")
        assert [tuple(o) for o in obs] == [
            ("o" * 63 + str(i), "equity", T0 + 60 * i, f'{{"round": {i}}}',
             asset_list(ASSETS)[0]) for i in range(2)]
    finally:
        await store.close()
