"""CapitalBench options carry the paper's fields; a live round's manifest is unchanged and a
round built from history says so (issue 29, point 5)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agents.capitalbench.rounds import plan_round, round_files
from daemon.config.settings import ConfigError, parse_config

TEMPLATE = "$options\n"
FULL = {"id": "QQQ", "name": "Invesco QQQ", "asset_class": "us_equity", "symbol": "QQQ",
        "category": "broad market", "group": "US equities", "risk_bucket": "high",
        "exposure": "the 100 largest non-financial Nasdaq companies"}
BARE = {"id": "TLT", "name": "iShares 20+ Year Treasury", "asset_class": "bond"}
CASH = {"id": "CASH", "name": "Cash", "asset_class": "cash"}


def _cap(tmp: Path, options: list[dict[str, Any]]) -> Any:
    (tmp / "b.md").write_text("Facts only.\n")
    llm = {"kind": "llm", "protocol": "capitalbench", "api_base": "http://127.0.0.1:1/v1",
           "model": "openai/x", "markets": ["equity"]}
    cfg = parse_config({
        "markets": {"equity": {"assets": ["SPY", "QQQ", "TLT"]}, "polymarket": {"enabled": False}},
        "agents": [{"id": "a", **llm}],
        "capitalbench": {"rounds_dir": str(tmp / "rounds"), "briefing": str(tmp / "b.md"),
                         "options": options}})
    return cfg.capitalbench


def _files(cap: Any, **kw: Any) -> dict[str, bytes]:
    plan = plan_round("weekly", datetime(2026, 10, 19, 13, 30, tzinfo=UTC).timestamp(), 3600.0)
    return round_files(plan, cap, b"Facts only.\n", {}, TEMPLATE, "v1", **kw)


def test_options_show_the_papers_fields(tmp_path: Path) -> None:
    files = _files(_cap(tmp_path, [FULL, BARE, CASH]))
    options = json.loads(files["options.json"])["options"]
    assert options[0] == FULL  # every field, as configured
    assert options[1] == BARE and options[2] == CASH  # unset fields are left out
    lines = files["prompt.md"].decode().splitlines()
    assert lines[0] == ("- QQQ: Invesco QQQ (us_equity); symbol QQQ; category broad market;"
                        " group US equities; risk bucket high; exposure: the 100 largest"
                        " non-financial Nasdaq companies")
    assert lines[1] == "- TLT: iShares 20+ Year Treasury (bond)"  # as before the fields
    assert lines[2] == "- CASH: Cash (cash)"


def test_a_live_round_has_no_retrospective_key_a_replayed_one_does(tmp_path: Path) -> None:
    cap = _cap(tmp_path, [BARE, CASH])
    live = json.loads(_files(cap)["manifest.json"])
    assert "retrospective" not in live  # the bytes of a live round are those of before
    past = json.loads(_files(cap, retrospective=True)["manifest.json"])
    assert past["retrospective"] is True
    assert {k: v for k, v in past.items() if k != "retrospective"} == live


@pytest.mark.parametrize(("field", "value", "words"), [
    ("symbol", "BAD TICKER", "symbol"),
    ("risk_bucket", "x" * 33, "risk_bucket"),
    ("exposure", "x" * 301, "exposure"),
])
def test_bad_option_fields_are_one_line(tmp_path: Path, field: str, value: str,
                                        words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        _cap(tmp_path, [{**FULL, field: value}, CASH])
