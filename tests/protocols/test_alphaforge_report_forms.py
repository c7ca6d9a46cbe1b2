"""`report --json` and `report --html` carry the AlphaForgeBench section (text has it)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from daemon.app.cli import main
from daemon.store.store import Store

V1, V2 = "a" * 64, "b" * 64
INSTABILITY = {
    "repeats": 2, "bars": 3, "assets": ["AAA"], "input_sha256": "f" * 64,
    "temperatures": {"0": {"snr": 2.5, "models": {"m": {
        "model": "openai/m", "asked": 2, "valid": 2, "runs": 2, "pairwise_agreement": 0.75,
        "disagreement_steps": 0.5, "active_jaccard": 0.6, "mean_return": 0.01,
        "std_return": 0.002, "distinct_versions": 2, "versions": [V1, V2],
        "run_signals": [[1, 0, -1], [1, 1, -1]], "run_active": [[1, 0, 0], [1, 1, 0]],
        "codes": {V1: "code 1", V2: "code 2"}}}}},
    "temperature_agreement": {"m": {"0/0.7": 0.9}},
}


async def make_db(path: Path) -> None:
    store = await Store.open(str(path), lock=False)
    await store.close()
    con = sqlite3.connect(path)
    with con:
        for ts, version, outcome, value in [(100.0, V1, "ok", 1000.0),
                                            (200.0, V1, "invalid", 1010.0),
                                            (300.0, V2, "ok", 1020.0)]:
            summary = {"protocol": "alphaforgebench", "strategy_version": version,
                       "strategy_since": 100.0, "failed": {}, "exposure": {"AAA": 1.0}}
            con.execute("INSERT INTO decisions(agent, market, scheduled_ts, decided_ts, outcome,"
                        " raw_output) VALUES('af', 'equity', ?, ?, ?, ?)",
                        (ts, ts, outcome, json.dumps(summary, sort_keys=True)))
            con.execute("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                        " VALUES('af', 'equity', ?, 'decision', ?, 0)", (ts, value))
        con.execute("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                    " VALUES('af', 'equity', 400, 'daily', 1030, 0)")
        con.execute("INSERT INTO instability_runs(ts, input_sha256, prompt_sha256, repeats,"
                    " result_json) VALUES(5, 'in', 'pr', 2, ?)", (json.dumps(INSTABILITY),))
    con.close()


async def test_json_and_html_reports_have_versions_and_instability(
        tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "af.db"
    await make_db(db)
    capsys.readouterr()  # the migration's log lines
    assert main(["report", "--db", str(db), "--json", "--html", str(tmp_path / "r.html")]) == 0
    board = json.loads(capsys.readouterr().out)
    af = board["alphaforge"]
    assert [v["version"] for v in af["versions"]] == [V1[:12], V2[:12]]
    assert af["versions"][0]["failed"] == 1
    assert af["versions"][0]["ret"] == pytest.approx(1020.0 / 1000.0 - 1)
    model = af["instability"]["temperatures"]["0"]["models"]["m"]
    assert model["pairwise_agreement"] == 0.75 and af["instability"]["temperatures"]["0"][
        "snr"] == 2.5
    # The per-run audit data stays in the database and /api/alphaforge, not in the board.
    assert "run_signals" not in model and "codes" not in model
    page = (tmp_path / "r.html").read_text()
    assert "AlphaForgeBench strategy versions" in page and V2[:12] in page
    assert "AlphaForgeBench instability" in page and "2.500" in page and "0.750" in page
    # The text report shows the section once (its own block, not twice).
    assert main(["report", "--db", str(db)]) == 0
    assert capsys.readouterr().out.count("AlphaForgeBench strategy versions") == 1


async def test_a_board_without_alphaforge_has_no_section(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "empty.db"
    store = await Store.open(str(db), lock=False)
    await store.close()
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--json"]) == 0
    assert "alphaforge" not in json.loads(capsys.readouterr().out)
