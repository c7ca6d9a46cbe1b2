"""AlphaForgeBench strategies see the recorded OHLCV of a history recording (issue 29, point 1)."""

from __future__ import annotations

import asyncio
import json
import math
import re
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import pytest
import structlog

from agents.alphaforgebench.agent import PRICE_CLOSES, PRICE_OHLCV, bars_of
from agents.base import DailyBar, Observation
from daemon.app.cli import main
from daemon.core.events import BarEvent
from daemon.market.bars import DailyBars
from tests.agents.test_llm_agent import DAY, T, equity_obs
from tests.fakes.yahoo_server import FakeYahoo
from tests.feeds.test_history_ohlcv import (
    BAD_VOLUME,
    INVERTED,
    MISSING,
    SESSIONS,
    aapl_rows,
    ohlcv_payload,
    tsla_rows,
)
from tests.feeds.test_history_recording import END, START
from tests.protocols.test_alphaforge import StrategyModel

ROOT = Path(__file__).resolve().parents[2]

#: Reports the current and the previous row of its frame through the error it raises.
SEE = """
def generate_signal(df):
    r, p = df.iloc[-1], df.iloc[-2]
    seen = [r["open"], r["high"], r["low"], r["close"], r["volume"], p["high"], p["low"],
            p["volume"]]
    raise ValueError("SEEN " + repr([round(float(x), 4) for x in seen]))
"""


def _seen(text: str) -> list[float]:
    m = re.search(r"SEEN \[([^\]]*)\]", text)
    assert m is not None, text
    return [float(x) for x in m.group(1).split(", ")]


async def _record(tmp_path: Path) -> Path:
    """Build the OHLCV recording of TSLA and AAPL from the fake Yahoo chart history."""
    fake = FakeYahoo()
    await fake.start()
    fake.charts["TSLA"] = ohlcv_payload("TSLA", tsla_rows())
    fake.charts["AAPL"] = ohlcv_payload("AAPL", aapl_rows())
    try:
        cfg_path = tmp_path / "y.toml"
        cfg_path.write_text(f'[sources.equity.yahoo]\nchart_url = "{fake.chart_url}"\n')
        rec = tmp_path / "ohlcv.jsonl.gz"
        rc = await asyncio.to_thread(main, [
            "build-recording", "--tickers", "TSLA,AAPL", "--start", str(START), "--end",
            str(END), "--out", str(rec), "--config", str(cfg_path)])
        assert rc == 0
    finally:
        await fake.stop()
    return rec


#: Invested on a wide day (high - low above 10), out otherwise (NaN: out).
WIDE = """
def generate_signal(df):
    r = df.iloc[-1]
    if r["high"] - r["low"] > 10:
        return {"signal": 1, "position": 1.0}
    return {"signal": -1, "position": 0.0}
"""


async def test_the_instability_backtest_runs_on_the_recorded_bars(tmp_path: Path) -> None:
    """``alphaforge-instability``'s frozen frames carry the recorded OHLCV: a strategy on the
    day's range trades TSLA's 20-wide bars and never AAPL's 5-wide ones (closes only: never)."""
    from agents.alphaforgebench.instability import execute, frozen_bars
    from agents.alphaforgebench.sandbox import SandboxLimits

    rec = await _record(tmp_path)
    tsla, aapl = frozen_bars(rec, ["TSLA"]), frozen_bars(rec, ["AAPL"])
    assert set(frozen_bars(rec, ["TSLA", "AAPL"])) == {"TSLA"}  # AAPL misses a step
    assert tsla["TSLA"]["high"] == [r[1] for r in tsla_rows().values()]
    assert aapl["AAPL"]["volume"] == [None if d in (INVERTED, BAD_VOLUME) else r[4]
                                      for d, r in aapl_rows().items()]
    limits = SandboxLimits(cpu_s=30, timeout_s=10)
    assert (await execute(WIDE, tsla, 300, limits))["signals"] == {"TSLA": [1] * len(SESSIONS)}
    assert (await execute(WIDE, aapl, 300, limits))["signals"] == {
        "AAPL": [-1] * (len(SESSIONS) - 1)}
    closes_only = {"TSLA": {k: tsla["TSLA"][k] for k in ("ts", "close")}}
    assert (await execute(WIDE, closes_only, 300, limits))["signals"] == {
        "TSLA": [-1] * len(SESSIONS)}


async def test_a_strategy_sees_the_recorded_high_low_and_volume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recorded from the fake Yahoo chart history and replayed at each close: every frame's
    rows are the recorded bars (a refused bar and a missing day: NaN, never invented)."""
    rec = await _record(tmp_path)

    from daemon.app.replay import replay
    from daemon.config.settings import parse_config

    data = tomllib.loads((ROOT / "examples" / "alphaforgebench.toml").read_text())
    data["markets"]["equity"].update(assets=["TSLA", "AAPL"], stale_after="2d")
    data["markets"]["equity"]["schedule"]["times"] = ["close"]  # the bar is complete
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    async with StrategyModel([SEE]) as model:
        data["agents"][0].update(api_base=model.api_base, timeout=10)
        data["agents"][0]["strategy"].update(regenerate_every="0", timeout="5s")
        await replay(rec, parse_config(data), tmp_path / "af.db", progress=False)
        prompts = model.prompts()
    assert PRICE_OHLCV.split("\n")[0] in prompts[0] and PRICE_CLOSES not in prompts[0]
    con = sqlite3.connect(tmp_path / "af.db")
    rows = con.execute("SELECT scheduled_ts, raw_output FROM decisions"
                       " WHERE agent = 'alphaforge' ORDER BY scheduled_ts").fetchall()
    con.close()
    closes = {c: d for d, _, c in SESSIONS}
    by_day = {closes[ts]: json.loads(raw)["failed"] for ts, raw in rows if ts in closes}
    assert sorted(by_day) == [d for d, _, _ in SESSIONS]
    nan = math.nan
    tsla, aapl = tsla_rows(), aapl_rows()
    days = [d for d, _, _ in SESSIONS]
    for i, day in enumerate(days[1:], start=1):
        o, h, lo, c, v = tsla[day]
        _, ph, pl, _, pv = tsla[days[i - 1]]
        assert _seen(by_day[day]["TSLA"]) == pytest.approx([o, h, lo, c, v, ph, pl, pv])
        if day == MISSING:  # no AAPL print that day: its last bar is still the current one
            assert _seen(by_day[day]["AAPL"]) == _seen(by_day[days[i - 1]]["AAPL"])
            continue
        prev = days[i - 2] if days[i - 1] == MISSING else days[i - 1]
        o, h, lo, c, v = aapl[day]
        _, ph, pl, _, pv = aapl[prev]
        if day in (INVERTED, BAD_VOLUME):  # refused bar: the price now, no volume
            o, h, lo, v = c, c, c, nan
        if prev in (INVERTED, BAD_VOLUME):
            ph, pl, pv = nan, nan, nan
        assert _seen(by_day[day]["AAPL"]) == pytest.approx([o, h, lo, c, v, ph, pl, pv],
                                                           nan_ok=True), day


def _with_bars(bars: dict[str, tuple[DailyBar, ...]]) -> Observation:
    import dataclasses

    return dataclasses.replace(equity_obs(), bars=bars)


def _ny(ts: float) -> str:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    return datetime.fromtimestamp(ts, ZoneInfo("America/New_York")).date().isoformat()


def test_bars_of_takes_recorded_bars_and_marks_unknowns() -> None:
    obs = equity_obs()  # AAPL closes 100..104 at T-5d..T-1d, price 180 at T-60
    hist = obs.history["AAPL"]
    recorded = tuple(DailyBar(p.ts, _ny(p.ts), p.price - 1, p.price + 2, p.price - 3, p.price,
                              1000.0 + k) for k, p in enumerate(hist) if k != 3)
    bars = bars_of(_with_bars({"AAPL": recorded}), lookback=4)
    a = bars["AAPL"]
    assert a["close"] == [102.0, 103.0, 104.0, 180.0]
    assert a["high"] == [104.0, None, 106.0, 180.0]  # day 3 has no bar; today is partial
    assert a["low"] == [99.0, None, 101.0, 180.0]
    assert a["volume"] == [1002.0, None, 1004.0, None]
    assert a["open"] == [101.0, None, 103.0, 180.0]
    assert "high" not in bars["MSFT"]  # no bars for it: the closes only, as before
    assert bars_of(equity_obs(), lookback=4)["AAPL"] == {
        "ts": [p.ts for p in hist[-3:]] + [T - 60], "close": [102.0, 103.0, 104.0, 180.0]}


def test_observation_carries_bars_only_when_recorded() -> None:
    plain = equity_obs()
    assert "bars" not in plain.to_dict()
    bar = DailyBar(T - DAY, "2026-01-01", None, 5.0, 4.0, 4.5, None)
    obs = _with_bars({"AAPL": (bar,)})
    assert Observation.from_dict(obs.to_dict()) == obs
    assert obs.sha256() != plain.sha256()


def _bar(day: str, ts: float, **kw: Any) -> BarEvent:
    vals: dict[str, Any] = {"open": 10.0, "high": 12.0, "low": 9.0, "close": 11.0,
                            "volume": 100.0, **kw}
    return BarEvent(ts=ts, recv_ts=ts, asset="AAPL", day=day, **vals)


@pytest.mark.parametrize(("kw", "why"), [
    ({"high": 8.0}, "high 8 is below low 9"),
    ({"low": math.nan}, "is not a positive number"),
    ({"close": 13.0}, "close 13 is outside the range 9..12"),
    ({"volume": -1.0}, "volume -1.0 is not a non-negative number"),
])
def test_a_bad_bar_is_one_log_line_and_never_kept(kw: dict[str, Any], why: str) -> None:
    kept = DailyBars(5, lambda m, a: a == "AAPL")
    kept.on_bar(_bar("2026-01-02", 2 * DAY))
    with structlog.testing.capture_logs() as logs:
        kept.on_bar(_bar("2026-01-05", 5 * DAY, **kw))
        kept.on_bar(_bar("2026-01-01", 1 * DAY))  # older than the last kept: out of order
    assert [b.day for b in kept.bars["equity"]["AAPL"]] == ["2026-01-02"]
    assert len(logs) == 2 and why in logs[0]["why"] and "not after" in logs[1]["why"]
    kept.on_bar(BarEvent(ts=6 * DAY, asset="MSFT", day="2026-01-06", open=1.0, high=1.0,
                         low=1.0, close=1.0))
    assert "MSFT" not in kept.bars["equity"]  # not in the universe
    view = kept.view("equity", ("AAPL",), 2 * DAY - 1)
    assert view == {}  # not complete by then: no look-ahead
    assert kept.view("equity", ("AAPL",), 2 * DAY)["AAPL"][0].high == 12.0
    again = DailyBars(5, lambda m, a: True)
    again.restore(json.loads(json.dumps(kept.state())))
    assert again.bars == kept.bars


def test_a_replay_without_bars_keeps_its_checkpoint_shape() -> None:
    from daemon.market.state import MarketState

    st = MarketState({})
    assert "bars" not in st.state()
