"""docs/reproduce.md's AlphaForgeBench recipe end to end on a recording made by the fake chart
history (issue 29, point 7; split from test_reproduce.py, which holds the other recipes)."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import tomllib
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daemon.app.cli import main
from tests.fakes.yahoo_server import FakeYahoo, chart_payload
from tests.helpers import nyse_sessions
from tests.llm_server import FakeLlmServer, ok
from tests.project.test_reproduce import DOC, ROOT, _doc_tickers, _history_build

#: Two rules whose signals the test computes itself: the close above the window's first close
#: (all in), and the close above the previous close (half in; hold on the first bar).
RULE_A = """
def generate_signal(df):
    if df["close"].iloc[-1] > df["close"].iloc[0]:
        return {"signal": 1, "position": 1.0}
    return {"signal": -1, "position": 0.0}
"""
RULE_B = """
def generate_signal(df):
    if len(df) < 2:
        return {"signal": 0, "position": 0.0}
    if df["close"].iloc[-1] > df["close"].iloc[-2]:
        return {"signal": 1, "position": 0.5}
    return {"signal": -1, "position": 0.0}
"""


class RuleModel(FakeLlmServer):
    """At temperature 0 always rule A; above it rule A, then B, alternating."""

    def __init__(self) -> None:
        super().__init__()
        self.warm = 0

    async def _respond(self, body: dict[str, Any]) -> Any:
        code = RULE_A
        if body.get("temperature"):
            code = RULE_A if self.warm % 2 == 0 else RULE_B
            self.warm += 1
        self.push(ok(json.dumps({"strategy": {"code": code}})))
        return await super()._respond(body)


def _rule_signals(closes: list[float], rule: str) -> tuple[list[int], list[float]]:
    """Return the signals and exposures ``rule`` gives over ``closes`` (as in the paper:
    buy -> the position, sell -> 0, hold -> kept)."""
    sig: list[int] = []
    held: list[float] = []
    e = 0.0
    for t, c in enumerate(closes):
        if rule == "A":
            s, p = (1, 1.0) if c > closes[0] else (-1, 0.0)
        else:
            s, p = (0, 0.0) if t == 0 else (1, 0.5) if c > closes[t - 1] else (-1, 0.0)
        e = p if s == 1 else 0.0 if s == -1 else e
        sig.append(s)
        held.append(e)
    return sig, held


def _sleeve_return(closes: list[float], held: list[float], cost: float) -> float:
    """Return one sleeve's total return: exposure chosen at a close, held to the next; each
    change costs ``cost`` per unit traded."""
    value, prev = 1.0, 0.0
    for t, e in enumerate(held):
        value *= 1 - abs(e - prev) * cost
        prev = e
        if t + 1 < len(closes):
            value *= 1 + e * (closes[t + 1] / closes[t] - 1)
    return value - 1


async def test_the_alphaforgebench_recipe(tmp_path: Path, capsys: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the paper's seven assets from the fake chart history (the crypto pairs with
    00:00 UTC bars on every day, weekends included) and run the doc's
    ``alphaforge-instability`` on the doc's copy of examples/alphaforgebench.toml: each run's
    signals, the pairwise agreement, the active-step Jaccard, the returns and the temperature
    agreement equal the test's own computation from the closes of the NYSE sessions."""
    tickers = _doc_tickers("build-recording", "af-history.jsonl.gz")
    assert set(tickers) == {"AAPL", "GOOGL", "MSFT", "NVDA", "TSLA", "BTC-USD", "ETH-USD"}
    sessions = nyse_sessions(date(2025, 3, 3), date(2025, 3, 14))
    days = [date(2025, 3, 1) + timedelta(days=i) for i in range(15)]  # Mar 1 (Sat) .. 15
    closes: dict[str, list[float]] = {}
    fake = FakeYahoo()
    await fake.start()
    try:
        for k, sym in enumerate(tickers):
            if sym.endswith("-USD"):  # 24/7: a bar per calendar day, starting 00:00 UTC
                every = {d: round(900.0 + 37 * ((i * (k + 2)) % 7) - 5 * k + 1.1 * i, 2)
                         for i, d in enumerate(days)}
                closes[sym] = [every[d] for d, _, _ in sessions]
                fake.charts[sym] = chart_payload(sym, None, 0, [
                    (int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()), p)
                    for d, p in every.items()])
                continue
            closes[sym] = [round(100.0 + ((i * (k + 2)) % 5 - 2) * (1 + k) + 0.3 * i, 2)
                           for i in range(len(sessions))]
            fake.charts[sym] = chart_payload(sym, None, 0, [
                (int(o), c) for (_, o, _), c in zip(sessions, closes[sym], strict=True)])
        rec = tmp_path / "af-history.jsonl.gz"
        argv = ["build-recording", "--tickers", ",".join(tickers), "--start", "2025-03-03",
                "--end", "2025-03-14", "--out", str(rec),
                "--config", str(_history_build(tmp_path, fake.chart_url))]
        assert await asyncio.to_thread(main, argv) == 0
    finally:
        await fake.stop()
    cfg, db = tmp_path / "af.toml", tmp_path / "af.db"
    # The doc's sed line makes the seven assets the universe (run as written, from the root).
    block = next(b for b in re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)
                 if "af-history.toml" in b).replace("\\\n", " ")
    line = next(x for x in block.splitlines() if x.startswith("sed "))
    done = subprocess.run(shlex.split(line.split(">", 1)[0]), cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert sorted(tomllib.loads(done.stdout)["markets"]["equity"]["assets"]) == sorted(tickers)
    monkeypatch.setenv("LOCAL_LLM_KEY", "x")
    async with RuleModel() as model:
        cfg.write_text(done.stdout.replace("http://127.0.0.1:8000/v1", model.api_base))
        argv = ["alphaforge-instability", "--config", str(cfg), "--recording", str(rec),
                "--db", str(db), "--repeats", "2"]
        capsys.readouterr()
        assert await asyncio.to_thread(main, argv) == 0
    out = capsys.readouterr().out  # the JSON result (after a log line when logging is unset)
    start = re.search(r"^\{", out, flags=re.M)
    assert start is not None
    result = json.loads(out[start.start():])
    assets = sorted(tickers)
    assert result["assets"] == assets and result["bars"] == len(sessions)
    runs = {rule: [_rule_signals(closes[a], rule) for a in assets] for rule in "AB"}
    signals = {r: [s for sig, _ in runs[r] for s in sig] for r in runs}
    active = {r: [e > 0 for _, held in runs[r] for e in held] for r in runs}
    ret = {r: float(np.mean([_sleeve_return(closes[a], held, result["cost"])
                             for a, (_, held) in zip(assets, runs[r], strict=True)]))
           for r in runs}
    cold = result["temperatures"]["0"]["models"]["alphaforge"]
    assert cold["run_signals"] == [signals["A"]] * 2 and cold["pairwise_agreement"] == 1.0
    assert cold["mean_return"] == pytest.approx(ret["A"], abs=1e-12)
    warm = result["temperatures"]["0.7"]["models"]["alphaforge"]
    assert warm["run_signals"] == [signals["A"], signals["B"]]
    agree = np.mean(np.asarray(signals["A"]) == np.asarray(signals["B"]))
    assert warm["pairwise_agreement"] == pytest.approx(float(agree))
    both = np.sum(np.asarray(active["A"]) & np.asarray(active["B"]))
    either = np.sum(np.asarray(active["A"]) | np.asarray(active["B"]))
    assert warm["active_jaccard"] == pytest.approx(float(both / either))
    assert warm["mean_return"] == pytest.approx((ret["A"] + ret["B"]) / 2, abs=1e-12)
    # The temperature agreement: majority of [A, A] is A; of [A, B] a tie where they differ.
    majority_warm = [a if a == b else 0 for a, b in zip(signals["A"], signals["B"], strict=True)]
    expect = np.mean(np.asarray(signals["A"]) == np.asarray(majority_warm))
    assert result["temperature_agreement"]["alphaforge"]["0/0.7"] == pytest.approx(float(expect))
    assert main(["report", "--db", str(db)]) == 0
    assert "AlphaForgeBench instability (2 generations per model" in capsys.readouterr().out
