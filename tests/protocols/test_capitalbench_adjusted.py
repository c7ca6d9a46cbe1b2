"""Live CapitalBench rounds with ``adjusted_closes``: the trailing table from Yahoo's
dividend-adjusted closes at the freeze, and the start and end closes fetched together after the
end session, on one post-window basis (issue 29; the paper's Tiingo adjusted closes)."""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from agents.capitalbench.rounds import plan_round
from agents.capitalbench.runner import CapitalRunner
from daemon.config.settings import parse_config
from daemon.market.state import MarketState
from daemon.store.store import Store
from tests.fakes.yahoo_server import FakeYahoo, chart_payload
from tests.helpers import nyse_sessions
from tests.protocols.test_capitalbench_checks import _data

FREEZE = datetime(2026, 10, 19, 13, 30, tzinfo=UTC).timestamp()
#: TLT's dividends: ex-dates (one before the freeze, one inside the round's window) and amounts.
DIVIDENDS = {date(2026, 9, 1): 0.30, date(2026, 10, 22): 0.31}


SESSIONS = nyse_sessions(date(2025, 9, 1), date(2026, 11, 6))


def _quoted(k: int) -> dict[date, float]:
    return {d: 80.0 + 10 * k + 3 * math.sin(i / (5 + k)) + 0.01 * i
            for i, (d, _, _) in enumerate(SESSIONS)}


def _adjust(quoted: dict[date, float], dividends: dict[date, float]) -> dict[date, float]:
    """Yahoo's multiplicative adjustment, every dividend as of the last session served."""
    out = dict(quoted)
    for ex, amount in dividends.items():
        before = max(d for d in quoted if d < ex)
        f = 1 - amount / quoted[before]
        out = {d: p * f if d < ex else p for d, p in out.items()}
    return out


QUOTED = {a: _quoted(k) for k, a in enumerate(("QQQ", "TLT", "SPY"))}
ADJUSTED = {a: _adjust(q, DIVIDENDS if a == "TLT" else {}) for a, q in QUOTED.items()}


@pytest.fixture
async def yahoo() -> Any:
    fake = FakeYahoo()
    await fake.start()
    for a, q in QUOTED.items():
        fake.charts[a] = chart_payload(a, None, 0, [(int(o), q[d]) for d, o, _ in SESSIONS],
                                       adjclose=[ADJUSTED[a][d] for d, _, _ in SESSIONS])
    yield fake
    await fake.stop()


async def _runner(tmp_path: Path, yahoo: FakeYahoo, adjusted: bool = True
                  ) -> tuple[CapitalRunner, Store]:
    data = _data(tmp_path)
    data["capitalbench"]["adjusted_closes"] = adjusted
    data["sources"] = {"equity": {"yahoo": {"chart_url": yahoo.chart_url}}}
    store = await Store.open(tmp_path / "cb.db")
    state = MarketState({"equity": object()})  # type: ignore[dict-item]
    host = SimpleNamespace(config=parse_config(data), clock=None, store=store, state=state)
    return CapitalRunner(host), store  # type: ignore[arg-type]


def _trailing(closes: dict[date, float], asof: date, days: int) -> float:
    now = max((d, p) for d, p in closes.items() if d <= asof)[1]
    then = max((d, p) for d, p in closes.items() if d <= asof - timedelta(days=days))[1]
    return now / then - 1


async def test_the_trailing_table_uses_adjusted_closes(yahoo: FakeYahoo, tmp_path: Path) -> None:
    runner, store = await _runner(tmp_path, yahoo)
    try:
        plan = plan_round("weekly", FREEZE, 3600.0)
        rdir = runner.freeze(plan, await runner.trailing_closes(plan))
    finally:
        await store.close()
    csv = (rdir / "market_data" / "universe_trailing_returns.csv").read_text().splitlines()
    rows = {line.split(",")[0]: line.split(",") for line in csv[1:]}
    head = csv[0].split(",")
    asof = date(2026, 10, 18)
    for a in ("QQQ", "TLT"):
        for label, days in (("7d", 7), ("30d", 30), ("6m", 182), ("1y", 365)):
            got = float(rows[a][head.index(f"return_{label}")])
            assert got == pytest.approx(_trailing(ADJUSTED[a], asof, days), abs=1e-6), (a, label)
    # TLT's September dividend is in its 1 y and 6 m returns, which the quoted closes miss.
    assert float(rows["TLT"][head.index("return_1y")]) > _trailing(QUOTED["TLT"], asof, 365)
    manifest = yaml.safe_load((rdir / "manifest.yaml").read_text())
    assert manifest["price_basis"].startswith("dividend-adjusted daily close")


async def _started_round(runner: CapitalRunner, store: Store) -> Any:
    """Freeze the test's round and store it as started with provisional start closes."""
    plan = plan_round("weekly", FREEZE, 3600.0)
    rdir = runner.freeze(plan)
    provisional = {"QQQ": 1.0, "TLT": 1.0, "SPY": 1.0}  # as stored at the start session
    await store.execute_atomic([(
        "INSERT INTO capital_rounds(round_id, track, frozen_ts, deadline_ts, start_day,"
        " start_ts, end_day, end_ts, dir, manifest_json, hashes_sha256, status,"
        " start_prices_json) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (plan.round_id, "weekly", plan.freeze_ts, plan.deadline_ts,
         plan.start_day.isoformat(), plan.start_ts, plan.end_day.isoformat(), plan.end_ts,
         str(rdir), json.dumps({"benchmark": "SPY"}), "0" * 64, "started",
         json.dumps(provisional)))])
    return plan


async def test_start_and_end_closes_are_fetched_together_after_the_window(
        yahoo: FakeYahoo, tmp_path: Path) -> None:
    runner, store = await _runner(tmp_path, yahoo)
    try:
        plan = await _started_round(runner, store)
        assert plan.start_day < date(2026, 10, 22) <= plan.end_day  # a dividend inside
        yahoo.chart_fail = [500] * 3  # the first fetch fails: the round waits
        await runner.on_mark(plan.end_ts + 60)
        row = await store.fetchall("SELECT status, end_prices_json FROM capital_rounds")
        assert row == [("started", None)]
        yahoo.chart_fail = []
        await runner.on_mark(plan.end_ts + 86_400)
        (status, sp, ep), = await store.fetchall(
            "SELECT status, start_prices_json, end_prices_json FROM capital_rounds")
    finally:
        await store.close()
    assert status == "resolved"
    start, end = json.loads(sp), json.loads(ep)
    for a in ("QQQ", "TLT", "SPY"):
        assert start[a] == pytest.approx(ADJUSTED[a][plan.start_day])
        assert end[a] == pytest.approx(ADJUSTED[a][plan.end_day])
    # TLT's return includes the dividend: more than the quoted closes give.
    assert end["TLT"] / start["TLT"] > QUOTED["TLT"][plan.end_day] / QUOTED["TLT"][plan.start_day]


async def test_a_fetch_without_the_end_session_leaves_the_round_unresolved(
        yahoo: FakeYahoo, tmp_path: Path) -> None:
    """The paper's rule: rows matching the start and end dates, or no scoring yet (an asset
    left out would drop from the oracle and its holders from the scores)."""
    runner, store = await _runner(tmp_path, yahoo)
    full = yahoo.charts["QQQ"]
    try:
        plan = await _started_round(runner, store)
        kept = [(d, o) for d, o, _ in SESSIONS if d != plan.end_day]
        yahoo.charts["QQQ"] = chart_payload("QQQ", None, 0, [(int(o), QUOTED["QQQ"][d])
                                                             for d, o in kept],
                                            adjclose=[ADJUSTED["QQQ"][d] for d, _ in kept])
        await runner.on_mark(plan.end_ts + 60)
        assert await store.fetchall("SELECT status, end_prices_json FROM capital_rounds") == [
            ("started", None)]
        yahoo.charts["QQQ"] = full  # the row is there at the next daily mark
        await runner.on_mark(plan.end_ts + 86_400)
        (status, ep), = await store.fetchall("SELECT status, end_prices_json FROM capital_rounds")
    finally:
        await store.close()
    assert status == "resolved"
    assert json.loads(ep)["QQQ"] == pytest.approx(ADJUSTED["QQQ"][plan.end_day])


async def test_without_the_setting_nothing_is_fetched(yahoo: FakeYahoo, tmp_path: Path) -> None:
    runner, store = await _runner(tmp_path, yahoo, adjusted=False)
    try:
        plan = plan_round("weekly", FREEZE, 3600.0)
        assert await runner.trailing_closes(plan) is None
        manifest = yaml.safe_load((runner.freeze(plan) / "manifest.yaml").read_text())
    finally:
        await store.close()
    assert manifest["price_basis"] == "daily close (last regular-session price)"
    assert yahoo.chart_requests == []
