"""``paperarena status``: the running daemon's state from its API, on one screen."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from daemon.web.status import render_status
from tests.web.test_alerts import T0, FakeSource, buy, tick
from tests.web.test_metrics_http import start_daemon, stop_daemon

ROOT = Path(__file__).resolve().parents[2]


async def status(*args: str) -> tuple[int, str, str]:
    """Run ``paperarena status`` (this checkout's) and return (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daemon.app.cli", "status", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_status_prints_sources_rounds_and_flagged_agents(tmp_path: Path) -> None:
    d = await start_daemon(tmp_path, sources=[FakeSource("yahoo", market="equity",
                                                         state="down")])
    try:
        eng = d.engine
        await tick(eng, T0 + 60, 1.0)
        await buy(eng, T0 + 61)
        await eng.rounds["equity"].run(T0 + 3600, missed=True)
        for i in range(1, 4):  # ew (conservative, halt_on_breach) falls 15%: halted
            await tick(eng, T0 + 3600 + 120 * i, 0.85)
        await eng.bus.drain()
        code, out, err = await status("--url", str(d.obs.url))
        assert code == 0, err
        lines = out.splitlines()
        assert len(lines) <= 24  # one screen
        assert "sources: 0/1 live" in out
        assert any(line.split()[:2] == ["yahoo", "down"] for line in lines)
        eq = next(line for line in lines if line.strip().startswith("equity") and "last" in line)
        assert "missed=3" in eq and "missed 3" in eq
        assert any(line.split()[:3] == ["ew", "equity", "halted"] for line in lines)
        assert any(line.split()[:3] == ["cash", "equity", "active"] for line in lines)
        assert lines[-1].startswith("attention: ")
        assert "ew (equity) halted: " in lines[-1]
        code, out, _ = await status("--url", str(d.obs.url), "--json")
        assert code == 0 and out.startswith("{") and '"rounds"' in out
        # From the config's [http] address, as `paperarena resume` does.
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[http]\nport = {str(d.obs.url).rsplit(":", 1)[1]}\n')
        code, out, err = await status("--config", str(cfg))
        assert code == 0, err
        assert "sources: 0/1 live" in out
    finally:
        await stop_daemon(d)


async def test_status_names_each_markets_next_round(tmp_path: Path) -> None:
    d = await start_daemon(tmp_path)
    try:
        eng = d.engine
        code, out, err = await status("--url", str(d.obs.url), "--json")
        assert code == 0, err
        st = json.loads(out)
        now = eng.clock.now()
        fires = {}
        for job, trig in eng.triggers():
            if job.startswith("decide:"):
                nxt = trig.get_next_fire_time(None, datetime.fromtimestamp(now, UTC))
                if nxt.timestamp() <= now:  # a round due at now itself: the one after it
                    nxt = trig.get_next_fire_time(nxt, nxt)
                fires[job.split(":", 1)[1]] = nxt
        assert set(st["rounds"]) == set(eng.slots) and set(fires) == set(eng.slots)
        for market, r in st["rounds"].items():
            assert r["next_ts"] > now
            assert r["next_ts"] == fires[market].timestamp()
        code, out, err = await status("--url", str(d.obs.url))
        assert code == 0, err
        for market, r in st["rounds"].items():
            line = next(ln for ln in out.splitlines() if ln.strip().startswith(market)
                        and "last" in ln)
            when = datetime.fromtimestamp(r["next_ts"], UTC).strftime("%Y-%m-%d %H:%MZ")
            assert f"next {when} (in " in line
    finally:
        await stop_daemon(d)


def test_status_prints_time_until_the_next_round() -> None:
    st = {"clock": 1000.0, "sources": [], "agents": [],
          "rounds": {"equity": {"last_ts": None, "next_ts": 1000.0 + 3 * 3600 + 12 * 60 + 5}}}
    assert "next 1970-01-01 03:28Z (in 3 h 12 min)" in render_status(st, "http://x")


async def test_status_without_a_daemon_is_one_line_and_exit_1() -> None:
    code, out, err = await status("--url", "http://127.0.0.1:9")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "no daemon answering at http://127.0.0.1:9/api/status" in err


async def test_a_degraded_sandbox_shows_in_api_status_and_status(tmp_path: Path) -> None:
    # The start-up check configured the process as degraded (allow_degraded = true on a host
    # without bubblewrap): /api/status and `paperarena status` say so with the missing layers.
    from agents.alphaforgebench import isolation

    saved = (isolation._policy, isolation._state)
    d = await start_daemon(tmp_path, sources=[FakeSource("yahoo", market="equity")])
    try:
        code, out, _ = await status("--url", str(d.obs.url), "--json")
        assert code == 0 and json.loads(out)["sandbox"] == {"state": "unused", "missing": {}}
        isolation.configure(isolation.SandboxPolicy(bwrap=None, tolerated=frozenset(
            {"bubblewrap", "seccomp"})), {"bubblewrap": "not found", "seccomp": "off: refused"})
        code, out, _ = await status("--url", str(d.obs.url), "--json")
        assert json.loads(out)["sandbox"] == {
            "state": "degraded", "missing": {"bubblewrap": "not found",
                                             "seccomp": "off: refused"}}
        code, out, err = await status("--url", str(d.obs.url))
        assert code == 0, err
        assert ("sandbox: DEGRADED, strategies run without: bubblewrap (not found); seccomp"
                " (off: refused)") in out.splitlines()
    finally:
        isolation._policy, isolation._state = saved
        await stop_daemon(d)
