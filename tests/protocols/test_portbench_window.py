"""PortBench's lookback window is a setting honoured everywhere, and its profile alignment,
adaptation and stress-CEPS scores (issue 29, point 3).

The market keeps as many daily closes as the longest window needs; the S1 prompt, the stored
risk ground truth, the covariance baselines and the S3 oracle all read ``cov_window`` returns.
Every figure is recomputed here from the raw closes, by hand.
"""

from __future__ import annotations

import gzip
import json
import math
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from agents.base import CASH, Observation, PricePoint
from agents.config import AgentConfig
from agents.portbench.agent import PortBenchAgent
from agents.portbench.profile_scores import (
    decision_pas,
    profile_html,
    profile_lines,
    profile_scores,
    stress_window,
)
from agents.portbench.scores import max_sharpe, score_decision
from daemon.config.settings import parse_config
from daemon.core.sparse_rows import DECISIONS, fill_map
from daemon.engine.engine import history_days
from daemon.market.state import HISTORY_DAYS
from tests.llm_server import FakeLlmServer, ok

ROOT = Path(__file__).resolve().parents[2]
NY = ZoneInfo("America/New_York")
T = 1_714_600_000.0
DAY = 86_400.0
KEY_ENV = "PAPERARENA_TEST_LLM_KEY"


def test_the_history_kept_is_sized_to_the_longest_window() -> None:
    pb = {"id": "pb", "kind": "llm", "model": "openai/m", "protocol": "portbench",
          "markets": ["equity"]}
    assert history_days(parse_config({"agents": [pb]})) == 61  # default cov_window 60
    rp = {"id": "rp", "kind": "risk_parity", "cov_window": 120}
    assert history_days(parse_config({"agents": [pb, rp]})) == 121
    small = {"id": "mv", "kind": "min_variance", "cov_window": 10}
    assert history_days(parse_config({"agents": [small]})) == HISTORY_DAYS
    assert history_days(parse_config({"agents": [{"id": "ew", "kind": "equal_weight"}]})) == 30
    mom = {"id": "mom", "kind": "momentum", "lookback_days": 90}
    assert history_days(parse_config({"agents": [mom]})) == 90


def _recorded_closes(until: float) -> dict[str, dict[str, float]]:
    """Return asset -> New York day -> last recorded price before ``until``, from the file."""
    out: dict[str, dict[str, float]] = {}
    with gzip.open(ROOT / "examples" / "portbench-sample.jsonl.gz", "rt") as f:
        for line in f:
            ev = json.loads(line) if line.strip() else {}
            if ev.get("type") != "PriceEvent" or ev["ts"] >= until:
                continue
            day = datetime.fromtimestamp(ev["ts"], NY).date().isoformat()
            out.setdefault(ev["asset"], {})[day] = ev["price"]
    return out


def _inverse_vol(closes: dict[str, dict[str, float]], assets: list[str], n: int) -> list[float]:
    days = sorted(set.intersection(*(set(closes[a]) for a in assets)))[-(n + 1):]
    inv = []
    for a in assets:
        px = [closes[a][d] for d in days]
        r = [px[i + 1] / px[i] - 1.0 for i in range(len(px) - 1)]
        mean = sum(r) / len(r)
        inv.append(1.0 / math.sqrt(sum((x - mean) ** 2 for x in r) / (len(r) - 1)))
    return [x / sum(inv) for x in inv]


async def test_a_covariance_baseline_reads_its_whole_window_from_a_replay(
    tmp_path: Path,
) -> None:
    import sqlite3

    from daemon.app.replay import replay

    data = tomllib.loads((ROOT / "examples" / "portbench.toml").read_text())
    data["agents"] = [{"id": "rp", "kind": "risk_parity", "cov_window": 45}]
    cfg = parse_config(data)
    end = datetime(2026, 7, 20, tzinfo=NY).timestamp()  # 55 sessions: more than 30 closes
    await replay(ROOT / "examples" / "portbench-sample.jsonl.gz", cfg, tmp_path / "w.db",
                 progress=False, window=(None, end))
    con = sqlite3.connect(tmp_path / "w.db")
    ts, raw, index = con.execute(
        f"SELECT d.scheduled_ts, d.allocation_json, s.assets_json FROM {DECISIONS}"
        " WHERE d.agent='rp' AND d.outcome='ok' ORDER BY d.scheduled_ts DESC LIMIT 1").fetchone()
    con.close()
    got = fill_map(raw, index)
    assets = list(data["markets"]["equity"]["assets"])
    closes = _recorded_closes(ts)
    want = _inverse_vol(closes, assets, 45)
    assert [got[a] for a in assets] == pytest.approx(want, rel=1e-9)
    # The old cap (30 closes) gives other weights: the window was not honoured then.
    capped = _inverse_vol(closes, assets, 29)
    assert max(abs(x - y) for x, y in zip(want, capped, strict=True)) > 1e-4


def _obs(n: int) -> Observation:
    """Two assets with ``n + 1`` daily closes of a fixed pseudo-random walk."""
    rng = np.random.default_rng(7)
    history = {}
    for j, a in enumerate(("SPY", "TLT")):
        px = [100.0]
        for r in rng.normal(0.0005 * (1 - j), 0.01 + 0.01 * (1 - j), n):
            px.append(px[-1] * (1.0 + float(r)))
        history[a] = tuple(PricePoint(T - (n + 1 - i) * DAY, p) for i, p in enumerate(px))
    return Observation(
        agent="pb", market="equity", decision_ts=T, assets=("SPY", "TLT"),
        prices={a: PricePoint(T - 60, 100.0) for a in ("SPY", "TLT")}, history=history,
        holdings={}, cash=1000.0, value=1000.0, initial_value=1000.0,
        weights={"SPY": 0.0, "TLT": 0.0, CASH: 1.0}, news={},
    )


async def _no_sleep(_: float) -> None:
    return None


def _answers(server: FakeLlmServer, w: dict[str, float]) -> None:
    server.push_step("views", ok(json.dumps({"regime": "bull", "views": {"SPY": 0.5, "TLT": 0.3}})))
    server.push_step("signals", ok(json.dumps({"signals": {"SPY": "buy", "TLT": "buy"}})))
    server.push_step("weights", ok(json.dumps({"weights": w})))
    server.push_step("risk", ok(json.dumps({"rebalance": True, "var_95": -0.01,
                                            "max_drawdown": -0.02})))


def _agent(server: FakeLlmServer, monkeypatch: Any, **kw: Any) -> PortBenchAgent:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    cfg = AgentConfig.model_validate({
        "id": "pb", "kind": "llm", "model": "openai/test-model", "api_base": server.api_base,
        "api_key_env": KEY_ENV, "timeout": 5, "max_attempts": 2, "protocol": "portbench",
        "markets": ["equity"], "asset_classes": {"SPY": "equities", "TLT": "bonds"}, **kw})
    return PortBenchAgent(cfg, sleep=_no_sleep)


def _var_dd(port: list[float]) -> tuple[float, float]:
    srt, k = sorted(port), 0.05 * (len(port) - 1)
    lo = int(k)
    var = srt[lo] + (k - lo) * (srt[min(lo + 1, len(srt) - 1)] - srt[lo])
    nav = peak = 1.0
    dd = 0.0
    for r in port:
        nav *= 1.0 + r
        peak = max(peak, nav)
        dd = min(dd, nav / peak - 1.0)
    return var, dd


async def test_the_prompt_and_the_risk_truth_use_the_configured_window(
    monkeypatch: Any,
) -> None:
    ob = _obs(70)  # 71 closes, plus a latest intraday price that never counts
    async with FakeLlmServer() as server:
        _answers(server, {"SPY": 0.4, "TLT": 0.4})
        d = await _agent(server, monkeypatch, cov_window=60).decide(ob)
        assert d.outcome == "ok", d.reason
        views_prompt = server.prompts()[0]
    assert "over the 60 daily returns" in views_prompt
    summary = json.loads(d.raw_output)
    assert summary["lookback"] == 60
    px = {a: [p.price for p in ob.history[a]][-61:] for a in ("SPY", "TLT")}
    rets = {a: [px[a][i + 1] / px[a][i] - 1.0 for i in range(60)] for a in px}
    # SPY's window return in the prompt: the product of its 60 returns.
    assert f"SPY (equities): 100.00; return {px['SPY'][-1] / px['SPY'][0] - 1.0:+.2%}" in (
        views_prompt)
    var, dd = _var_dd([0.4 * rets["SPY"][i] + 0.4 * rets["TLT"][i] for i in range(60)])
    assert summary["risk_truth"]["var_95"] == pytest.approx(var, rel=1e-12)
    assert summary["risk_truth"]["max_drawdown"] == pytest.approx(dd, rel=1e-12)


async def test_rounded_weights_are_renormalised(monkeypatch: Any) -> None:
    async with FakeLlmServer() as server:
        # 0.3334 * 2 = 0.6668 is fine; 0.5001 + 0.5001 = 1.0002 is rounding: renormalised.
        _answers(server, {"SPY": 0.5001, "TLT": 0.5001})
        d = await _agent(server, monkeypatch, risk_profile="aggressive").decide(_obs(10))
        assert d.outcome == "ok", d.reason
        assert d.allocation == pytest.approx({"SPY": 0.5, "TLT": 0.5, CASH: 0.0})
        assert server.steps.count("weights") == 1  # accepted at once
        _answers(server, {"SPY": 0.52, "TLT": 0.51})  # 1.03: beyond the 2 % tolerance
        server.push_step("weights", ok(json.dumps({"weights": {"SPY": 0.52, "TLT": 0.51}})))
        d = await _agent(server, monkeypatch, risk_profile="aggressive").decide(_obs(10))
    assert d.outcome == "invalid" and "weights sum to 1.0300, more than 1" in d.reason


def test_the_s3_oracle_reads_the_stored_lookback() -> None:
    ob = _obs(12)
    closes = {a: [(p.ts, p.price) for p in ob.history[a]] for a in ("SPY", "TLT")}
    for a in closes:  # five closes after the decision
        last = closes[a][-1][1]
        closes[a] += [(T + k * DAY, last * (1.0 + (0.01 if a == "SPY" else 0.002) * k))
                      for k in range(1, 6)]
    summary = {
        "protocol": "portbench", "profile": "balanced", "lookback": 4,
        "current": {"SPY": 0.5, "TLT": 0.0, CASH: 0.5},
        "views": {"SPY": 0.5, "TLT": 0.3}, "signals": {"SPY": "buy", "TLT": "buy"},
        "weights": {"SPY": 0.5, "TLT": 0.3, CASH: 0.2},
        "execution": {"turnover": 0.8, "drift": 0.5}, "applied": True,
        "risk": {"rebalance": True, "var_95": -0.01, "max_drawdown": -0.02},
        "risk_truth": {"rebalance": True, "var_95": -0.01, "max_drawdown": -0.02},
    }
    sc = score_decision(summary, T, closes, {"SPY": "equities", "TLT": "bonds"}, horizon=5)
    past = np.array([[p for _, p in closes[a][:13]][-5:] for a in ("SPY", "TLT")]).T
    hist = past[1:] / past[:-1] - 1.0  # the last 4 returns before the decision
    fut = np.array([[p for _, p in closes[a][12:]] for a in ("SPY", "TLT")]).T
    w = max_sharpe((fut[1:] / fut[:-1] - 1.0).mean(axis=0),
                   np.cov(hist, rowvar=False, ddof=1), 0.04 / 252)
    assert w is not None
    long = score_decision(summary | {"lookback": 11}, T, closes,
                          {"SPY": "equities", "TLT": "bonds"}, horizon=5)
    # S4: the turnover to the 4-return window's oracle from SPY 50 % / CASH 50 %.
    tau_star = abs(float(w[0]) - 0.5) + float(w[1])
    assert sc.scores["S4"] == pytest.approx(1.0 - abs(0.8 - tau_star) / max(0.8, tau_star))
    # S5 against the oracle's VaR and drawdown over the same 4 returns, and its drift.
    var, dd = _var_dd([float(r @ w) for r in hist])
    drift = max(abs(float(w[0]) - 0.5), float(w[1]))
    e = (abs(-0.01 - var) / max(abs(var), 1e-6) + abs(-0.02 - dd) / max(abs(dd), 1e-6)) / 2
    s5 = 0.5 * float(drift > 0.05) + 0.5 * min(1.0, max(0.0, 1.0 - e))
    assert sc.scores["S5"] == pytest.approx(s5)
    # A longer window gives other figures (the oracle's risk over 11 returns).
    assert long.scores["S5"] != pytest.approx(sc.scores["S5"])


# -- profile alignment, adaptation, stress CEPS (Table 6) -------------------------------------


def wf(profile: str, answers: int, cap: int, floor: int, var: float | None) -> dict[str, Any]:
    return {"protocol": "portbench", "profile": profile,
            "alignment": {"answers": answers, "equity_cap": cap, "bond_floor": floor},
            "risk_truth": {"var_95": var, "max_drawdown": -0.05, "rebalance": False}}


def day_ts(y: int, m: int, d: int) -> float:
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
        ("m-cons", day_ts(2024, 3, 1), wf("conservative", 2, 1, 0, -0.005)),  # (0.5+1+1)/3
        ("m-cons", day_ts(2024, 3, 2), wf("conservative", 1, 0, 0, -0.005)),  # 1
        ("m-bal", day_ts(2024, 3, 1), wf("balanced", 1, 0, 0, -0.03)),  # 2/3
        ("m-agg", day_ts(2024, 3, 1), wf("aggressive", 1, 0, 0, -0.03)),  # 1
        ("flat", day_ts(2024, 3, 1), wf("balanced", 1, 0, 0, -0.01)),  # 1, one profile only
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
    at = day_ts(*day)
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
    assert stress_window([day_ts(2020, 1, 31), day_ts(2020, 3, 1)]) is None
    assert stress_window([day_ts(2020, 2, 1), day_ts(2020, 5, 31)]) == ("2020 COVID Crash", 0.45)
    assert stress_window([]) is None


def test_the_stress_ceps_of_several_windows_combine() -> None:
    from agents.portbench.profile_scores import format_stress_windows

    china = {"window": "2015 China Shock", "threshold": 0.40,
             "agents": {"a": {"CEPS": 0.41, "risk_safe": True},
                        "b": {"CEPS": 0.39, "risk_safe": False}}}
    covid = {"window": "2020 COVID Crash", "threshold": 0.45,
             "agents": {"a": {"CEPS": 0.46, "risk_safe": True}}}
    text = format_stress_windows([china, {}, covid])  # {}: a store that is no stress window
    rows = {line.split()[0]: line for line in text.splitlines() if line[:2] in ("a ", "b ")}
    assert rows["a"].endswith("  risk-safe") and "0.410 risk-safe" in rows["a"]
    assert rows["b"].endswith("  risk-UNSAFE")  # unsafe in one window: unsafe overall
    assert "2020 COVID Crash (>= 0.45)" in text
    assert format_stress_windows([{}, {}]) == ""
