"""Trades and positions rebuilt from stored fills (daemon.web.positions.replay_trades)."""

from __future__ import annotations

import pytest

from daemon.web.positions import replay_trades


def test_prices_fees_and_realized_pnl_come_back_from_the_fills() -> None:
    # 1000 cash; buy 10 A at 50 and 20 B at 10 (fee 1); A rises to 60, sell 5 A (fee 0.3);
    # then B sold out at 12 (fee 0.24): its price comes from the cash the fill moved.
    fills = [
        (1.0, {"A": 10.0, "B": 20.0}, {"A": 500 / 999, "B": 200 / 999, "CASH": 299 / 999},
         1000.0, 999.0, 1.0),
        (2.0, {"A": -5.0}, {"A": 300 / 1138.7, "B": 200 / 1138.7, "CASH": 638.7 / 1138.7},
         1139.0, 1138.7, 0.3),
        (3.0, {"B": -20.0}, {"A": 300 / 1178.46, "CASH": 878.46 / 1178.46},
         1178.7, 1178.46, 0.24),
    ]
    trades, led = replay_trades(fills, [])
    by = [(t["ts"], t["asset"], t["side"], t["units"]) for t in trades]
    assert by == [(1.0, "A", "buy", 10.0), (1.0, "B", "buy", 20.0), (2.0, "A", "sell", 5.0),
                  (3.0, "B", "sell", 20.0)]
    assert [t["price"] for t in trades] == pytest.approx([50.0, 10.0, 60.0, 12.0])
    assert [t["fee"] for t in trades] == pytest.approx([500 / 700, 200 / 700, 0.3, 0.24])
    assert trades[0]["realized_pnl"] is None and trades[1]["realized_pnl"] is None
    assert trades[2]["realized_pnl"] == pytest.approx((60 - 50) * 5 - 0.3)
    assert trades[3]["realized_pnl"] == pytest.approx((12 - 10) * 20 - 0.24)
    assert led.units == {"A": 5.0, "B": 0.0} and led.avg("A") == pytest.approx(50.0)
    assert led.avg("B") is None


def test_a_resolution_closes_the_tokens_held_at_their_payout() -> None:
    fills = [(1.0, {"Y": 100.0}, {"Y": 40 / 100, "CASH": 60 / 100}, 100.0, 100.0, 0.0)]
    trades, led = replay_trades(fills, [(5.0, {"Y": 1.0, "N": 0.0})])
    assert trades[-1] == {"ts": 5.0, "asset": "Y", "side": "resolved", "units": 100.0,
                          "price": 1.0, "fee": 0.0, "realized_pnl": pytest.approx(60.0)}
    assert led.units["Y"] == 0.0 and led.cash == pytest.approx(160.0)
