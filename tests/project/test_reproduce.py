"""docs/reproduce.md: every command parses, and the recipes run end to end on small recordings
made by the fake servers (issue 29, point 7)."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sqlite3
import subprocess
import tomllib
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from daemon.app.cli import main
from daemon.app.cli_parser import build_parser
from daemon.app.replay import replay
from daemon.config.settings import parse_config
from tests.fakes.yahoo_server import FakeYahoo, chart_payload
from tests.helpers import nyse_sessions

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reproduce.md"


def _commands() -> list[list[str]]:
    """Return every ``paperarena`` command of the doc's sh blocks, continuation lines joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            words = shlex.split(line)
            while words and "=" in words[0]:  # LOCAL_LLM_KEY=x
                words.pop(0)
            if words and words[0] == "paperarena":
                out.append(words[1:])
    return out


def test_every_command_of_the_doc_parses() -> None:
    cmds = _commands()
    assert {c[0] for c in cmds} >= {"build-recording", "replay", "report", "stress-gate",
                                    "alphaforge-instability", "record"}
    parser = build_parser()
    for argv in cmds:
        parser.parse_args(argv)  # an unknown command or flag exits (SystemExit)
        for a in argv:
            if a.startswith("examples/"):
                assert (ROOT / a).exists(), a


async def test_the_portbench_stress_recipe(tmp_path: Path, capsys: Any) -> None:
    """Build a COVID-window recording from the fake history, replay examples/stress.toml with a
    portbench agent: the report has the gate, the stage scores, the stress CEPS verdict against
    Table 6's 0.45 and PAS; ``stress-gate`` combines the window."""
    from tests.protocols.test_portbench import PortBenchModel

    tickers = ["SPY", "TLT", "GLD", "BIL"]
    sessions = nyse_sessions(date(2020, 2, 3), date(2020, 3, 13))
    fake = FakeYahoo()
    await fake.start()
    try:
        for k, sym in enumerate(tickers):
            bars = [(int(o), round(100.0 * (1 + 0.01 * ((i * (k + 1)) % 7 - 3)) ** (i / 5), 4))
                    for i, (_, o, _) in enumerate(sessions)]
            fake.charts[sym] = chart_payload(sym, None, 0, bars)
        build = tmp_path / "build.toml"
        build.write_text(f'[sources.equity.yahoo]\nchart_url = "{fake.chart_url}"\n')
        rec = tmp_path / "covid.jsonl.gz"
        argv = ["build-recording", "--tickers", ",".join(tickers), "--start", "2020-02-03",
                "--end", "2020-03-13", "--out", str(rec), "--config", str(build)]
        assert await asyncio.to_thread(main, argv) == 0
    finally:
        await fake.stop()
    data = tomllib.loads((ROOT / "examples" / "stress.toml").read_text())
    data["markets"]["equity"]["assets"] = tickers
    async with PortBenchModel() as model:
        data["agents"].append({"id": "pb-balanced", "kind": "llm", "protocol": "portbench",
                               "markets": ["equity"], "model": "openai/m", "timeout": 10,
                               "api_base": model.api_base, "cov_window": 10})
        await replay(rec, parse_config(data), tmp_path / "covid.db", progress=False)
    capsys.readouterr()
    assert main(["report", "--db", str(tmp_path / "covid.db"), "--json"]) == 0
    board = json.loads(capsys.readouterr().out)
    assert board["stress_gate"]["pb-balanced"]["tolerance"] == pytest.approx(0.20)
    assert {"sixty_forty", "risk_parity", "min_variance"} <= set(board["stress_gate"])
    scores = board["portbench"]["pb-balanced"]
    assert scores["decisions"] > 0 and scores["CEPS"] is not None
    stress = board["portbench_profiles"]["stress_ceps"]
    assert (stress["window"], stress["threshold"]) == ("2020 COVID Crash", 0.45)
    verdict = stress["agents"]["pb-balanced"]
    assert verdict["CEPS"] == pytest.approx(scores["CEPS"])
    assert verdict["risk_safe"] is (scores["CEPS"] >= 0.45)
    assert board["portbench_profiles"]["pas"]["pb-balanced"]["PAS"] is not None
    assert main(["stress-gate", str(tmp_path / "covid.db")]) == 0
    gate = capsys.readouterr().out
    assert "pb-balanced" in gate and "sixty_forty" in gate
    # ... with the secondary criterion: the agent's stress CEPS against the window's 0.45.
    assert "2020 COVID Crash (>= 0.45)" in gate
    row = next(line for line in gate.splitlines()[gate.splitlines().index(
        next(x for x in gate.splitlines() if x.startswith("Stress CEPS"))):]
        if line.startswith("pb-balanced"))
    verdict_text = "risk-safe" if scores["CEPS"] >= 0.45 else "risk-UNSAFE"
    assert f"{scores['CEPS']:.3f} {verdict_text}" in row and row.endswith(verdict_text)


async def test_the_livetradebench_recipe(tmp_path: Path, capsys: Any) -> None:
    """The leaderboard of a replay with next-price fills and the random-guess baseline."""
    from datetime import UTC, datetime

    data = tomllib.loads((ROOT / "examples" / "sample-replay.toml").read_text())
    data["markets"]["equity"].setdefault("schedule", {"kind": "nyse"})["fill_at"] = "next_price"
    data["markets"]["polymarket"] = {"enabled": False}
    data["agents"] = [{"id": "ew", "kind": "equal_weight"},
                      {"id": "guess", "kind": "random_guess", "seed": 1}]
    end = datetime(2026, 10, 24, tzinfo=UTC).timestamp()
    await replay(ROOT / "examples" / "sample.jsonl.gz", parse_config(data), tmp_path / "l.db",
                 progress=False, window=(None, end))
    capsys.readouterr()
    assert main(["report", "--db", str(tmp_path / "l.db"), "--json"]) == 0
    board = json.loads(capsys.readouterr().out)
    agents = {r["agent"] for r in board["rows"] if r["market"] == "equity"}
    assert agents == {"ew", "guess"}
    con = sqlite3.connect(tmp_path / "l.db")
    late = con.execute("SELECT COUNT(*) FROM fills WHERE ts > scheduled_ts").fetchone()[0]
    total = con.execute("SELECT COUNT(*) FROM fills").fetchone()[0]
    con.close()
    assert total > 0 and late == total  # every fill after its decision: at the next prices


def _djia_tickers() -> list[str]:
    """Return the tickers of the doc's DJIA ``build-recording`` command."""
    build = next(c for c in _commands() if c[0] == "build-recording" and "--news" in c)
    return build[build.index("--tickers") + 1].split(",")


async def test_the_stockbench_recipe(tmp_path: Path, capsys: Any,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the DJIA recording (opens, closes, Finnhub news) from the fakes, replay
    examples/stockbench-djia.toml: fills at the recorded opens, and the report's composite
    score equals Eq. 4 recomputed from its CR, MDD and Sortino columns (CR and MDD from the
    stored daily marks)."""
    from tests.fakes.news_server import FakeNews
    from tests.protocols.test_stockbench import StockBenchModel

    tickers = _djia_tickers()
    assert tickers == tomllib.loads((ROOT / "examples" / "stockbench-djia.toml").read_text()
                                    )["markets"]["equity"]["assets"]
    sessions = nyse_sessions(date(2025, 3, 3), date(2025, 3, 11))
    yahoo, news = FakeYahoo(), FakeNews(token="fh-test")
    await yahoo.start()
    await news.start()
    opens: dict[tuple[str, float], float] = {}
    try:
        for k, sym in enumerate(tickers):
            closes = [round(100.0 + k + 3 * ((i * (k + 2)) % 5 - 2) + 0.5 * i, 2)
                      for i in range(len(sessions))]
            payload = chart_payload(sym, None, 0, [(int(o), c) for (_, o, _), c
                                                   in zip(sessions, closes, strict=True)])
            quote = payload["chart"]["result"][0]["indicators"]["quote"][0]
            quote["open"] = [round(c * (0.98 - 0.002 * k), 2) for c in closes]
            opens |= {(sym, o): p for (_, o, _), p in zip(sessions, quote["open"], strict=True)}
            yahoo.charts[sym] = payload
        news.finnhub["AAPL"] = [{"id": i, "headline": f"Apple story {i}", "source": "Wire",
                                 "url": "", "summary": "", "related": "AAPL",
                                 "datetime": int(sessions[i][1]) + 3600} for i in range(3)]
        monkeypatch.setenv("FINNHUB_API_KEY", "fh-test")
        build = tmp_path / "build.toml"
        build.write_text(f'[sources.equity.yahoo]\nchart_url = "{yahoo.chart_url}"\n'
                         f'[sources.news]\nfinnhub_url = "{news.base}/api/v1"\n')
        rec = tmp_path / "djia.jsonl.gz"
        argv = ["build-recording", "--news", "finnhub", "--start", "2025-03-03",
                "--end", "2025-03-11", "--tickers", ",".join(tickers), "--out", str(rec),
                "--config", str(build)]
        assert await asyncio.to_thread(main, argv) == 0
    finally:
        await news.stop()
        await yahoo.stop()
    cfg = tmp_path / "djia.toml"
    db = tmp_path / "djia.db"
    monkeypatch.setenv("LOCAL_LLM_KEY", "x")
    async with StockBenchModel() as model:
        cfg.write_text((ROOT / "examples" / "stockbench-djia.toml").read_text().replace(
            "http://127.0.0.1:8000/v1", model.api_base))
        assert await asyncio.to_thread(main, ["replay", str(rec), "--config", str(cfg),
                                              "--db", str(db), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--json"]) == 0
    board = json.loads(capsys.readouterr().out)
    rows = {r["agent"]: r for r in board["rows"] if r["market"] == "equity"}
    assert set(rows) == {"qwen-run1", "qwen-run2", "qwen-run3", "buy_and_hold"}
    con = sqlite3.connect(db)
    # Every purchase is filled at the session's recorded open (09:31 decisions).
    from daemon.core.sparse_rows import FILLS, fill_map

    fills = con.execute(f"SELECT f.scheduled_ts, f.trades_json, s.assets_json, f.agent,"
                        f" f.traded_value FROM {FILLS} WHERE f.traded_value > 0").fetchall()
    assert {f[3] for f in fills} >= {"buy_and_hold", "qwen-run1"}
    marks = {a: [v for (v,) in con.execute(
        "SELECT value FROM equity WHERE agent = ? AND market = 'equity' AND kind = 'daily'"
        " ORDER BY ts", (a,))] for a in rows}
    decisions = con.execute("SELECT COUNT(*) FROM decisions WHERE agent = 'qwen-run1'"
                            ).fetchone()[0]
    con.close()
    assert decisions == len(sessions)
    open_ts = {o for _, o, _ in sessions}
    for ts, trades, assets, _, traded in fills:
        day_open = max(o for o in open_ts if o <= ts)
        at_open = sum(abs(q) * opens[(sym, day_open)] for sym, q in
                      fill_map(trades, assets).items())
        assert ts - day_open < 120 and traded == pytest.approx(at_open, rel=1.5e-3)
    # CR and MDD from the stored daily marks, the composite from the three columns (Eq. 4).
    for agent, values in marks.items():
        v = np.asarray([100_000.0, *values])
        assert rows[agent]["cumulative_return"] == pytest.approx(v[-1] / v[0] - 1, abs=1e-9)
        peak = np.maximum.accumulate(v)
        assert rows[agent]["max_drawdown"] == pytest.approx(float(np.max(1 - v / peak)),
                                                            abs=1e-9)
    ranked = [a for a in rows if not rows[a]["provisional"]]
    cols = np.array([[rows[a]["cumulative_return"], -rows[a]["max_drawdown"],
                      rows[a]["sortino_stockbench"]] for a in ranked], dtype=float)
    sd = cols.std(axis=0)
    z = np.where(sd > 1e-12, (cols - cols.mean(axis=0)) / np.where(sd > 1e-12, sd, 1), 0.0)
    for a, score in zip(ranked, z.mean(axis=1), strict=True):
        assert rows[a]["composite_score"] == pytest.approx(float(score), abs=1e-9)
    order = sorted(ranked, key=lambda a: -rows[a]["composite_score"])
    assert [rows[a]["composite_rank"] for a in order] == list(range(1, len(order) + 1))


def _history_build(tmp_path: Path, chart_url: str) -> Path:
    """Write the build config pointing ``build-recording`` at the fake chart history."""
    build = tmp_path / "build.toml"
    build.write_text(f'[sources.equity.yahoo]\nchart_url = "{chart_url}"\n')
    return build


def _doc_tickers(command: str, out: str) -> list[str]:
    """Return the tickers of the doc's ``command`` that writes ``out``."""
    argv = next(c for c in _commands() if c[0] == command and out in c)
    return argv[argv.index("--tickers") + 1].split(",")


async def test_the_capitalbench_recipe(tmp_path: Path, capsys: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the options' and SPY's dividend-adjusted history from the fake (JNJ and SPY pay a
    dividend), replay examples/capitalbench.toml: weekly rounds frozen, marked retrospective,
    their trailing returns and each resolved round's return, score, regret and S&P comparison
    equal to a recomputation from the adjusted closes, not the quoted ones."""
    from tests.protocols.test_capitalbench import SampleModel

    tickers = _doc_tickers("build-recording", "cb-history.jsonl.gz")
    doc_argv = next(c for c in _commands() if c[0] == "build-recording"
                    and "cb-history.jsonl.gz" in c)
    assert "--dividend-adjusted" in doc_argv
    options = [o["id"] for o in tomllib.loads((ROOT / "examples" / "capitalbench.toml")
                                              .read_text())["capitalbench"]["options"]]
    assert set(tickers) == {*options, "SPY"} - {"CASH"}
    sessions = nyse_sessions(date(2025, 1, 6), date(2025, 1, 24))
    quoted: dict[str, dict[date, float]] = {}
    closes: dict[str, dict[date, float]] = {}  # dividend-adjusted, as Yahoo's adjclose
    ex = sessions[7][0]  # JNJ and SPY go ex-dividend on the 8th session (Wednesday, Jan 15)
    fake = FakeYahoo()
    await fake.start()
    try:
        for k, sym in enumerate(tickers):
            quoted[sym] = {d: round(50.0 + 10 * k + ((i * (k + 3)) % 7 - 2) * (1 + k / 4), 2)
                           for i, (d, _, _) in enumerate(sessions)}
            # Yahoo's adjustment: closes before the ex-date times 1 - dividend / last close
            # before it; from the ex-date on, as quoted.
            dividend = {"JNJ": 1.24, "SPY": 1.97}.get(sym, 0.0)
            before = max(d for d in quoted[sym] if d < ex)
            factor = 1 - dividend / quoted[sym][before]
            closes[sym] = {d: p * factor if d < ex else p for d, p in quoted[sym].items()}
            fake.charts[sym] = chart_payload(
                sym, None, 0, [(int(o), quoted[sym][d]) for d, o, _ in sessions],
                adjclose=[closes[sym][d] for d, _, _ in sessions])
        rec = tmp_path / "cb-history.jsonl.gz"
        argv = ["build-recording", "--tickers", ",".join(tickers), "--start", "2025-01-06",
                "--end", "2025-01-24", "--out", str(rec), "--dividend-adjusted",
                "--config", str(_history_build(tmp_path, fake.chart_url))]
        assert await asyncio.to_thread(main, argv) == 0
    finally:
        await fake.stop()
    # The doc's sed line adds SPY to the preset's universe (run as written, from the root).
    sed = next(b for b in re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)
               if "cb-history.toml" in b).replace("\\\n", " ")
    line = next(x for x in sed.splitlines() if x.startswith("sed "))
    words = shlex.split(line.split(">", 1)[0])
    done = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, check=True)
    cfg, db = tmp_path / "cb-history.toml", tmp_path / "cb-history.db"
    monkeypatch.setenv("LOCAL_LLM_KEY", "x")
    async with SampleModel() as model:
        assert "SPY" in tomllib.loads(done.stdout)["markets"]["equity"]["assets"]
        cfg.write_text(done.stdout.replace("http://127.0.0.1:8000/v1", model.api_base)
                       .replace('rounds_dir = "rounds"', f'rounds_dir = "{tmp_path / "rounds"}"')
                       .replace('"examples/capitalbench-briefing.md"',
                                f'"{ROOT / "examples" / "capitalbench-briefing.md"}"'))
        assert await asyncio.to_thread(main, ["replay", str(rec), "--config", str(cfg),
                                              "--db", str(db), "--no-progress"]) == 0
    assert len(model.requests) == 3 * 2 * 3  # 3 weekly rounds x 2 models x (1 + 2 repeats)
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--json"]) == 0
    board = json.loads(capsys.readouterr().out)
    rounds = {r["round_id"]: r for r in board["capitalbench"]["rounds"]}
    assert set(rounds) == {"weekly-2025-01-06", "weekly-2025-01-13", "weekly-2025-01-21"}
    weights = {"model_a": {"AAPL": 0.5, "MSFT": 0.5}, "model_b": {"JNJ": 1.0}}
    resolved = spans_dividend = 0
    for rid, rnd in rounds.items():
        manifest = yaml.safe_load((tmp_path / "rounds" / rid / "manifest.yaml").read_text())
        assert manifest["retrospective"] is True and rnd["retrospective"] is True
        # The mechanical table: 7-day returns of the adjusted closes as of the freeze's eve.
        asof = date.fromisoformat(manifest["trailing_returns_asof"])
        table = (tmp_path / "rounds" / rid / "market_data" / "universe_trailing_returns.csv"
                 ).read_text().splitlines()
        for line in table[1:]:
            row = dict(zip(table[0].split(","), line.split(","), strict=True))
            sym = row[table[0].split(",")[0]]
            if sym not in closes:
                continue
            now = [p for d, p in sorted(closes[sym].items()) if d <= asof]
            then = [p for d, p in sorted(closes[sym].items()) if d <= asof - timedelta(days=7)]
            want = now[-1] / then[-1] - 1 if now and then else None
            got_7d = row["return_7d"]
            assert (got_7d == "") == (want is None), (rid, sym)
            if want is not None:
                assert float(got_7d) == pytest.approx(want, abs=1e-6), (rid, sym)
        if rnd["status"] != "resolved":
            continue
        resolved += 1
        start, end = (date.fromisoformat(manifest[k]) for k in ("start_day", "end_day"))
        ret = {s: closes[s][end] / closes[s][start] - 1 for s in tickers}
        if start < ex <= end:  # the quoted closes would give JNJ another return
            spans_dividend += 1
            assert ret["JNJ"] != pytest.approx(quoted["JNJ"][end] / quoted["JNJ"][start] - 1,
                                               abs=1e-4)
        best = max(0.0, *(ret[o] for o in options if o != "CASH"))
        res = {r["agent"]: r for r in rnd["results"]}
        assert set(res) == set(weights)
        for agent, w in weights.items():
            pr = sum(x * ret[s] for s, x in w.items())
            got = res[agent]
            assert got["portfolio_return"] == pytest.approx(pr, abs=1e-9)
            assert got["max_possible_return"] == pytest.approx(best, abs=1e-9)
            assert got["regret"] == pytest.approx(best - pr, abs=1e-9)
            assert got["score"] == pytest.approx(100 * pr / best, abs=1e-6)
            assert got["vs_sp500"] == pytest.approx(pr - ret["SPY"], abs=1e-9)
    assert resolved == 2 and spans_dividend == 1  # the last round ends after the recording
    assert main(["report", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "CapitalBench rounds" in text and "(retrospective: built from history)" in text
