"""The StockBench protocol through the real LiteLLM path against the local step-aware server."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agents.base import CASH, Observation
from agents.config import AgentConfig
from agents.llm_output import InvalidOutput
from agents.stockbench.agent import StockBenchAgent, check_orders, execution_problem, to_weights
from tests.agents.test_llm_agent import T, equity_obs
from tests.llm_server import Behaviour, FakeLlmServer, ok

KEY_ENV = "PAPERARENA_TEST_LLM_KEY"


def pick(*tickers: str) -> Behaviour:
    return ok(json.dumps({"reasoning": "look closer", "selected": list(tickers)}))


def orders(decisions: dict[str, Any]) -> Behaviour:
    return ok(json.dumps({"reasoning": "because", "decisions": decisions}))


async def _no_sleep(_: float) -> None:
    return None


def make(server: FakeLlmServer, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> StockBenchAgent:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    cfg = AgentConfig.model_validate({
        "id": "sb", "kind": "llm", "model": "openai/test-model", "api_base": server.api_base,
        "api_key_env": KEY_ENV, "timeout": 5, "max_attempts": 2, "protocol": "stockbench",
        "markets": ["equity"], **kw})
    return StockBenchAgent(cfg, sleep=_no_sleep)


@pytest.fixture
async def server() -> Any:
    async with FakeLlmServer() as s:
        yield s


# equity_obs(): value 1000, cash 820, AAPL 1 share at 180 (weight 0.18), MSFT 400, NVDA no price.


async def test_four_steps_end_in_an_allocation(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("overview", pick("MSFT"))
    server.push_step("decision", orders({"MSFT": {"action": "increase", "target_usd": 400.0},
                                         "AAPL": {"action": "decrease", "target_usd": 90.0},
                                         "NVDA": {"action": "hold"}}))
    d = await make(server, monkeypatch).decide(equity_obs())
    assert d.outcome == "ok", d.reason
    assert server.steps == ["overview", "decision"]
    assert d.allocation == pytest.approx({"AAPL": 0.09, "MSFT": 0.4, "NVDA": 0.0, CASH: 0.51})
    overview, decision = server.prompts()
    # The overview shows every stock's price and position, past actions and news.
    assert "AAPL: price 180.00" in overview and "1.0000 shares = 180.00 USD" in overview
    assert "NVDA: no price today" in overview
    assert "AAPL increase 0.0% -> 20.0%" in overview
    assert "Apple ships a new phone" in overview
    # The decision step adds the fundamentals of the selection, naming what is unavailable.
    assert "YOUR SELECTION: MSFT" in decision
    fundamentals = decision.split("FUNDAMENTALS OF THE SELECTED STOCKS", 1)[1]
    assert "MSFT: (no fundamentals received)\n  market capitalisation: unavailable" in fundamentals
    assert "P/E ratio (trailing): unavailable" in fundamentals
    assert "dividend yield: unavailable" in fundamentals
    assert "52-week range: unavailable; range over the 5 daily close(s) available" in fundamentals
    assert "AAPL:" not in fundamentals
    # Each step is auditable: its name, the hash of what it sent, its answer and parsed value.
    assert [c["step"] for c in d.calls] == ["overview", "decision"]
    assert [c["input_sha256"] for c in d.calls] == [
        hashlib.sha256(p.encode()).hexdigest() for p in server.prompts()]
    assert d.calls[0]["parsed"] == {"selected": ["MSFT"]}
    assert d.calls[1]["parsed"]["decisions"]["AAPL"] == {"action": "decrease", "target_usd": 90.0}
    assert d.template_version.startswith("stockbench-v1+")
    assert json.loads(d.raw_output)["execution"] == "ok"
    assert d.usage["tokens_in"] == 200


async def test_orders_over_the_account_are_revised(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("overview", pick())
    server.push_step("decision", orders({"MSFT": {"action": "increase", "target_usd": 900.0}}))
    server.push_step("revision_1", orders({"MSFT": {"action": "increase", "target_usd": 800.0}}))
    d = await make(server, monkeypatch).decide(equity_obs())
    assert d.outcome == "ok", d.reason
    assert server.steps == ["overview", "decision", "revision_1"]
    revision = server.prompts()[2]
    assert "the positions would total 1080.00 USD but the account is worth 1000.00 USD" in revision
    assert "80.00 USD short" in revision and '"target_usd": 900.0' in revision
    assert d.allocation == pytest.approx({"AAPL": 0.18, "MSFT": 0.8, "NVDA": 0.0, CASH: 0.02})
    assert json.loads(d.raw_output)["revisions"] == 1


async def test_orders_are_revised_until_they_fit(server: FakeLlmServer, monkeypatch: Any) -> None:
    """The paper's rule by default: orders over the account go back to the model until they fit,
    here five revisions (more than any fixed limit the setting used to have)."""
    too_much = [orders({"MSFT": {"action": "increase", "target_usd": 900.0 - 10 * k}})
                for k in range(5)]
    fits = orders({"MSFT": {"action": "increase", "target_usd": 700.0}})
    server.push_step("overview", pick())
    server.push_step("decision", too_much[0])
    for k in range(1, 5):
        server.push_step(f"revision_{k}", too_much[k])
    server.push_step("revision_5", fits)
    d = await make(server, monkeypatch).decide(equity_obs())
    assert d.outcome == "ok", d.reason
    assert server.steps == ["overview", "decision", *(f"revision_{k}" for k in range(1, 6))]
    # Each revision names the shortfall by hand: AAPL 180 USD kept + MSFT target > 1000 USD.
    for k in range(1, 6):
        prompt = server.prompts()[1 + k]
        short = 180.0 + 900.0 - 10 * (k - 1) - 1000.0
        assert f"revision {k})" in prompt and f"{short:.2f} USD short" in prompt
        assert "sent back again, until they fit" in prompt
    # The applied weights: AAPL kept at 180 / 1000, MSFT 700 / 1000, the rest in CASH.
    assert d.allocation == pytest.approx({"AAPL": 0.18, "MSFT": 0.7, "NVDA": 0.0,
                                          CASH: 1.0 - 0.18 - 0.7})
    assert json.loads(d.raw_output)["revisions"] == 5


def test_revision_rounds_is_until_fit_or_a_bounded_number() -> None:
    import tomllib
    from pathlib import Path

    from pydantic import ValidationError

    base = {"id": "x", "kind": "llm", "model": "m", "protocol": "stockbench",
            "markets": ["equity"]}
    assert AgentConfig.model_validate(base).revision_rounds == "until_fit"
    assert AgentConfig.model_validate({**base, "revision_rounds": 2}).revision_rounds == 2
    for bad in ("forever", 11, -1):
        with pytest.raises(ValidationError):
            AgentConfig.model_validate({**base, "revision_rounds": bad})
    root = Path(__file__).resolve().parents[2]
    for preset in ("stockbench.toml", "stockbench-djia.toml"):
        agents = tomllib.loads((root / "examples" / preset).read_text())["agents"]
        assert {a["revision_rounds"] for a in agents if a.get("protocol") == "stockbench"} == {
            "until_fit"}


async def test_holds_after_the_last_revision(server: FakeLlmServer, monkeypatch: Any) -> None:
    too_much = orders({"MSFT": {"action": "increase", "target_usd": 5000.0}})
    server.push_step("overview", pick("AAPL"))
    server.push_step("decision", too_much)
    server.push_step("revision_1", too_much)
    d = await make(server, monkeypatch, revision_rounds=1).decide(equity_obs())
    assert (d.outcome, d.allocation) == ("invalid", None)
    assert d.reason.startswith("step execution: the positions would total 5180.00 USD")
    assert "(after 1 revision(s)); holding" in d.reason
    assert server.steps == ["overview", "decision", "revision_1"]
    assert "(revision 1 of 1)" in server.prompts()[2]
    assert "cannot be executed after revision 1, the portfolio is kept" in server.prompts()[2]


async def test_failed_step_is_named(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("overview", pick("TSLA"), pick("AAPL", "AAPL"))
    d = await make(server, monkeypatch).decide(equity_obs())
    assert (d.outcome, d.allocation) == ("invalid", None)
    assert d.reason == "step overview: invalid output: ticker AAPL selected twice (attempt 2 of 2)"
    assert server.steps == ["overview", "overview"]
    assert "unknown ticker 'TSLA'" in server.prompts()[1]  # the retry says what was wrong
    assert [c["outcome"] for c in d.calls] == ["invalid", "invalid"]


async def test_error_at_decision_step(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("overview", pick())
    server.push_step("decision", Behaviour(status=500), Behaviour(status=503))
    d = await make(server, monkeypatch).decide(equity_obs())
    assert d.outcome == "error"
    assert d.reason.startswith("step decision: InternalServerError") or d.reason.startswith(
        "step decision: ServiceUnavailableError"), d.reason
    assert d.reason.endswith("(attempt 2 of 2)")
    assert json.loads(d.raw_output)["failed_step"] == "decision"


async def test_all_holds_is_a_hold(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("overview", pick())
    server.push_step("decision", orders({"AAPL": {"action": "hold"}}))
    d = await make(server, monkeypatch).decide(equity_obs())
    assert (d.outcome, d.allocation) == ("hold", None)


async def test_budget_spent_between_steps_pauses(server: FakeLlmServer, monkeypatch: Any) -> None:
    server.push_step("overview", pick())
    d = await make(server, monkeypatch, daily_budget_tokens=100).decide(equity_obs())
    assert d.outcome == "paused"
    assert d.reason.startswith("step decision: daily budget exceeded: 120 tokens >= 100")
    assert server.steps == ["overview"]


@pytest.mark.parametrize(
    ("decisions", "error"),
    [
        ([], "'decisions' must be an object"),
        ({"TSLA": {"action": "hold"}}, "unknown ticker 'TSLA'"),
        ({"AAPL": "buy"}, "order of AAPL must be an object"),
        ({"AAPL": {"action": "buy", "target_usd": 5}}, "action of AAPL must be increase"),
        ({"AAPL": {"action": "increase"}}, "target_usd of AAPL is not a number: None"),
        ({"AAPL": {"action": "increase", "target_usd": "500"}}, "is not a number: '500'"),
        ({"AAPL": {"action": "decrease", "target_usd": -1}}, "must be finite and >= 0"),
        ({"AAPL": {"action": "increase", "target_usd": 100}}, "above its current 180.00 USD"),
        ({"AAPL": {"action": "decrease", "target_usd": 180}}, "below its current 180.00 USD"),
        ({"NVDA": {"action": "increase", "target_usd": 10}}, "no price for NVDA"),
    ],
)
def test_orders_are_validated_strictly(decisions: Any, error: str) -> None:
    with pytest.raises(InvalidOutput, match=None) as err:
        check_orders(json.dumps({"decisions": decisions}), "stop", equity_obs())
    assert error in str(err.value)


def test_truncated_answer_is_invalid() -> None:
    with pytest.raises(InvalidOutput, match="truncated"):
        check_orders('{"decisions": {}}', "length", equity_obs())


def test_execution_fits_and_weights() -> None:
    obs: Observation = equity_obs()
    fit = check_orders('{"decisions": {"MSFT": {"action": "increase", "target_usd": 820}}}',
                       "stop", obs)
    assert execution_problem(fit, obs) == ""
    w = to_weights(fit, obs)
    assert w == pytest.approx({"AAPL": 0.18, "MSFT": 0.82, "NVDA": 0.0, CASH: 0.0})
    over = check_orders('{"decisions": {"MSFT": {"action": "increase", "target_usd": 820.01}}}',
                        "stop", obs)
    assert "0.01 USD short" in execution_problem(over, obs)
    assert T > 0


class StockBenchModel(FakeLlmServer):
    """A model that reads each step's prompt: picks two stocks, buys 10,000 USD of each it
    does not hold, asks for too much every third decision (then revises), and sends garbage
    to every fourth overview (valid on retry)."""

    async def _respond(self, body: dict[str, Any]) -> Any:
        prompt = body["messages"][-1]["content"]
        step = self.step_of(body) or ""
        tickers = prompt.rsplit("Tickers: ", 1)[-1].split(".\n")[0].split(", ")
        if step == "overview":
            tickers = prompt.split("each one of: ", 1)[1].split(".\n", 1)[0].split(", ")
            n = self.steps.count("overview")
            self.push(ok("no idea") if n % 4 == 0 else pick(*tickers[n % 5: n % 5 + 2]))
        else:
            held = {line.split(":")[0] for line in prompt.splitlines()
                    if "shares =" in line and line[:1].isalpha()}
            picks = prompt.split("YOUR SELECTION: ", 1)[1].split("\n", 1)[0].split(", ")
            buy = [t for t in picks if t in tickers and t not in held]
            greedy = step == "decision" and self.steps.count("decision") % 3 == 0
            amount = 1e6 if greedy else 10_000.0
            self.push(orders({t: {"action": "increase", "target_usd": amount} for t in buy}))
        return await super()._respond(body)


async def test_example_config_replays_the_sample(tmp_path: Any, monkeypatch: Any) -> None:
    import sqlite3
    import tomllib
    from datetime import UTC, datetime
    from pathlib import Path

    from daemon.app.replay import replay
    from daemon.config.settings import parse_config

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "examples" / "stockbench.toml").read_text())
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    async with StockBenchModel() as model:
        data["agents"][0].update(api_base=model.api_base, timeout=10)
        cfg = parse_config(data)
        end = datetime(2026, 10, 28, tzinfo=UTC).timestamp()  # the first 7 sessions
        await replay(root / "examples" / "sample.jsonl.gz", cfg, tmp_path / "sb.db",
                     progress=False, window=(None, end))
    con = sqlite3.connect(tmp_path / "sb.db")
    q = con.execute
    outcomes = dict(q("SELECT outcome, COUNT(*) FROM decisions WHERE agent='stockbench'"
                      " GROUP BY outcome").fetchall())
    assert sum(outcomes.values()) == 7 and outcomes.get("ok", 0) >= 4, outcomes
    steps = {s for (s,) in q("SELECT DISTINCT step FROM llm_calls")}
    assert {"overview", "decision", "revision_1"} <= steps
    assert q("SELECT COUNT(*) FROM llm_calls WHERE outcome='invalid' AND step='overview'"
             ).fetchone()[0] >= 1
    # Every call names its step, the hash of its prompt, its outcome; valid ones their value.
    for step, sha, outcome, parsed in q("SELECT step, input_sha256, outcome, parsed_json"
                                        " FROM llm_calls"):
        assert step and len(sha) == 64 and outcome in ("ok", "invalid")
        assert (parsed is not None) == (outcome == "ok")
    # Decisions at the open, 100,000 USD accounts, stock purchases filled.
    (first,) = q("SELECT MIN(scheduled_ts) FROM decisions").fetchone()
    assert datetime.fromtimestamp(first, UTC).strftime("%H:%M") == "13:31"  # 09:31 EDT
    bought = q("SELECT value_before, traded_value FROM fills WHERE agent='stockbench'"
               " AND traded_value > 0").fetchall()
    assert bought and bought[0][0] == pytest.approx(100_000.0)
    assert all(v == pytest.approx(20_000.0, rel=0.01) or v < 20_001 for _, v in bought)
    reasons = [r for (r,) in q("SELECT reason FROM decisions WHERE outcome != 'ok'"
                               " AND agent='stockbench'")]
    assert all(r.startswith("step ") or r == "every stock held" or not r for r in reasons)
    con.close()


async def test_probe_runs_the_agents_own_protocol(
    server: FakeLlmServer, monkeypatch: Any, tmp_path: Any
) -> None:
    from agents.probe import run_probe_command
    from agents.stepwise import load_prompt_set
    from daemon.config.settings import load_config
    from tests.agents.test_llm_agent import _store_decisions

    monkeypatch.setenv(KEY_ENV, "sk-test")
    db = tmp_path / "arena.db"
    e = equity_obs()
    _store_decisions(db, [("sb", "equity", T, e, e.sha256())])
    cfg = tmp_path / "arena.toml"
    cfg.write_text(
        '[[agents]]\nid = "sb"\nkind = "llm"\nmodel = "openai/test-model"\n'
        f'api_base = "{server.api_base}"\napi_key_env = "{KEY_ENV}"\n'
        'protocol = "stockbench"\nmarkets = ["equity"]\n')
    server.push_step("overview", pick(), pick())
    server.push_step("decision", orders({"MSFT": {"action": "increase", "target_usd": 500.0}}),
                     orders({"MSFT": {"action": "increase", "target_usd": 300.0}}))
    out = await run_probe_command(load_config(str(cfg)).agents, str(cfg), str(db), "sb", 2)
    assert server.steps == ["overview", "decision", "overview", "decision"]
    assert (out["valid"], out["invalid"]) == (2, 0)
    assert out["mean_l1"] == pytest.approx(0.4)
    assert out["template_version"] == load_prompt_set("stockbench")[1]


async def test_a_step_that_could_pass_the_deadline_is_not_started(
    server: FakeLlmServer, monkeypatch: Any
) -> None:
    server.push_step("overview", Behaviour(content=json.dumps({"selected": []}), delay=0.8))
    agent = make(server, monkeypatch, timeout=1)
    agent.decision_deadline = 1.5  # the decision step could end 1.8 s in at the earliest
    d = await agent.decide(equity_obs())
    assert d.outcome == "error"
    assert d.reason == ("step decision: not enough time left before the decision deadline"
                        " for another call")
    assert server.steps == ["overview"] and [c["step"] for c in d.calls] == ["overview"]
