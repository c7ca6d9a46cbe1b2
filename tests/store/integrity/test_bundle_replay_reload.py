"""A live season reloaded while running rebuilds its report by replay (issue 32).

A live-clock season (the daemon in this process, every source at the local fakes, an LLM agent
at the fake OpenAI-compatible server, baselines beside it) with ``[season] amendments =
"allow"`` is reloaded (SIGHUP's :meth:`LiveDaemon.reload`) between two rounds: a refused reload
(a market setting changed: restart required) stores nothing; the applied one adds a baseline
and an HTTP agent (the reference agent service) and changes the LLM agent's setting (it is
rebuilt), records the season's amendment and stores the new config in ``config_reloads``,
chained (``verify --db`` names an edited row). The daemon is then stopped and started again
with the reloaded config (a restart: no amendment). The bundle verifies, and ``report
--bundle`` in a fresh process with no network rebuilds the report byte for byte, the reload
applied again at its time: the added agents trade in the replayed report.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.app.live import LiveDaemon
from daemon.app.sources import build_sources
from daemon.config.settings import load_config
from tests.agents.test_llm_agent import KEY_ENV
from tests.agents.test_remote_agent import SERVICE, serve
from tests.app.test_live_e2e import Tape, make_config, next_round, prices_applied, subscribed
from tests.fakes.scenario import Scenario, wait_until
from tests.llm_server import FakeLlmServer, answer
from tests.store.integrity.test_bundle import rechain
from tests.store.integrity.test_bundle_replay import _env, assert_rebuilds, exported, forged, rows
from tests.store.test_cli_database import cli

pytestmark = pytest.mark.slow

DEFAULT = answer({"AAPL": 0.3, "MSFT": 0.3, "CASH": 0.4})


def _toml_value(v: Any) -> str:
    """Return ``v`` as a TOML value (inline tables and arrays; JSON's strings are TOML's)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()
                               if x is not None) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


def _write(path: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` (a config's JSON form) as the TOML file ``path``."""
    path.write_text("".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in config.items()
                            if v is not None))
    return path


async def _live_season(tmp: Path) -> Path:
    """Run the live daemon two rounds, reload it (refused, then applied), run two more."""
    db = tmp / "live.db"
    sc = Scenario()
    await sc.start()
    os.environ[KEY_ENV] = "sk-test"
    try:
        async with FakeLlmServer(default=DEFAULT) as llm, serve(SERVICE.make_app()) as url:
            agents: list[dict[str, Any]] = [
                {"id": "llm", "kind": "llm", "model": "openai/test-model",
                 "api_base": llm.api_base, "api_key_env": KEY_ENV, "markets": ["equity"],
                 "max_attempts": 2, "timeout": 10.0},
                {"id": "equal_weight", "kind": "equal_weight"},
                {"id": "cash", "kind": "cash"},
            ]
            base = make_config(sc, db, agents=agents).model_dump(mode="json")
            base["season"] = {"name": "S1", "amendments": "allow"}
            path = _write(tmp / "season.toml", base)
            cfg = load_config(path)
            daemon = LiveDaemon(cfg, db=str(db), sources=lambda eng: build_sources(cfg, eng))
            tape = Tape()
            await sc.wait_phase(0.2)  # just after a round boundary
            await daemon.start()
            try:
                eng = daemon.engine
                assert eng is not None
                eng.bus.add_tap("#", tape)
                await subscribed(sc)
                t = await sc.wait_phase(1.0)
                await sc.send_initial()
                await wait_until(lambda: prices_applied(eng, sc), 5, "the first prices")
                await next_round(eng, tape, t)
                for k in range(3):
                    t = await sc.wait_phase(1.0)
                    if k == 1:  # between two rounds
                        refused = json.loads(json.dumps(base))
                        refused["markets"]["equity"]["initial_cash"] = 20_000.0
                        assert not await daemon.reload(str(_write(tmp / "no.toml", refused)))
                        assert rows(db, "SELECT COUNT(*) FROM config_reloads") == [(0,)]
                        new = json.loads(json.dumps(base))
                        new["agents"][0]["max_attempts"] = 3  # rebuilt
                        new["agents"] += [{"id": "buy_and_hold", "kind": "buy_and_hold"},
                                          {"id": "remote", "kind": "http", "markets": ["equity"],
                                           "http": {"url": url, "timeout": 5}}]
                        assert await daemon.reload(str(_write(path, new)))
                        t = await sc.wait_phase(1.6)
                    await sc.burst()
                    await wait_until(lambda: prices_applied(eng, sc), 5, "a burst")
                    await next_round(eng, tape, t)
                await sc.wait_phase(1.0)  # stop in a quiet gap: no round in flight
            finally:
                await daemon.stop()
            # a restart with the reloaded config: its lineup is the amended one
            cfg = load_config(path)
            daemon = LiveDaemon(cfg, db=str(db), sources=lambda eng: build_sources(cfg, eng))
            await sc.wait_phase(0.2)
            await daemon.start()
            try:
                eng = daemon.engine
                assert eng is not None
                eng.bus.add_tap("#", tape)
                await subscribed(sc)
                for _ in range(2):
                    t = await sc.wait_phase(1.0)
                    await sc.burst()
                    await wait_until(lambda: prices_applied(eng, sc), 5, "a burst")
                    await next_round(eng, tape, t)
                await sc.wait_phase(1.0)
            finally:
                await daemon.stop()
            return db
    finally:
        os.environ.pop(KEY_ENV, None)
        await sc.stop()


@pytest.fixture(scope="module")
def season(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """The live store and its bundle."""
    tmp = tmp_path_factory.mktemp("live-reload")
    db = asyncio.run(_live_season(tmp))
    yield db, exported(db)


def test_the_reload_is_stored_chained_and_an_edit_is_named(season: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    db, _ = season
    (run, ts, text), = rows(db, "SELECT run_id, ts, config_json FROM config_reloads")
    (run_id, started, run_text), (_, restarted, again) = rows(
        db, "SELECT id, started_ts, config_json FROM runs ORDER BY id")
    config, first = json.loads(text), json.loads(run_text)
    assert run == run_id and started < ts < restarted
    assert again == text  # the restart ran with the reloaded config, stored alike
    # the run's config but for the reloaded agents, in the same form
    assert [a["id"] for a in config["agents"]] == [
        "llm", "equal_weight", "cash", "buy_and_hold", "remote"]
    assert (config["agents"][0]["max_attempts"], first["agents"][0]["max_attempts"]) == (3, 2)
    assert {k: v for k, v in config.items() if k != "agents"} == {
        k: v for k, v in first.items() if k != "agents"}
    # the amendment at the reload's time; the added agent decided only after it
    assert rows(db, "SELECT ts FROM season WHERE kind='amendment'") == [(ts,)]
    for agent in ("buy_and_hold", "remote"):
        (decided,), = rows(db, f"SELECT MIN(scheduled_ts) FROM decisions WHERE agent='{agent}'")
        assert decided > ts
        assert rows(db, f"SELECT COUNT(*) FROM fills WHERE agent='{agent}' AND"
                        " traded_value > 0")[0][0] >= 1
    r = cli("verify", "--db", str(db), timeout=120)
    assert r.returncode == 0 and ", config_reloads 1, " in r.stdout, r.stdout + r.stderr
    edited = tmp_path / "edited.db"
    edited.write_bytes(db.read_bytes())
    con = sqlite3.connect(edited)
    with con:
        con.execute("UPDATE config_reloads SET config_json=replace(config_json,"
                    " '\"max_attempts\":3', '\"max_attempts\":9')")
        assert con.total_changes == 1
    con.close()
    r = cli("verify", "--db", str(edited), timeout=120)
    assert r.returncode == 1, r.stdout
    assert r.stdout.startswith("config_reloads: row 1 (") and "was edited" in r.stdout, r.stdout


def test_a_reloaded_season_rebuilds_its_report_by_replay(season: tuple[Path, Path]) -> None:
    _, bundle = season
    board = json.dumps(json.loads(assert_rebuilds(bundle)))
    assert '"buy_and_hold"' in board and '"remote"' in board


def test_an_amendment_deleted_before_the_export_is_named_by_the_replay(
        season: tuple[Path, Path], tmp_path: Path) -> None:
    """A publisher who deletes the reload's amendment (and chains the season again, so
    ``verify`` holds) and exports again is caught: the replay makes the amendment the store
    lacks."""
    _, bundle = season

    def edit(db: Path) -> None:
        con = sqlite3.connect(db)
        with con:
            assert con.execute("DELETE FROM season WHERE kind='amendment'").rowcount == 1
            rechain(con, "season")
        con.close()

    r = cli("verify-bundle", str(forged(bundle, tmp_path, edit)), timeout=300, env=_env())
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert ("the replay made a season row 2 (the amendment of season 'S1') that is not stored"
            ) in r.stdout, r.stdout
