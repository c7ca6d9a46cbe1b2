"""Only regular-session prices mark equities: extended hours and non-equity quotes are data only."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.core.events import NonMarkingPrice, PriceEvent, decode_event, encode_event
from daemon.store.reports import leaderboard
from daemon.timing.nyse import get_nyse_calendar
from feeds.alpaca import AlpacaSettings, AlpacaStreamAdapter
from feeds.finnhub import FinnhubSettings, FinnhubStreamAdapter
from feeds.yahoo import YahooSettings, YahooStreamAdapter
from scoring.board.text import to_json
from tests.fakes.yahoo_server import pricing_frame
from tests.recordings import TINY_CONFIG, make_recording

T_MS = 1_788_377_229_000


@pytest.mark.parametrize(("hours", "reason"), [(0, "pre-market"), (2, "post-market"),
                                                (3, "extended hours")])
def test_yahoo_extended_hours_snapshot_is_data_not_a_mark(hours: int, reason: str) -> None:
    ad = YahooStreamAdapter(YahooSettings())
    res = ad.decode(pricing_frame("AAPL", 190.5, T_MS, market_hours=hours), T_MS / 1000)
    (ev,) = res.events
    assert type(ev) is NonMarkingPrice and not ev.marks and ev.reason == reason
    assert (ev.asset, ev.price, ev.ts) == ("AAPL", 190.5, T_MS / 1000)
    assert decode_event(encode_event(ev)) == ev  # recorded and replayed as it is
    marks = YahooStreamAdapter(YahooSettings(extended_hours_marks=True))
    (ev,) = marks.decode(pricing_frame("AAPL", 190.5, T_MS, market_hours=hours), 0.0).events
    assert type(ev) is PriceEvent and ev.marks  # ...unless the config asks


def test_yahoo_regular_equity_marks_and_non_equity_quotes_do_not() -> None:
    ad = YahooStreamAdapter(YahooSettings())
    (ev,) = ad.decode(pricing_frame("AAPL", 190.5, T_MS), 0.0).events
    assert type(ev) is PriceEvent and ev.marks
    (etf,) = ad.decode(pricing_frame("SPY", 500.0, T_MS, quote_type=20), 0.0).events
    assert type(etf) is PriceEvent
    (btc,) = ad.decode(pricing_frame("BTC-USD", 9e4, T_MS, quote_type=41), 0.0).events
    assert type(btc) is NonMarkingPrice and btc.reason == "quote type 41"
    crypto = YahooStreamAdapter(YahooSettings(mark_quote_types=(8, 41)))
    assert type(crypto.decode(pricing_frame("BTC-USD", 9e4, T_MS, quote_type=41), 0.0)
                .events[0]) is PriceEvent


async def test_one_after_hours_print_does_not_change_the_report(tmp_path: Path) -> None:
    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY_CONFIG)
    cfg = load_config(cfg_path)
    # Thu 2026-11-05 21:30 UTC = 16:30 New York (post-market; EST, the close is 21:00 UTC)
    t = datetime(2026, 11, 5, 21, 30, tzinfo=UTC).timestamp()
    frame = pricing_frame("AAPL", 250.0, int(t * 1000), market_hours=2)
    (print_,) = YahooStreamAdapter(YahooSettings()).decode(frame, t + 0.2).events
    make_recording(tmp_path / "plain.jsonl.gz")
    make_recording(tmp_path / "print.jsonl.gz", extra=[print_])
    await replay(tmp_path / "plain.jsonl.gz", cfg, tmp_path / "plain.db", progress=False)
    await replay(tmp_path / "print.jsonl.gz", cfg, tmp_path / "print.db", progress=False)
    plain = json.loads(to_json(leaderboard(tmp_path / "plain.db")))
    printed = json.loads(to_json(leaderboard(tmp_path / "print.db")))
    assert printed["rows"] == plain["rows"]
    assert printed == plain
    # The print is kept as data, with its asset and price, never as a 'price' (mark) row.
    con = sqlite3.connect(tmp_path / "print.db")
    rows = con.execute("SELECT kind, market, asset, price FROM market_events"
                       " WHERE kind != 'price' AND asset = 'AAPL'").fetchall()
    con.close()
    assert rows == [("NonMarkingPrice", "equity", "AAPL", 250.0)]


# Wed 2026-09-16 (EDT): the session is 13:30-20:00 UTC.
OPEN_T = datetime(2026, 9, 16, 15, 0, tzinfo=UTC).timestamp()
CLOSE_PRINT_T = datetime(2026, 9, 16, 20, 0, 0, 300_000, tzinfo=UTC).timestamp()
POST_T = datetime(2026, 9, 16, 20, 30, tzinfo=UTC).timestamp()
PRE_T = datetime(2026, 9, 16, 12, 0, tzinfo=UTC).timestamp()


def _rfc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_alpaca_trades_outside_the_regular_session_are_data_only() -> None:
    is_open = get_nyse_calendar().is_open
    ad = AlpacaStreamAdapter(AlpacaSettings(), "k", "s", is_open=is_open)
    frame = json.dumps([{"T": "t", "S": "AAPL", "p": 190.0 + i, "s": 1, "t": _rfc(t)}
                        for i, t in enumerate((PRE_T, OPEN_T, CLOSE_PRINT_T, POST_T))])
    evs = ad.decode(frame, POST_T + 1).events
    assert [type(e).__name__ for e in evs] == [
        "NonMarkingPrice", "PriceEvent", "PriceEvent", "NonMarkingPrice"]
    assert evs[0].reason == "outside regular session"  # type: ignore[attr-defined]
    marks = AlpacaStreamAdapter(AlpacaSettings(extended_hours_marks=True), "k", "s",
                                is_open=is_open)
    assert all(type(e) is PriceEvent for e in marks.decode(frame, POST_T + 1).events)


def test_finnhub_trades_outside_the_regular_session_are_data_only() -> None:
    ad = FinnhubStreamAdapter(FinnhubSettings(), "tok", is_open=get_nyse_calendar().is_open)
    frame = json.dumps({"type": "trade", "data": [
        {"p": 190.0, "s": "AAPL", "t": int(OPEN_T * 1000), "v": 1},
        {"p": 191.0, "s": "AAPL", "t": int(POST_T * 1000), "v": 1},
    ]})
    evs = ad.decode(frame, POST_T + 1).events
    assert [type(e) for e in evs] == [PriceEvent, NonMarkingPrice]


async def test_a_print_after_the_close_mark_does_not_change_the_report(tmp_path: Path) -> None:
    """The report prices each mark at the last price at or before it (a closing-auction print
    just after the close, at the close's price, changes nothing)."""
    from daemon.timing.nyse import get_nyse_calendar as nyse
    from feeds.recording import iter_events

    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY_CONFIG)
    cfg = load_config(cfg_path)
    make_recording(tmp_path / "plain.jsonl.gz")
    close = nyse().session_bounds(datetime(2026, 11, 5, tzinfo=UTC).date())[1].timestamp()
    last = [ev for _, ev in iter_events(tmp_path / "plain.jsonl.gz")
            if type(ev) is PriceEvent and ev.asset == "AAPL" and ev.ts <= close][-1]
    auction = PriceEvent(ts=close + 0.3, recv_ts=close + 0.4, market="equity", asset="AAPL",
                         price=last.price)
    make_recording(tmp_path / "auction.jsonl.gz", extra=[auction])
    await replay(tmp_path / "plain.jsonl.gz", cfg, tmp_path / "plain.db", progress=False)
    await replay(tmp_path / "auction.jsonl.gz", cfg, tmp_path / "auction.db", progress=False)
    plain = json.loads(to_json(leaderboard(tmp_path / "plain.db")))
    auctioned = json.loads(to_json(leaderboard(tmp_path / "auction.db")))
    assert auctioned == plain
