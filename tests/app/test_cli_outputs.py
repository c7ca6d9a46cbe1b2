"""What the CLI says (issue 11.12): record's per-source summary and exit code, probe's pure JSON
on stdout, report --html naming the file it wrote; what ``report`` imports (issue 27). Real
subprocesses against local fakes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

from daemon.app.replay import replay
from daemon.store.store import Store
from tests.agents.test_llm_agent import KEY_ENV, T, equity_obs
from tests.fakes.scenario import Scenario
from tests.llm_server import FakeLlmServer, answer
from tests.recordings import TINY_CONFIG, make_recording

ROOT = Path(__file__).resolve().parents[2]


async def cli(*args: str, timeout: float = 120.0) -> tuple[int, str, str]:
    """Run ``python -m daemon.app.cli`` while this loop keeps serving the fakes."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon.app.cli", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, KEY_ENV: "sk-test-not-a-real-key"})
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record_config(path: Path, sources: str) -> Path:
    path.write_text('[markets.equity]\nassets = ["AAPL", "MSFT"]\n'
                    "[markets.polymarket]\nenabled = false\n"
                    "[http]\nenabled = false\n" + sources)
    return path


async def test_record_with_every_source_down_says_so_and_fails(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    cfg = record_config(tmp_path / "c.toml", (
        "[sources]\nbackfill = false\n"
        f'[sources.equity.yahoo]\nws_url = "ws://{dead}/"\nchart_url = "http://{dead}/chart"\n'
        f'[sources.news]\ngoogle_url = "http://{dead}/rss"\n'))
    out = tmp_path / "rec.jsonl.gz"
    code, _, err = await cli("record", "--config", str(cfg), "--out", str(out),
                             "--duration", "2")
    assert code == 1, err
    summary = [ln for ln in err.splitlines() if ln.startswith("paperarena record:")]
    assert len(summary) == 1, err
    assert "recorded nothing but its own clock" in summary[0]
    assert "yahoo" in summary[0] and str(out) in summary[0]


async def test_record_summarises_per_source(tmp_path: Path) -> None:
    sc = Scenario(equities={"AAPL": 180.0, "MSFT": 400.0})
    await sc.start()
    try:
        sc.yahoo.snapshot_on_subscribe = True  # every subscription gets a price at once
        y = sc.sources_config()["equity"]["yahoo"]
        news = sc.sources_config()["news"]
        cfg = record_config(tmp_path / "c.toml", (
            "[sources]\nbackfill = false\n"
            f'[sources.equity.yahoo]\nws_url = "{y["ws_url"]}"\nchart_url = "{y["chart_url"]}"\n'
            f'[sources.news]\ngoogle_url = "{news["google_url"]}"\nrequest_spacing = 0\n'))
        out = tmp_path / "rec.jsonl.gz"
        code, _, err = await cli("record", "--config", str(cfg), "--out", str(out),
                                 "--duration", "4")
    finally:
        await sc.stop()
    summary = [ln for ln in err.splitlines() if ln.startswith("paperarena record:")]
    assert code == 0, err
    assert len(summary) == 1, err
    line = summary[0]
    assert "market events (" in line and "yahoo" in line and "data messages" in line, line
    assert str(out) in line


async def test_probe_prints_only_json_on_stdout(tmp_path: Path) -> None:
    db = tmp_path / "arena.db"
    store = await Store.open(db)
    await store.close()
    e = equity_obs()
    con = sqlite3.connect(db)
    with con:
        con.execute("INSERT INTO decisions(agent, market, scheduled_ts, decided_ts, outcome,"
                    " input_json, input_sha256) VALUES(?,?,?,?,?,?,?)",
                    ("llm1", "equity", T, T, "ok", e.canonical_json().decode(), e.sha256()))
    con.close()
    async with FakeLlmServer() as server:
        cfg = tmp_path / "arena.toml"
        cfg.write_text(
            '[logging]\nlevel = "debug"\n[[agents]]\nid = "llm1"\nkind = "llm"\n'
            f'model = "openai/test-model"\napi_base = "{server.api_base}"\n'
            f'api_key_env = "{KEY_ENV}"\n')
        server.push(answer({"AAPL": 1.0}), answer({"AAPL": 0.5, "CASH": 0.5}))
        code, stdout, err = await cli("probe", "--config", str(cfg), "--db", str(db),
                                      "--agent", "llm1", "--repeats", "2")
    assert code == 0, err
    result = json.loads(stdout)  # the whole of stdout is one JSON document
    assert result["agent"] == "llm1" and result["valid"] == 2
    assert err.strip(), "the logs go to stderr"


async def _tiny_store(tmp_path: Path) -> Path:
    """Replay a two-day recording with the tiny config into ``tmp_path/r.db``; return it."""
    from daemon.config.settings import load_config

    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec, days=2)
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(TINY_CONFIG)
    db = tmp_path / "r.db"
    await replay(rec, load_config(cfg_path), db, progress=False)
    return db


async def test_report_html_says_where_it_wrote(tmp_path: Path) -> None:
    db = await _tiny_store(tmp_path)
    html = tmp_path / "board.html"
    code, stdout, err = await cli("report", "--db", str(db), "--html", str(html), "--json")
    assert code == 0, err
    assert html.exists()
    assert f"wrote the HTML report to {html.resolve()}" in err
    json.loads(stdout)  # stdout stays the JSON board


async def test_record_stops_on_sigterm_with_its_summary(tmp_path: Path) -> None:
    from feeds.recording import iter_events, read_header

    dead = f"127.0.0.1:{closed_port()}"
    cfg = record_config(tmp_path / "c.toml", (
        "[sources]\nbackfill = false\n"
        f'[sources.equity.yahoo]\nws_url = "ws://{dead}/"\nchart_url = "http://{dead}/chart"\n'
        f'[sources.news]\ngoogle_url = "http://{dead}/rss"\n'))
    out = tmp_path / "rec.jsonl.gz"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon.app.cli", "record", "--config", str(cfg), "--out", str(out),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    for _ in range(300):
        if out.exists():
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
    err = err_bytes.decode()
    assert proc.returncode == 1, err  # stopped cleanly, but nothing was recorded
    assert "Traceback" not in err
    assert "paperarena record: recorded nothing but its own clock" in err
    read_header(out)
    assert [type(e).__name__ for _, e in iter_events(out)] == ["ClockEvent"]  # sealed


#: Run in a fresh interpreter: import the CLI, run ``report --json`` on the store ``argv[1]``,
#: and print the modules loaded after each step (and the command's exit code and output).
_REPORT_MODULES = """
import contextlib, io, json, sys
from daemon.app.cli import main
at_import = sorted(sys.modules)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["report", "--db", sys.argv[1], "--json"])
json.dump({"code": code, "out": out.getvalue(), "at_import": at_import,
           "after": sorted(sys.modules)}, sys.stdout)
"""


def _adapters(modules: list[str]) -> list[str]:
    """Return the feed adapters, their network libraries, litellm and the whole config (which
    imports the adapters' settings) among ``modules``."""
    return [m for m in modules if m.split(".")[0] in ("feeds", "aiohttp", "websockets", "litellm")
            or m == "daemon.config.settings"]


async def test_report_imports_no_feed_adapter(tmp_path: Path) -> None:
    """``paperarena report`` needs no feed adapter, network library, LLM client or config: the
    CLI imports each command's handler when it runs (issue 27: the report answers in seconds)."""
    db = await _tiny_store(tmp_path)
    r = subprocess.run([sys.executable, "-c", _REPORT_MODULES, str(db)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout)
    assert seen["code"] == 0, r.stderr[-2000:]
    assert json.loads(seen["out"])["rows"], "the report was made"
    assert "daemon.app.cli" in seen["at_import"]
    assert _adapters(seen["at_import"]) == []
    assert "daemon.store.reports" in seen["after"]  # the report's own path was taken
    assert _adapters(seen["after"]) == []
    assert _adapters(["feeds.alpaca", "aiohttp", "daemon.config.settings", "feedsx"]) == [
        "feeds.alpaca", "aiohttp", "daemon.config.settings"]  # the filter sees what it must

