"""The PortBench protocol through the real LiteLLM path against the local step-aware server."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from agents.base import CASH, NewsItem, Observation, PricePoint
from agents.config import AgentConfig
from agents.portbench.agent import PortBenchAgent, Profile, execution, signal_of
from agents.protocols import build_llm_agent
from daemon.core.sparse_rows import FILLS, fill_map
from tests.llm_server import Behaviour, FakeLlmServer, ok

KEY_ENV = "PAPERARENA_TEST_LLM_KEY"
T = 1_714_600_000.0
DAY = 86_400.0
ASSETS = ("SPY", "TLT", "GLD")
CLASSES = {"SPY": "equities", "TLT": "bonds", "GLD": "commodities"}


def obs() -> Observation:
    """SPY, TLT, GLD with 6 daily closes; the account holds 50 % SPY, 50 % cash."""
    moves = {"SPY": [0.01, -0.02, 0.015, 0.0, 0.01], "TLT": [-0.005, 0.01, -0.005, 0.002, 0.0],
             "GLD": [0.0, 0.004, 0.002, -0.001, 0.003]}
    history = {}
    for a, rs in moves.items():
        closes = [100.0]
        for r in rs:
            closes.append(closes[-1] * (1 + r))
        history[a] = tuple(PricePoint(T - (6 - i) * DAY, p) for i, p in enumerate(closes))
    return Observation(
        agent="pb", market="equity", decision_ts=T, assets=ASSETS,
        prices={a: PricePoint(T - 60, 100.0) for a in ASSETS}, history=history,
        holdings={"SPY": 5.0}, cash=500.0, value=1000.0, initial_value=1000.0,
        weights={"SPY": 0.5, "TLT": 0.0, "GLD": 0.0, CASH: 0.5},
        news={"SPY": (NewsItem(T - 3600, "Stocks rally on rate hopes", "Wire"),)},
    )


def views(**v: float) -> Behaviour:
    return ok(json.dumps({"reasoning": "r", "regime": "bull", "views": v}))


def signals(**s: str) -> Behaviour:
    return ok(json.dumps({"reasoning": "r", "signals": s}))


def weights(**w: float) -> Behaviour:
    return ok(json.dumps({"reasoning": "r", "weights": w}))


def risk(rebalance: bool = True, var: float = -0.01, dd: float = -0.02) -> Behaviour:
    return ok(json.dumps({"reasoning": "watch SPY", "rebalance": rebalance, "var_95": var,
                          "max_drawdown": dd}))


async def _no_sleep(_: float) -> None:
    return None


def make(server: FakeLlmServer, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> PortBenchAgent:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    cfg = AgentConfig.model_validate({
        "id": "pb", "kind": "llm", "model": "openai/test-model", "api_base": server.api_base,
        "api_key_env": KEY_ENV, "timeout": 5, "max_attempts": 2, "protocol": "portbench",
        "markets": ["equity"], "asset_classes": CLASSES, **kw})
    return PortBenchAgent(cfg, sleep=_no_sleep)


@pytest.fixture
async def server() -> Any:
    async with FakeLlmServer() as s:
        yield s


def script(server: FakeLlmServer, w: Behaviour, r: Behaviour | None = None) -> None:
    server.push_step("views", views(SPY=0.5, TLT=0.3, GLD=-0.4))
    server.push_step("signals", signals(SPY="buy", TLT="buy", GLD="sell"))
    server.push_step("weights", w)
    server.push_step("risk", r or risk())


async def test_five_stages_end_in_the_target(server: FakeLlmServer, monkeypatch: Any) -> None:
    script(server, weights(SPY=0.6, TLT=0.3))
    d = await make(server, monkeypatch).decide(obs())
    assert d.outcome == "ok", d.reason
    assert server.steps == ["views", "signals", "weights", "risk"]
    assert d.allocation == pytest.approx({"SPY": 0.6, "TLT": 0.3, "GLD": 0.0, CASH: 0.1})
    s1, s2, s3, s5 = server.prompts()
    # S1 shows classes, the window's returns, correlations, the profile and the news.
    assert "SPY (equities): 100.00; return +1.47%" in s1
    assert "Within each class" in s1 and "bonds / equities:" in s1
    assert "balanced: at most 65% of the account in equities and crypto" in s1
    assert "at least 20% in bonds and cash" in s1
    assert "Stocks rally on rate hopes" in s1
    # Each stage sees the earlier answers; S3 names the buy-signal assets and the limits.
    assert '"GLD": -0.4' in s2
    assert "buy-signal assets (SPY, TLT)" in s3 and "maximum drawdown 20%" in s3
    # S4 is computed, not asked: |0.6 - 0.5| + 0.3 = 0.4 turnover, 15 bps of 400 USD.
    assert "trades 40.0% of the account" in s5 and "cost of 0.60 USD (15 bps" in s5
    # Every stage is stored: its calls, and the whole workflow in raw_output.
    assert [c["step"] for c in d.calls] == ["views", "signals", "weights", "risk"]
    assert [c["input_sha256"] for c in d.calls] == [
        hashlib.sha256(p.encode()).hexdigest() for p in server.prompts()]
    assert d.calls[2]["parsed"]["SPY"] == 0.6
    summary = json.loads(d.raw_output)
    assert summary["profile"] == "balanced" and summary["regime"] == "bull"
    assert summary["signals"] == {"SPY": "buy", "TLT": "buy", "GLD": "sell"}
    assert summary["execution"] == pytest.approx(
        {"turnover": 0.4, "cost_usd": 0.6, "cost_bps": 15.0, "drift": 0.3})
    assert summary["risk"] == {"rebalance": True, "var_95": -0.01, "max_drawdown": -0.02}
    truth = summary["risk_truth"]
    assert truth["rebalance"] is True and truth["var_95"] < 0 and truth["max_drawdown"] < 0
    assert d.template_version.startswith("portbench-v1+")
    assert d.reasoning == "watch SPY"


async def test_profile_is_stated_and_scored_not_enforced(
    server: FakeLlmServer, monkeypatch: Any
) -> None:
    """The paper's default: the profile is stated in the prompt, a target breaking its equity
    cap is applied, and the breach is scored after the fact (PAS)."""
    from agents.portbench.profile_scores import decision_pas

    script(server, weights(SPY=0.6, TLT=0.4))
    d = await make(server, monkeypatch, risk_profile="conservative").decide(obs())
    assert d.outcome == "ok", d.reason
    assert server.steps == ["views", "signals", "weights", "risk"]
    assert "conservative: at most 40% of the account in equities and crypto" in (
        server.prompts()[2])
    assert d.allocation == pytest.approx({"SPY": 0.6, "TLT": 0.4, "GLD": 0.0, CASH: 0.0})
    summary = json.loads(d.raw_output)
    # By hand: equities (SPY) 60 % > the 40 % cap; bonds and cash (TLT + CASH) 40 % >= 40 %.
    eq, bc = 0.6, 0.4 + 0.0
    assert summary["alignment"] == {"answers": 1, "equity_cap": int(eq > 0.40),
                                    "bond_floor": int(bc < 0.40)}
    # PAS: the mean of the cap check (0), the floor check (1) and the VaR check of the target
    # by historical simulation over the observed closes against the -1 % limit.
    o = obs()
    closes = np.array([[p.price for p in o.history[a]] for a in ASSETS]).T
    port = (closes[1:] / closes[:-1] - 1.0) @ np.array([0.6, 0.4, 0.0])
    var_ok = float(np.quantile(port, 0.05) >= -0.01)
    assert decision_pas(summary) == pytest.approx((0.0 + 1.0 + var_ok) / 3)


async def test_equity_cap_is_enforced_and_named(server: FakeLlmServer, monkeypatch: Any) -> None:
    script(server, weights(SPY=0.6, TLT=0.4))
    server.push_step("weights", weights(SPY=0.4, TLT=0.6))
    d = await make(server, monkeypatch, risk_profile="conservative",
                   enforce_profile=True).decide(obs())
    assert d.outcome == "ok", d.reason
    assert server.steps == ["views", "signals", "weights", "weights", "risk"]
    retry = server.prompts()[3]
    assert "equity cap of the conservative profile broken: equities and crypto 60.0% > 40%" in retry
    assert d.allocation == pytest.approx({"SPY": 0.4, "TLT": 0.6, "GLD": 0.0, CASH: 0.0})
    # The breach is kept for the profile alignment score (one of two answers broke the cap).
    assert json.loads(d.raw_output)["alignment"] == {"answers": 2, "equity_cap": 1,
                                                     "bond_floor": 0}


async def test_bond_floor_breach_holds_naming_the_limit(
    server: FakeLlmServer, monkeypatch: Any
) -> None:
    server.push_step("views", views(SPY=0.5, TLT=0.3, GLD=0.4))
    server.push_step("signals", signals(SPY="buy", TLT="buy", GLD="buy"))
    server.push_step("weights", weights(SPY=0.3, GLD=0.5), weights(SPY=0.4, GLD=0.3, TLT=0.2))
    d = await make(server, monkeypatch, risk_profile="conservative",
                   enforce_profile=True).decide(obs())
    assert (d.outcome, d.allocation) == ("invalid", None)
    assert d.reason == (
        "step weights: invalid output: bond floor of the conservative profile broken: bonds and"
        " cash (CASH included) 30.0% < 40% (attempt 2 of 2)"
    )
    summary = json.loads(d.raw_output)
    assert summary["failed_step"] == "weights"
    assert summary["alignment"] == {"answers": 2, "equity_cap": 0, "bond_floor": 2}
    assert server.steps == ["views", "signals", "weights", "weights"]


async def test_only_buy_signals_get_weight(server: FakeLlmServer, monkeypatch: Any) -> None:
    script(server, weights(GLD=0.2), risk())
    server.push_step("weights", weights(TLT=0.5))
    d = await make(server, monkeypatch).decide(obs())
    assert d.outcome == "ok", d.reason
    assert "GLD has signal 'sell' in S2: only buy-signal assets may get weight" in (
        server.prompts()[3])
    assert d.allocation == pytest.approx({"SPY": 0.0, "TLT": 0.5, "GLD": 0.0, CASH: 0.5})


async def test_no_rebalance_keeps_the_portfolio(server: FakeLlmServer, monkeypatch: Any) -> None:
    script(server, weights(SPY=0.52, TLT=0.02), risk(rebalance=False))
    d = await make(server, monkeypatch, rebalance_rule="model").decide(obs())
    assert (d.outcome, d.allocation) == ("hold", None)
    assert d.reason == "risk monitor: no rebalance"
    summary = json.loads(d.raw_output)
    assert summary["applied"] is False and summary["risk_truth"]["rebalance"] is False


@pytest.mark.parametrize("target, flag", [
    ({"SPY": 0.52, "TLT": 0.02}, True),   # drift 2 %: kept, whatever the model says
    ({"SPY": 0.53, "TLT": 0.05}, True),   # drift exactly 5 %: not above the threshold
    ({"SPY": 0.6, "TLT": 0.3}, False),    # drift 30 %: applied although the model says no
])
async def test_s5_is_the_papers_deterministic_monitor(
    server: FakeLlmServer, monkeypatch: Any, target: dict[str, float], flag: bool
) -> None:
    """By default S5 computes VaR, drawdown and drift from the S3 weights and rebalances only
    when the largest single-asset drift exceeds 5 % (the paper's S5); the model's answer is
    kept for its score."""
    script(server, weights(**target), risk(rebalance=flag))
    d = await make(server, monkeypatch).decide(obs())
    o = obs()
    keys = list(ASSETS)
    w = np.array([target.get(a, 0.0) for a in keys])
    drift = float(np.max(np.abs(w - np.array([o.weights[a] for a in keys]))))
    summary = json.loads(d.raw_output)
    assert summary["rebalance_rule"] == "drift" and summary["risk"]["rebalance"] is flag
    assert summary["execution"]["drift"] == pytest.approx(drift)
    assert summary["applied"] is (drift > 0.05 + 1e-12) is summary["risk_truth"]["rebalance"]
    if drift > 0.05 + 1e-12:
        assert d.outcome == "ok"
        assert d.allocation == pytest.approx({**{a: target.get(a, 0.0) for a in keys},
                                              CASH: 1.0 - w.sum()})
    else:
        assert (d.outcome, d.allocation, d.reason) == ("hold", None,
                                                       "risk monitor: no rebalance")
    # VaR and drawdown by historical simulation of the S3 weights over the observed closes.
    closes = np.array([[p.price for p in o.history[a]] for a in keys]).T
    port = (closes[1:] / closes[:-1] - 1.0) @ w
    nav = np.concatenate(([1.0], np.cumprod(1.0 + port)))
    truth = summary["risk_truth"]
    assert truth["max_drawdown"] == pytest.approx(float(np.min(nav / np.maximum.accumulate(nav)
                                                               - 1.0)))
    assert truth["var_95"] == pytest.approx(float(np.quantile(port, 0.05)))


async def test_views_must_cover_every_asset(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("views", views(SPY=0.5, TLT=0.3), views(SPY=2.0, TLT=0.0, GLD=0.0))
    d = await make(server, monkeypatch).decide(obs())
    assert d.outcome == "invalid"
    assert d.reason == "step views: invalid output: view of SPY must be in [-1, 1], got 2" \
        " (attempt 2 of 2)"
    assert "'views' lacks GLD" in server.prompts()[1]


async def test_risk_estimates_are_checked(server: FakeLlmServer, monkeypatch: Any) -> None:
    script(server, weights(SPY=0.5), risk(var=0.02))
    server.push_step("risk", risk(var=-0.02))
    d = await make(server, monkeypatch, rebalance_rule="model").decide(obs())
    assert d.outcome == "ok", d.reason
    assert "var_95 must be a negative fraction in [-1, 0], got 0.02" in server.prompts()[4]


async def test_error_at_a_stage_is_named(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("views", views(SPY=0.5, TLT=0.3, GLD=-0.4))
    server.push_step("signals", Behaviour(status=500), Behaviour(status=500))
    d = await make(server, monkeypatch).decide(obs())
    assert d.outcome == "error" and d.reason.startswith("step signals: ")
    assert json.loads(d.raw_output)["views"]["GLD"] == -0.4


def test_profile_limits_on_the_default_universe() -> None:
    # The default stock universe's sectors count as equities; CASH counts toward the floor.
    p = Profile.of(AgentConfig(id="x", kind="llm", model="m", protocol="portbench",
                               markets=("equity",), risk_profile="aggressive"))
    assert p.violation({"AAPL": 0.5, "JPM": 0.45, CASH: 0.05}).startswith(
        "equity cap of the aggressive profile broken: equities and crypto 95.0% > 90%")
    assert p.violation({"AAPL": 0.5, "JPM": 0.4, CASH: 0.1}) == ""
    assert Profile.of(AgentConfig(id="x", kind="cash", max_drawdown=0.05)).max_drawdown == 0.05


def test_signal_thresholds_and_execution() -> None:
    assert [signal_of(v) for v in (0.21, 0.2, -0.2, -0.21)] == ["buy", "hold", "hold", "sell"]
    s4 = execution(obs(), {"SPY": 0.0, "TLT": 0.5, "GLD": 0.5, CASH: 0.0})
    assert s4 == pytest.approx({"turnover": 1.5, "cost_usd": 2.25, "cost_bps": 15.0,
                                "drift": 0.5})


def test_protocol_is_config() -> None:
    cfg = AgentConfig(id="x", kind="llm", model="m", protocol="portbench", markets=("equity",))
    assert isinstance(build_llm_agent(cfg), PortBenchAgent)
    with pytest.raises(ValidationError, match="protocol 'portbench' trades the equity market"):
        AgentConfig(id="x", kind="llm", model="m", protocol="portbench")


class PortBenchModel(FakeLlmServer):
    """A model that reads each stage's prompt: bullish on the first two tickers, buys them
    within the balanced cap (30 % each), rebalances; garbage to every third S1 (valid on retry)."""

    async def _respond(self, body: dict[str, Any]) -> Any:
        prompt = body["messages"][-1]["content"]
        step = self.step_of(body) or ""
        tickers = prompt.split("needs a view: ", 1)[1].split(".\n", 1)[0].split(", ")
        top = tickers[:2]
        if step == "views":
            n = self.steps.count("views")
            v = {t: (0.5 if t in top else 0.0) for t in tickers}
            self.push(ok("bullish") if n % 3 == 0 else views(**v))
        elif step == "signals":
            self.push(signals(**{t: ("buy" if t in top else "hold") for t in tickers}))
        elif step == "weights":
            self.push(weights(**{t: 0.3 for t in top}))
        else:
            self.push(risk())
        return await super()._respond(body)


async def test_example_config_replays_the_sample(
    tmp_path: Any, monkeypatch: Any, capsys: Any
) -> None:
    import sqlite3
    import tomllib
    from datetime import UTC, datetime
    from pathlib import Path

    from daemon.app.replay import replay
    from daemon.config.settings import parse_config

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "examples" / "portbench.toml").read_text())
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    async with PortBenchModel() as model:
        data["agents"][0].update(api_base=model.api_base, timeout=10)
        cfg = parse_config(data)
        end = datetime(2026, 5, 22, tzinfo=UTC).timestamp()  # the first 15 sessions
        await replay(root / "examples" / "portbench-sample.jsonl.gz", cfg, tmp_path / "pb.db",
                     progress=False, window=(None, end))
        views_prompt = next(r["messages"][-1]["content"] for r in model.requests
                            if "needs a view" in r["messages"][-1]["content"])
    con = sqlite3.connect(tmp_path / "pb.db")
    q = con.execute
    outcomes = dict(q("SELECT outcome, COUNT(*) FROM decisions WHERE agent='portbench'"
                      " GROUP BY outcome").fetchall())
    # The first session has no close before its decision: skipped; every other one ran the
    # five stages, and S5 applied its target exactly when the largest drift from the current
    # weights was above 5 % (the first decision, from cash; later the same two buys drift less).
    assert outcomes.get("ok", 0) >= 1 and outcomes.get("skipped") == 1, outcomes
    assert outcomes.get("ok", 0) + outcomes.get("hold", 0) >= 10
    assert set(outcomes) <= {"ok", "hold", "skipped"}
    for outcome, raw in q("SELECT outcome, raw_output FROM decisions WHERE agent='portbench'"
                          " AND outcome IN ('ok', 'hold')"):
        summary = json.loads(raw)
        cur, tgt = summary["current"], summary["weights"]
        drift = max(abs(tgt.get(a, 0.0) - cur.get(a, 0.0)) for a in cur if a != CASH)
        assert (outcome == "ok") is (drift > 0.05) is summary["applied"]
    steps = [s for (s,) in q("SELECT step FROM llm_calls WHERE outcome='ok' ORDER BY id")]
    assert steps[:4] == ["views", "signals", "weights", "risk"]
    assert q("SELECT COUNT(*) FROM llm_calls WHERE outcome='invalid' AND step='views'"
             ).fetchone()[0] >= 1
    for (raw,) in q("SELECT raw_output FROM decisions WHERE agent='portbench' AND outcome='ok'"):
        summary = json.loads(raw)
        assert summary["execution"]["cost_bps"] == 15.0 and "risk_truth" in summary
    # Every baseline decided every round.
    agents = {a for (a,) in q("SELECT DISTINCT agent FROM decisions WHERE outcome='ok'")}
    assert {"sixty_forty", "risk_parity", "equal_risk_contribution", "min_variance"} <= agents
    # The multi-asset universe's classes reach the prompt and the class-aware baseline.
    w = fill_map(*q(f"SELECT f.weights_json, s.assets_json FROM {FILLS}"
                    " WHERE f.agent='sixty_forty' ORDER BY f.ts LIMIT 1").fetchone())
    assert w["TLT"] + w["IEF"] == pytest.approx(0.4, abs=0.01)  # 40 % over the bond class
    assert w["SPY"] + w["QQQ"] + w["EFA"] == pytest.approx(0.6, abs=0.01)
    assert w.get("GLD", 0.0) == 0.0 and w.get("BTC-USD", 0.0) == 0.0
    assert "bonds" in views_prompt and "crypto" in views_prompt and "BTC-USD" in views_prompt
    con.close()
    # Stage scores from the store: S1..S5 and CEPS once 2 later closes exist (S5 against the
    # oracle's weights, issue 29), the last decisions of the window pending.
    from agents.portbench.scores import format_table, summarise
    from daemon.store.reports import portbench_scores

    by_agent = portbench_scores(str(tmp_path / "pb.db"), horizon=2)
    m = summarise(by_agent["portbench"])
    ran = outcomes["ok"] + outcomes.get("hold", 0)
    assert m["decisions"] == ran and m["S5_pending"] == m["pending"]
    assert 1 <= m["pending"] < m["decisions"] and m["CEPS"] is not None
    assert all(0.0 <= m[s] <= 1.0 for s in ("S1", "S2", "S3", "S4", "S5")), m
    assert "pending" not in format_table(by_agent).splitlines()[1]
    from daemon.app.cli import main as cli

    assert cli(["stage-scores", "--db", str(tmp_path / "pb.db"), "--horizon", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("agent "))
    assert "CEPS" in lines[head] and lines[head + 1].startswith("portbench")
    assert cli(["stage-scores", "--db", str(tmp_path / "missing.db")]) == 2
    # paperarena report shows the stage scores under the leaderboard.
    capsys.readouterr()
    assert cli(["report", "--db", str(tmp_path / "pb.db")]) == 0
    report = capsys.readouterr().out
    assert "PortBench stage scores (horizon 5 daily closes" in report
    assert "\nportbench " in report.split("PortBench stage scores", 1)[1]
    # ... and in --json and --html, with the stress gate of the window.
    html = tmp_path / "pb.html"
    assert cli(["report", "--db", str(tmp_path / "pb.db"), "--json", "--html", str(html)]) == 0
    board = json.loads(capsys.readouterr().out)
    five = summarise(portbench_scores(str(tmp_path / "pb.db")).get("portbench", []))
    got = board["portbench"]["portbench"]
    assert set(got) == set(five)
    assert all(got[k] == pytest.approx(v, rel=1e-9) for k, v in five.items() if v is not None)
    assert board["portbench"]["portbench"]["decisions"] == ran
    assert set(board["stress_gate"]) >= {"portbench", "min_variance", "equal_weight"}
    assert board["stress_gate"]["portbench"]["tolerance"] == pytest.approx(0.20)
    # Profile alignment (issue 29): the mean over decisions of the equity-cap, bond-floor and
    # VaR-limit checks, recomputed from the stored workflows (no stress window: 2026).
    con = sqlite3.connect(tmp_path / "pb.db")
    checks = []
    for (raw,) in con.execute("SELECT raw_output FROM decisions WHERE agent='portbench'"
                              " AND outcome IN ('ok', 'hold')"):
        s = json.loads(raw)
        n, a = s["alignment"]["answers"], s["alignment"]
        c = [1 - a["equity_cap"] / n, 1 - a["bond_floor"] / n]
        if s["risk_truth"]["var_95"] is not None:
            c.append(1.0 if s["risk_truth"]["var_95"] >= -0.02 else 0.0)
        checks.append(sum(c) / len(c))
    con.close()
    pas = board["portbench_profiles"]["pas"]["portbench"]
    assert pas["PAS"] == pytest.approx(sum(checks) / len(checks)) and pas["profile"] == "balanced"
    assert pas["decisions"] == ran and "stress_ceps" not in board["portbench_profiles"]
    assert "PortBench profile alignment (PAS" in report
    page = html.read_text()
    assert "PortBench stage scores" in page and "Stress gate" in page
    assert "PortBench profile alignment</h2>" in page
    assert "<section class='portbench'><h2>PortBench stage scores</h2>" in page
