"""Issue 27: block bootstrap, Holm, Sharpe tests, rank stability, MCS, one risk-free rate.

Every figure is checked against independent code written here (the papers' formulas written
out, ``statsmodels`` for Holm, ``arch.bootstrap.MCS`` itself, a fixed AR(1) series with known
autocorrelation for the block length and the interval width).
"""

from __future__ import annotations

import json
import math
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest
from arch.bootstrap import MCS, StationaryBootstrap, optimal_block_length
from scipy.stats import kurtosis, norm, skew

from daemon.config.settings import ConfigError, parse_config
from daemon.store.reports import leaderboard, load_report
from scoring.board.report_html import render_html
from scoring.board.significance_html import mcs_band
from scoring.board.text import mcs_lines, to_table
from scoring.ledger.ledger import Book
from scoring.stats.diversification import class_correlations, signed_question_exposures
from scoring.stats.inference import (
    block_length,
    bootstrap_ci,
    null_p_value,
    resample_counts,
    stationary_indices,
)
from scoring.stats.metrics import sharpe, simple_returns, sortino, summarise
from scoring.stats.multiple import holm, model_confidence_set
from scoring.stats.sharpe_tests import (
    deflated_sharpe,
    min_track_record,
    probabilistic_sharpe,
    sharpe_difference_hac,
)
from tests.scoring.test_leaderboard import build_store, rows_by_agent
from tests.scoring.test_scoring_conventions import _as_polymarket

RNG = np.random.default_rng(20261127)
#: A fixed daily excess-return series (skewed, fat-tailed) for the Sharpe tests.
X = 0.0008 + 0.01 * RNG.standard_t(5, 250) + 0.002 * RNG.exponential(1.0, 250)


def _ar1(phi: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(0.0, 0.01, n + 200)
    x = np.zeros(n + 200)
    for t in range(1, n + 200):
        x[t] = phi * x[t - 1] + e[t]
    return x[200:]


# ----------------------------------------------------------------------------- 1. bootstrap


def test_draws_are_archs_stationary_bootstrap_and_counts_sum_per_resample() -> None:
    idx = stationary_indices(30, 4.0, 500, seed=3)
    bs = StationaryBootstrap(4.0, np.arange(30), seed=3)  # type: ignore[arg-type]
    assert (idx == np.array([d[0][0] for d in bs.bootstrap(500)])).all()
    counts = resample_counts(idx, 30)
    assert (counts.sum(axis=1) == 30).all()
    assert counts[7].tolist() == np.bincount(idx[7], minlength=30).tolist()


def test_block_length_and_interval_width_on_a_known_ar1() -> None:
    x = _ar1(0.6, 600, seed=11)  # lag-1 autocorrelation 0.6 by construction
    b = block_length(x)
    want = float(optimal_block_length(x)["stationary"].iloc[0])
    assert b == pytest.approx(want) and b > 3.0
    assert block_length(np.zeros(50)) == 1.0 and block_length(x[:5]) == 1.0
    # Interval of the mean: the block bootstrap's width matches the long-run standard error
    # of an AR(1), sigma_e / (1 - phi) / sqrt(T), and is wider than the i.i.d. one by about
    # sqrt((1 + phi) / (1 - phi)) = 2.
    lo, hi = bootstrap_ci(x, np.mean, 4000, 0.95, seed=1)
    lo1, hi1 = bootstrap_ci(x, np.mean, 4000, 0.95, seed=1, block=1.0)
    sd_e = float(np.std(x[1:] - 0.6 * x[:-1], ddof=1))
    long_run = 2 * 1.959964 * sd_e / (1 - 0.6) / math.sqrt(x.size)
    assert (hi - lo) == pytest.approx(long_run, rel=0.25)
    assert (hi - lo) / (hi1 - lo1) > 1.5


def test_p_values_come_from_the_resampled_null_and_never_reach_zero() -> None:
    draws = np.array([0.9, 1.0, 1.1, 1.2, 0.8])
    # centred on 1.0: -0.1, 0, 0.1, 0.2, -0.2; |.| >= 1 never -> the floor 1 / (B + 1).
    assert null_p_value(1.0, draws) == pytest.approx(1 / 6)
    # centred on 0.15: -0.15, -0.05, 0, 0.05, 0.25; two reach |0.15|.
    assert null_p_value(0.15, [0.0, 0.1, 0.15, 0.2, 0.4]) == pytest.approx((1 + 2) / 6)
    assert null_p_value(1.0, draws, one_sided=True) == pytest.approx(1 / 6)
    assert null_p_value(0.0, draws) == 1.0
    assert math.isnan(null_p_value(float("nan"), draws))


# ----------------------------------------------------------------------------- 2. Holm


def test_holm_equals_statsmodels() -> None:
    from statsmodels.stats.multitest import multipletests

    p = [0.01, 0.04, 0.03, 0.2, 0.001, 0.5]
    want = multipletests(p, method="holm")[1]
    assert holm(p) == pytest.approx(list(want))
    got = holm([0.02, float("nan"), 0.03])  # NaN is out of the family (m = 2)
    assert got[0] == pytest.approx(0.04) and math.isnan(got[1]) and got[2] == pytest.approx(0.04)


# ----------------------------------------------------------------------------- 3. Sharpe tests


def test_psr_dsr_and_min_trl_by_bailey_and_lopez_de_prado() -> None:
    sr = float(np.mean(X) / np.std(X, ddof=1))
    g3 = float(skew(X))
    g4 = float(kurtosis(X, fisher=False))
    t = X.size
    denom = math.sqrt(1 - g3 * sr + (g4 - 1) / 4 * sr**2)
    assert probabilistic_sharpe(X) == pytest.approx(norm.cdf(sr * math.sqrt(t - 1) / denom))
    # DSR: the PSR against the expected maximum SR of N = 10 trials with variance V.
    v, n = 0.0004, 10
    sr0 = math.sqrt(v) * ((1 - np.euler_gamma) * norm.ppf(1 - 1 / n)
                          + np.euler_gamma * norm.ppf(1 - 1 / (n * math.e)))
    assert deflated_sharpe(X, n, v) == pytest.approx(
        norm.cdf((sr - sr0) * math.sqrt(t - 1) / denom))
    assert deflated_sharpe(X, 1, v) == pytest.approx(probabilistic_sharpe(X))
    trl = 1 + (1 - g3 * sr + (g4 - 1) / 4 * sr**2) * (norm.ppf(0.95) / sr) ** 2
    assert min_track_record(X) == pytest.approx(trl)
    assert min_track_record(-X) == math.inf
    assert math.isnan(probabilistic_sharpe(np.full(30, 0.001)))  # no spread: undefined


def test_normal_quantiles_equal_scipys_and_a_report_imports_neither_arch_nor_scipy() -> None:
    import subprocess
    import sys

    from scoring.stats.sharpe_tests import _norm_ppf

    qs = [0.0, 1e-9, 0.025, 0.05, 0.5, 0.9, 0.95, 1 - 1 / 1000, 1 - 1 / (1000 * math.e), 1.0]
    assert [_norm_ppf(q) for q in qs] == pytest.approx(list(norm.ppf(qs)), rel=1e-14,
                                                                abs=0)
    assert math.isnan(_norm_ppf(-0.1)) and math.isnan(_norm_ppf(1.5))
    # The draws and the normal quantiles without arch (statsmodels, pandas) or scipy: a
    # report's imports (issue 27, point 1); the figures stay arch's and scipy's (above).
    code = ("import sys; from scoring.board.leaderboard import report_of; "
            "from scoring.stats.inference import stationary_indices as s; s(30, 2.5, 100); "
            "from scoring.stats.sharpe_tests import min_track_record as m; "
            "import numpy; m(numpy.linspace(-0.01, 0.03, 40)); "
            "print(sorted({n.split('.')[0] for n in sys.modules} & {'arch', 'scipy', 'pandas', "
            "'statsmodels'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


def _hac_by_hand(a: np.ndarray, b: np.ndarray, lags: int) -> tuple[float, float]:
    """Ledoit and Wolf (2008) Section 3.1, written out with loops."""
    n = a.size
    ma, mb, ga, gb = a.mean(), b.mean(), (a * a).mean(), (b * b).mean()
    diff = ma / math.sqrt(ga - ma**2) - mb / math.sqrt(gb - mb**2)
    grad = [ga / (ga - ma**2) ** 1.5, -gb / (gb - mb**2) ** 1.5,
            -ma / (2 * (ga - ma**2) ** 1.5), mb / (2 * (gb - mb**2) ** 1.5)]
    y = [[a[t] - ma, b[t] - mb, a[t] ** 2 - ga, b[t] ** 2 - gb] for t in range(n)]
    psi = [[0.0] * 4 for _ in range(4)]
    for j in range(lags + 1):
        w = 1.0 if j == 0 else 1 - j / (lags + 1)
        for t in range(j, n):
            for u in range(4):
                for v in range(4):
                    g = y[t][u] * y[t - j][v] / n
                    psi[u][v] += w * g
                    if j:
                        psi[v][u] += w * g
    var = sum(grad[u] * psi[u][v] * grad[v] for u in range(4) for v in range(4))
    se = math.sqrt(var * n / (n - 4) / n)
    return diff, 2 * (1 - norm.cdf(abs(diff) / se))


def test_sharpe_difference_hac_by_hand_and_close_to_jobson_korkie_memmel() -> None:
    a, b = X[:120], 0.6 * X[:120] + 0.01 * RNG.normal(size=120)
    diff, _, p = sharpe_difference_hac(a, b, lags=3)
    want_diff, want_p = _hac_by_hand(a, b, 3)
    assert (diff, p) == pytest.approx((want_diff, want_p))
    # i.i.d. normal returns, no lag: the HAC test agrees with Jobson-Korkie as corrected by
    # Memmel (2003): theta = (2 - 2 rho + (SR_a^2 + SR_b^2 - 2 SR_a SR_b rho^2) / 2) / T.
    rng = np.random.default_rng(5)
    z = rng.multivariate_normal([0.05, 0.02], [[1.0, 0.5], [0.5, 1.0]], size=5000)
    xa, xb = z[:, 0], z[:, 1]
    sa, sb = xa.mean() / xa.std(), xb.mean() / xb.std()
    rho = float(np.corrcoef(xa, xb)[0, 1])
    theta = (2 - 2 * rho + 0.5 * (sa**2 + sb**2 - 2 * sa * sb * rho**2)) / xa.size
    p_jkm = 2 * (1 - norm.cdf(abs(sa - sb) / math.sqrt(theta)))
    assert sharpe_difference_hac(xa, xb, lags=0)[2] == pytest.approx(p_jkm, abs=0.02)


# ----------------------------------------------------------------------------- 5. MCS


def test_model_confidence_set_equals_archs_mcs() -> None:
    rng = np.random.default_rng(1)
    losses = rng.normal(0, 1, (80, 7)) + np.linspace(0, 0.9, 7)
    m = MCS(losses, 0.1, reps=3000, block_size=3, method="max", seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.compute()
    want = m.pvalues.sort_index()["Pvalue"].to_numpy()
    counts = resample_counts(stationary_indices(80, 3, 3000, 9), 80)
    included, p = model_confidence_set(losses, counts, 0.1, full=True)
    # arch's step p-value is the share (no +1): ours is (1 + B share) / (B + 1).
    assert p == pytest.approx(list((want * 3000 + 1) / 3001))
    assert np.flatnonzero(included).tolist() == sorted(int(j) for j in m.included)  # type: ignore[call-overload]
    inc2, p2 = model_confidence_set(losses, counts, 0.1)  # stops at the set
    assert (inc2 == included).all()
    assert all(math.isnan(p2[j]) for j in np.flatnonzero(inc2))


# ----------------------------------------------------------------------------- board


@pytest.fixture()
def market(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A 61-mark equity store with autocorrelated prices, baselines of PortBench kinds."""
    n = 61
    rets = {"S": 0.004 + _ar1(0.4, n - 1, 1), "N": _ar1(0.4, n - 1, 2),
            "M": 0.001 + _ar1(0.4, n - 1, 3)}
    prices = {a: list(100 * np.cumprod(np.r_[1.0, 1 + r])) for a, r in rets.items()}
    plans = {"steady": {0: {"S": 1.0}}, "noisy": {0: {"N": 1.0}}, "mid": {0: {"M": 1.0}},
             "rp": {0: {"M": 0.5, "N": 0.5}}, "cash": {0: {"CASH": 1.0}}}
    db = tmp_path / "m.db"
    build_store(db, prices, plans, agents_cfg=[{"id": "rp", "kind": "risk_parity"},
                                               {"id": "cash", "kind": "cash"}])
    con = sqlite3.connect(db)
    values = {a: np.array([v for (v,) in con.execute(
        "SELECT value FROM equity WHERE agent=? ORDER BY ts", (a,))]) for a in plans}
    return db, {a: v[1:] / v[:-1] - 1 for a, v in values.items()}


def test_rank_stability_mcs_and_sharpe_tests_on_a_store(
        market: tuple[Path, dict[str, np.ndarray]]) -> None:
    db, rets = market
    board = leaderboard(db)
    rows = [r for r in board["rows"] if r["rank"] is not None]
    names = [r["agent"] for r in rows]
    x = np.column_stack([rets[a] for a in names])  # rf 0: excess = raw
    n = x.shape[0]
    blocks = [min(max(float(optimal_block_length(c)["stationary"].iloc[0]), 1.0), n)
              for c in x.T if np.std(c) > 1e-12]
    block = float(np.median(blocks))
    assert board["markets"]["equity"]["mcs"]["block_length"] == pytest.approx(block)
    sb = StationaryBootstrap(block, np.arange(n), seed=0)  # type: ignore[arg-type]
    idx = np.array([d[0][0] for d in sb.bootstrap(10_000)])
    cum = np.stack([np.prod(1 + x[:, i][idx], axis=1) - 1 for i in range(len(names))], axis=1)
    first = np.argmax(cum, axis=1)
    for i, r in enumerate(rows):
        stab = r["rank_stability"]
        assert stab["top1"] == pytest.approx(np.mean(first == i))
        top3 = np.argsort(-cum, axis=1, kind="stable")[:, :3]
        assert stab["top3"] == pytest.approx(np.mean((top3 == i).any(axis=1)))
        if i:
            lead = np.prod(1 + x[:, 0]) - np.prod(1 + x[:, i])
            d = cum[:, 0] - cum[:, i]
            assert stab["p_to_best"] == pytest.approx(
                (1 + np.sum(d - lead >= lead)) / 10_001)
        # PSR, DSR (trials: the 5 agents of the market), MinTRL on the row's own returns.
        if r["agent"] != "cash":
            assert r["psr"] == pytest.approx(probabilistic_sharpe(rets[r["agent"]]))
            trl = min_track_record(rets[r["agent"]])
            assert r["min_trl"] == (None if trl == math.inf else pytest.approx(trl))
            assert r["distinguishable"] == (n >= trl)
    assert sum(r["rank_stability"]["top1"] for r in rows) == pytest.approx(1.0)
    # The Model Confidence Set: arch's MCS on minus the daily returns, same draws.
    m = MCS(-x, 0.1, reps=10_000, block_size=block, method="max", seed=0)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.compute()
    want = sorted(names[int(j)] for j in m.included)  # type: ignore[call-overload]
    assert sorted(board["markets"]["equity"]["mcs"]["agents"]) == want
    assert all(r["in_mcs"] == (r["agent"] in want) for r in rows)
    # Every comparison is Holm-adjusted within the market; marks follow the adjusted p.
    pairs = {}
    for r in board["rows"]:
        for vs in [r["vs_next"], *r["vs_baselines"].values()]:
            if vs is not None and not vs["provisional"]:
                pairs[frozenset((r["agent"], vs["agent"]))] = vs
    keys = sorted(pairs, key=sorted)
    adj = holm([pairs[k]["p_value"] for k in keys])
    assert [pairs[k]["p_value_holm"] for k in keys] == pytest.approx(adj)
    assert board["markets"]["equity"]["comparisons"] == len(keys)
    # Holm's smallest adjusted p the draws allow: the family times the smallest raw p
    assert board["markets"]["equity"]["holm_floor"] == pytest.approx(
        holm([1 / 10_001] + [1.0] * (len(keys) - 1))[0], rel=1e-12)
    for r in rows[:-1]:
        assert r["tied_with_next"] == (r["vs_next"]["p_value_holm"] >= 0.05)
    # vs_baselines: every baseline configured in the market, PortBench's risk parity too.
    assert set(rows_by_agent(board)["steady"]["vs_baselines"]) == {"rp", "cash"}
    # Shown in the text report and the HTML report.
    text = to_table(board)
    assert "90% Model Confidence Set" in text and ", ".join(
        board["markets"]["equity"]["mcs"]["agents"]) in text
    html = render_html(load_report(db))
    assert "Model Confidence Set</b>" in html


# ----------------------------------------------------------------------------- 6. risk-free


def test_cash_accrues_the_rate_and_all_cash_has_no_negative_sharpe_or_sortino() -> None:
    book = Book("equity", initial_cash=1000.0)
    book.add_agent("c")
    values = [float(book.mark()[0])]
    for _ in range(30):
        book.accrue(0.04 / 252)
        values.append(float(book.values()[0]))
    assert values[-1] == pytest.approx(1000 * (1 + 0.04 / 252) ** 30)
    s = summarise(values, 252, 0.04)
    assert math.isnan(s.sharpe) and math.isnan(s.sortino)  # undefined, never -sqrt(252)
    r = np.diff(values) / np.array(values[:-1])
    assert math.isnan(sharpe(r, 252, 0.04)) and math.isnan(sortino(r, 252, 0.04))
    book.accrue(0.0)
    assert float(book.values()[0]) == pytest.approx(values[-1])
    with pytest.raises(ValueError):
        book.accrue(float("nan"))


def test_risk_free_rate_setting_defaults_to_zero_and_validates() -> None:
    cfg = parse_config({})
    assert cfg.markets.equity.risk_free_rate == 0.0
    assert cfg.markets.polymarket.risk_free_rate == 0.0
    assert parse_config({"markets": {"polymarket": {"risk_free_rate": 0.03}}}
                        ).markets.polymarket.risk_free_rate == 0.03
    for bad in (float("nan"), float("inf"), 0.9, "4%"):
        with pytest.raises(ConfigError):
            parse_config({"markets": {"polymarket": {"risk_free_rate": bad}}})


def test_report_uses_excess_returns_and_states_the_rate(tmp_path: Path) -> None:
    db = tmp_path / "rf.db"
    build_store(db, {"A": [100.0, 101.0, 103.0, 102.0, 104.0]},
                {"a": {0: {"A": 1.0}}}, rf=0.05)
    board = leaderboard(db)
    row = rows_by_agent(board)["a"]
    r = np.array([101 / 100, 103 / 101, 102 / 103, 104 / 102]) - 1
    assert row["cumulative_excess_return"] == pytest.approx(np.prod(1 + r - 0.05 / 252) - 1)
    assert row["psr"] == pytest.approx(probabilistic_sharpe(r - 0.05 / 252))
    assert "equity 5.00%" in to_table(board).splitlines()[0]
    assert "cash accrues it" in to_table(board).splitlines()[0]


# ----------------------------------------------------------------------------- 7. Polymarket


def test_one_polymarket_question_scores_as_concentrated() -> None:
    rng = np.random.default_rng(2)
    y1, y2 = rng.normal(0, 0.05, 40), rng.normal(0, 0.05, 40)
    y2 = 0.8 * y1 + 0.6 * y2  # the two questions' YES series correlate positively
    corr = class_correlations(np.column_stack([y1, y2, np.zeros(40)]), ["q1", "q2", "CASH"],
                              {"q1": "q1", "q2": "q2", "CASH": "cash"})
    questions = {"q1": ["Y1", "N1"], "q2": ["Y2", "N2"]}
    one = signed_question_exposures({"Y1": 1.0}, questions, corr)
    assert one == pytest.approx({"s_intra": 0.0, "s_inter": 0.0, "s_corr": 0.0})  # concentrated
    no = signed_question_exposures({"N1": 1.0}, questions, corr)
    assert no["s_corr"] == pytest.approx(0.0)  # a NO token alone: the same single exposure
    # YES and NO of one question in equal value: the pair pays out whatever happens (cash).
    assert math.isnan(signed_question_exposures({"Y1": 0.5, "N1": 0.5}, questions,
                                                corr)["s_corr"])
    rho = corr.cross[("q1", "q2")]
    same = signed_question_exposures({"Y1": 0.5, "Y2": 0.5}, questions, corr)
    hedge = signed_question_exposures({"Y1": 0.5, "N2": 0.5}, questions, corr)
    assert same["s_inter"] == pytest.approx((1 - rho) / 2)
    assert hedge["s_inter"] == pytest.approx(min(1.0, (1 + rho) / 2))  # signed: a hedge
    assert same["s_intra"] == pytest.approx(0.0)


def test_polymarket_store_single_question_and_annulled_brier(tmp_path: Path) -> None:
    db = tmp_path / "pm.db"
    marks = build_store(db, {"Y": [0.5, 0.6, 0.7, 0.8], "N": [0.5, 0.4, 0.3, 0.2],
                             "Y2": [0.5, 0.5, 0.6, 0.5], "N2": [0.5, 0.5, 0.4, 0.5]},
                        {"yes": {0: {"Y": 1.0}}, "spread": {0: {"Y": 0.5, "N2": 0.5}}})
    _as_polymarket(db, None)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO books(market, state_json, updated_ts) VALUES(?,?,?)",
                ("polymarket", json.dumps({"questions": {"q1": ["Y", "N"],
                                                         "q2": ["Y2", "N2"]}}), marks[0]))
    con.execute("INSERT INTO resolutions(question_id, market, ts, payouts_json) VALUES(?,?,?,?)",
                ("q1", "polymarket", marks[2] + 3600, json.dumps({"Y": 1.0, "N": 0.0})))
    con.execute("INSERT INTO resolutions(question_id, market, ts, payouts_json) VALUES(?,?,?,?)",
                ("q2", "polymarket", marks[2] + 3600, json.dumps({"Y2": 0.5, "N2": 0.5})))
    con.commit()
    con.close()
    rows = rows_by_agent(leaderboard(db))
    assert rows["yes"]["s_corr"] == pytest.approx(0.0)  # one question held: concentrated
    assert rows["spread"]["s_corr"] > 0.0
    # q2 was annulled 50/50: out of the Brier score, counted apart.
    assert rows["yes"]["brier_questions"] == 1 and rows["yes"]["brier_annulled"] == 1
    assert rows["yes"]["brier"] == pytest.approx(0.0)


# ----------------------------------------------------------------------------- replayed


def test_replayed_cash_accrues_the_rate_and_scores_no_negative_ratio(tmp_path: Path) -> None:
    import asyncio

    from daemon.app.replay import replay
    from daemon.config.settings import load_config
    from tests.recordings import TINY_CONFIG, make_recording

    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec, days=6)
    cfg_path = tmp_path / "rf.toml"
    cfg_path.write_text(TINY_CONFIG.replace(
        '[markets.equity]\n', '[markets.equity]\nrisk_free_rate = 0.05\n').replace(
        '[markets.polymarket]\n', '[markets.polymarket]\nrisk_free_rate = 0.05\n')
        + "\n[http]\nenabled = false\n")
    db = tmp_path / "rf.db"
    asyncio.run(replay(rec, load_config(cfg_path), db, progress=False))
    con = sqlite3.connect(db)
    for market in ("equity", "polymarket"):
        cash = [v for (v,) in con.execute(
            "SELECT value FROM equity WHERE agent='cash' AND market=? AND kind='daily'"
            " ORDER BY ts", (market,))]
        assert len(cash) >= 3
        # Every daily mark grows the cash by the rate of one period, 0.05 / 252.
        assert np.diff(cash) / np.array(cash[:-1]) == pytest.approx(0.05 / 252, rel=1e-9)
    board = leaderboard(db)
    assert board["conventions"]["risk_free_rate"] == {"equity": 0.05, "polymarket": 0.05}
    for r in board["rows"]:
        if r["agent"] == "cash":
            assert r["sharpe"] is None and r["sortino"] is None  # never -sqrt(252)
            assert r["cumulative_excess_return"] == pytest.approx(0.0, abs=1e-12)


def test_a_store_from_before_the_accrual_uses_no_rate(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    build_store(db, {"A": [100.0, 101.0, 103.0, 102.0, 104.0]},
                {"a": {0: {"A": 1.0}}, "cash": {0: {"CASH": 1.0}}}, rf=0.04)
    con = sqlite3.connect(db)
    (cfg_json,) = con.execute("SELECT config_json FROM runs").fetchone()
    cfg = json.loads(cfg_json)
    cfg["markets"]["polymarket"] = {"initial_cash": 500.0}  # no rate: written before issue 27
    con.execute("UPDATE runs SET config_json=?", (json.dumps(cfg),))
    con.commit()
    con.close()
    board = leaderboard(db)
    # Its cash never accrued the stated 4 %: the report uses 0, so all cash is not -sqrt(252).
    assert board["conventions"]["risk_free_rate"] == {"equity": 0.0, "polymarket": 0.0}
    cash = rows_by_agent(board)["cash"]
    assert cash["sortino"] is None and cash["sharpe"] is None
    r = np.array([101 / 100, 103 / 101, 102 / 103, 104 / 102]) - 1
    assert rows_by_agent(board)["a"]["sharpe"] == pytest.approx(sharpe(r, 252, 0.0))


@pytest.mark.parametrize("n", [4, 5, 6])
def test_a_resample_of_one_repeated_day_has_no_sharpe(tmp_path: Path, n: int) -> None:
    # A few days: many resamples repeat one day (zero spread; the one-pass variance left ~1e-20,
    # a Sharpe of ~1e8). "dust" holds a millionth in N, then all M: a real spread of ~1e-8 in its
    # draws without the last day, which one pass cancels; kept. Two-pass reference.
    rng = np.random.default_rng(n)
    prices = {"N": list(100 * np.cumprod(np.r_[1.0, 1.0 + rng.normal(0.002, 0.02, n - 1)])),
              "M": list(100 * np.cumprod(np.r_[1.0, 1.0 + rng.normal(0.001, 0.01, n - 1)]))}
    prices["M"][-1] *= 1.04
    db = tmp_path / "short.db"
    build_store(db, prices, {"noisy": {0: {"N": 1.0}}, "mild": {0: {"M": 1.0}},
                             "dust": {0: {"N": 1e-6, "CASH": 1 - 1e-6}, n - 2: {"M": 1.0}}},
                rf=0.04)
    rows = leaderboard(db)["rows"]
    con = sqlite3.connect(db)
    rets = {r["agent"]: simple_returns([v for (v,) in con.execute(
        "SELECT value FROM equity WHERE agent=? ORDER BY ts", (r["agent"],))]) for r in rows}
    bs = StationaryBootstrap(1.0, np.arange(n - 1), seed=0)  # i.i.d.: under 10 days
    idx = np.array([d[0][0] for d in bs.bootstrap(10_000)])
    one_day = (idx == idx[:, :1]).all(axis=1)
    assert one_day.any()  # the case under test occurs
    for r in rows:
        xs = (rets[r["agent"]] - 0.04 / 252)[idx]
        mean, sd = xs.mean(axis=1), xs.std(axis=1, ddof=1)
        defined = sd > 1e-12 * np.maximum(1.0, np.abs(mean))
        assert not defined[one_day].any()
        want = np.quantile((mean / np.where(defined, sd, 1.0) * math.sqrt(252))[defined],
                           [0.025, 0.975])
        if r["agent"] == "dust":  # its excess returns: -rf / N plus a spread of ~1e-8
            tiny = sd < 1e-6
            assert defined[tiny].sum() > 1000 and np.all(sd[tiny & defined] > 1e-9)
        else:
            assert max(abs(x) for x in r["sharpe_ci"]) < 1e3
        assert r["sharpe_ci"] == pytest.approx(list(want), rel=1e-9)


def test_a_family_too_large_for_its_draws_says_none_can_be_significant() -> None:
    # 4,983 comparisons, 10,000 draws (the bench's 1,000 agents): the smallest Holm p is 0.498
    big = {"mcs": {"agents": ["a"], "days": 84}, "comparisons": 4983, "holm_floor": 0.49825}
    small = {**big, "comparisons": 400, "holm_floor": 400 / 10_001}
    lines = mcs_lines({"rows": [], "markets": {"equity": big, "polymarket": small}})
    assert lines[0].endswith("4983 comparisons, Holm-adjusted (the smallest adjusted p-value "
                             "the draws allow is 0.498: none can be significant)"), lines
    assert lines[1].endswith("400 comparisons, Holm-adjusted"), lines
    assert "0.498: none can be significant" in mcs_band(big) and "none" not in mcs_band(small)
