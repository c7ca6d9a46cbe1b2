"""PortBench's profile alignment, adaptation and stress-CEPS scores (issue 29, point 3)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from agents.portbench.profile_scores import (
    decision_pas,
    profile_html,
    profile_lines,
    profile_scores,
    stress_window,
)


def wf(profile: str, answers: int, cap: int, floor: int, var: float | None) -> dict[str, Any]:
    return {"protocol": "portbench", "profile": profile,
            "alignment": {"answers": answers, "equity_cap": cap, "bond_floor": floor},
            "risk_truth": {"var_95": var, "max_drawdown": -0.05, "rebalance": False}}


def ts(y: int, m: int, d: int) -> float:
    return datetime(y, m, d, 15, tzinfo=UTC).timestamp()


def test_decision_pas_is_the_mean_of_its_checks() -> None:
    # All kept: 1.
    assert decision_pas(wf("balanced", 1, 0, 0, -0.015)) == 1.0
    # One of two answers broke the cap (1/2), floor kept (1), VaR -2.5 % < -2 % (0): 0.5.
    assert decision_pas(wf("balanced", 2, 1, 0, -0.025)) == pytest.approx((0.5 + 1 + 0) / 3)
    # The conservative limit is -1 %: -1.5 % breaks it; no VaR known: two checks only.
    assert decision_pas(wf("conservative", 1, 0, 0, -0.015)) == pytest.approx(2 / 3)
    assert decision_pas(wf("aggressive", 3, 0, 3, None)) == pytest.approx(0.5)
    # A workflow that never reached the weights stage, or of no profile: not evaluable.
    assert decision_pas({"profile": "balanced", "failed_step": "views"}) is None
    assert decision_pas({"alignment": {"answers": 1}}) is None


def test_adaptation_is_the_spread_of_the_mean_pas_over_profiles() -> None:
    decisions = [
        ("m-cons", ts(2024, 3, 1), wf("conservative", 2, 1, 0, -0.005)),  # (0.5+1+1)/3
        ("m-cons", ts(2024, 3, 2), wf("conservative", 1, 0, 0, -0.005)),  # 1
        ("m-bal", ts(2024, 3, 1), wf("balanced", 1, 0, 0, -0.03)),  # 2/3
        ("m-agg", ts(2024, 3, 1), wf("aggressive", 1, 0, 0, -0.03)),  # 1
        ("flat", ts(2024, 3, 1), wf("balanced", 1, 0, 0, -0.01)),  # 1, one profile only
    ]
    cfg = {a: {"model": "openai/m", "protocol": "portbench"} for a in ("m-cons", "m-bal",
                                                                       "m-agg")}
    cfg["flat"] = {"model": "openai/flat", "protocol": "portbench"}
    out = profile_scores(decisions, cfg, {"m-cons": 0.5})
    cons = ((0.5 + 1 + 1) / 3 + 1.0) / 2
    assert out["pas"]["m-cons"]["PAS"] == pytest.approx(cons)
    assert out["pas"]["m-cons"]["decisions"] == 2
    means = [cons, 2 / 3, 1.0]
    mu = sum(means) / 3
    std = math.sqrt(sum((x - mu) ** 2 for x in means) / 3)  # population
    got = out["adaptation"]["openai/m"]
    assert got["adapt_score"] == pytest.approx(std)
    assert got["profiles"] == pytest.approx({"conservative": cons, "balanced": 2 / 3,
                                             "aggressive": 1.0})
    assert out["adaptation"]["openai/flat"]["adapt_score"] is None
    assert "stress_ceps" not in out  # March 2024 is no stress window
    text = "\n".join(profile_lines(out))
    assert f"{std:.3f}" in text and "m-cons" in text
    assert "<h3>Adaptation score</h3>" in profile_html(out)


@pytest.mark.parametrize(("day", "name", "threshold"), [
    ((2015, 8, 3), "2015 China Shock", 0.40),
    ((2020, 3, 16), "2020 COVID Crash", 0.45),
    ((2022, 12, 30), "2022 Crypto Collapse", 0.50),
])
def test_stress_ceps_against_table_6(day: tuple[int, int, int], name: str,
                                     threshold: float) -> None:
    at = ts(*day)
    decisions = [("a", at, wf("balanced", 1, 0, 0, -0.01)),
                 ("b", at, wf("balanced", 1, 0, 0, -0.01))]
    cfg = {"a": {"protocol": "portbench"}, "b": {"protocol": "portbench"}}
    out = profile_scores(decisions, cfg, {"a": threshold, "b": threshold - 0.001})
    stress = out["stress_ceps"]
    assert (stress["window"], stress["threshold"]) == (name, threshold)
    assert stress["agents"]["a"]["risk_safe"] is True  # at the threshold: safe
    assert stress["agents"]["b"]["risk_safe"] is False
    text = "\n".join(profile_lines(out))
    assert f"({name}: risk-safe when CEPS >= {threshold:.2f})" in text
    assert "risk-UNSAFE" in text


def test_a_store_across_a_window_edge_is_no_stress_window() -> None:
    assert stress_window([ts(2020, 1, 31), ts(2020, 3, 1)]) is None
    assert stress_window([ts(2020, 2, 1), ts(2020, 5, 31)]) == ("2020 COVID Crash", 0.45)
    assert stress_window([]) is None
