"""``paperarena alphaforge-instability`` against the local model server on the shipped sample."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daemon.app.cli import main
from tests.llm_server import FakeLlmServer, ok
from tests.pg import pg_database, requires_pg

ROOT = Path(__file__).resolve().parents[2]

STABLE = """
def generate_signal(df):
    if df["close"].iloc[-1] > df["close"].iloc[0]:
        return {"signal": 1, "position": 1.0}
    return {"signal": -1, "position": 0.0}
"""


def threshold(k: int) -> str:
    """A strategy whose rule changes with ``k``: ret_1 above -k/1000."""
    return (
        "import numpy as np\n\ndef generate_signal(df):\n"
        "    r = df['ret_1'].iloc[-1]\n"
        "    if np.isnan(r):\n        return {'signal': 0, 'position': 0.0}\n"
        f"    if r > -{k} / 1000:\n        return {{'signal': 1, 'position': 0.5}}\n"
        "    return {'signal': -1, 'position': 0.0}\n")


class TwoModels(FakeLlmServer):
    """model-a always writes the same code; model-b a different rule at every call."""

    def __init__(self) -> None:
        super().__init__()
        self.b_calls = 0
        self.temperatures: list[tuple[str, Any]] = []

    async def _respond(self, body: dict[str, Any]) -> Any:
        model = body["model"]
        self.temperatures.append((model, body.get("temperature")))
        if model.endswith("model-a"):
            code = STABLE
        else:
            self.b_calls += 1
            code = threshold(self.b_calls * 7)
        self.push(ok(json.dumps({"strategy": {"code": code}})))
        return await super()._respond(body)


def write_config(tmp_path: Path, api_base: str) -> Path:
    agents = ""
    for name in ("a", "b"):
        agents += f"""
[[agents]]
id = "model-{name}"
kind = "llm"
protocol = "alphaforgebench"
markets = ["equity"]
model = "openai/model-{name}"
api_base = "{api_base}"
api_key_env = "LOCAL_LLM_KEY"
[agents.strategy]
lookback = 30
timeout = "5s"
"""
    path = tmp_path / "af.toml"
    path.write_text("[markets.polymarket]\nenabled = false\n" + agents)
    return path


async def cli(*args: str) -> tuple[int, str, str]:
    """Run ``python -m daemon.app.cli`` (it configures logging) while this loop serves the fake."""
    import asyncio
    import os
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon.app.cli", *args, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "LOCAL_LLM_KEY": "sk-local"})
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_repeated_generations_measure_instability(tmp_path: Path, monkeypatch: Any,
                                                        capsys: Any) -> None:
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    db = tmp_path / "af.db"
    server = await TwoModels().start()
    assert isinstance(server, TwoModels)
    try:
        cfg = write_config(tmp_path, server.api_base)
        code, out, err = await cli("alphaforge-instability", "--config", str(cfg),
                                   "--recording", str(ROOT / "examples" / "sample.jsonl.gz"),
                                   "--db", str(db), "--repeats", "2", "--sessions", "6")
    finally:
        await server.close()
    assert code == 0, err
    result = json.loads(out)  # the whole of stdout is the JSON result
    assert result["bars"] == 6 and result["repeats"] == 2 and len(result["assets"]) == 15
    # 2 models x 2 temperatures x 2 generations, each at its temperature.
    assert sorted(set(server.temperatures)) == [
        ("model-a", 0.0), ("model-a", 0.7), ("model-b", 0.0), ("model-b", 0.7)]
    assert len(server.temperatures) == 8
    for temp in ("0", "0.7"):
        block = result["temperatures"][temp]
        a, b = block["models"]["model-a"], block["models"]["model-b"]
        assert a["valid"] == a["runs"] == 2 and a["distinct_versions"] == 1
        assert a["pairwise_agreement"] == 1.0 and a["disagreement_steps"] == 0.0
        assert a["active_jaccard"] == 1.0 and a["std_return"] == 0.0
        assert b["distinct_versions"] == 2
        assert b["pairwise_agreement"] < 1.0 and b["disagreement_steps"] > 0.0
        # SNR over the runs' Sharpe ratios (Appendix F):
        # |mean a - mean b| / mean(std a, std b) with std a = 0
        assert a["std_sharpe"] == 0.0 and len(b["sharpes"]) == 2
        expected = abs(a["mean_sharpe"] - b["mean_sharpe"]) / (b["std_sharpe"] / 2)
        assert block["snr"] == pytest.approx(expected)
        # The step-wise agreement per bar: the mean over stocks of 1 where the two runs agree.
        sb = np.asarray(b["run_signals"])
        per_step = (sb[0] == sb[1]).astype(float).reshape(len(result["assets"]), -1)
        assert b["stepwise_agreement"] == pytest.approx(per_step.mean(axis=0).tolist())
        assert b["mean_stepwise_agreement"] == pytest.approx(b["pairwise_agreement"])
        assert a["stepwise_agreement"] == [1.0] * result["bars"]
        # Every run's signals, active steps and code are kept, so the figures can be audited:
        # recompute b's pairwise agreement and Jaccard from the stored runs.
        steps = result["bars"] * len(result["assets"])
        sig, act = b["run_signals"], b["run_active"]
        assert len(sig) == len(act) == b["runs"] and all(len(r) == steps for r in sig + act)
        assert b["pairwise_agreement"] == pytest.approx(
            sum(x == y for x, y in zip(sig[0], sig[1], strict=True)) / steps)
        both = sum(1 for x, y in zip(act[0], act[1], strict=True) if x and y)
        either = sum(1 for x, y in zip(act[0], act[1], strict=True) if x or y)
        assert b["active_jaccard"] == pytest.approx(both / either if either else 1.0)
        from agents.alphaforgebench.sandbox import code_sha256

        assert sorted(b["codes"]) == sorted(set(b["versions"]))
        assert all(code_sha256(c) == v for v, c in b["codes"].items())
    # model-a writes the same code at both temperatures: its majority signals agree everywhere.
    assert result["temperature_agreement"]["model-a"] == {"0/0.7": 1.0}
    assert 0.0 <= result["temperature_agreement"]["model-b"]["0/0.7"] <= 1.0
    con = sqlite3.connect(db)
    (stored,) = con.execute("SELECT result_json FROM instability_runs").fetchone()
    con.close()
    assert json.loads(stored) == result
    # The report shows it.
    assert main(["report", "--db", str(db)]) == 0
    report = capsys.readouterr().out
    assert "AlphaForgeBench instability (2 generations per model, 6 bars x 15 stocks" in report
    assert "SNR" in report


@pytest.mark.parametrize("args, error", [
    (["--repeats", "1"], "--repeats must be at least 2"),
    (["--temperatures", "hot"], "--temperatures must be numbers"),
    (["--temperatures", "3"], "--temperatures must be between 0 and 2"),
])
def test_bad_arguments_are_one_line(tmp_path: Path, capsys: Any, args: list[str],
                                    error: str) -> None:
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1")
    code = main(["alphaforge-instability", "--config", str(cfg), "--recording",
                 str(ROOT / "examples" / "sample.jsonl.gz"), *args])
    err = capsys.readouterr().err
    assert code == 2 and error in err and err.count("\n") == 1


async def test_a_config_without_alphaforge_agents_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "x.toml"
    cfg.write_text('[[agents]]\nid = "bh"\nkind = "buy_and_hold"\n')
    code, _, err = await cli("alphaforge-instability", "--config", str(cfg), "--recording",
                             str(ROOT / "examples" / "sample.jsonl.gz"), "--db",
                             str(tmp_path / "d.db"))
    assert code == 2 and "no agent with protocol = 'alphaforgebench'" in err


@requires_pg
def test_a_result_is_stored_in_a_shared_store_and_read_back() -> None:
    """Issue 19: ``--db postgresql://...`` stores the result in the shared store (its own scope,
    so a daemon running on that store is not disturbed); the merged read finds it."""
    from agents.alphaforgebench.instability import INSTABILITY_SCOPE, instability_row
    from daemon.store.append import append_rows

    def store_result(db: str, result: dict[str, Any], ts: float) -> None:
        append_rows(db, [instability_row(result, ts)], scope=INSTABILITY_SCOPE)
    from daemon.store.read import open_for_reading

    result = {"input_sha256": "i" * 64, "prompt_sha256": "p" * 64, "repeats": 2, "bars": 6}
    with pg_database() as url:
        store_result(url, result, 1.0)
        store_result(url, {**result, "bars": 7}, 2.0)
        con = open_for_reading(url)
        rows = con.execute("SELECT ts, repeats, result_json FROM instability_runs ORDER BY ts")
        assert [(ts, n, json.loads(r)["bars"]) for ts, n, r in rows] == [(1.0, 2, 6),
                                                                        (2.0, 2, 7)]
        con.close()
