"""Seasons through the commands (issue 32, point 1): ``run`` and ``replay`` freeze the lineup, a
later start or a SIGHUP reload with another one is refused in one line or recorded as an
amendment, and ``report`` (text and JSON) says which season and which amendments."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from daemon.app.live import LiveDaemon
from daemon.config.settings import load_config
from daemon.store.integrity.season import read_season
from tests.store.integrity.test_bundle import rechain
from tests.store.test_cli_database import QUIET, cli, one_line
from tests.store.test_faults import TINY_CONFIG, make_recording

SEASON = '\n[season]\nname = "S1"\n'
AGENTS = ('[[agents]]\nid = "ew"\nkind = "equal_weight"\n'
          '[[agents]]\nid = "cash"\nkind = "cash"\n')


def _season(db: Path) -> dict[str, Any] | None:
    con = sqlite3.connect(db)
    try:
        return read_season(con)
    finally:
        con.close()


def test_run_freezes_the_lineup_then_refuses_or_records_a_change(tmp_path: Path) -> None:
    cfg, db = tmp_path / "c.toml", tmp_path / "live.db"
    cfg.write_text(QUIET + AGENTS + SEASON)
    r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3")
    assert r.returncode == 0, r.stderr[-2000:]
    season = _season(db)
    assert season is not None and season["name"] == "S1" and season["amendments"] == []
    cfg.write_text(QUIET + AGENTS.replace('id = "cash"', 'id = "cash2"') + SEASON)
    line = one_line(cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3"))
    assert line.startswith(f"paperarena: --db {db}: season 'S1': the lineup is frozen and"
                           " agents.cash, agents.cash2, config_sha256 changed; restore it, or"
                           " set [season]")
    cfg.write_text(QUIET + AGENTS.replace('id = "cash"', 'id = "cash2"') + SEASON
                   + 'amendments = "allow"\n')
    r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3")
    assert r.returncode == 0, r.stderr[-2000:]
    season = _season(db)
    assert season is not None and [a["changes"] for a in season["amendments"]] == [
        ["agents.cash", "agents.cash2", "config_sha256"]]
    r = cli("report", "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert "season S1: lineup frozen " in r.stdout and "; 1 amendment(s)\n" in r.stdout
    assert "  amendment " in r.stdout and ": agents.cash, agents.cash2, config_sha256" in r.stdout
    other = tmp_path / "other.toml"
    other.write_text(QUIET + AGENTS + '\n[season]\nname = "S2"\n')
    line = one_line(cli("run", "--config", str(other), "--db", str(db), "--duration", "0.3"))
    assert line == (f"paperarena: --db {db} holds season 'S1', not season 'S2': a new season starts"
                    " clean books, so use a new --db (or set [season] name = 'S1')")


def test_the_season_rows_are_chained_so_verify_names_an_edited_or_reordered_one(
        tmp_path: Path) -> None:
    cfg, db = tmp_path / "c.toml", tmp_path / "live.db"
    cfg.write_text(QUIET + AGENTS + SEASON + 'amendments = "allow"\n')
    assert cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3").returncode == 0
    for new in ('id = "cash2"', 'id = "cash3"'):  # two amendments
        cfg.write_text(QUIET + AGENTS.replace('id = "cash"', new) + SEASON
                       + 'amendments = "allow"\n')
        r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3")
        assert r.returncode == 0, r.stderr[-2000:]
    r = cli("verify", "--db", str(db))
    assert r.returncode == 0 and ", season 3, " in r.stdout, r.stdout + r.stderr
    for i, (sql, said) in enumerate((
            ("UPDATE season SET name='S1-clean'", "season: row 1 (kind='start', ts="),
            ("UPDATE season SET changes_json='[]' WHERE id=2",
             "season: row 2 (kind='amendment', ts="),
            ("DELETE FROM season WHERE id=2", "season: a row was deleted before row 3"),
            # every season row is hashed since v17: a hash removed is not a row from before
            ("UPDATE season SET chain=NULL, name='S1-clean'",
             "season: row 1 (kind='start', ts="),
            # the lineup edited, its row's hash recomputed: the lineup is not its SHA-256
            ("UPDATE season SET lineup_json=replace(lineup_json, 'cash2', 'cash9') WHERE id=2",
             "season: row 2 (kind='amendment', ts="))):
        edited = tmp_path / f"e{i}.db"
        edited.write_bytes(db.read_bytes())
        con = sqlite3.connect(edited)
        with con:
            assert con.execute(sql).rowcount >= 1
            if i == 4:
                rechain(con, "season")
        con.close()
        r = cli("verify", "--db", str(edited))
        assert r.returncode == 1 and said in r.stdout + r.stderr, r.stdout + r.stderr
        assert i != 3 or "has no hash, but every row of this table is hashed since schema" \
            " v17" in r.stdout, r.stdout
        assert i != 4 or "its lineup does not hash to its lineup_sha256" in r.stdout, r.stdout


async def test_a_reload_with_another_lineup_is_refused_or_amends(tmp_path: Path) -> None:
    changed = AGENTS.replace('"equal_weight"', '"buy_and_hold"')
    for policy, applied in (("refuse", False), ("allow", True)):
        cfg = tmp_path / f"{policy}.toml"
        cfg.write_text(QUIET + AGENTS + SEASON + f'amendments = "{policy}"\n')
        db = tmp_path / f"{policy}.db"
        daemon = LiveDaemon(load_config(cfg), db=str(db))
        await daemon.start()
        try:
            cfg.write_text(QUIET + changed + SEASON + f'amendments = "{policy}"\n')
            assert await daemon.reload(str(cfg)) is applied
            assert daemon.config.agents[0].kind == ("buy_and_hold" if applied
                                                    else "equal_weight")
        finally:
            await daemon.stop()
        season = _season(db)
        assert season is not None
        assert [a["changes"] for a in season["amendments"]] == (
            [["agents.ew.kind", "config_sha256"]] if applied else [])


async def test_a_reload_applied_but_not_stored_says_so_and_keeps_the_new_agents(
        tmp_path: Path) -> None:
    cfg, db = tmp_path / "c.toml", tmp_path / "s.db"
    cfg.write_text(QUIET + AGENTS + SEASON + 'amendments = "allow"\n')
    daemon = LiveDaemon(load_config(cfg), db=str(db))
    await daemon.start()
    try:
        con = sqlite3.connect(db)  # the store can no longer take a reload's config
        with con:
            con.execute("DROP TABLE config_reloads")
        con.close()
        cfg.write_text(QUIET + AGENTS.replace('"equal_weight"', '"buy_and_hold"') + SEASON
                       + 'amendments = "allow"\n')
        with capture_logs() as logs:
            assert await daemon.reload(str(cfg)) is True
        assert daemon.config.agents[0].kind == "buy_and_hold"  # the engine runs it
        assert daemon.engine is not None
        kinds = {aid: type(slot.agent).__name__ for ss in daemon.engine.slots.values()
                 for aid, slot in ss.items()}
        assert kinds["ew"] != "EqualWeightAgent" and "BuyAndHold" in kinds["ew"], kinds
        said = [e for e in logs if e["event"].startswith("config reload applied, but not stored")]
        assert [e["event"] for e in said] == [
            "config reload applied, but not stored: the season's amendment or the reloaded"
            " config is missing from the store (a bundle of this season cannot replay it)"]
        assert "config_reloads" in said[0]["error"]  # and the store says its write failed
        assert not any("refused" in e["event"] for e in logs)
    finally:
        await daemon.stop()


def test_replay_report_names_the_season_in_text_and_json(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec)
    plain, seasoned = tmp_path / "plain.toml", tmp_path / "season.toml"
    plain.write_text(TINY_CONFIG)
    seasoned.write_text(TINY_CONFIG + SEASON)
    for cfg, db in ((plain, "p.db"), (seasoned, "s.db")):
        r = cli("replay", str(rec), "--config", str(cfg), "--db", str(tmp_path / db),
                "--no-progress", timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    p_json = json.loads(cli("report", "--db", str(tmp_path / "p.db"), "--json").stdout)
    s_json = json.loads(cli("report", "--db", str(tmp_path / "s.db"), "--json").stdout)
    assert "season" not in p_json
    season = s_json.pop("season")
    assert season["name"] == "S1" and season["amendments"] == []
    assert s_json == p_json  # the season changes no figure
    text = cli("report", "--db", str(tmp_path / "s.db")).stdout
    assert text.count("season S1: lineup frozen ") == 1 and "no amendments" in text
    assert "season" not in cli("report", "--db", str(tmp_path / "p.db")).stdout


async def test_api_status_shows_the_season_and_its_amendments(tmp_path: Path) -> None:
    from daemon.config.season import lineup
    from daemon.store.integrity.season import open_season
    from tests.web.test_metrics_http import make_config, start_daemon, stop_daemon

    d = await start_daemon(tmp_path)
    try:
        code, body = await d.get("/api/status")
        assert code == 200 and body["season"] is None  # no season: none shown
        store, cfg = d.engine.store, make_config()
        await open_season(store, "d.db", "S1", lineup(cfg), amendments="allow", ts=1.8e9)
        changed = lineup(cfg.model_copy(update={"agents": cfg.agents[:1]}))
        await open_season(store, "d.db", "S1", changed, amendments="allow", ts=1.8e9 + 86_400)
        code, body = await d.get("/api/status")
    finally:
        await stop_daemon(d)
    assert code == 200
    season = body["season"]
    assert season["name"] == "S1" and season["started"] == "2027-01-15 08:00 UTC"
    assert [a["date"] for a in season["amendments"]] == ["2027-01-16 08:00 UTC"]
    assert season["amendments"][0]["changes"][0].startswith("agents.")
