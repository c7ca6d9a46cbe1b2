"""The AlphaForgeBench protocol through the real LiteLLM path against the local model server."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from agents.alphaforgebench.agent import AlphaForgeAgent, bars_of, check_strategy, target_weights
from agents.alphaforgebench.sandbox import code_sha256
from agents.base import CASH, Observation
from agents.config import AgentConfig
from agents.llm_output import InvalidOutput
from tests.agents.test_llm_agent import T, equity_obs
from tests.llm_server import Behaviour, FakeLlmServer, ok

KEY_ENV = "PAPERARENA_TEST_LLM_KEY"
DAY = 86_400.0

#: Above its 3-bar mean: invest 80 %; below: sell.
TREND = """
import numpy as np

def generate_signal(df):
    close = df["close"].iloc[-1]
    mean = df["close"].iloc[-3:].mean()
    if len(df) < 3 or np.isnan(mean):
        return {"signal": 0, "position": 0.0}
    if close > mean:
        return {"signal": 1, "position": 0.8}
    return {"signal": -1, "position": 0.0}
"""

LOOP = "def generate_signal(df):\n    while True:\n        pass\n"


def strategy(code: str) -> Behaviour:
    return ok(json.dumps({"strategy": {"code": code}}))


async def _no_sleep(_: float) -> None:
    return None


def make(server: FakeLlmServer, monkeypatch: pytest.MonkeyPatch, **strategy_kw: Any
         ) -> AlphaForgeAgent:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    cfg = AgentConfig.model_validate({
        "id": "af", "kind": "llm", "model": "openai/test-model", "api_base": server.api_base,
        "api_key_env": KEY_ENV, "timeout": 5, "max_attempts": 2,
        "protocol": "alphaforgebench", "markets": ["equity"],
        "strategy": {"timeout": 2, "cpu_seconds": 30, **strategy_kw}})
    return AlphaForgeAgent(cfg, sleep=_no_sleep)


@pytest.fixture
async def server() -> Any:
    async with FakeLlmServer() as s:
        yield s


def later(obs: Observation, days: float) -> Observation:
    dt = days * DAY
    return dataclasses.replace(
        obs, decision_ts=obs.decision_ts + dt,
        prices={a: dataclasses.replace(p, ts=p.ts + dt) for a, p in obs.prices.items()})


# equity_obs(): AAPL 180 now (closes 100..104), MSFT 400 now (closes 101..105), NVDA no price;
# weights AAPL 0.18, CASH 0.82.


async def test_generates_once_and_trades_every_bar(server: FakeLlmServer, monkeypatch: Any
                                                   ) -> None:
    server.push_step("strategy", strategy(TREND))
    agent = make(server, monkeypatch)
    try:
        d = await agent.decide(equity_obs())
        assert d.outcome == "ok", d.reason
        assert server.steps == ["strategy"]
        # AAPL and MSFT are above their 3-bar mean: 0.8 of a third each; NVDA has no price.
        assert d.allocation == pytest.approx({"AAPL": 0.8 / 3, "MSFT": 0.8 / 3, "NVDA": 0.0,
                                              CASH: 1 - 1.6 / 3})
        summary = json.loads(d.raw_output)
        assert summary["strategy_version"] == code_sha256(TREND) and summary["generated"]
        assert summary["signals"] == {"AAPL": [1, 0.8], "MSFT": [1, 0.8]}
        (call,) = d.calls
        assert call["step"] == "strategy" and call["parsed"]["code"] == TREND
        prompt = server.prompts()[0]
        assert "generate_signal(df)" in prompt and "rsi_{w}" in prompt
        # The next day: no model call, the same version runs again.
        d2 = await agent.decide(later(equity_obs(), 1))
        assert d2.outcome == "ok" and d2.calls == () and len(server.requests) == 1
        assert json.loads(d2.raw_output)["strategy_version"] == code_sha256(TREND)
        assert "generated" not in json.loads(d2.raw_output)
        # A week later a new version is asked for.
        server.push_step("strategy", strategy(TREND + "\n# v2\n"))
        d3 = await agent.decide(later(equity_obs(), 7))
        assert len(server.requests) == 2
        assert json.loads(d3.raw_output)["strategy_version"] == code_sha256(TREND + "\n# v2\n")
    finally:
        await agent.aclose()


async def test_kept_forever_with_regenerate_every_zero(server: FakeLlmServer, monkeypatch: Any
                                                       ) -> None:
    server.push_step("strategy", strategy(TREND))
    agent = make(server, monkeypatch, regenerate_every=0)
    try:
        await agent.decide(equity_obs())
        d = await agent.decide(later(equity_obs(), 30))
        assert d.outcome == "ok" and len(server.requests) == 1
    finally:
        await agent.aclose()


async def test_forbidden_import_is_retried_then_held(server: FakeLlmServer, monkeypatch: Any
                                                     ) -> None:
    bad = "import os\ndef generate_signal(df):\n    return {'signal': 0, 'position': 0.0}\n"
    server.push_step("strategy", strategy(bad), strategy(bad))
    agent = make(server, monkeypatch)
    try:
        d = await agent.decide(equity_obs())
        assert d.outcome == "invalid" and d.allocation is None
        assert d.reason.startswith("step strategy: invalid output: strategy code rejected:"
                                   " import of 'os' is not allowed")
        assert [c["outcome"] for c in d.calls] == ["invalid", "invalid"]
        assert "import of 'os'" in server.prompts()[1]  # the retry says what was wrong
    finally:
        await agent.aclose()


async def test_a_looping_strategy_holds_and_the_agent_goes_on(server: FakeLlmServer,
                                                              monkeypatch: Any) -> None:
    server.push_step("strategy", strategy(LOOP))
    agent = make(server, monkeypatch)
    try:
        d = await agent.decide(equity_obs())
        assert d.outcome == "invalid" and d.allocation is None
        assert "timed out after 2s" in d.reason and d.reason.endswith("holding")
        summary = json.loads(d.raw_output)
        assert summary["bar_failed"].startswith("timed out")
        # Every stock asked (those with a price) is a recorded failure of the bar.
        assert summary["failed"].keys() == {"AAPL", "MSFT"}
        assert all(r.startswith("timed out") for r in summary["failed"].values())
        d2 = await agent.decide(later(equity_obs(), 1))  # a new worker, stopped again
        assert d2.outcome == "invalid" and agent.worker is not None and agent.worker.starts == 2
    finally:
        await agent.aclose()


async def test_a_stock_that_crashes_is_held_alone(server: FakeLlmServer, monkeypatch: Any
                                                  ) -> None:
    code = ("def generate_signal(df):\n"
            "    if df['close'].iloc[-1] > 300:\n"
            "        return {'signal': 1, 'position': 1 / 0}\n"
            "    return {'signal': 1, 'position': 2.0 if df['close'].iloc[-1] > 170 else 1.0}\n")
    server.push_step("strategy", strategy(code))
    agent = make(server, monkeypatch)
    try:
        d = await agent.decide(equity_obs())
        assert d.outcome == "invalid"  # every stock failed: MSFT raised, AAPL out of range
        failed = json.loads(d.raw_output)["failed"]
        assert "ZeroDivisionError" in failed["MSFT"] and "position must be" in failed["AAPL"]
    finally:
        await agent.aclose()


async def test_a_forged_answer_line_fails_the_bar_for_every_stock(server: FakeLlmServer,
                                                                  monkeypatch: Any) -> None:
    # The strategy writes a valid-looking answer without the request's id on every descriptor.
    code = ("import pandas as pd\n\n"
            "def generate_signal(df):\n"
            "    line = b'{\"ok\": true, \"results\": {\"AAPL\": {\"signal\": 1,"
            " \"position\": 1.0}}}\\n'\n"
            "    for fd in range(1, 64):\n"
            "        try:\n"
            "            pd.io.common.os.write(fd, line)\n"
            "        except Exception:\n"
            "            pass\n"
            "    return {'signal': 1, 'position': 0.5}\n")
    server.push_step("strategy", strategy(code))
    agent = make(server, monkeypatch)
    try:
        d = await agent.decide(equity_obs())
        assert d.outcome == "invalid" and d.allocation is None
        assert "protocol error" in d.reason and d.reason.endswith("holding")
        summary = json.loads(d.raw_output)
        assert summary["failed"].keys() == {"AAPL", "MSFT"}
        assert all("protocol error" in r for r in summary["failed"].values())
        assert "signals" not in summary
    finally:
        await agent.aclose()


async def test_a_stock_not_answered_is_a_recorded_failure(server: FakeLlmServer,
                                                         monkeypatch: Any) -> None:
    server.push_step("strategy", strategy(TREND))
    agent = make(server, monkeypatch)
    try:
        await agent.decide(equity_obs())
        assert agent.worker is not None

        async def only_aapl(bars: dict[str, Any]) -> dict[str, Any]:
            assert bars.keys() == {"AAPL", "MSFT"}
            return {"AAPL": {"signal": 1, "position": 0.8}}  # MSFT missing altogether

        monkeypatch.setattr(agent.worker, "run_bar", only_aapl)
        d = await agent.decide(later(equity_obs(), 1))
        summary = json.loads(d.raw_output)
        assert summary["signals"] == {"AAPL": [1, 0.8]}
        assert summary["failed"] == {"MSFT": "no answer for this stock"}
        assert d.outcome == "ok" and "MSFT" in d.reason
    finally:
        await agent.aclose()


def test_target_weights_hold_sell_and_scale() -> None:
    obs = equity_obs()
    w, e = target_weights(obs, {"AAPL": (0, 1.0), "MSFT": (1, 0.6)})
    assert w == pytest.approx({"AAPL": 0.18, "MSFT": 0.2, "NVDA": 0.0, CASH: 0.62})
    assert e["AAPL"] == pytest.approx(0.54)
    w2, _ = target_weights(obs, {"AAPL": (-1, 0.0)})
    assert w2["AAPL"] == 0.0 and w2[CASH] == pytest.approx(1.0)
    drifted = dataclasses.replace(obs, weights={"AAPL": 0.9, CASH: 0.1})
    w3, _ = target_weights(drifted, {"MSFT": (1, 1.0)})
    total = 0.9 + 1 / 3
    assert w3["AAPL"] == pytest.approx(0.9 / total) and w3[CASH] == pytest.approx(0.0)


def test_bars_are_the_closes_and_the_current_price() -> None:
    bars = bars_of(equity_obs(), lookback=3)
    assert set(bars) == {"AAPL", "MSFT"}
    assert bars["AAPL"]["close"] == [103.0, 104.0, 180.0]
    assert bars["AAPL"]["ts"][-1] == T - 60


def test_strategy_answer_is_strict() -> None:
    with pytest.raises(InvalidOutput, match="'strategy' must be an object"):
        check_strategy(json.dumps({"strategy": "def generate_signal(df): pass"}), "stop")
    with pytest.raises(InvalidOutput, match="truncated"):
        check_strategy(json.dumps({"strategy": {"code": TREND}}), "length")
    assert check_strategy(json.dumps({"strategy": {"code": TREND}}), "stop").code == TREND


def test_the_prompt_lists_only_columns_the_frames_have() -> None:
    import re

    import pandas as pd  # type: ignore[import-untyped]

    from agents.alphaforgebench.agent import FACTORS
    from agents.alphaforgebench.factor_library import frame

    cols = set(frame(pd.Series([float(i + 1) for i in range(10)])).columns)
    for names, _ in FACTORS:
        head, _, windows = names.partition(", w in ")
        for name in re.split(r",\s*", head):
            for w in windows.split() or [""]:
                assert name.replace("{w}", w) in cols, name


class StrategyModel(FakeLlmServer):
    """Answers each strategy request with the next code of ``codes`` (the last one repeats)."""

    def __init__(self, codes: list[str]) -> None:
        super().__init__()
        self.codes = codes
        self.served = 0

    async def _respond(self, body: dict[str, Any]) -> Any:
        code = self.codes[min(self.served, len(self.codes) - 1)]
        self.served += 1
        self.push(strategy(code))
        return await super()._respond(body)


async def test_example_config_replays_the_sample(tmp_path: Any, monkeypatch: Any) -> None:
    import sqlite3
    import tomllib
    from datetime import UTC, datetime
    from pathlib import Path

    from daemon.app.replay import replay
    from daemon.config.settings import parse_config

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "examples" / "alphaforgebench.toml").read_text())
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    # Version 1 trades, version 2 loops forever (killed every bar), version 3 trades again.
    codes = [TREND, LOOP, TREND.replace("0.8", "0.5")]
    async with StrategyModel(codes) as model:
        data["agents"][0].update(api_base=model.api_base, timeout=10)
        # 2 s of wall clock per bar, a hang guard: the 15 stocks' frames (the whole factor
        # library) take about 0.1 s; the loop is stopped by it (not by the CPU limit).
        data["agents"][0]["strategy"].update(regenerate_every="2d", timeout="2s",
                                             cpu_seconds=30)
        cfg = parse_config(data)
        end = datetime(2026, 10, 31, tzinfo=UTC).timestamp()  # the first 10 sessions
        await replay(root / "examples" / "sample.jsonl.gz", cfg, tmp_path / "af.db",
                     progress=False, window=(None, end))
    con = sqlite3.connect(tmp_path / "af.db")
    q = con.execute
    rows = q("SELECT scheduled_ts, outcome, reason, raw_output FROM decisions"
             " WHERE agent='alphaforge' ORDER BY scheduled_ts").fetchall()
    assert len(rows) >= 8
    versions = [json.loads(r[3]).get("strategy_version") for r in rows]
    assert versions[0] == code_sha256(TREND)
    assert code_sha256(LOOP) in versions and versions[-1] == code_sha256(codes[2])
    by_version = {v: [r for r, rv in zip(rows, versions, strict=True) if rv == v]
                  for v in set(versions)}
    assert all(r[1] == "ok" for r in by_version[code_sha256(TREND)])
    assert all(r[1] == "invalid" and "timed out after 2s" in r[2]
               for r in by_version[code_sha256(LOOP)])
    assert all(r[1] == "ok" for r in by_version[code_sha256(codes[2])])  # the daemon went on
    # The code of every version is stored with the call that produced it.
    stored = {json.loads(p)["sha256"]: json.loads(p)["code"]
              for (p,) in q("SELECT parsed_json FROM llm_calls WHERE step='strategy'"
                            " AND outcome='ok'")}
    assert stored[code_sha256(LOOP)] == LOOP
    # Version 1 bought stocks (fills with trades), at the paper's 10 bps cost.
    fills = q("SELECT traded_value, cost FROM fills WHERE agent='alphaforge'"
              " AND traded_value > 0").fetchall()
    assert fills and all(c == pytest.approx(t * 0.001) for t, c in fills)
    first = datetime.fromtimestamp(rows[0][0], UTC)
    assert first.strftime("%H:%M") == "19:55"  # 15:55 EDT
    con.close()

    # The report and the API show the live figures of each version apart.
    from agents.alphaforgebench.report import load_async, text_section
    from daemon.store.reports import load_alphaforge
    from daemon.store.store import Store

    data = load_alphaforge(str(tmp_path / "af.db"))
    figures = {v["version"]: v for v in data["versions"]}
    loop = figures[code_sha256(LOOP)[:12]]
    assert loop["failed"] == loop["bars"] == len(by_version[code_sha256(LOOP)])
    assert loop["ok"] == 0 and loop["active"] is None
    v1 = figures[code_sha256(TREND)[:12]]
    assert v1["ok"] == v1["bars"] and v1["ret"] is not None and v1["active"] is not None
    # The versions' returns chain into the agent's whole return.
    (v_first, v_last) = (q2 := sqlite3.connect(tmp_path / "af.db")).execute(
        "SELECT (SELECT value_before FROM fills WHERE agent='alphaforge' ORDER BY scheduled_ts"
        " LIMIT 1), (SELECT value FROM equity WHERE agent='alphaforge' ORDER BY ts DESC"
        " LIMIT 1)").fetchone()
    q2.close()
    chained = 1.0
    for v in data["versions"]:
        chained *= 1.0 + v["ret"]
    assert chained == pytest.approx(v_last / v_first)
    section = text_section(load_alphaforge(str(tmp_path / "af.db")))
    assert "AlphaForgeBench strategy versions" in section and code_sha256(LOOP)[:12] in section
    store = await Store.open(str(tmp_path / "af.db"), lock=False)
    try:
        assert await load_async(store.fetchall) == data
        # After a restart the agent takes up the version its last decision ran.
        agent = AlphaForgeAgent(cfg.agents[0])
        assert await agent.restore_from_store(store.fetchall)
        assert agent.current is not None and agent.current.code == codes[2]
        assert agent.created_ts == json.loads(rows[-1][3])["strategy_since"]
        assert not agent.due(rows[-1][0] + DAY)
    finally:
        await store.close()


@pytest.mark.parametrize("extra, error", [
    ({"markets": ["equity", "polymarket"]}, "trades the equity market only"),
    ({"strategy": {"timeout": -1}}, "strategy.timeout"),
    ({"strategy": {"memory_mb": 10}}, "strategy.memory_mb"),
    ({"strategy": {"regenerate_every": "weekly"}}, "strategy.regenerate_every"),
    ({"strategy": {"lookback": 1}}, "strategy.lookback"),
])
def test_bad_settings_are_one_line(tmp_path: Any, extra: dict[str, Any], error: str) -> None:
    from daemon.config.settings import ConfigError, parse_config

    agent = {"id": "af", "kind": "llm", "model": "openai/m", "protocol": "alphaforgebench",
             "markets": ["equity"], **extra}
    with pytest.raises(ConfigError) as info:
        parse_config({"agents": [agent]})
    assert any(error in line for line in info.value.problems), info.value.problems


HOSTILE = {
    "socket": ("import pandas as pd\n\ndef generate_signal(df):\n"
               "    pd.io.common.urlopen('http://127.0.0.1:9/')\n"
               "    return {'signal': 1, 'position': 1.0}\n", "not allowed"),
    "file write": ("import pandas as pd\n\ndef generate_signal(df):\n"
                   "    df.to_csv('/tmp/paperarena-alphaforge-test.csv')\n"
                   "    return {'signal': 1, 'position': 1.0}\n", "writing files is not allowed"),
    "10 GB": ("import numpy as np\n\ndef generate_signal(df):\n"
              "    x = np.ones(10 * 1024 ** 3, dtype=np.uint8)\n"
              "    return {'signal': 1, 'position': float(x[0])}\n", "MemoryError"),
    "endless loop": (LOOP, "timed out after 2s"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_hostile_strategy_is_recorded_and_the_next_version_trades(
        server: FakeLlmServer, monkeypatch: Any, name: str) -> None:
    code, error = HOSTILE[name]
    server.push_step("strategy", strategy(code), strategy(TREND))
    agent = make(server, monkeypatch, regenerate_every="1d")
    try:
        d = await agent.decide(equity_obs())
        assert d.outcome == "invalid" and d.allocation is None, d.reason
        assert error in d.reason and d.reason.endswith("holding")
        d2 = await agent.decide(later(equity_obs(), 1))  # renewed: the good version trades
        assert d2.outcome == "ok" and d2.allocation is not None
        assert json.loads(d2.raw_output)["strategy_version"] == code_sha256(TREND)
    finally:
        await agent.aclose()
    from pathlib import Path

    assert not Path("/tmp/paperarena-alphaforge-test.csv").exists()


def test_the_engine_keeps_the_closes_a_strategy_looks_back_on() -> None:
    from daemon.config.settings import parse_config
    from daemon.engine.engine import history_days
    from daemon.market.state import HISTORY_DAYS

    agent = {"id": "af", "kind": "llm", "model": "openai/m", "protocol": "alphaforgebench",
             "markets": ["equity"]}
    assert history_days(parse_config({"agents": [agent]})) == 299  # lookback 300
    short = {**agent, "strategy": {"lookback": 10}}
    assert history_days(parse_config({"agents": [short]})) == HISTORY_DAYS
    assert history_days(parse_config({"agents": [{"id": "bh", "kind": "buy_and_hold"}]})) == 30


#: The review's exfiltration: read every process's environment (the daemon's above all) and
#: the daemon's files, reversed so redaction would miss it, into the decision's reason.
EXFILTRATE = """
import pandas as pd

def generate_signal(df):
    os = pd.io.common.os
    found = []
    for pid in ['self', '1', '2', str(os.getppid())] + os.listdir('/proc'):
        for name in ('environ', 'cmdline'):
            try:
                fd = os.open('/proc/%s/%s' % (pid, name), 0)
                found.append(os.read(fd, 65536).decode(errors='replace'))
            except Exception as e:
                found.append(str(e)[:20])
    found.append(str(dict(os.environ)))
    raise ValueError('LEAK ' + ' '.join(found)[::-1][:250])
"""


async def test_a_replayed_strategy_cannot_carry_the_provider_key_out(
        tmp_path: Any, monkeypatch: Any, capfd: pytest.CaptureFixture[str]) -> None:
    # Through the daemon's own replay, with the model answering the hostile code: the key is in
    # the daemon's environment; it must appear nowhere in the store, the log or the API.
    import sqlite3
    import tomllib
    from datetime import UTC, datetime
    from pathlib import Path

    from daemon.app.replay import replay
    from daemon.config.settings import parse_config

    canary = "sk-canary-6c1f0b2e9d"
    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "examples" / "alphaforgebench.toml").read_text())
    monkeypatch.setenv("LOCAL_LLM_KEY", canary)
    async with StrategyModel([EXFILTRATE]) as model:
        data["agents"][0].update(api_base=model.api_base, timeout=10)
        cfg = parse_config(data)
        end = datetime(2026, 10, 24, tzinfo=UTC).timestamp()  # the first 5 sessions
        await replay(root / "examples" / "sample.jsonl.gz", cfg, tmp_path / "af.db",
                     progress=False, window=(None, end))
    con = sqlite3.connect(tmp_path / "af.db")
    reasons = [r for (r,) in con.execute(
        "SELECT reason FROM decisions WHERE agent='alphaforge' AND reason LIKE '%LEAK%'")]
    assert reasons, "the hostile strategy did not run"
    dump = "\n".join(con.iterdump())
    con.close()
    out, err = capfd.readouterr()
    for text in (dump, out, err):
        assert canary not in text and canary[::-1] not in text


def test_a_store_without_strategy_versions_reads_no_fill_or_mark() -> None:
    # Every report reads the AlphaForgeBench section; a store without a strategy version
    # (no decision carrying the marker) reads neither its fills nor its equity marks.
    from agents.alphaforgebench.report import DECISIONS_SQL, board_section, load

    asked: list[str] = []

    def fetchall(sql: str, params: Any) -> list[tuple[Any, ...]]:
        asked.append(sql)  # no decision, no instability run; a fill or mark otherwise
        return [] if sql == DECISIONS_SQL or "instability_runs" in sql else [("x", 1.0, 9.0)]

    assert load(fetchall) == {"versions": [], "instability": None}
    assert asked == [DECISIONS_SQL, "SELECT ts, result_json FROM instability_runs ORDER BY id "
                                    "DESC LIMIT 1"]
    assert board_section(fetchall) is None
