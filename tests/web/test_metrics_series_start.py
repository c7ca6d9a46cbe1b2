"""Issue 27, point 9: the live /metrics figures start an agent's series as the report does."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from daemon.store.reports import leaderboard
from daemon.web.metrics import PerformanceCache
from tests.scoring.test_leaderboard import build_store, rows_by_agent

PRICES = {"A": [100.0, 110.0, 99.0, 108.9, 104.0, 112.0], "B": [50.0, 51.0, 49.0, 52.0, 53.0,
                                                                  50.0]}
PLANS = {
    "late": {1: {"A": 1.0}},  # marks from day 0, first fill at day 1: the first mark starts
    "early": {0: {"A": 0.5, "B": 0.5}},  # its fill is moved before day 0's mark (below)
}


class _Store:
    """The store surface PerformanceCache reads: ``fetchall`` on a SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        con = sqlite3.connect(self.path)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()


def _sharpe(values: list[float]) -> float:
    """Return the annualised Sharpe (rf 0, N 252, ddof 1) of a value series, by hand."""
    v = np.asarray(values)
    r = v[1:] / v[:-1] - 1.0
    return float(r.mean() / r.std(ddof=1) * math.sqrt(252))


def test_metrics_and_report_agree_on_the_series_start(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    marks = build_store(db, PRICES, PLANS)
    con = sqlite3.connect(db)
    con.execute("UPDATE fills SET ts = ts - 3600 WHERE agent = 'early'")  # an hour before
    con.commit()
    con.close()
    engine = SimpleNamespace(
        store=_Store(db), books={"equity": SimpleNamespace(initial_cash=1000.0)},
        config=SimpleNamespace(markets=SimpleNamespace(
            equity=SimpleNamespace(risk_free_rate=0.0, periods_per_year=252))))
    cache = PerformanceCache(engine)  # type: ignore[arg-type]
    asyncio.run(cache.refresh())
    rows = rows_by_agent(leaderboard(db))
    con = sqlite3.connect(db)
    stored = {a: [v for (v,) in con.execute(
        "SELECT value FROM equity WHERE agent = ? ORDER BY ts", (a,))] for a in PLANS}
    con.close()
    assert len(marks) == 6
    # late: its first mark (day 0, 1000 in cash) comes before its first fill (day 1): the six
    # marks are the series, 5 periods; the old rule prepended 1000 and counted 6.
    live = cache.summary("equity", "late")
    assert live.n_periods == rows["late"]["n_periods"] == 5
    assert live.sharpe == pytest.approx(rows["late"]["sharpe"], rel=1e-10)  # the report rounds
    assert live.sharpe == pytest.approx(_sharpe(stored["late"]), rel=1e-12)
    # early: its first fill is an hour before its first mark: the initial cash starts the
    # series at that fill (a real period to the first mark), 6 periods in both.
    live = cache.summary("equity", "early")
    assert live.n_periods == rows["early"]["n_periods"] == 6
    assert live.sharpe == pytest.approx(rows["early"]["sharpe"], rel=1e-10)
    assert live.sharpe == pytest.approx(_sharpe([1000.0, *stored["early"]]), rel=1e-12)
