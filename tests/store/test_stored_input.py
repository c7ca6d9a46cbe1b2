"""A decision's input stored in two parts rebuilds byte for byte (issue 16, point 4)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agents.base import (
    Fundamentals,
    MarketView,
    NewsItem,
    PastAllocation,
    PricePoint,
    Question,
    join_encoded,
)
from agents.stored_input import agent_row, join_input


def view() -> MarketView:
    return MarketView.build(
        "polymarket", 1_700_000_000.25, ("Y1", "N1"),
        {"Y1": PricePoint(1_699_999_990.1, 0.1 + 0.2), "N1": PricePoint(1_699_999_991.0, 0.7)},
        {"Y1": (PricePoint(1.0, 1e-7), PricePoint(2.0, 0.333333333333333)), "N1": ()},
        {"q1": (NewsItem(5.0, "Zürich – “quotes” \\ and \u2028", "src", "s", "u"),)},
        (Question("q1", "Will it?", "Y1", "N1"),),
        {"Y1": Fundamentals(3.0, {"pe": 33.0, "cap": 3.1e12}, "yahoo")},
    )


def test_split_parts_rebuild_the_whole_input_byte_for_byte() -> None:
    v = view()
    obs = v.observation("a1", holdings={"Y1": 12.5, "CASH": 3}, cash=3.0, value=1e3 / 3,
                        initial_value=500.0, weights={"Y1": 0.9, "CASH": 0.1},
                        recent_allocations=(PastAllocation(1.5, {"Y1": 1.0}, -0.125),))
    whole, own = v.encode_parts(obs)
    assert whole == obs.canonical_json()
    row = agent_row(own, obs)
    # The past allocation is stored as the time of its fill; the fill gives back the rest.
    assert b'"recent_fills":[1.5]' in row and b"-0.125" not in row
    # Holdings and weights name assets by their index in the market part's asset list.
    assert b'"holdings_ix":[["CASH",3],[0,12.5]]' in row and b'"Y1"' not in row
    fills = [(1.5, '{"Y1":1.0}', 500.0 * 0.875), (9.0, '{"N1":1.0}', 1.0)]
    rebuilt = join_input(row.decode(), v.market_json().decode(), fills)
    assert rebuilt is not None and rebuilt.encode() == whole
    assert hashlib.sha256(rebuilt.encode()).hexdigest() == obs.sha256()
    assert b'"news"' not in row and b'"holdings"' not in v.market_json()
    with pytest.raises(ValueError, match=r"fill at 1\.5 that is not stored"):
        join_input(row.decode(), v.market_json().decode(), fills[1:])


TOKENS = ("11309400161584271476731373876890335319956127217674170329942510146471253024043",
          "23831697880848678699000781412460139409040777827883175410811092711070340723414",
          "48576218174064817816433895201673965780987823719872431465096930041587965100217")


def test_token_ids_are_stored_as_indexes_and_rebuild_byte_for_byte() -> None:
    """Issue 16, point 4: a Polymarket row keeps no 77-digit token id of its own."""
    v = MarketView.build("polymarket", 1_700_000_000.0, TOKENS,
                         {t: PricePoint(1.0, 0.5) for t in TOKENS}, {}, {}, (), {})
    obs = v.observation(
        "a1", holdings={TOKENS[2]: 272.66300189105425, TOKENS[0]: -0.0}, cash=0.0,
        value=313.47300338648824, initial_value=500.0,
        weights={TOKENS[2]: 0.3479253383167821, TOKENS[0]: 0.0, "CASH": 0.6520746616832179})
    whole, own = v.encode_parts(obs)
    row = agent_row(own, obs)
    assert not any(t.encode() in row for t in TOKENS)
    assert len(row) < 250 < len(b"".join(own.values()))
    rebuilt = join_input(row.decode(), v.market_json().decode())
    assert rebuilt is not None and rebuilt.encode() == whole == obs.canonical_json()
    assert hashlib.sha256(rebuilt.encode()).hexdigest() == obs.sha256()


def test_rows_keyed_by_asset_id_from_schema_v8_to_v10_still_read() -> None:
    """A per-agent part written before the indexes (holdings and weights by asset id)."""
    v = MarketView.build("polymarket", 1_700_000_000.0, TOKENS,
                         {t: PricePoint(1.0, 0.5) for t in TOKENS}, {}, {}, (), {})
    obs = v.observation("a1", holdings={TOKENS[1]: 2.5}, cash=1.0, value=2.25,
                        initial_value=2.0, weights={TOKENS[1]: 0.5555, "CASH": 0.4445})
    whole, own = v.encode_parts(obs)
    old = {k: b for k, b in own.items() if k != "recent_allocations"}
    old["recent_fills"] = b"[]"
    old_row = join_encoded(old)
    assert TOKENS[1].encode() in old_row
    assert join_input(old_row.decode(), v.market_json().decode()) == whole.decode()


def test_an_asset_index_outside_the_market_part_is_refused() -> None:
    market = '{"assets":["A","B"],"market":"m"}'
    assert join_input('{"agent":"a","holdings_ix":[[1,2.0]],"weights_ix":[]}', market) == (
        '{"agent":"a","assets":["A","B"],"holdings":{"B":2.0},"market":"m","weights":{}}')
    with pytest.raises(ValueError, match="asset index 2"):
        join_input('{"agent":"a","holdings_ix":[[2,2.0]]}', market)
    with pytest.raises(ValueError, match="asset index"):
        join_input('{"agent":"a","holdings_ix":[[1,2.0]]}', '{"market":"m"}')


def test_rows_from_before_the_split_are_returned_as_stored() -> None:
    assert join_input('{"agent":"a","news":{}}', None) == '{"agent":"a","news":{}}'
    assert join_input(None, None) is None


def test_parts_that_overlap_or_are_not_objects_are_refused() -> None:
    with pytest.raises(ValueError, match="share keys"):
        join_input('{"agent":"a"}', '{"agent":"b"}')
    with pytest.raises(ValueError, match="not JSON objects"):
        join_input('[1]', '{"a":1}')
    with pytest.raises(ValueError, match="not JSON"):
        join_input('{', '{"a":1}')


async def test_probe_rebuilds_a_split_input_from_a_v6_store(tmp_path: Path) -> None:
    from agents.probe import load_frozen_input
    from daemon.store.records import DecisionRecord, RoundCommit
    from daemon.store.store import Store

    v = view()
    obs = v.observation("a1", holdings={}, cash=500.0, value=500.0, initial_value=500.0,
                        weights={"CASH": 1.0})
    whole, own = v.encode_parts(obs)
    row = agent_row(own, obs)
    msha = hashlib.sha256(v.market_json()).hexdigest()
    store = await Store.open(tmp_path / "s.db")
    try:
        rc = RoundCommit()
        rc.observations[msha] = ("polymarket", v.decision_ts, v.market_json().decode())
        rc.decisions.append(DecisionRecord(
            "a1", "polymarket", v.decision_ts, v.decision_ts, "ok", input_json=row.decode(),
            input_sha256=hashlib.sha256(whole).hexdigest(), observation_sha256=msha))
        await store.commit_round(rc)
        rc2 = RoundCommit(observations=dict(rc.observations))  # the same part twice: one row
        await store.commit_round(rc2)
        assert await store.fetchall("SELECT COUNT(*) FROM observations") == [(1,)]
    finally:
        await store.close()
    frozen = load_frozen_input(str(tmp_path / "s.db"), "a1")
    assert frozen == obs and frozen.canonical_json() == whole


async def test_a_v10_store_migrates_and_reads_its_old_rows_beside_new_ones(
        tmp_path: Path) -> None:
    """Rows keyed by asset id (v10) and by asset index (v11) read back in one store."""
    import sqlite3

    from agents.stored_input import load_input
    from daemon.store.records import DecisionRecord, RoundCommit
    from daemon.store.schema import SCHEMA_VERSION
    from daemon.store.store import Store

    v = MarketView.build("polymarket", 1_700_000_000.0, TOKENS,
                         {t: PricePoint(1.0, 0.5) for t in TOKENS}, {}, {}, (), {})
    v.encode(v.observation("x", holdings={}, cash=0.0, value=0.0, initial_value=0.0,
                           weights={}))  # encodes the market-wide part once
    msha = hashlib.sha256(v.market_json()).hexdigest()
    wholes: dict[str, bytes] = {}

    async def write(agent: str, old: bool) -> None:
        obs = v.observation(agent, holdings={TOKENS[0]: 3.25}, cash=0.5, value=2.125,
                            initial_value=2.0, weights={TOKENS[0]: 0.7647, "CASH": 0.2353})
        whole, own = v.encode_parts(obs)
        if old:
            parts = {k: b for k, b in own.items() if k != "recent_allocations"}
            row = join_encoded({**parts, "recent_fills": b"[]"})
        else:
            row = agent_row(own, obs)
        wholes[agent] = whole
        rc = RoundCommit()
        rc.observations[msha] = ("polymarket", v.decision_ts, v.market_json().decode())
        rc.decisions.append(DecisionRecord(
            agent, "polymarket", v.decision_ts, v.decision_ts, "hold", input_json=row.decode(),
            input_sha256=hashlib.sha256(whole).hexdigest(), observation_sha256=msha))
        await store.commit_round(rc)

    db = tmp_path / "s.db"
    store = await Store.open(db)
    try:
        await write("old", old=True)
    finally:
        await store.close()
    con = sqlite3.connect(db)  # back to v10's tables
    con.execute("UPDATE meta SET value='10' WHERE key='schema_version'")
    con.execute("ALTER TABLE observations DROP COLUMN assets_sha256")
    con.execute("ALTER TABLE decisions DROP COLUMN reasoning")  # v12's
    con.execute("ALTER TABLE capital_rounds DROP COLUMN trailing_json")  # v16's
    for table in ("decisions", "llm_calls", "fills", "market_events", "equity", "resolutions",
                  "runs", "capital_rounds", "capital_submissions"):
        con.execute(f"ALTER TABLE {table} DROP COLUMN chain")  # v13's (runs: v14's; capital: v15's)
    con.execute("DROP TABLE capital_round_states")  # v15's
    con.execute("DROP TABLE season")
    con.execute("CREATE INDEX fills_agent ON fills(agent, market, ts)")
    con.commit()
    con.close()
    store = await Store.open(db)
    try:
        assert await store.schema_version() == SCHEMA_VERSION == 17
        await write("new", old=False)
    finally:
        await store.close()
    con = sqlite3.connect(db)
    try:
        rows = dict(con.execute("SELECT agent, input_json FROM decisions").fetchall())
        assert TOKENS[0] in rows["old"] and TOKENS[0] not in rows["new"]
        assert con.execute("SELECT name FROM sqlite_master WHERE name='fills_agent'"
                           ).fetchone() is None
        for agent, whole in wholes.items():
            assert load_input(con, agent, "polymarket", v.decision_ts) == whole.decode()
    finally:
        con.close()
