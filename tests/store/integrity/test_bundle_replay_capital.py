"""A live season with CapitalBench rounds rebuilds its report by replay (issue 32).

A live-clock season (the daemon in this process, the equity feeds and their daily history at
the local fakes) freezes a weekly CapitalBench round a few seconds in (its trigger moved there:
a weekly track fires on the first session of a week only) and asks three models at a fake
OpenAI-compatible server (the protocol test's: one valid, one always invalid, one invalid then
valid on retry), official run and a consistency repeat, while a baseline trades. ``report
--bundle`` in a fresh process with no key and no network rebuilds its report byte for byte, the
round frozen again at its stored time and every answer checked again by the protocol. An edited
stored CapitalBench answer is named with its agent. The briefing's text is in the store (schema
v17): the bundle rebuilds on a machine without the briefing file, and a store that holds
neither (written before v17) is refused in one line.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from apscheduler.triggers.date import DateTrigger

from agents.capitalbench.runner import CapitalRunner
from daemon.app.bundle_replay import replay_store
from daemon.app.bundle_replay.capital import first_capital_difference
from daemon.app.live import LiveDaemon
from daemon.app.sources import build_sources
from daemon.config.settings import parse_config
from daemon.timing.clock import utc_datetime
from tests.app.test_live_e2e import Tape, make_config, next_round, prices_applied
from tests.fakes.scenario import Scenario, wait_until
from tests.protocols.test_capitalbench import CapitalModel, _config
from tests.protocols.test_capitalbench_adjusted import _adjust
from tests.store.integrity.test_bundle import _members, rechain
from tests.store.integrity.test_bundle_replay import (
    assert_rebuilds,
    exported,
    forged,
    offline_cli,
    rows,
)
from tests.store.integrity.test_bundle_replay_agents import _difference
from tests.store.test_cli_database import cli

pytestmark = pytest.mark.slow

EQUITIES = {"QQQ": 300.0, "TLT": 90.0, "GLD": 180.0}


def _status(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [s for (s,) in con.execute("SELECT status FROM capital_rounds")]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


#: TLT's closes the chart served to the adjusted season: quoted and adjusted.
SERVED: dict[str, list[float]] = {}


def _serve_dividend(sc: Scenario) -> None:
    """Make the Yahoo chart's adjusted closes of TLT those of a dividend in its served days
    (the quoted closes unchanged): the trailing table of adjusted closes is not the quoted one."""
    res = sc.yahoo.charts["TLT"]["chart"]["result"][0]
    days = [date.fromtimestamp(t) for t in res["timestamp"]]
    quoted = dict(zip(days, res["indicators"]["quote"][0]["close"], strict=True))
    adjusted = _adjust(quoted, {days[len(days) // 2]: 0.9})
    res["indicators"]["adjclose"] = [{"adjclose": [adjusted[d] for d in days]}]
    SERVED.update(quoted=list(quoted.values()), adjusted=list(adjusted.values()))


async def _live_season(tmp: Path, adjusted: bool = False) -> Path:
    """Run the live daemon until its CapitalBench round is collected and a few decision rounds
    ran; return its store. ``adjusted``: with ``[capitalbench] adjusted_closes``."""
    db = tmp / "live.db"
    sc = Scenario(equities=EQUITIES)
    await sc.start()
    sc.serve_daily_history()
    if adjusted:
        _serve_dividend(sc)
    os.environ["CB_TEST_KEY"] = "sk-test"
    fire: list[float] = []

    def triggers(self: CapitalRunner) -> list[tuple[str, Any]]:  # a few seconds in, once
        fire.append(time.time() + 4.0)
        return [("capital:weekly", DateTrigger(run_date=utc_datetime(fire[0])))]

    try:
        async with CapitalModel() as model:
            data = _config(tmp, model.api_base, repeats=1)
            cap = {k: v for k, v in data["capitalbench"].items() if k != "show_retrospective"}
            cap["adjusted_closes"] = adjusted
            base = make_config(sc, db, agents=data["agents"][:1], polymarket=False,
                               backfill=True)  # the baseline; the models with their section
            cfg = parse_config({**base.model_dump(mode="json", exclude_none=True),
                                "agents": data["agents"], "capitalbench": cap})
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(CapitalRunner, "triggers", triggers)
                daemon = LiveDaemon(cfg, db=str(db),
                                    sources=lambda eng: build_sources(cfg, eng))
                tape = Tape()
                await sc.wait_phase(0.2)
                await daemon.start()
                try:
                    eng = daemon.engine
                    assert eng is not None
                    eng.bus.add_tap("#", tape)
                    await wait_until(lambda: any(len(c.symbols) == 3
                                                 for c in sc.yahoo.open_conns),
                                     10, "the Yahoo subscription")
                    for k in range(3):
                        t = await sc.wait_phase(1.0)
                        if k == 0:
                            await sc.send_initial()
                            await wait_until(lambda: prices_applied(eng, sc), 5,
                                             "the first prices")
                        else:
                            await sc.burst(polymarket=False)
                        await next_round(eng, tape, t, timeout=60)
                    await wait_until(lambda: _status(db) == ["collected"], 120,
                                     "the CapitalBench round collected")
                    await sc.wait_phase(1.0)  # stop in a quiet gap
                finally:
                    await daemon.stop()
            assert len(model.requests) >= 6
            return db
    finally:
        os.environ.pop("CB_TEST_KEY", None)
        await sc.stop()


@pytest.fixture(scope="module")
def season(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """The live store and its bundle."""
    tmp = tmp_path_factory.mktemp("live-capital")
    db = asyncio.run(_live_season(tmp))
    yield db, exported(db)


@pytest.fixture(scope="module")
def adjusted_season(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """The live store of a season of adjusted closes and its bundle."""
    tmp = tmp_path_factory.mktemp("live-capital-adjusted")
    db = asyncio.run(_live_season(tmp, adjusted=True))
    yield db, exported(db)


def test_a_live_capitalbench_round_is_replayed_byte_identically(
        season: tuple[Path, Path]) -> None:
    db, bundle = season
    # One live round (not built from history), every agent asked twice, each outcome stored.
    (manifest,) = [json.loads(m) for (m,) in rows(db, "SELECT manifest_json FROM"
                                                       " capital_rounds")]
    assert "retrospective" not in manifest
    subs = rows(db, "SELECT agent, run_id, outcome FROM capital_submissions ORDER BY rowid")
    assert {(a, o) for a, _, o in subs} == {("alpha", "ok"), ("beta", "invalid"),
                                            ("gamma", "ok")}, subs
    assert len(subs) == 6
    rounds = json.loads(assert_rebuilds(bundle))["capitalbench"]["rounds"]
    assert [x["agent"] for x in rounds[0]["results"]] == ["alpha", "gamma"]


def test_a_live_round_of_adjusted_closes_is_replayed_from_its_stored_trailing_closes(
        adjusted_season: tuple[Path, Path], tmp_path: Path) -> None:
    db, bundle = adjusted_season
    ((rid, rdir, trailing),) = rows(db, "SELECT round_id, dir, trailing_json FROM"
                                         " capital_rounds")
    stored = json.loads(trailing)  # the closes the freeze fetched: TLT's adjusted ones
    assert set(stored) == {"QQQ", "TLT", "GLD"}
    closes = {p for _, p in stored["TLT"]}
    assert len(closes) >= 5 and closes <= set(SERVED["adjusted"])
    assert not closes <= set(SERVED["quoted"])
    table = (Path(rdir) / "market_data" / "universe_trailing_returns.csv").read_text()
    assert_rebuilds(bundle)

    # The round frozen again is the live one (its package's hashes too), from the stored
    # closes: other closes (the chain recomputed) freeze another table.
    store = tmp_path / "store.db"
    store.write_bytes(_members(bundle)["store.db"])
    asyncio.run(replay_store(str(store), str(tmp_path / "a.db")))
    assert first_capital_difference(str(store), str(tmp_path / "a.db")) is None
    forged_closes = {a: [[d, p * (1.0 if k == len(days) - 1 else 1.5)]
                         for k, (d, p) in enumerate(days)] for a, days in stored.items()}
    con = sqlite3.connect(store)
    with con:
        con.execute("UPDATE capital_rounds SET trailing_json=?", (json.dumps(forged_closes),))
        rechain(con, "capital_rounds")
    con.close()
    asyncio.run(replay_store(str(store), str(tmp_path / "b.db")))
    line = first_capital_difference(str(store), str(tmp_path / "b.db"))
    assert line is not None and line.startswith(
        f"the replay's CapitalBench round {rid} differs in hashes_sha256"), line
    assert "return_" in table  # the live table was built (and replayed) from them


def _edit_alpha(db: Path, *, chain: bool = True) -> None:
    """Make alpha's stored official answer a refusal (its calls only: the stored rows' report
    is unchanged), and (``chain``) recompute the chain of the submissions, as a forger would."""
    con = sqlite3.connect(db)
    with con:
        rowid, calls_json = con.execute(
            "SELECT rowid, calls_json FROM capital_submissions WHERE agent='alpha' AND"
            " run_id='official'").fetchone()
        calls = json.loads(calls_json)
        assert calls[-1]["outcome"] == "ok"
        calls[-1]["raw_response"] = "<refusal>no</refusal>"
        con.execute("UPDATE capital_submissions SET calls_json=? WHERE rowid=?",
                    (json.dumps(calls, sort_keys=True), rowid))
        if chain:
            rechain(con, "capital_submissions")
    con.close()


def test_an_edited_capitalbench_answer_is_named(season: tuple[Path, Path],
                                               tmp_path: Path) -> None:
    _, bundle = season
    store = tmp_path / "plain.db"  # edited, its chain left as it was: verify names the row
    store.write_bytes(_members(bundle)["store.db"])
    _edit_alpha(store, chain=False)
    r = cli("verify", "--db", str(store), timeout=120)
    assert r.returncode == 1 and r.stdout.startswith("capital_submissions: row "), r.stdout
    assert "agent='alpha', replicate=1) was edited: its content does not match" in r.stdout
    edited = forged(bundle, tmp_path, _edit_alpha)
    assert _members(edited)["report.json"] == _members(bundle)["report.json"]
    line = _difference(edited)
    assert line.startswith("the replay's CapitalBench submission of alpha in round weekly-"), line
    assert "(official 1) differs in outcome: stored 'ok', replayed " in line, line


def _briefing(db: Path) -> Path:
    """Return the briefing file the stored run's config names."""
    ((config_json,),) = rows(db, "SELECT config_json FROM runs")
    return Path(json.loads(config_json)["capitalbench"]["briefing"])


def test_a_live_season_rebuilds_without_its_briefing_file(season: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    """The briefing's text is stored once, chained and named by the round's manifest; the
    bundle rebuilds byte for byte where the file is not; a store without it refuses."""
    db, bundle = season
    path = _briefing(db)
    data = path.read_bytes()
    ((sha, name, text),) = rows(db, "SELECT sha256, name, text FROM capital_briefings")
    assert (sha, name, text.encode()) == (hashlib.sha256(data).hexdigest(), path.name, data)
    ((manifest,),) = rows(db, "SELECT manifest_json FROM capital_rounds")
    assert json.loads(manifest)["briefing_sha256"] == sha
    r = cli("verify", "--db", str(db), timeout=120)
    assert r.returncode == 0 and "capital_briefings 1," in r.stdout, r.stdout + r.stderr

    def pre_v17(store: Path) -> None:  # no briefing stored, none named (chains recomputed)
        con = sqlite3.connect(store)
        with con:
            con.execute("DELETE FROM capital_briefings")
            m = {k: v for k, v in json.loads(manifest).items() if k != "briefing_sha256"}
            con.execute("UPDATE capital_rounds SET manifest_json=?", (json.dumps(m),))
            rechain(con, "capital_rounds")
        con.close()

    old = forged(bundle, tmp_path, pre_v17)
    moved = tmp_path / "moved-briefing.md"
    path.rename(moved)
    try:
        assert_rebuilds(bundle)
        r = offline_cli("report", "--bundle", str(old), "--json")
        assert (f"the CapitalBench briefing {path} is not here and the store holds no copy of"
                " the briefing round weekly-") in r.stderr, r.stderr[-2000:]
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    finally:
        moved.rename(path)

    store = tmp_path / "text.db"  # its text edited: named whether its chain is recomputed or not
    for rechained in (False, True):
        store.write_bytes(_members(bundle)["store.db"])
        con = sqlite3.connect(store)
        with con:
            con.execute("UPDATE capital_briefings SET text='Facts: rates cut.'")
            if rechained:
                rechain(con, "capital_briefings")
        con.close()
        r = cli("verify", "--db", str(store), timeout=120)
        why = ("was edited: its text does not hash to its sha256" if rechained
               else "was edited: its content does not match its hash")
        assert r.returncode == 1 and r.stdout.splitlines()[0] == (
            f"capital_briefings: row 1 (sha256={sha!r}) {why}"), r.stdout


async def test_replayed_rounds_resolve_and_score_again_from_the_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A season of ``paperarena replay`` (four weekly rounds built from history, three resolved
    at the daily marks and scored, one started) rebuilds its report byte for byte. Its briefing
    is rewritten before the third round: each text is stored once, and the bundle rebuilds
    with the file holding the other text, and with the file gone."""
    from daemon.app.replay import replay
    from tests.protocols.test_capitalbench import _recording

    monkeypatch.setenv("CB_TEST_KEY", "sk-test")
    _recording(tmp_path / "rec.jsonl")
    read = CapitalRunner.read_briefing
    texts = ["Facts: rates unchanged (2026-10-15).\n", "Facts: rates cut (2026-11-05).\n"]

    def rewritten(self: CapitalRunner) -> tuple[str, bytes]:
        reads.append(1)
        if len(reads) == 3:
            Path(self.cap.briefing).write_text(texts[1])
        return read(self)

    reads: list[int] = []
    async with CapitalModel() as model:
        cfg = parse_config(_config(tmp_path, model.api_base))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(CapitalRunner, "read_briefing", rewritten)
            await replay(tmp_path / "rec.jsonl", cfg, tmp_path / "cb.db", progress=False)
    statuses = [s for (s,) in rows(tmp_path / "cb.db", "SELECT status FROM capital_rounds"
                                                        " ORDER BY round_id")]
    assert statuses == ["resolved", "resolved", "resolved", "started"], statuses
    shas = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    assert rows(tmp_path / "cb.db", "SELECT sha256, text FROM capital_briefings ORDER BY id"
                ) == list(zip(shas, texts, strict=True))
    named = [json.loads(m)["briefing_sha256"] for (m,) in rows(
        tmp_path / "cb.db", "SELECT manifest_json FROM capital_rounds ORDER BY round_id")]
    assert named == [shas[0], shas[0], shas[1], shas[1]]
    # The file holds the second text: the first two rounds are frozen again from the stored one
    # (a round frozen from another text would differ in its hashes: exit 1, named).
    bundle = tmp_path / "cb.tar"
    r = cli("export", "--db", str(tmp_path / "cb.db"), "--bundle", str(bundle), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    r = offline_cli("report", "--bundle", str(bundle), "--json")
    assert r.returncode == 0 and "not replayed" not in r.stderr, r.stderr[-2000:]
    assert r.stdout.encode() == _members(bundle)["report.json"]
    scored = [i for x in json.loads(r.stdout)["capitalbench"]["rounds"] for i in x["results"]
              if i.get("score") is not None]
    assert len(scored) == 6  # alpha and gamma in each resolved round
    # A round frozen but whose submissions were never stored (the run stopped while it asked
    # the models) is frozen again, and its models not asked.
    def drop(db: Path) -> None:  # and the chain recomputed
        con = sqlite3.connect(db)
        with con:
            con.execute("DELETE FROM capital_submissions WHERE round_id='weekly-2026-11-09'")
            rechain(con, "capital_submissions")
        con.close()

    edited = forged(bundle, tmp_path, drop)
    Path(cfg.capitalbench.briefing).unlink()  # type: ignore[union-attr]  # now none at all
    r = offline_cli("report", "--bundle", str(edited), "--json")
    assert r.returncode == 0 and "not replayed" not in r.stderr, r.stderr[-2000:]
    assert r.stdout.encode() == _members(edited)["report.json"] != _members(bundle)["report.json"]
