"""CapitalBench options carry the paper's fields; a live round's manifest is unchanged and a
round built from history says so (issue 29, point 5)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.capitalbench.rounds import RoundConflict, plan_round, round_files
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
    options = yaml.safe_load(files["options.yaml"])["options"]
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
    live = yaml.safe_load(_files(cap)["manifest.yaml"])
    assert "retrospective" not in live  # the bytes of a live round are those of before
    past = yaml.safe_load(_files(cap, retrospective=True)["manifest.yaml"])
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


def test_round_inputs_are_yaml_files_hashed_and_read_back(tmp_path: Path) -> None:
    """The paper's manifest.yaml and options.yaml, listed by SHA-256 in hashes.json and read
    back; a round frozen earlier as JSON is still read, and re-used when it holds the same."""
    import hashlib

    from agents.capitalbench.rounds import freeze_round, load_manifest, verify_round

    files = _files(_cap(tmp_path, [FULL, BARE, CASH]))
    assert "manifest.json" not in files and "options.json" not in files
    manifest = yaml.safe_load(files["manifest.yaml"])
    assert manifest["options_file"] == "options.yaml" and manifest["start_day"] == "2026-10-19"
    rdir = freeze_round(tmp_path / "rounds", files, "weekly-x")
    listed = json.loads((rdir / "hashes.json").read_text())["files"]
    for name in ("manifest.yaml", "options.yaml"):
        assert listed[name] == hashlib.sha256((rdir / name).read_bytes()).hexdigest()
    assert verify_round(rdir) == []
    assert load_manifest(rdir) == manifest
    assert freeze_round(tmp_path / "rounds", files, "weekly-x") == rdir  # identical: re-used
    (rdir / "options.yaml").write_text((rdir / "options.yaml").read_text().replace("QQQ", "QQX"))
    assert verify_round(rdir) == [f"{rdir / 'options.yaml'}: changed (SHA-256 differs from"
                                  " hashes.json)"]
    # An older round: the same inputs frozen as JSON.
    old = {k: v for k, v in files.items() if k not in ("manifest.yaml", "options.yaml")}
    old["manifest.json"] = json.dumps({**manifest, "options_file": "options.json"}).encode()
    old["options.json"] = json.dumps(yaml.safe_load(files["options.yaml"])).encode()
    odir = tmp_path / "old"
    odir.mkdir()
    for rel, data in old.items():
        (odir / rel).parent.mkdir(parents=True, exist_ok=True)
        (odir / rel).write_bytes(data)
    (odir / "hashes.json").write_text(json.dumps({"algorithm": "sha256", "files": {
        rel: hashlib.sha256(data).hexdigest() for rel, data in old.items()}}))
    assert verify_round(odir) == [] and load_manifest(odir)["options_file"] == "options.json"
    assert freeze_round(tmp_path, files, "old") == odir  # the same inputs: re-used, not rewritten
    assert not (odir / "manifest.yaml").exists()
    other = dict(files, **{"briefing.md": b"Other facts.\n"})
    with pytest.raises(RoundConflict, match="holds other inputs"):
        freeze_round(tmp_path, other, "old")
