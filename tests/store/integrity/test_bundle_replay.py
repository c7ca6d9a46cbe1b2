"""A live season's bundle rebuilds its report by replay (issue 32, points 3 and 5).

A live-clock run (the daemon in this process, every source at the local fakes, an LLM agent at
the fake OpenAI-compatible server, baselines beside it) writes a store; ``export --bundle``
bundles it. Then, with the fakes and the model server stopped, ``report --bundle`` in a fresh
process with no API key in its environment and no network (a network namespace of its own,
where the system allows one: ``unshare -rn``) replays the season from the stored answers and
prints the report byte-identical to the bundle's ``report.json``. A bundle whose stored answer
was edited (re-chained and re-exported, so every other check holds) fails with one line naming
the first difference; one whose report.json was edited too.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.app.live import LiveDaemon
from daemon.app.sources import build_sources
from tests.agents.test_llm_agent import KEY_ENV
from tests.app.test_live_e2e import Tape, make_config, next_round, prices_applied, subscribed
from tests.fakes.scenario import Scenario, wait_until
from tests.llm_server import FakeLlmServer, answer, ok
from tests.store.integrity.test_bundle import _members, _pack, rechain
from tests.store.test_cli_database import ROOT, cli

pytestmark = pytest.mark.slow

#: The model's answers, in request order (then the default): a retry after a bad answer, a
#: hold-like all-cash answer and moves between the three stocks.
ANSWERS = [answer({"AAPL": 0.6, "CASH": 0.4}), ok("not json"),
           answer({"MSFT": 0.5, "NVDA": 0.3, "CASH": 0.2}), answer({"NVDA": 1.0}),
           answer({"CASH": 1.0}), answer({"AAPL": 0.2, "MSFT": 0.2, "NVDA": 0.6})]
DEFAULT = answer({"AAPL": 0.3, "MSFT": 0.3, "CASH": 0.4})


def _env() -> dict[str, str]:
    """A fresh process's environment: no provider key, LiteLLM's price map offline."""
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV and "API_KEY" not in k}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _no_network() -> list[str]:
    """Return the command prefix that runs a process in a network namespace of its own (no
    route anywhere, not even to this host's loopback), where the system allows one."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []  # the fakes and the model server are stopped anyway: nothing would answer


def offline_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``paperarena ARGS`` in a fresh process with no network and no provider key."""
    return subprocess.run([*_no_network(), sys.executable, "-m", "daemon.app.cli", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())


async def _live_season(tmp: Path) -> tuple[Path, int]:
    """Run the live daemon for a few rounds against the fakes; return its store and how many
    model calls it made."""
    db = tmp / "live.db"
    sc = Scenario()
    await sc.start()
    try:
        async with FakeLlmServer(default=DEFAULT) as llm:
            llm.push(*ANSWERS)
            agents: list[dict[str, Any]] = [
                {"id": "llm", "kind": "llm", "model": "openai/test-model",
                 "api_base": llm.api_base, "api_key_env": KEY_ENV, "markets": ["equity"],
                 "max_attempts": 2, "timeout": 10.0},
                {"id": "equal_weight", "kind": "equal_weight"},
                {"id": "momentum", "kind": "momentum"},
                {"id": "cash", "kind": "cash"},
            ]
            cfg = make_config(sc, db, agents=agents)
            daemon = LiveDaemon(cfg, db=str(db), sources=lambda eng: build_sources(cfg, eng))
            tape = Tape()
            await sc.wait_phase(0.2)  # just after a round boundary
            await daemon.start()
            try:
                eng = daemon.engine
                assert eng is not None
                eng.bus.add_tap("#", tape)
                await subscribed(sc)
                t = await sc.wait_phase(1.0)  # prices in the quiet middle of a period
                await sc.send_initial()
                await wait_until(lambda: prices_applied(eng, sc), 5, "the first prices")
                await next_round(eng, tape, t)
                for _ in range(4):
                    t = await sc.wait_phase(1.0)
                    await sc.burst()
                    await wait_until(lambda: prices_applied(eng, sc), 5, "a burst")
                    await next_round(eng, tape, t)
                await sc.wait_phase(1.0)  # stop in a quiet gap: no round in flight
            finally:
                await daemon.stop()
            return db, len(llm.requests)
    finally:
        await sc.stop()


@pytest.fixture(scope="module")
def season(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """The live store and its bundle."""
    tmp = tmp_path_factory.mktemp("live-bundle")
    db, calls = asyncio.run(_live_season(tmp))
    assert calls >= 6  # every queued answer was asked for, the bad one retried
    yield db, exported(db)


def exported(db: Path) -> Path:
    """Return the bundle ``paperarena export`` writes of ``db`` (next to it, ``live.tar``)."""
    bundle = db.parent / "live.tar"
    r = cli("export", "--db", str(db), "--bundle", str(bundle), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return bundle


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Return the rows ``sql`` selects from the SQLite store ``db``."""
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _count(db: Path, sql: str) -> int:
    return int(rows(db, sql)[0][0])


def test_a_live_bundle_rebuilds_its_report_by_replay_with_no_model(
        season: tuple[Path, Path]) -> None:
    db, bundle = season
    assert _count(db, "SELECT COUNT(*) FROM llm_calls WHERE outcome='invalid'") >= 1
    assert _count(db, "SELECT COUNT(*) FROM fills WHERE agent='llm'") >= 3
    assert _count(db, "SELECT COUNT(*) FROM market_events WHERE kind='prices'") >= 1  # bursts
    assert "llm" in json.dumps(json.loads(assert_rebuilds(bundle)))


def assert_rebuilds(bundle: Path) -> str:
    """Assert that ``report --bundle`` (offline, in a fresh process) prints the bundle's
    ``report.json`` byte for byte, replayed from the stored answers; return the report.

    ``report --bundle`` runs ``verify-bundle``'s whole check (``verify_bundle`` with the
    replay) and exits 1 on any problem, or says "not replayed": exit 0 without that note is
    ``verify-bundle``'s "ok ... report replayed from the stored answers matches" (whose own
    output tests/store/integrity/test_bundle.py checks), so the season is replayed once here,
    not twice."""
    r = offline_cli("report", "--bundle", str(bundle), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "not replayed" not in r.stderr, r.stderr
    assert r.stdout.encode() == _members(bundle)["report.json"]
    return r.stdout


def edit_answer(store: Path, agent: str, raw: str, step: str | None = None) -> str:
    """Set the first stored valid answer of ``agent`` (at ``step``) to ``raw`` and re-chain
    ``llm_calls``; return the answer it had."""
    con = sqlite3.connect(store)
    with con:
        rid, old = con.execute(
            "SELECT id, raw_response FROM llm_calls WHERE agent=? AND outcome='ok'"
            " AND (? IS NULL OR step=?) ORDER BY id LIMIT 1", (agent, step, step)).fetchone()
        con.execute("UPDATE llm_calls SET raw_response=? WHERE id=?", (raw, rid))
        rechain(con, "llm_calls")
    con.close()
    return str(old)


def forged(bundle: Path, tmp: Path, edit: Callable[[Path], object]) -> Path:
    """Return ``bundle`` re-exported after ``edit`` of its store (the chains recomputed)."""
    store = tmp / "edited.db"
    store.write_bytes(_members(bundle)["store.db"])
    edit(store)
    assert cli("verify", "--db", str(store), timeout=120).returncode == 0  # the chains hold
    out = tmp / "forged.tar"
    r = cli("export", "--db", str(store), "--bundle", str(out), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_an_edited_answer_or_report_fails_with_the_first_difference(
        season: tuple[Path, Path], tmp_path: Path) -> None:
    _, bundle = season
    edited = json.dumps({"reasoning": "edited", "allocations": {"CASH": 1.0}})

    def edit(db: Path) -> None:
        assert json.loads(edit_answer(db, "llm", edited))["allocations"] != {"CASH": 1.0}

    forged_tar = forged(bundle, tmp_path, edit)
    # the rows' report is unchanged: only the replay sees the answer no longer yields the fills
    assert _members(forged_tar)["report.json"] == _members(bundle)["report.json"]
    r = cli("report", "--bundle", str(forged_tar), timeout=300, env=_env())
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"paperarena: {forged_tar}: the report replayed from the stored"
                               " answers differs from report.json at line "), r.stderr
    assert "report.json has '" in r.stderr and "the replay '" in r.stderr
    r = cli("verify-bundle", str(forged_tar), timeout=300, env=_env())
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and lines[0].startswith(
        "the report replayed from the stored answers differs from report.json at line ")
    # and the first replayed decision that is not the stored one: the edited answer's
    assert lines[1].startswith("the replay's decision of llm in equity at "), lines
    assert "differs in raw_output: stored " in lines[1] and lines[1].endswith(
        """replayed '{"reasoning": "edited", "allocations": {"CASH": 1.0}}'"""), lines
    members = _members(bundle)
    report = members["report.json"].replace(b'"llm"', b'"llm2"', 1)
    assert report != members["report.json"]
    edited = _pack(tmp_path / "report.tar", {**members, "report.json": report})
    r = cli("report", "--bundle", str(edited), timeout=300, env=_env())
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "llm2" in r.stderr and "differs from report.json at line " in r.stderr
