"""Issue 27, point 1: the faster batched statistics give numpy's and the scalar figures exactly."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scoring.stats.inference import null_p_value, null_p_values, quantile_rows


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=float).view(np.int64)


@pytest.mark.parametrize("n", [1, 2, 3, 37, 9_999, 10_000])
@pytest.mark.parametrize("q", [[0.025, 0.975], [0.975, 0.025], [0.0, 1.0], [0.5], [0.1, 0.9]])
def test_quantile_rows_equal_np_quantile(n: int, q: list[float]) -> None:
    rng = np.random.default_rng(n)
    x = rng.normal(size=(40, n))  # more rows than one pass of quantile_rows takes
    x[1] = x[33] = 1.0  # a constant row
    x[20] = 0.0
    x[2] = np.round(x[2], 1)  # many ties
    x[3] = 0.0  # zeros: np.quantile itself
    x[4, ::2] = -0.0
    x[5] = np.abs(x[5]) * 1e-300
    want = np.quantile(x, q, axis=1).T
    got = quantile_rows(x, q)
    assert got.shape == want.shape
    assert np.array_equal(_bits(got), _bits(want))
    assert np.array_equal(x, x)  # the input is left as it was
    assert np.array_equal(_bits(quantile_rows(x.T.copy().T, q)), _bits(want))  # any layout


def test_significance_quantiles_equal_np_quantile_of_each_rows_finite_draws() -> None:
    from scoring.stats.inference import finite_quantiles

    a = (1.0 - 0.95) / 2.0  # the interval's ends as finite_quantiles makes them (not 0.025 exactly)
    q = [a, 1.0 - a]
    rng = np.random.default_rng(27)
    x = rng.normal(size=(6, 10_000))
    want = np.quantile(x, q, axis=1).T
    assert np.array_equal(_bits(finite_quantiles(x, 0.95)), _bits(want))  # all finite: one pass
    x[1] *= 1e305  # finite draws whose sum overflows: the mask's way, the same figures
    x[2, ::7] = np.inf
    x[3, ::3] = np.nan
    x[4] = np.nan  # no finite draw: NaN
    x[5, 0] = -np.inf
    got = finite_quantiles(x, 0.95)
    for i in range(6):
        row = x[i][np.isfinite(x[i])]
        ref = np.quantile(row, q) if row.size else np.full(2, np.nan)
        assert np.array_equal(_bits(got[i]), _bits(ref)), i


def test_quantile_rows_leaves_its_input() -> None:
    x = np.array([[3.0, 1.0, 2.0, 0.5]])
    quantile_rows(x, [0.25, 0.75])
    assert x.tolist() == [[3.0, 1.0, 2.0, 0.5]]


def test_null_p_values_with_infinite_draws_equal_null_p_value() -> None:
    rng = np.random.default_rng(9)
    draws = rng.normal(0.0, 1.0, (4, 300))
    draws[0, ::5] = np.inf  # not finite: out of the count, as in null_p_value
    draws[1, ::9] = -np.inf
    est = np.array([0.2, -0.1, 0.05, 3.0])
    got = null_p_values(est, draws)
    for i in range(4):
        assert got[i] == null_p_value(float(est[i]), draws[i])
    full = rng.normal(0.0, 1.0, (3, 200))  # every draw finite: the unmasked count
    e2 = np.array([0.1, 0.0, -0.4])
    got2 = null_p_values(e2, full)
    assert [float(v) for v in got2] == [null_p_value(float(e2[i]), full[i]) for i in range(3)]


def _mcs_reference(losses: np.ndarray, counts: np.ndarray, size: float
                   ) -> tuple[np.ndarray, list[float]]:
    """The elimination as first written (fresh arrays each step), for comparison."""
    k = losses.shape[1]
    p_out = [float("nan")] * k
    included = np.ones(k, dtype=bool)
    means = losses.mean(axis=0)
    boot = counts @ (losses - means) / counts.sum(axis=1, keepdims=True)
    reps = boot.shape[0]
    running = 0.0
    while included.sum() > 1:
        cols = np.flatnonzero(included)
        err = boot[:, cols]
        err = err - err.mean(axis=1, keepdims=True)
        sd = np.sqrt((err**2).mean(axis=0))
        sd[sd <= 0.0] = np.inf
        diffs = means[cols] - means[cols].mean()
        stat_i = diffs / sd
        test = float(np.max(stat_i))
        sim = np.max(err / sd, axis=1)
        p = (1 + int(np.count_nonzero(test < sim))) / (reps + 1)
        running = max(running, p)
        if running > size:
            break
        out = cols[stat_i == test]
        for j in out.tolist():
            p_out[j] = running
        included[out] = False
    return included, p_out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_model_confidence_set_in_place_equals_fresh_arrays(seed: int) -> None:
    from scoring.stats.inference import resample_counts, stationary_indices
    from scoring.stats.multiple import model_confidence_set

    rng = np.random.default_rng(seed)
    t, k = 60, 40
    losses = rng.normal(0.0, 0.01, (t, k)) + np.linspace(0.0, 0.012, k)  # several eliminated
    losses[:, 3] = losses[:, 2]  # a tie: eliminated together
    counts = resample_counts(stationary_indices(t, 2.0, 2_000, seed), t)
    got_in, got_p = model_confidence_set(losses, counts, 0.1)
    want_in, want_p = _mcs_reference(losses, counts, 0.1)
    assert got_in.tolist() == want_in.tolist()
    assert np.array_equal(_bits(np.array(got_p)), _bits(np.array(want_p)))
    assert sum(np.isfinite(want_p)) >= 10  # the test does eliminate (many steps)


def test_null_p_values_one_sided_equal_null_p_value() -> None:
    rng = np.random.default_rng(13)
    draws = rng.normal(0.05, 0.2, (5, 400))
    draws[2, ::11] = np.nan
    est = np.array([0.05, -0.1, 0.3, 0.0, float("nan")])
    got = null_p_values(est, draws, one_sided=True)
    for i in range(5):
        want = null_p_value(float(est[i]), draws[i], one_sided=True)
        assert (np.isnan(got[i]) and np.isnan(want)) or got[i] == want


def test_fill_decoder_equals_fill_map() -> None:
    from daemon.core.sparse_rows import fill_map
    from scoring.board.load import _FillDecoder

    decode = _FillDecoder()
    assets = '["AAA", "BBB", "CCC"]'
    cases = [('[[0, 0.5], [2, -0.0], ["ZZZ", 0.25]]', assets), ('{"AAA": 1.0}', None),
             ('[[1, 0.3]]', assets), ('[]', None), ('[[2, 0.1], [0, 0.9]]', assets),
             # json's own literals and numbers msgspec refuses: read by json, as fill_map does
             ('[[0, NaN], [1, Infinity], [2, -Infinity]]', assets), ('{"AAA": 1e400}', None),
             ('[[0, 3], [1, 123456789012345678901234567890], [2, 1e-320]]', assets)]
    for text, a in cases * 2:  # the second time from the parsed list
        got, want = decode(text, a), fill_map(text, a)
        assert repr(got) == repr(want) and list(got) == list(want)
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
        assert [math.copysign(1.0, v) for v in got.values()] == [
            math.copysign(1.0, v) for v in want.values()]
    with pytest.raises(ValueError, match="asset index 3 of 3"):
        decode("[[3, 0.1]]", assets)
    with pytest.raises(ValueError, match="asset index 3 of 3"):
        fill_map("[[3, 0.1]]", assets)


def test_fills_decoded_per_market_on_first_read_equal_decoding_all() -> None:
    # A market's stored fill rows are decoded when one of its keys is first read (in the
    # process that scores the market): the same fills as decoding every row at once.
    from scoring.board.load import _Fill, _FillDecoder, _Fills

    assets = '["AAA", "BBB"]'
    rows = [(a, m, float(t), f'[[{t % 2}, {t * 0.1}]]', '[[0, -0.0], [1, 1e-310]]', 0.5 * t,
             None if t % 3 else t * 10, assets)
            for a in ("a1", "a2") for m in ("equity", "polymarket") for t in range(4)]
    fills = _Fills()
    for row in rows:
        fills.stored.setdefault(row[1], []).append(row)
    decode = _FillDecoder()
    want: dict[tuple[str, str], list[_Fill]] = {}
    for a, m, ts, trades, w, cost, traded, sets in rows:
        want.setdefault((a, m), []).append(_Fill(ts, decode(trades, sets), decode(w, sets),
                                                 cost, float(traded or 0.0)))
    assert fills.get(("a2", "polymarket")) == want[("a2", "polymarket")]
    assert list(fills.stored) == ["equity"]  # only the market read is decoded
    assert ("a1", "equity") in fills and "equity" not in fills.stored
    assert fills[("a9", "equity")] == [] and fills.get(("a9", "cash")) is None
    assert repr({k: fills[k] for k in want}) == repr(want)  # -0.0, subnormals, floats kept
    bad = _Fills()
    bad.stored["equity"] = [("a1", "equity", 1.0, "[[2, 0.1]]", "[]", 0.0, 0.0, assets)]
    with pytest.raises(ValueError, match="asset index 2 of 2"):
        bad.get(("a1", "equity"))


def test_sharpe_tests_with_moments_given_equal_computed() -> None:
    from scoring.stats.sharpe_tests import (
        deflated_sharpe,
        min_track_record,
        probabilistic_sharpe,
        sharpe_moments,
    )

    rng = np.random.default_rng(21)
    for x in (rng.normal(0.001, 0.01, 80), rng.normal(-0.001, 0.01, 40), np.full(30, 0.001)):
        mom = sharpe_moments(x)
        pairs = [(probabilistic_sharpe(x, 0.0), probabilistic_sharpe(x, 0.0, moments=mom)),
                 (deflated_sharpe(x, 7, 0.01), deflated_sharpe(x, 7, 0.01, moments=mom)),
                 (min_track_record(x, 0.0, 0.95), min_track_record(x, 0.0, 0.95, moments=mom))]
        for a, b in pairs:
            assert (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("t", [2, 3, 7, 8, 9, 22, 29, 128, 129, 300])
def test_sharpe_moments_rows_equal_each_series_and_plain_moments(t: int) -> None:
    from scoring.stats.sharpe_tests import (
        sharpe_moments,
        sharpe_moments_many,
        sharpe_moments_rows,
    )

    rng = np.random.default_rng(t)
    x = rng.normal(3e-4, 0.01, (12, t)) + rng.standard_t(3, (12, t)) * 1e-3
    x[3], x[4] = 0.001, 0.0  # no spread: undefined
    got = sharpe_moments_rows(x)
    assert len(got) == 12
    for i, (row, g) in enumerate(zip(x, got, strict=True)):
        want = sharpe_moments(row)  # bit for bit the same figures
        assert g[3] == want[3] == t
        assert all((math.isnan(a) and math.isnan(b)) or a == b
                   for a, b in zip(g, want, strict=True))
        if t < 3 or i in (3, 4):
            assert all(math.isnan(v) for v in g[:3])
            continue
        c = row - row.mean()  # the moments written plainly
        s0 = math.sqrt(float(np.mean(c**2)))
        assert g[0] == pytest.approx(row.mean() / row.std(ddof=1), rel=1e-12, abs=0)
        assert g[1] == pytest.approx(float(np.mean(c**3)) / s0**3, rel=1e-9, abs=1e-12)
        assert g[2] == pytest.approx(float(np.mean(c**4)) / s0**4, rel=1e-12, abs=0)
    mixed = [x[0], x[1, :-1], x[2], np.r_[x[3, :-1], np.inf]]  # two lengths, a non-finite
    for g, row in zip(sharpe_moments_many(mixed), mixed, strict=True):
        want = sharpe_moments(row)
        assert all((math.isnan(a) and math.isnan(b)) or a == b
                   for a, b in zip(g, want, strict=True))


def _flip_rate_loop(weight_seq: list[dict[str, float]], eps: float = 1e-9) -> float:
    """flip_rate as first written: a loop per step and asset."""
    from itertools import pairwise

    if len(weight_seq) < 2:
        return float("nan")
    keys = sorted({k for w in weight_seq for k in w})
    last_sign: dict[str, float] = {}
    flips = eligible = 0
    for prev, cur in pairwise(weight_seq):
        for k in keys:
            dw = float(cur.get(k, 0.0)) - float(prev.get(k, 0.0))
            if abs(dw) <= eps:
                continue
            sign = 1.0 if dw > 0.0 else -1.0
            if k in last_sign:
                eligible += 1
                if sign != last_sign[k]:
                    flips += 1
            last_sign[k] = sign
    return float("nan") if eligible == 0 else flips / eligible


def test_flip_rate_equals_the_loop() -> None:
    from scoring.stats.metrics import flip_rate

    rng = np.random.default_rng(3)
    names = ["A", "B", "C", "D", "CASH"]
    for trial in range(200):
        t = int(rng.integers(0, 9))
        seq = [{k: float(rng.choice([0.0, 0.1, 0.2, 0.5, 1e-12, rng.random()]))
                for k in names if rng.random() < 0.7} for _ in range(t)]
        if trial % 17 == 0 and seq:
            seq[0]["A"] = float("nan")
        got, want = flip_rate(seq), _flip_rate_loop(seq)
        assert (math.isnan(got) and math.isnan(want)) or got == want, seq
    assert math.isnan(flip_rate([{}, {}, {}]))


@pytest.mark.timeout(300, method="signal")
@pytest.mark.parametrize("parallel", [True, False])
def test_meanwhile_runs_once_here_after_the_first_item(parallel: bool) -> None:
    # map_forked calls ``meanwhile`` once in this process, after its own item (the children's
    # items still being computed when forked), and the results are unchanged.
    import os

    from scoring.board.forked import map_forked

    here = os.getpid()
    calls: list[tuple[int, int]] = []
    done: list[int] = []

    def square(x: int) -> tuple[int, int]:
        done.append(x)  # only this process's items are seen here
        return os.getpid(), x * x

    got = map_forked(square, [1, 2, 3], parallel=parallel,
                     meanwhile=lambda: calls.append((os.getpid(), len(done))))
    assert [g[1] for g in got] == [1, 4, 9] and got[0][0] == here
    assert calls == [(here, 1 if parallel else 3)]
    assert ({g[0] for g in got[1:]}.isdisjoint({here})) is parallel


def test_heap_kept_reuses_freed_memory_and_restores_the_defaults() -> None:
    # While the markets are computed, a large temporary freed stays in glibc's heap (no
    # new zeroed pages for the next one); mallinfo2 counts the free bytes kept.
    import ctypes

    from scoring.board.forked import _heap_kept

    try:
        libc = ctypes.CDLL(None)
        info = libc.mallinfo2
    except (OSError, AttributeError):
        pytest.skip("no glibc mallinfo2")

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    info.restype = Info
    with _heap_kept():
        a = np.ones(2_000_000)  # 16 MB: from the heap, not a mapping of its own
        assert info().hblkhd < a.nbytes
        del a
        kept = info()
        assert kept.fordblks >= 16_000_000  # kept, not returned
        b = np.full(2_000_000, 2.0)  # the same memory again
        assert info().arena == kept.arena and b.sum() == 4_000_000.0
        del b
    assert info().arena < kept.arena - 16_000_000  # given back afterwards


def test_the_cli_report_pauses_the_cyclic_collector_and_restores_it(tmp_path: Path) -> None:
    # ``load_report(parallel=True)`` (``paperarena report``) computes with the cyclic collector
    # off (no collections scanning every row's dict) and gives it back as it was.
    import gc

    import daemon.store.reports as reports
    from tests.scoring.test_leaderboard import AGENTS_CFG, PLANS, PRICES, build_store

    db = tmp_path / "s.db"
    build_store(db, PRICES, PLANS, agents_cfg=AGENTS_CFG)
    seen: list[bool] = []
    real = reports.board.report_of

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    reports.board.report_of = spy  # type: ignore[assignment]
    try:
        cli = reports.load_report(db, parallel=True).board
        assert gc.isenabled() and seen == [False]
        gc.disable()
        reports.load_report(db, parallel=True)
        assert not gc.isenabled()  # left as it was
        gc.enable()
        inner = reports.load_report(db).board  # the daemon's: the collector runs
        assert seen == [False, False, True]
    finally:
        reports.board.report_of = real  # type: ignore[assignment]
        gc.enable()
    assert cli == inner


@pytest.mark.timeout(300, method="signal")
def test_forked_markets_run_without_huge_page_advice_and_restore_it() -> None:
    # The markets' temporaries get small pages (no 2 MiB page zeroed whole at its first
    # touch); numpy's switch is back as it was afterwards, and the results are the same.
    from numpy._core.multiarray import _get_madvise_hugepage

    from scoring.board.forked import map_forked

    before = _get_madvise_hugepage()

    def square(x: int) -> tuple[int, bool]:
        return x * x, bool(_get_madvise_hugepage())

    assert map_forked(square, [2, 3], parallel=True) == [(4, False), (9, False)]
    assert _get_madvise_hugepage() == before
    assert map_forked(square, [2, 3]) == [(4, before), (9, before)]  # not forked: untouched


@pytest.mark.parametrize(("n_obs", "reps", "seed"), [(29, 2_000, 0), (22, 999, 5), (1, 40, 0),
                                                     (2, 7, 3), (3, 1, 2), (200, 64, 9),
                                                     (150_006, 2, 0)])
def test_starts_and_uniforms_equal_the_generators_calls_draw_by_draw(n_obs: int, reps: int,
                                                                     seed: int) -> None:
    from scoring.stats.inference import _drawn_at_once, _starts_and_uniforms

    gen = np.random.default_rng(seed)  # arch's calls, one draw at a time
    want_s = np.empty((reps, n_obs), dtype=np.int64)
    want_u = np.empty((reps, n_obs))
    for i in range(reps):
        want_s[i] = gen.integers(n_obs, size=n_obs, dtype=np.int64)
        want_u[i] = gen.random(n_obs)
    starts, u = _starts_and_uniforms(n_obs, reps, seed)
    assert starts.dtype == np.int64 and np.array_equal(starts, want_s)
    assert np.array_equal(_bits(u), _bits(want_u))
    # 150,006 days: 2**32 mod n_obs is most of n_obs, so numpy redraws some start (one value
    # in about 30,000): the block refuses, the calls draw by draw give the figures
    assert (_drawn_at_once(np.random.default_rng(seed), n_obs, reps) is None) == (
        n_obs == 150_006)


def test_draws_made_at_once_that_are_not_the_generators_are_not_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import scoring.stats.inference as inference

    gen = np.random.default_rng(4)
    want = [(gen.integers(9, size=9, dtype=np.int64), gen.random(9)) for _ in range(30)]
    made = inference._drawn_at_once

    def shifted(g: np.random.Generator, n_obs: int, reps: int) -> tuple[np.ndarray, np.ndarray]:
        out = made(g, n_obs, reps)  # as another numpy's mapping might: one start off
        assert out is not None
        out[0][1, 3] = (out[0][1, 3] + 1) % n_obs
        return out

    monkeypatch.setattr(inference, "_drawn_at_once", shifted)
    starts, u = inference._starts_and_uniforms(9, 30, 4)
    assert np.array_equal(starts, np.array([s for s, _ in want]))
    assert np.array_equal(u, np.array([x for _, x in want]))
