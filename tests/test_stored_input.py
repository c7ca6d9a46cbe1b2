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
    fills = [(1.5, '{"Y1":1.0}', 500.0 * 0.875), (9.0, '{"N1":1.0}', 1.0)]
    rebuilt = join_input(row.decode(), v.market_json().decode(), fills)
    assert rebuilt is not None and rebuilt.encode() == whole
    assert hashlib.sha256(rebuilt.encode()).hexdigest() == obs.sha256()
    assert b'"news"' not in row and b'"holdings"' not in v.market_json()
    with pytest.raises(ValueError, match=r"fill at 1\.5 that is not stored"):
        join_input(row.decode(), v.market_json().decode(), fills[1:])


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
    from daemon.store import DecisionRecord, RoundCommit, Store

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
