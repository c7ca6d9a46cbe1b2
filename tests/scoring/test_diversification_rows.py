"""Issue 27, point 1: the row-vectorised diversification equals the scalar one bit for bit."""

from __future__ import annotations

import math

import numpy as np

from scoring.stats.diversification import (
    class_correlations,
    diversification,
    diversification_rows,
    signed_question_exposures,
    signed_question_rows,
)


def _same(got: np.ndarray, want: dict[str, float]) -> None:
    for i, k in enumerate(("s_intra", "s_inter", "s_corr")):
        w = want[k]
        assert (math.isnan(got[i]) and math.isnan(w)) or got[i] == w, (k, got[i], w)


def test_rows_equal_the_scalar_scores_of_every_row() -> None:
    rng = np.random.default_rng(7)
    assets = ["A", "B", "C", "D", "E", "CASH"]
    classes = {"A": "x", "B": "y", "C": "x", "D": "z", "E": "y", "CASH": "cash"}
    panel = np.column_stack([rng.normal(0, 0.01, (40, 5)), np.zeros(40)])
    corr = class_correlations(panel, assets, classes)
    w = rng.dirichlet(np.ones(6), 60)
    w[rng.random((60, 6)) < 0.4] = 0.0  # rows holding different sets (and orders) of classes
    w[3] = 0.0
    w[4] = [0, 0, 0, 0, 0, 1.0]  # all cash: NaN
    got = diversification_rows(w, assets, corr, 1e-12)
    for t in range(60):
        _same(got[t], diversification({a: float(x) for a, x in zip(assets, w[t], strict=True)
                                       if x > 1e-12}, corr))


def test_question_rows_equal_the_scalar_signed_exposures() -> None:
    rng = np.random.default_rng(3)
    questions = {f"q{i}": [f"q{i}Y", f"q{i}N"] for i in range(5)}
    assets = [t for toks in questions.values() for t in toks]
    series = np.column_stack([rng.normal(0, 0.05, (30, 5)), np.zeros(30)])
    corr = class_correlations(series, [*questions, "CASH"],
                              {**{q: q for q in questions}, "CASH": "cash"})
    w = rng.dirichlet(np.ones(11), 80)
    w[rng.random((80, 11)) < 0.5] = 0.0
    w[5, :-1] = 0.0  # nothing at risk: NaN
    w[6] = 0.0
    w[6, [0, 1]] = 0.5  # YES and NO matched: cash only, NaN
    w[7] = 0.0
    w[7, 0] = 1.0  # one question held: concentrated
    got = signed_question_rows(w, assets, questions, corr)
    for t in range(80):
        weights = {a: float(w[t, j]) for j, a in enumerate(assets)} | {"CASH": float(w[t, -1])}
        _same(got[t], signed_question_exposures(weights, questions, corr))
    assert got[7, 0] == 0.0  # s_intra of one question: 1 - 1 * rho_intra(1)


def test_rows_of_more_assets_than_a_pattern_number_holds_equal_the_scalar_scores() -> None:
    rng = np.random.default_rng(17)  # 70 columns: the held patterns grouped by np.unique's rows
    assets = [f"A{j}" for j in range(69)] + ["CASH"]
    classes = {a: f"c{j % 7}" for j, a in enumerate(assets[:-1])} | {"CASH": "cash"}
    panel = np.column_stack([rng.normal(0, 0.01, (40, 69)), np.zeros(40)])
    corr = class_correlations(panel, assets, classes)
    w = rng.dirichlet(np.ones(70), 50)
    w[rng.random((50, 70)) < 0.9] = 0.0
    w[7] = w[3]  # two rows holding the same assets
    got = diversification_rows(w, assets, corr, 1e-12)
    for t in range(50):
        _same(got[t], diversification({a: float(x) for a, x in zip(assets, w[t], strict=True)
                                       if x > 1e-12}, corr))
