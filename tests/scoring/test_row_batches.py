"""Issue 27, point 1: the per-row figures computed together equal the per-figure functions.

``summary_parts`` computes each summary figure with the mean, standard deviation, drawdowns and
growth of the returns computed once; every figure must still be its own function's bit for bit
(``repr`` equal, NaN where it gave NaN) on fixed data with the edge cases: no value, one value,
a zero, NaN, a constant series, a total loss. ``_labels_at`` looks every regime label up with
one ``searchsorted``; it must equal the lookup per time it replaced. The rolling-k figures
compounded once equal the one-figure functions. numpy's sums, means, variances and products
repeated on Python lists (``scoring.stats.small_sums``), and the rows' benchmark-relative
figures computed from them, equal numpy's bit for bit.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from scoring.board.figures import REGIME_UNKNOWN, _labels_at, _relative
from scoring.stats.benchmarks import (
    ROLLING_KS,
    rolling_k_delta,
    rolling_k_figures,
    rolling_k_return,
)
from scoring.stats.metrics import (
    annualised_return,
    calmar,
    cumulative_return,
    drawdown_series,
    flip_rate,
    max_drawdown,
    mean_daily_turnover,
    mean_turnover,
    sharpe,
    simple_returns,
    sortino,
    sortino_stockbench,
    summarise,
    summary_parts,
    turnover,
    volatility,
    win_rate,
)
from scoring.stats.small_sums import np_mean, np_prod, np_std, np_sum, np_var


def _mean_turnover_loop(seq: list[dict[str, Any]]) -> float:
    """Return the mean turnover as first computed: one :func:`turnover` per step."""
    if len(seq) < 2:
        return math.nan
    return float(np.mean([turnover(a, b) for a, b in pairwise(seq)]))


def _reference(values: list[float], n: int, rf: float, weights: list[dict[str, float]],
               traded: list[float] | None) -> dict[str, Any]:
    """Return the summary as summarise first computed it: one function per figure."""
    r = simple_returns(values)
    return {
        "cumulative_return": cumulative_return(values),
        "annualised_return": annualised_return(r, n),
        "volatility": volatility(r, n, annualise=True),
        "sharpe": sharpe(r, n, rf),
        "sortino": sortino(r, n, rf),
        "sortino_stockbench": sortino_stockbench(r, n, rf),
        "max_drawdown": max_drawdown(values),
        "calmar": calmar(r, values, n),
        "win_rate": win_rate(r),
        "mean_turnover": mean_daily_turnover(traded, values) if traded is not None else math.nan,
        "target_turnover": _mean_turnover_loop(weights),
        "flip_rate": flip_rate(weights),
        "n_periods": int(r.size),
    }


def _check(values: list[float], n: int = 252, rf: float = 0.0,
           weights: list[dict[str, float]] | None = None,
           traded: list[float] | None = None) -> None:
    w = weights or []
    perf, r, dd = summary_parts(values, n, rf, w, traded)
    want = _reference(values, n, rf, w, traded)
    got = {k: getattr(perf, k) for k in want}
    assert repr(got) == repr(want), values
    assert repr(summarise(values, n, rf, w, traded)) == repr(perf)
    assert repr(r.tolist()) == repr(simple_returns(values).tolist())
    assert repr(dd.tolist()) == repr(drawdown_series(values).tolist())
    assert list(perf.to_dict()) == list(want)  # the same keys in the same order
    assert all(v is None or v == v for v in perf.to_dict().values())  # NaN -> None


@pytest.mark.parametrize("seed", range(30))
def test_summary_parts_equal_the_functions_on_random_series(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(0, 120))
    values = (1000.0 * np.cumprod(1.0 + rng.normal(0.0, 0.02, size))).tolist()
    weights = [{"A": float(x), "B": 1.0 - float(x)} for x in rng.random(int(rng.integers(0, 6)))]
    traded = [float(x) for x in rng.random(3) * 100.0] if seed % 2 else None
    _check(values, int(rng.choice([252, 365, 12])), float(rng.choice([0.0, 0.04, -0.01])),
           weights, traded)


def test_summary_parts_edge_cases_equal_the_functions() -> None:
    for values in ([], [100.0], [100.0, 100.0], [100.0, 100.0, 100.0], [100.0, 0.0, 50.0],
                   [0.0, 10.0, 20.0], [100.0, math.nan, 110.0], [100.0, 110.0, 121.0],
                   [100.0, 90.0, 81.0, 72.9], [100.0, 0.0], [100.0, 101.0], [-5.0, 5.0, 10.0],
                   [100.0, math.inf, 100.0], [1.0, 1.0 + 1e-15, 1.0]):
        for rf in (0.0, 0.04):
            _check(values, 252, rf)
            _check(values, 252, rf, [{"A": 1.0}, {"B": 1.0}, {"A": 0.5, "B": 0.5}], [1.0, 2.0])


def test_labels_at_equals_the_lookup_per_time() -> None:
    marks = np.array([10.0, 20.0, 30.0, 40.0])
    labels = ["a", "b", "c", "d"]

    def one(ts: float) -> str:  # the lookup as it was done for each time
        i = int(np.searchsorted(marks, ts, side="right")) - 1
        return labels[i] if i >= 0 else REGIME_UNKNOWN

    times = [5.0, 10.0, 15.0, 20.0, 29.999, 30.0, 40.0, 99.0, -1.0, 10, 40]
    assert _labels_at(marks, labels, times) == [one(t) for t in times]
    assert _labels_at(marks, labels, []) == []
    assert _labels_at(np.empty(0), [], [1.0, 2.0]) == [REGIME_UNKNOWN] * 2
    assert _labels_at(marks[:1], labels[:1], [10.0]) == ["a"]


def _same_k(got: float, want: float) -> bool:
    """Tell whether two figures are the same float (NaN equal to NaN)."""
    return (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize(("steps", "bad"), [(1, False), (3, False), (12, False), (40, False),
                                            (40, True), (85, False)])
def test_rolling_k_figures_equal_each_figure_alone(steps: int, bad: bool) -> None:
    rng = np.random.default_rng(steps)
    prices = np.cumprod(1.0 + rng.normal(0.0, 0.02, (steps, 4)), axis=0)
    prices[:, 0] = 1.0  # cash
    held = rng.uniform(0.0, 10.0, (steps, 4))
    if bad:
        held[7] = 0.0  # a step with nothing held: a denominator of 0, NaN from there
    got = rolling_k_figures(held, prices, ROLLING_KS)
    assert _same_k(got["cr0"], rolling_k_return(held, prices, 0))
    for k in ROLLING_KS:
        assert _same_k(got["cr"][str(k)], rolling_k_return(held, prices, k))
        assert _same_k(got["delta"][str(k)], rolling_k_delta(held, prices, k))
        assert _same_k(got["delta_same_window"][str(k)],
                     rolling_k_delta(held, prices, k, same_window=True))
    finite = [v for v in got["delta_same_window"].values() if math.isfinite(v)]
    assert len(finite) == sum(1 for k in ROLLING_KS if steps - 1 - 2 * k >= 1) or bad


_WINDOW_SQL = (  # the store's query the panel made before: the reference
    "SELECT asset, upto, ts, price, id FROM (SELECT asset, upto, ts, price, id,"
    " ROW_NUMBER() OVER (PARTITION BY asset, upto ORDER BY ts DESC, id DESC) AS n FROM"
    " (SELECT asset, (SELECT MIN(m) FROM panel_marks WHERE m >= ts) AS upto, ts, price,"
    " id FROM market_events WHERE kind='price' AND market=? AND ts <= ?)) WHERE n = 1")


@pytest.mark.parametrize("seed", range(8))
def test_latest_by_mark_equals_the_window_query(seed: int) -> None:
    import sqlite3

    from scoring.board.panels import _latest_by_mark

    rng = np.random.default_rng(seed)
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE market_events(id INTEGER PRIMARY KEY, kind TEXT, market TEXT,"
                " asset TEXT, ts REAL, price REAL)")
    marks = sorted({float(x) for x in rng.integers(0, 50, int(rng.integers(1, 8))) * 10.0})
    events = []
    for n in range(int(rng.integers(0, 300))):
        ts = float(rng.choice([*marks, float(rng.integers(-20, 520)), marks[-1] + 1.0]))
        if n % 7 == 0:
            ts = float(int(ts))  # stored as an integer-valued time
        price = None if rng.random() < 0.1 else float(rng.normal(10.0, 1.0))
        events.append(("price" if n % 11 else "trade", "m" if n % 13 else "other",
                       str(rng.choice(["A", "B", "C"])), ts, price))
    events += [("price", "m", "A", marks[0], 1.0), ("price", "m", "A", marks[0], 2.0)]  # a tie
    order = rng.permutation(len(events))  # ids not in time order
    con.executemany("INSERT INTO market_events(kind, market, asset, ts, price) VALUES(?,?,?,?,?)",
                    [events[i] for i in order])
    con.execute("CREATE TEMP TABLE panel_marks(m REAL PRIMARY KEY)")
    con.executemany("INSERT INTO panel_marks(m) VALUES(?)", [(m,) for m in marks])
    want = con.execute(_WINDOW_SQL, ("m", marks[-1])).fetchall()
    got = _latest_by_mark(con.execute(
        "SELECT asset, ts, price, id FROM market_events WHERE kind='price' AND market=?"
        " AND ts <= ?", ("m", marks[-1])).fetchall(), marks)
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert repr(sorted(got, key=repr)) == repr(sorted(want, key=repr))  # the same types
    assert _latest_by_mark([], marks) == []


def test_rolling_k_figures_rows_equal_each_panel_alone() -> None:
    from scoring.stats.benchmarks import rolling_k_figures_rows

    rng = np.random.default_rng(7)
    panels = []
    for steps, assets in [(85, 17), (85, 17), (85, 17), (40, 4), (1, 3), (2, 3), (3, 3),
                          (33, 17), (85, 17), (85, 1), (12, 9), (40, 4)]:
        prices = np.cumprod(1.0 + rng.normal(0.0, 0.03, (steps, assets)), axis=0)
        prices[:, -1] = 1.0  # cash
        held = rng.uniform(0.0, 10.0, (steps, assets)) * (rng.random((steps, assets)) < 0.5)
        panels.append((held, prices))
    panels[1][0][7] = 0.0  # nothing held at a step: a zero denominator, NaN from there
    panels[2][1][5, 0] = math.nan  # a missing price
    panels[8][1][20, 3] = 0.0  # a price of zero
    panels[11][0][:] = 0.0  # never held
    got = rolling_k_figures_rows(panels, ROLLING_KS)
    want = [rolling_k_figures(h, p, ROLLING_KS) for h, p in panels]
    assert repr(got) == repr(want)
    assert rolling_k_figures_rows([], ROLLING_KS) == []
    with pytest.raises(ValueError):
        rolling_k_figures_rows([(np.ones((3, 2)), np.ones((3, 3)))], ROLLING_KS)


def test_turnover_does_not_depend_on_the_order_of_the_keys() -> None:
    # Summed left to right, 1e16 + 1 + 1 stays 1e16 (ties to even) but 1 + 1 + 1e16 does not:
    # the exact sum is the same in every order.
    big_first = {"x": 1e16, "y": 1.0, "z": 1.0}
    big_last = {"z": 1.0, "y": 1.0, "x": 1e16}
    for a in (big_first, big_last):
        assert turnover(a, {}) == 1e16 + 2.0
        assert turnover({}, a) == 1e16 + 2.0
    assert mean_turnover([big_first, {}, big_last]) == 1e16 + 2.0
    assert turnover({"A": 0.5, "B": 0.5}, {"A": 0.2, "C": 0.8}) == math.fsum([0.3, 0.5, 0.8])
    assert turnover({}, {}) == 0.0 and math.isnan(turnover({"A": math.nan}, {}))


@pytest.mark.parametrize("seed", range(30))
def test_mean_turnover_equals_one_turnover_per_step(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = [f"A{j}" if j % 3 else f"token{j * 7919}" for j in range(int(rng.integers(1, 25)))]
    seq: list[dict[str, Any]] = []
    for _ in range(int(rng.integers(0, 60))):
        held = [a for a in names if rng.random() < 0.6]
        rng.shuffle(held)  # keys in any order
        w = rng.dirichlet(np.ones(len(held))) if held else np.empty(0)
        scale = float(10.0 ** rng.integers(-6, 3))
        seq.append({a: float(x) * scale for a, x in zip(held, w, strict=True)})
    want = _mean_turnover_loop(seq)
    assert repr(mean_turnover(seq)) == repr(want)
    if len(seq) >= 2:
        assert repr(summarise([1.0, 1.1], 252, 0.0, seq).target_turnover) == repr(want)


def _flip_rate_loop(seq: list[dict[str, Any]], eps: float = 1e-9) -> float:
    """Return the flip rate as its docstring defines it: one asset and one step at a time."""
    flips = eligible = 0
    for k in sorted(set().union(*seq)):
        last = None
        for a, b in pairwise(seq):
            dw = float(b.get(k, 0.0)) - float(a.get(k, 0.0))
            if not abs(dw) > eps:
                continue
            if last is not None:
                eligible += 1
                flips += (dw > 0.0) != last
            last = dw > 0.0
    return flips / eligible if eligible else math.nan


@pytest.mark.parametrize("seed", range(12))
def test_turnover_and_flip_rate_of_one_key_order_equal_the_loops(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)  # every allocation lists the same keys in one order
    names = [f"A{j}" for j in range(int(rng.integers(1, 20)))]
    rng.shuffle(names)
    seq = [{a: float(x) for a, x in zip(names, rng.dirichlet(np.ones(len(names))) *
                                        (rng.random(len(names)) < 0.7), strict=True)}
           for _ in range(int(rng.integers(2, 40)))]
    shuffled = [dict(sorted(w.items(), key=lambda kv: rng.random())) for w in seq]
    for s in (seq, shuffled):  # the values as they are, and by key
        assert repr(mean_turnover(s)) == repr(_mean_turnover_loop(seq))
        assert repr(flip_rate(s)) == repr(_flip_rate_loop(seq))
        got = summarise([1.0, 1.1], 252, 0.0, s)
        assert repr((got.target_turnover, got.flip_rate)) == repr(
            (_mean_turnover_loop(seq), _flip_rate_loop(seq)))


def test_mean_turnover_edge_cases_equal_one_turnover_per_step() -> None:
    cases: list[list[dict[str, Any]]] = [
        [], [{}], [{"A": 1.0}], [{}, {}], [{}, {}, {}], [{"A": 1.0}, {}], [{}, {"A": 1.0}],
        [{"A": 1}, {"A": 0, "B": 1}], [{"A": 0.0}, {"A": -0.0}],
        [{"A": -0.5, "B": 1.5}, {"B": 1.0}], [{"A": math.nan}, {"A": 0.5}, {"B": 1.0}],
        [{"A": math.inf}, {"A": math.inf}], [{"A": math.inf}, {"B": 1.0}],
        [{"x": 1e16, "y": 1.0, "z": 1.0}, {}, {"z": 1.0, "y": 1.0, "x": 1e16}],
        [{"x": 1e-300, "y": 1e300}, {"y": 1e300 + 1e284, "z": 5e-324}],
    ]
    for seq in cases:
        got, want = mean_turnover(seq), _mean_turnover_loop(seq)
        assert repr(got) == repr(want), seq
        if len(seq) >= 2:
            s = summarise([1.0, 1.1, 1.2], 252, 0.0, seq, [])
            assert repr(s.target_turnover) == repr(want), seq
            assert repr(s.flip_rate) == repr(flip_rate(seq)), seq


# ----------------------------------------------------------------------------- small sums


def _fbits(x: float) -> tuple[bool, float, float]:
    """Return what tells two floats apart: NaN, the value and the sign of a zero."""
    return (math.isnan(x), 0.0 if math.isnan(x) else x, math.copysign(1.0, x))


def _lists(rng: np.random.Generator, n: int, trial: int) -> np.ndarray:
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
    if trial % 3 == 0:
        x = rng.standard_normal(n) * 0.01
    if trial % 7 == 0 and n:
        x[rng.integers(0, n)] = (math.nan, math.inf, -math.inf, 0.0, -0.0)[trial % 5]
    if trial % 11 == 0:
        x = -np.zeros(n)  # all -0.0: numpy's sum starts from 0.0
    return x


def test_sums_means_variances_and_products_equal_numpy() -> None:
    rng = np.random.default_rng(5)
    for trial in range(3010):
        n = trial % 301  # every length up to 300, ten times, each with other data
        x = _lists(rng, n, trial)
        a = x.tolist()
        with np.errstate(all="ignore"):
            assert _fbits(np_sum(a)) == _fbits(float(np.sum(x))), (trial, n)
            assert _fbits(np_prod(a)) == _fbits(float(np.prod(x))), (trial, n)
            assert _fbits(np_prod((1.0 + x).tolist())) == _fbits(float(np.prod(1.0 + x)))
            if n:
                assert _fbits(np_mean(a)) == _fbits(float(np.mean(x))), (trial, n)
            for ddof in (0, 1):
                if n > ddof:
                    assert _fbits(np_var(a, ddof)) == _fbits(float(np.var(x, ddof=ddof)))
                    assert _fbits(np_std(a, ddof)) == _fbits(float(np.std(x, ddof=ddof)))


def _numpy_relative(r: list[float], b: list[float], n: int) -> dict[str, float]:
    """Return the relative figures written plainly with numpy (docs/scoring.md's formulas)."""
    x, y = np.asarray(r), np.asarray(b)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    out = {"days": float(x.size), "excess_return": math.nan, "beta": math.nan,
           "tracking_error": math.nan, "information_ratio": math.nan}
    if x.size:
        out["excess_return"] = float(np.prod(1.0 + x) - np.prod(1.0 + y))
    if x.size >= 2:
        var_b = float(np.var(y, ddof=1))
        if var_b > 1e-12**2:
            out["beta"] = float(np.cov(x, y, ddof=1)[0, 1]) / var_b
        a = x - y
        sd = float(np.std(a, ddof=1))
        out["tracking_error"] = sd * math.sqrt(n)
        if sd > 1e-12 * max(1.0, abs(float(np.mean(a)))):
            out["information_ratio"] = float(np.mean(a)) / sd * math.sqrt(n)
    return out


def test_relative_figures_equal_numpy_with_the_benchmark_side_remembered() -> None:
    rng = np.random.default_rng(9)
    marks = [float(86400 * t) for t in range(60)]
    bench = {"ew": {t: float(v) for t, v in zip(marks, rng.normal(0, 0.01, 60), strict=True)},
             "flat": dict.fromkeys(marks[::2], 0.001),  # a constant benchmark: no beta
             "gappy": {t: (math.nan if i % 9 == 0 else float(rng.normal(0, 0.02)))
                       for i, t in enumerate(marks) if i % 3}}
    other = {name: {t: v * 2.0 + 0.001 for t, v in series.items()}  # another market's, the
             for name, series in bench.items()}  # same names and marks: its own side
    cache: dict[object, object] = {}
    for trial in range(400):
        lo = int(rng.integers(0, 20)) if trial % 2 else 0  # most rows share their days
        hi = int(rng.integers(lo, 61))
        r = rng.normal(0, 0.02, hi - lo)
        if trial % 5 == 0 and r.size:
            r[rng.integers(0, r.size)] = math.nan
        ends = marks[lo:hi]
        if trial % 4 == 1:
            bench, other = other, bench
        got = _relative(r, ends, bench, 252, cache if trial % 3 else None)
        assert list(got) == list(bench)
        for name, series in bench.items():
            days = [(x, series[t]) for x, t in zip(r.tolist(), ends, strict=True) if t in series]
            want = _numpy_relative([a for a, _ in days], [b for _, b in days], 252)
            want["days"] = len(days)
            assert list(got[name]) == list(want)
            assert [_fbits(float(v)) for v in got[name].values()] == [
                _fbits(float(v)) for v in want.values()], (trial, name)
