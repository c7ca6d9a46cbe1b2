"""Issue 27, point 1: every batched form of the report's statistics equals the per-item
computation it replaced, element by element and bit for bit, on fixed data: order statistics
from windows (and the percentiles built on them), rank stability in one pass, the Model
Confidence Set's steps in blocks of draws, the resampled figures computed in place, the
rows' diversification scored together; and a report's markets computed in forked processes
(``scoring.board.forked``) give the same bytes as in this process, forking only where it is
safe. The tests that must fork use pytest-timeout's signal method: its default thread method
runs a timer thread beside the test, and a process with a second thread never forks."""

from __future__ import annotations

import asyncio
import math
import os
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import scoring.board.forked as forked
import scoring.board.leaderboard as leaderboard
from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.store.reports import load_report
from scoring.board.batched_rows import score_pending
from scoring.board.figures import _mean_scores
from scoring.board.forked import blas_threads, fork_safe, map_forked, one_blas_thread
from scoring.board.report_html import render_html
from scoring.board.significance import _CHUNK, _Market
from scoring.board.text import to_json, to_table
from scoring.stats.diversification import (
    class_correlations,
    diversification_rows,
    signed_question_rows,
)
from scoring.stats.inference import quantile_rows
from scoring.stats.metrics import DDOF, STD_ZERO_RTOL
from scoring.stats.multiple import _step_draws
from scoring.stats.order_stats import MIN_WINDOW_N, rank_counts, stacked, window_order_stats

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"
SAMPLE_CONFIG = ROOT / "examples" / "sample-replay.toml"


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=float).view(np.int64)


def _rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = rng.normal(size=(24, n))
    x[1] = np.round(x[1], 1)  # heavy ties
    x[2] = 0.0  # constant: every window holds the whole row
    x[3] = np.sort(x[3])  # sorted: the leading values place the windows wrongly
    x[4] = np.sort(x[4])[::-1]
    x[5, : n // 3] = np.inf  # infinite values in the top window
    x[6] = rng.standard_cauchy(n)
    x[7] = rng.lognormal(size=n) * 1e-300  # tiny magnitudes
    x[8] = np.where(rng.random(n) < 0.5, -0.0, 0.0)
    x[9, : n // 2] = -1.0  # a tie that holds the lower order statistics
    return x


@pytest.mark.parametrize("n", [MIN_WINDOW_N, 10_000, 12_345])
@pytest.mark.parametrize("q", [[0.025, 0.975], [0.5], [0.001, 0.2, 0.8, 0.999]])
def test_window_order_stats_equal_a_sort(n: int, q: list[float]) -> None:
    x = _rows(n)
    positions = [int(np.floor((n - 1) * v)) for v in q]
    low, high, ok = window_order_stats(x, positions)
    s = np.sort(x, axis=1)
    for i in range(x.shape[0]):
        if not ok[i]:
            assert np.isnan(low[i]).all() and np.isnan(high[i]).all()
            continue
        for j, p in enumerate(positions):
            assert low[i, j] == s[i, p] and high[i, j] == s[i, p + 1], (i, p)
    assert ok[0] and ok[6] and ok[7]  # ordinary draws take the windows
    assert not ok[3] or not ok[4]  # a sorted row is reported, not mis-read


@pytest.mark.parametrize("n", [MIN_WINDOW_N, 10_000])
def test_quantile_rows_with_windows_equal_np_quantile(n: int) -> None:
    x = _rows(n)
    x[5, : n // 3] = 7.0  # quantile_rows takes finite draws
    x = np.vstack([x, np.random.default_rng(1).normal(size=(40, n))])  # several passes
    for q in ([0.025, 0.975], [0.975, 0.025], [0.5], [0.0, 1.0]):
        want = np.quantile(x, q, axis=1).T
        assert np.array_equal(_bits(quantile_rows(x, q)), _bits(want)), q


def test_window_order_stats_refuses_short_rows() -> None:
    with pytest.raises(ValueError):
        window_order_stats(np.zeros((2, MIN_WINDOW_N - 1)), [3])
    with pytest.raises(ValueError):
        window_order_stats(np.zeros((2, MIN_WINDOW_N)), [MIN_WINDOW_N - 1])


def _by_matrix(m: np.ndarray, top: int) -> tuple[list[int], list[int] | None]:
    """The counts as the report first computed them: argmax and argpartition of B x k."""
    cum = np.ascontiguousarray(m.T)
    k = m.shape[0]
    first = np.bincount(np.argmax(cum, axis=1), minlength=k).tolist()
    if k <= top:
        return first, None
    picked = np.argpartition(-cum, top - 1, axis=1)[:, :top]
    return first, np.bincount(picked.ravel(), minlength=k).tolist()


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(27)
    plain = rng.normal(size=(1000, 2_000))
    rounded = np.round(rng.normal(size=(300, 2_000)), 1)  # ties everywhere
    flat_top = rng.normal(size=(200, 2_000))
    flat_top[5:60] = 4.0  # 55 series tied above the rest: every boundary a tie
    pairs = rng.normal(size=(50, 2_000))
    pairs[1::2] = pairs[::2]  # each series twice
    nan_row = rng.normal(size=(20, 500))
    nan_row[7, 3] = np.nan  # not finite: the whole matrix
    return [plain, rounded, flat_top, pairs, nan_row, rng.normal(size=(4, 300)),
            rng.normal(size=(3, 300)), rng.normal(size=(1, 30))]


@pytest.mark.parametrize("case", range(8))
def test_rank_counts_equal_argmax_and_argpartition(case: int) -> None:
    m = _cases()[case]
    rows = [np.ascontiguousarray(r) for r in m]
    for top in (1, 3):
        assert rank_counts(rows, top) == _by_matrix(m, top), top


def _step_reference(boot: np.ndarray, cols: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One step over the whole matrix, as the report computed it before blocks."""
    reps = boot.shape[0]
    if cols is None:
        err = np.empty_like(boot)
        np.copyto(err, boot)
    else:
        err = boot[:, cols]
    err -= err.mean(axis=1, keepdims=True)
    tmp = np.empty((reps, err.shape[1]))
    np.square(err, out=tmp)
    sd = np.sqrt(tmp.mean(axis=0))
    sd[sd <= 0.0] = np.inf
    np.divide(err, sd, out=tmp)
    return sd, np.max(tmp, axis=1)


@pytest.mark.parametrize(("reps", "k"), [(10_000, 1_000), (257, 40), (256, 7), (5, 3),
                                         (1_000, 2)])
def test_mcs_step_in_blocks_equals_whole_matrix(reps: int, k: int) -> None:
    rng = np.random.default_rng(reps + k)
    boot = rng.normal(0.0, 1e-3, (reps, k)) + rng.normal(0.0, 1e-4, k)
    boot[:, -1] = boot[:, 0]  # a degenerate difference when both remain
    for cols in (None, np.arange(0, k, 2), np.array([0, k - 1])):
        got_sd, got_sim = _step_draws(boot, cols)
        want_sd, want_sim = _step_reference(boot, cols)
        assert np.array_equal(_bits(got_sd), _bits(want_sd))
        assert np.array_equal(_bits(got_sim), _bits(want_sim))


def test_stats_equal_fresh_expressions() -> None:
    rng = np.random.default_rng(27)
    days = [float(t) for t in range(40)]
    k = _CHUNK + 9  # two chunks
    returns = {f"a{j:03d}": {t: float(x) for t, x in zip(days, rng.normal(4e-4, 0.01, 40),
                                                         strict=True)} for j in range(k)}
    returns["a001"] = dict.fromkeys(days, 0.0)  # no spread: NaN Sharpe
    returns["a002"] = dict.fromkeys(days, 0.001)  # constant: NaN Sharpe, exact centring
    mk = _Market(returns, 0.02, 252)
    d = mk.draws(mk.has[:, 0])
    assert d is not None
    mk.stats(d, range(k))
    n = len(days)
    x = mk.excess[d.days]
    for s in range(0, k, _CHUNK):  # the expressions as first written, per chunk of columns
        xs = x[:, s : s + _CHUNK]
        cum = np.expm1(d.counts @ np.log1p(np.maximum(xs, -1.0 + 1e-12)))
        centre = xs.mean(axis=0)
        xc = xs - centre
        mc = d.counts @ xc / n
        mean = mc + centre
        var = (d.counts @ xc**2 - n * mc**2) / (n - DDOF)
        sd = np.sqrt(np.maximum(var, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            shp = mean / sd * math.sqrt(252)
        shp[sd <= STD_ZERO_RTOL * np.maximum(1.0, np.abs(mean))] = np.nan
        # stats computes x.T @ counts.T a band of agents at a time: BLAS sums in its own
        # order, so the draws agree to a few units in the last place, NaN at the same draws
        for i in range(xs.shape[1]):
            j = s + i
            np.testing.assert_allclose(d.cum[j], cum[:, i], rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(d.shp[j], shp[:, i], rtol=1e-12, atol=1e-13)
            assert np.array_equal(np.isnan(d.shp[j]), np.isnan(shp[:, i]))
    assert np.isnan(d.shp[1]).all() and np.isnan(d.shp[2]).all()
    # one contiguous row of B draws per agent, a chunk's rows consecutive in one array
    assert all(d.cum[j].flags.c_contiguous and d.shp[j].flags.c_contiguous for j in range(k))
    rows = [d.cum[j] for j in range(_CHUNK)]
    assert np.shares_memory(stacked(rows), rows[0])
    assert np.array_equal(_bits(stacked(rows)), _bits(np.vstack(rows)))


def _weights(rng: np.random.Generator, marks: int, width: int, kind: int) -> np.ndarray:
    w = rng.random((marks, width))
    if kind == 1:
        w[:, 1:-1] = 0.0  # one asset and cash
    elif kind == 2:
        w[::2, :-1] = 0.0  # cash only at every other mark
    elif kind == 3:
        w[:] = 0.0
        w[:, 0] = 1.0  # a single asset held throughout
    w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-300)
    return w


def _check(score_rows: object, rest: tuple[object, ...], weights: list[np.ndarray]) -> None:
    jobs = [[score_rows, (w, *rest), {"s_intra": None, "s_inter": None, "s_corr": None}]
            for w in weights]
    jobs.append([score_rows, (weights[0], *rest), None])  # a job without a row: skipped
    score_pending(jobs)
    for job, w in zip(jobs, weights, strict=False):
        want = _mean_scores(score_rows(w, *rest))  # type: ignore[operator]
        assert list(job[2]) == ["s_intra", "s_inter", "s_corr"]
        assert np.array_equal(_bits(np.array(list(job[2].values()))),
                              _bits(np.array(list(want.values()))))


def test_asset_rows_scored_together_equal_each_alone() -> None:
    rng = np.random.default_rng(27)
    names = ["A", "B", "C", "D", "CASH"]
    panel = np.column_stack([rng.normal(0, 0.01, (30, 4)), np.zeros(30)])
    panel[:, 1] = 0.7 * panel[:, 0] + 0.3 * panel[:, 1]
    corr = class_correlations(panel, names, {"A": "eq", "B": "eq", "C": "bond", "D": "D",
                                             "CASH": "cash"})
    weights = [_weights(rng, m, 5, kind) for m, kind in
               [(20, 0), (1, 0), (15, 1), (12, 2), (9, 3), (0, 0), (30, 0)]]
    _check(diversification_rows, (names, corr, 1e-12), weights)


def test_question_rows_scored_together_equal_each_alone() -> None:
    rng = np.random.default_rng(28)
    assets = ["q1-yes", "q1-no", "q2-yes", "q2-no", "q3-yes"]
    questions = {"q1": ["q1-yes", "q1-no"], "q2": ["q2-yes", "q2-no"], "q3": ["q3-yes"]}
    series = rng.normal(0, 0.02, (25, 3))
    corr = class_correlations(np.column_stack([series, np.zeros(25)]),
                              ["q1", "q2", "q3", "CASH"],
                              {"q1": "q1", "q2": "q2", "q3": "q3", "CASH": "cash"})
    weights = [_weights(rng, m, 6, kind) for m, kind in
               [(18, 0), (7, 1), (11, 2), (5, 3), (0, 0), (25, 0)]]
    _check(signed_question_rows, (assets, questions, corr), weights)


@pytest.mark.parametrize(("n_obs", "block", "seed"), [(85, 3.7, 0), (29, 1.0, 0), (22, 2.2, 5),
                                                      (1, 1.0, 0), (200, 50.0, 3), (3, 0.5, 2)])
def test_stationary_indices_equal_arch_bootstrap_draws(n_obs: int, block: float, seed: int
                                                       ) -> None:
    from arch.bootstrap import StationaryBootstrap

    from scoring.stats.inference import stationary_indices

    bs = StationaryBootstrap(block, np.arange(n_obs), seed=seed)  # type: ignore[arg-type]
    want = np.vstack([np.asarray(d[0][0], dtype=np.int64) for d in bs.bootstrap(500)])
    got = stationary_indices(n_obs, block, 500, seed)
    assert got.dtype == np.int64 and np.array_equal(got, want)


def test_pair_tests_in_reused_buffers_equal_each_pair() -> None:
    from scoring.board.significance import _P_BAND, _pair_tests
    from scoring.stats.inference import null_p_value

    rng = np.random.default_rng(7)
    draws = rng.normal(0.01, 0.05, (60, 10_000))
    draws[5, ::3] = np.nan  # an undefined Sharpe draw: its finite draws only
    bufs: dict[str, np.ndarray] = {}
    for size in (_CHUNK, 45):  # a full chunk, then a shorter one into the same buffers
        pairs = [(int(a), int(b)) for a, b in rng.integers(0, 60, (size, 2))]
        todo = [({}, 0.01 * i, -0.02, (draws[a], draws[b]), (draws[b], draws[a]))
                for i, (a, b) in enumerate(pairs)]
        _pair_tests(todo, bufs)
        for (vs, est_c, est_s, (a, b), (c, d)) in todo:
            diff = a - b
            assert vs["p_value"] == null_p_value(est_c, diff) or (
                math.isnan(vs["p_value"]) and math.isnan(null_p_value(est_c, diff)))
            want_s = null_p_value(est_s, c - d)
            assert vs["sharpe_p_value"] == want_s or (
                math.isnan(vs["sharpe_p_value"]) and math.isnan(want_s))
            fin = diff[np.isfinite(diff)]
            q = [(1.0 - 0.95) / 2.0, 1.0 - (1.0 - 0.95) / 2.0]  # the report's level
            want_ci = np.quantile(fin, q).tolist() if fin.size else [math.nan] * 2
            assert np.array_equal(_bits(np.array(vs["difference_ci"])), _bits(np.array(want_ci)))
    assert bufs["cum"].shape == (_P_BAND, 10_000)  # one band of differences, reused


def test_linear_quantile_equals_np_quantile() -> None:
    from scoring.stats.benchmarks import historical_var, linear_quantile

    rng = np.random.default_rng(60)
    for size in [1, 2, 3, 19, 20, 21, 59, 60, 61, 200]:
        for kind in range(4):
            x = rng.normal(0.0, 0.02, size)
            if kind == 1:
                x = np.round(x, 2)  # ties
            elif kind == 2:
                x[::2] = 0.0
                x[1::4] = -0.0  # zeros of both signs at the order statistics
            elif kind == 3:
                x = x * 1e-300
            for q in (0.05, 0.0, 1.0, 0.5, 0.025, 0.975, 1.0 - 0.95):
                want = float(np.quantile(x, q))
                got = linear_quantile(x.tolist(), q)
                assert math.copysign(1.0, got) == math.copysign(1.0, want) and (
                    got == want), (size, kind, q)
    r = rng.normal(0.0, 0.01, 90)
    assert historical_var(r, 0.95, 60, min_periods=20) == float(np.quantile(r[-60:], 1.0 - 0.95))


def test_holdings_in_python_floats_equal_float64_items() -> None:
    from types import SimpleNamespace

    from scoring.board.figures import _holdings

    rng = np.random.default_rng(11)
    assets = ["A", "B", "C"]
    fills = [SimpleNamespace(ts=float(t), trades={a: float(x) for a, x in
                                                 zip(["A", "B", "Z", "C"], rng.normal(0, 3, 4),
                                                     strict=True) if rng.random() < 0.8})
             for t in range(0, 40, 3)]
    fills[2].trades["A"] = -0.0
    fills[3].trades["B"] = 1e-300
    resolutions = [(10.5, {"B": 1.0}), (30.0, {"A": 0.0, "Q": 1.0})]
    store = SimpleNamespace(fills={("x", "m"): fills}, resolutions={"m": resolutions})
    marks = [float(t) for t in range(-1, 45, 2)]
    got = _holdings(store, ("x", "m"), marks, assets)  # type: ignore[arg-type]
    q = np.zeros(3)  # the form before: float64 items updated in place
    want = np.zeros((len(marks), 3))
    events = sorted([(f.ts, 0, n) for n, f in enumerate(fills)]
                    + [(t, 1, n) for n, (t, _) in enumerate(resolutions)])
    e = 0
    for row, m in enumerate(marks):
        while e < len(events) and events[e][0] <= m:
            _, kind, n = events[e]
            for a, d in (fills[n].trades.items() if kind == 0 else
                         ((a, None) for a in resolutions[n][1])):
                if a in assets:
                    q[assets.index(a)] = q[assets.index(a)] + float(d) if kind == 0 else 0.0
            e += 1
        want[row] = q
    assert np.array_equal(_bits(got), _bits(want))


# ----------------------------------------------------------------------------- forked markets


def _figures(x: int) -> tuple[int, list[float], dict[str, Any]]:
    """Return this process's id and floats whose bits a lossy transfer would change."""
    v = [math.pi * x, -0.0, math.nan, math.inf, 1e-310 * x, 0.1 + 0.2 * x]
    return os.getpid(), v, {"nested": {"x": x, "ok": x % 2 == 0, "none": None}}


def _float_bits(v: list[float]) -> list[bytes]:
    return [struct.pack("<d", f) for f in v]


class _Forks:
    """Count the forks this process makes (the real ``os.fork``, counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = os.fork

        def fork() -> int:
            self.count += 1
            return real()

        monkeypatch.setattr(forked.os, "fork", fork)


@pytest.mark.timeout(300, method="signal")
def test_forked_results_equal_in_process_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    forks = _Forks(monkeypatch)
    assert fork_safe()
    got = map_forked(_figures, [1, 2, 3], parallel=True)
    here = [_figures(x) for x in [1, 2, 3]]
    assert forks.count == 2  # one child per item after the first
    assert got[0][0] == os.getpid() and {g[0] for g in got[1:]}.isdisjoint({os.getpid()})
    assert len({g[0] for g in got}) == 3
    for (_, v, extra), (_, w, extra_here) in zip(got, here, strict=True):
        assert _float_bits(v) == _float_bits(w) and extra == extra_here
        assert [type(f) for f in v] == [type(f) for f in w]


@pytest.mark.timeout(300, method="signal")
def test_a_failed_child_is_computed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    forks = _Forks(monkeypatch)
    parent = os.getpid()

    def fails_in_a_child(x: int) -> tuple[int, int]:
        if os.getpid() != parent and x == 2:
            raise RuntimeError("only in the child")
        if os.getpid() != parent and x == 3:
            return os.getpid(), (lambda: x)  # type: ignore[return-value]  # cannot be pickled
        return os.getpid(), x * x

    got = map_forked(fails_in_a_child, [1, 2, 3, 4], parallel=True)
    assert forks.count == 3
    assert [g[1] for g in got] == [1, 4, 9, 16]
    assert got[1][0] == parent and got[2][0] == parent  # failed in the child: computed here
    assert got[3][0] != parent


@pytest.mark.timeout(300, method="signal")
def test_an_error_of_fn_is_raised_as_in_process() -> None:
    def boom(x: int) -> int:
        raise ValueError(f"bad {x}")

    with pytest.raises(ValueError, match="bad 1"):
        map_forked(boom, [1, 2], parallel=True)


def test_no_fork_beside_another_thread_or_without_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    forks = _Forks(monkeypatch)
    assert map_forked(_figures, [1, 2], parallel=False)[1][0] == os.getpid()  # not opted in
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not fork_safe()
        got = map_forked(_figures, [1, 2, 3], parallel=True)
    finally:
        stop.set()
        other.join()
    assert forks.count == 0 and {g[0] for g in got} == {os.getpid()}


def test_one_blas_thread_gives_the_same_products_and_restores_the_count() -> None:
    rng = np.random.default_rng(7)
    counts = rng.poisson(1.0, size=(10_000, 85)).astype(float)  # a count matrix's shape
    x = rng.normal(scale=0.01, size=(85, 1_000))
    before = blas_threads()
    threaded = counts @ x
    with one_blas_thread():
        assert blas_threads() in (None, 1)
        alone = counts @ x
    assert blas_threads() == before
    assert np.array_equal(_bits(alone), _bits(threaded))


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sample") / "sample.db"
    asyncio.run(replay(SAMPLE, load_config(SAMPLE_CONFIG), db, progress=False))
    return db


@pytest.mark.timeout(600, method="signal")
@pytest.mark.parametrize("window", [(None, None), (1793600000.0, None)])
def test_report_of_two_markets_forked_equals_in_process(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch,
        window: tuple[float | None, float | None]) -> None:
    here = load_report(sample_db, window=window)
    forks = _Forks(monkeypatch)
    there = load_report(sample_db, window=window, parallel=True)
    assert forks.count == 1  # the second market in a child
    assert set(here.board["markets"]) == {"equity", "polymarket"}
    assert to_json(there.board) == to_json(here.board)
    assert to_table(there.board) == to_table(here.board)
    assert render_html(there) == render_html(here)
    assert list(there.curves) == list(here.curves)
    assert there.labels == here.labels


@pytest.mark.timeout(600, method="signal")
def test_forked_report_without_curves_and_with_raw_rows_for_the_extras(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = load_report(sample_db)  # the extras read unrounded rows when they need them
    seen: list[list[dict[str, Any]]] = []
    real = leaderboard.board_extras

    def extras(con: Any, rows: Any, agents_cfg: Any) -> dict[str, Any]:
        seen.append(list(rows))
        return real(con, rows, agents_cfg)

    monkeypatch.setattr(leaderboard, "board_extras", extras)
    monkeypatch.setattr(leaderboard, "_extras_read_rows", lambda cfg: True)
    in_process = load_report(sample_db)
    forks = _Forks(monkeypatch)
    there = load_report(sample_db, parallel=True, curves_wanted=False)
    assert forks.count == 1 and there.curves == {} and here.curves
    assert to_json(there.board) == to_json(here.board) == to_json(in_process.board)
    assert there.board == here.board and list(there.board) == list(here.board)
    assert list(there.board["series"]) == list(here.board["series"])
    raw_here, raw_there = seen
    assert repr(raw_there) == repr(raw_here)  # every float unrounded, in the same order
    assert any(isinstance(v, float) and v != float(f"{v:.12g}")
               for r in raw_there for v in r.values())  # not the cleaned rows
