"""AlphaForgeBench instability measures against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agents.alphaforgebench.instability_stats import (
    active_jaccard,
    agreement_matrix,
    backtest_return,
    backtest_values,
    disagreement_step_fraction,
    exposures,
    jaccard,
    majority,
    pairwise_agreement,
    run_sharpe,
    snr,
    stepwise_agreement,
    temperature_agreement,
)

RUNS = [[1, 0, -1, 0],
        [1, 0, 0, 0],
        [1, 1, -1, 0]]


def test_pairwise_agreement_by_hand() -> None:
    # pairs: (0,1) 3/4, (0,2) 3/4, (1,2) 2/4 -> mean 2/3
    m = agreement_matrix(RUNS)
    assert m[0][1] == 0.75 and m[0][2] == 0.75 and m[1][2] == 0.5 and m[2][2] == 1.0
    assert pairwise_agreement(RUNS) == pytest.approx(2 / 3)


def test_disagreement_steps_by_hand() -> None:
    # step 0 all 1, step 1 {0,1}, step 2 {-1,0}, step 3 all 0 -> 2 of 4
    assert disagreement_step_fraction(RUNS) == 0.5
    assert disagreement_step_fraction([[1, 1], [1, 1]]) == 0.0


def test_jaccard_of_active_steps_by_hand() -> None:
    a = [True, True, False, False]
    b = [True, False, True, False]
    c = [False, False, False, False]
    assert jaccard(a, b) == pytest.approx(1 / 3)
    assert jaccard(c, c) == 1.0
    assert jaccard(a, c) == 0.0
    # pairs (a,b) 1/3, (a,c) 0, (b,c) 0 -> 1/9
    assert active_jaccard([a, b, c]) == pytest.approx(1 / 9)


def test_snr_by_hand() -> None:
    # means 0.2 and 0.1 -> spread 0.1; sample stds 0.2/sqrt(2) each -> SNR sqrt(2)/2
    assert snr({"m1": [0.1, 0.3], "m2": [0.0, 0.2]}) == pytest.approx(math.sqrt(2) / 2)
    # means 2, 5 -> 3; stds 1 (1,2,3) and 2 (3,5,7) -> within 1.5 -> SNR 2
    assert snr({"a": [1, 2, 3], "b": [3, 5, 7]}) == pytest.approx(2.0)
    assert snr({"a": [1.0, 1.0], "b": [2.0, 2.0]}) == math.inf
    assert snr({"a": [1.0, 1.0], "b": [1.0, 1.0]}) == 0.0
    assert snr({"a": [1.0, 2.0]}) is None
    assert snr({"a": [1.0], "b": [1.0, 2.0]}) is None


def test_temperature_agreement_by_hand() -> None:
    # majority of RUNS: step 0 -> 1, step 1 -> 0 (0,0,1), step 2 -> -1 (-1,0,-1), step 3 -> 0
    assert majority(RUNS) == [1, 0, -1, 0]
    assert majority([[1, -1], [-1, 1]]) == [0, 0]  # ties hold
    other = [[1, 1, 0, 0], [1, 1, -1, 0]]  # majority [1, 1, 0 (tie -1/0), 0]
    assert temperature_agreement(RUNS, other) == 0.5  # steps 0 and 3 agree


def test_exposures_hold_on_zero_and_failure() -> None:
    got = exposures([1, 0, -1, 0, 1, 1], [0.5, 0.9, 0.7, 1.0, 1.0, 0.3],
                    failed=[False, False, False, False, False, True])
    assert got == [0.5, 0.5, 0.0, 0.0, 1.0, 1.0]


def test_backtest_return_by_hand() -> None:
    # One asset 100 -> 110 -> 99, fully in from the first close, out at the second.
    # buy: 1 * (1 - 0.001) = 0.999; * 1.1 = 1.0989; sell: * (1 - 0.001) = 1.0978011
    r = backtest_return([[100.0, 110.0, 99.0]], [[1.0, 0.0, 0.0]], cost=0.001)
    assert r == pytest.approx(1.0978011 - 1)
    # Two sleeves: the second stays flat (1.0) -> mean of 1.0978011 and 1.0.
    r2 = backtest_return([[100.0, 110.0, 99.0], [5.0, 6.0, 7.0]],
                         [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], cost=0.001)
    assert r2 == pytest.approx((1.0978011 + 1.0) / 2 - 1)
    # Half exposure without costs: 1 + 0.5 * 0.1 = 1.05, then 1.05 * (1 + 0.5 * -0.1) = 0.9975
    assert backtest_return([[100.0, 110.0, 99.0]], [[0.5, 0.5, 0.5]], cost=0.0) == \
        pytest.approx(0.9975 - 1)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        pairwise_agreement([[1, 0]])
    with pytest.raises(ValueError):
        disagreement_step_fraction([[1, 0], [1]])


def test_the_instability_backtest_is_frictionless() -> None:
    """The paper's instability study and Table 9 backtest without costs: the frozen backtest's
    cost is 0, so a run's return is the mean over its sleeves of the compounded exposure-weighted
    close-to-close returns (numpy by hand), however often it trades."""
    from agents.alphaforgebench.instability import COST, run_figures

    assert COST == 0.0
    bars = {"A": {"ts": [1.0, 2.0, 3.0, 4.0, 5.0], "close": [100.0, 104.0, 99.0, 101.0, 97.0]},
            "B": {"ts": [1.0, 2.0, 3.0, 4.0, 5.0], "close": [50.0, 49.0, 52.0, 53.0, 55.0]}}
    run = {"signals": {"A": [1, -1, 1, -1, 1], "B": [1, 0, 0, -1, 0]},
           "positions": {"A": [1.0, 0.0, 0.5, 0.0, 1.0], "B": [0.8, 0.0, 0.0, 0.0, 0.0]},
           "failed": {"A": [False] * 5, "B": [False] * 5}}
    _, _, ret, _ = run_figures(bars, run)
    held = {"A": np.array([1.0, 0.0, 0.5, 0.0, 1.0]), "B": np.array([0.8, 0.8, 0.8, 0.0, 0.0])}
    sleeves = []
    for a in ("A", "B"):
        c = np.asarray(bars[a]["close"])
        sleeves.append(np.prod(1.0 + held[a][:-1] * (c[1:] / c[:-1] - 1.0)))
    assert ret == pytest.approx(float(np.mean(sleeves)) - 1.0, abs=1e-15)


def test_stepwise_agreement_is_the_jaccard_of_actions_per_step() -> None:
    """The paper's step-wise agreement: per step, the Jaccard similarity of the actions of each
    pair of runs ({a} vs {b}: 1 when equal, 0 otherwise), averaged over the pairs; its mean over
    the steps is the pairwise agreement rate (the paper's two figures coincide)."""
    rng = np.random.default_rng(3)
    runs = rng.choice([-1, 0, 1], size=(5, 40), p=[0.2, 0.6, 0.2])
    got = stepwise_agreement(runs.tolist())
    pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    want = np.mean([[len({runs[i, t]} & {runs[j, t]}) / len({runs[i, t]} | {runs[j, t]})
                     for i, j in pairs] for t in range(40)], axis=1)
    assert got == pytest.approx(want.tolist())
    assert float(np.mean(got)) == pytest.approx(pairwise_agreement(runs.tolist()))
    # By hand on RUNS: step 0 all agree (1), step 1 one pair of three (1/3), step 2 (0,2) agree
    # (1/3), step 3 all agree (1).
    assert stepwise_agreement(RUNS) == pytest.approx([1.0, 1 / 3, 1 / 3, 1.0])


def test_snr_is_over_the_runs_sharpe_ratios() -> None:
    """Appendix F's SNR is the inter-model Sharpe-ratio range over the typical run-to-run std:
    each run's figure is the annualised Sharpe ratio of its backtest's bar-to-bar returns
    (numpy by hand), and the SNR of those figures is (max - min of the means) / mean std."""
    closes = [[100.0, 103.0, 101.0, 104.0, 102.0, 106.0, 105.0],
              [20.0, 19.5, 20.5, 21.0, 20.0, 20.8, 21.5]]
    helds = {"m1": [[[1, 1, 0, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0, 0]],
                    [[1, 0, 0, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0, 0]]],
             "m2": [[[0, 0, 1, 1, 0, 1, 0], [1, 1, 0, 0, 1, 1, 0]],
                    [[0, 1, 1, 1, 0, 1, 0], [1, 0, 0, 0, 1, 1, 0]],
                    [[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0]]]}
    c = np.asarray(closes)
    figures: dict[str, list[float]] = {}
    for m, runs in helds.items():
        for held in runs:
            h = np.asarray(held, dtype=float)
            sleeves = np.cumprod(np.concatenate(
                [np.ones((2, 1)), 1.0 + h[:, :-1] * (c[:, 1:] / c[:, :-1] - 1.0)], axis=1),
                axis=1)
            v = sleeves.mean(axis=0)  # frictionless: value after each bar
            assert backtest_values(closes, held, cost=0.0) == pytest.approx(v.tolist())
            r = v[1:] / v[:-1] - 1.0
            sr = r.mean() / r.std(ddof=1) * np.sqrt(252)
            assert run_sharpe(v.tolist()) == pytest.approx(float(sr))
            figures.setdefault(m, []).append(float(sr))
    means = [np.mean(f) for f in figures.values()]
    within = np.mean([np.std(f, ddof=1) for f in figures.values()])
    assert snr(figures) == pytest.approx(float((max(means) - min(means)) / within))
    assert run_sharpe([1.0, 1.0, 1.0]) == 0.0  # never invested: no volatility, ratio 0
