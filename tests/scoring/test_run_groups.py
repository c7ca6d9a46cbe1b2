"""Runs of one model (``run_group``) are reported as one model; the stress gate per window."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from agents.portbench.stress_gate import global_gate, window_gate
from daemon.app.cli import main
from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.store.reports import load_report
from scoring.board.report_html import render_html
from scoring.board.run_groups import spread
from scoring.board.text import to_table
from tests.recordings import TINY_CONFIG, make_recording

GROUPED = TINY_CONFIG.replace('id = "ew"\nkind = "equal_weight"',
                              'id = "ew"\nkind = "equal_weight"\nrun_group = "trend"') \
    .replace('id = "mom"\nkind = "momentum"', 'id = "mom"\nkind = "momentum"\nrun_group = "trend"'
             ).replace('id = "bh"\nkind = "buy_and_hold"',
                       'id = "bh"\nkind = "buy_and_hold"\nrun_group = "trend"')


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import asyncio

    tmp = tmp_path_factory.mktemp("groups")
    rec = tmp / "rec.jsonl.gz"
    make_recording(rec, days=8)
    out = {}
    for name, text in (("plain", TINY_CONFIG), ("grouped", GROUPED),
                       ("gate", TINY_CONFIG + '[[agents]]\nid = "mv"\nkind = "min_variance"\n'
                        'risk_profile = "conservative"\n')):
        cfg = tmp / f"{name}.toml"
        cfg.write_text(text)
        out[name] = tmp / f"{name}.db"
        asyncio.run(replay(rec, load_config(cfg), out[name], progress=False))
    return out


def test_group_row_gives_mean_and_spread_beside_unchanged_ranks(stores: dict[str, Path]) -> None:
    assert GROUPED.count("run_group") == 3
    plain = load_report(stores["plain"]).board
    grouped = load_report(stores["grouped"]).board
    assert "run_groups" not in plain
    # The rows and their ranks are exactly those without groups.
    assert json.dumps(plain["rows"], sort_keys=True) == json.dumps(grouped["rows"],
                                                                   sort_keys=True)
    # One group per market the runs trade.
    assert [(x["market"], x["group"]) for x in grouped["run_groups"]] == [
        ("equity", "trend"), ("polymarket", "trend")]
    g = grouped["run_groups"][0]
    assert g["runs"] == 3
    assert g["agents"] == ["bh", "ew", "mom"]
    rows = {r["agent"]: r for r in grouped["rows"] if r["market"] == "equity"}
    rets = [rows[a]["cumulative_return"] for a in g["agents"]]
    f = g["figures"]["cumulative_return"]
    assert f["mean"] == pytest.approx(statistics.fmean(rets))
    assert f["std"] == pytest.approx(statistics.stdev(rets)) and f["std"] > 0
    assert (f["min"], f["max"]) == (min(rets), max(rets))
    assert g["ranks"] == [rows[a]["rank"] for a in g["agents"]]
    text = to_table(grouped)
    assert "runs of one model (run_group)" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("equity     trend"))
    assert f"{100 * f['mean']:+.2f}%" in line
    assert "Runs of one model" in render_html(load_report(stores["grouped"]))
    assert "runs of one model" not in to_table(plain)


def test_spread_of_one_run_and_of_none() -> None:
    assert spread([0.1]) == {"n": 1, "mean": 0.1, "std": 0.0, "min": 0.1, "max": 0.1}
    assert spread([None, float("nan")])["mean"] is None


def test_stress_gate_of_a_window(stores: dict[str, Path], capsys: Any) -> None:
    assert "stress_gate" not in load_report(stores["plain"]).board
    board = load_report(stores["gate"]).board
    gate = board["stress_gate"]
    mv = gate["mv"]
    assert mv["profile"] == "conservative" and mv["tolerance"] == pytest.approx(0.10)
    row = next(r for r in board["rows"] if r["agent"] == "mv" and r["market"] == "equity")
    assert mv["max_drawdown"] == row["max_drawdown"]
    assert mv["pass"] is (row["max_drawdown"] <= 0.10)
    assert "PortBench stress gate of this window" in to_table(board)
    assert "Stress gate" in render_html(load_report(stores["gate"]))
    # Three windows: pass only when every window passes.
    ok = {"a": {"profile": "balanced", "tolerance": 0.2, "max_drawdown": 0.05, "pass": True}}
    bad = {"a": {"profile": "balanced", "tolerance": 0.2, "max_drawdown": 0.25, "pass": False}}
    assert global_gate([ok, ok])["a"]["pass"] is True
    both = global_gate([ok, bad, ok])["a"]
    assert both["pass"] is False and both["max_drawdown"] == 0.25 and both["windows"] == 3
    assert window_gate([{"agent": "x", "market": "polymarket"}]) == {}
    assert main(["stress-gate", str(stores["gate"]), str(stores["gate"])]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("agent") and "\nmv " in out
    assert main(["stress-gate", str(stores["gate"].parent / "missing.db")]) == 2
    err = capsys.readouterr().err
    assert "missing.db" in err and len(err.strip().splitlines()) == 1
