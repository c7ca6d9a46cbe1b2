"""CapitalBench checks found by an outside verification: the report scores from the store alone
(whatever the working directory, with the round folder gone), and bad configs or answers get one
short line."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agents.capitalbench.agent import Rules, check_submission
from agents.capitalbench.rounds import plan_round, round_files
from agents.capitalbench.scores import capitalbench_section
from agents.llm_output import InvalidOutput
from daemon.config.settings import ConfigError, load_config, parse_config
from daemon.store.store import MIGRATIONS

OPTIONS = [{"id": "QQQ", "name": "Invesco QQQ", "asset_class": "us_equity"},
           {"id": "TLT", "name": "iShares 20+ Year Treasury", "asset_class": "bond"},
           {"id": "CASH", "name": "Cash", "asset_class": "cash"}]


def _data(tmp: Path) -> dict[str, Any]:
    (tmp / "briefing.md").write_text("Facts only.\n")
    llm = {"kind": "llm", "protocol": "capitalbench", "api_base": "http://127.0.0.1:1/v1",
           "model": "openai/x", "markets": ["equity"]}
    return {
        "markets": {"equity": {"assets": ["SPY", "QQQ", "TLT"]},
                    "polymarket": {"enabled": False}},
        "agents": [{"id": "a", **llm}, {"id": "b", **llm}],
        "capitalbench": {"rounds_dir": str(tmp / "rounds"),
                         "briefing": str(tmp / "briefing.md"), "options": OPTIONS},
    }


def test_the_report_scores_from_the_store_without_the_round_folder(tmp_path: Path) -> None:
    """The stored manifest names the options, so the maximum possible return and the scores do
    not depend on the working directory or on the round folder still being there."""
    cap = parse_config(_data(tmp_path)).capitalbench
    assert cap is not None
    freeze = datetime(2026, 10, 19, 13, 30, tzinfo=UTC).timestamp()
    plan = plan_round("weekly", freeze, 3600.0)
    files = round_files(plan, cap, b"Facts only.\n", {}, "$round_id", "v1")
    manifest = json.loads(files["manifest.json"])
    assert manifest["option_ids"] == ["QQQ", "TLT", "CASH"]
    con = sqlite3.connect(tmp_path / "cb.db")
    for v in sorted(MIGRATIONS):
        con.executescript(MIGRATIONS[v])
    con.execute(
        "INSERT INTO capital_rounds(round_id, track, frozen_ts, deadline_ts, start_day,"
        " start_ts, end_day, end_ts, dir, manifest_json, hashes_sha256, status,"
        " start_prices_json, end_prices_json) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (plan.round_id, "weekly", freeze, plan.deadline_ts, plan.start_day.isoformat(),
         plan.start_ts, plan.end_day.isoformat(), plan.end_ts,
         "rounds/" + plan.round_id,  # relative, and nothing there: moved away
         files["manifest.json"].decode(), "0" * 64, "resolved",
         json.dumps({"QQQ": 100.0, "TLT": 50.0, "SPY": 200.0}),
         json.dumps({"QQQ": 110.0, "TLT": 49.0, "SPY": 202.0})))
    con.execute(
        "INSERT INTO capital_submissions(round_id, run_id, agent, replicate, official, ts,"
        " model, outcome, reason, holdings_json, raw_responses_json, calls_json, tokens_in,"
        " tokens_out, cost_usd) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (plan.round_id, "official", "a", 1, 1, freeze, "x", "ok", "",
         json.dumps({"QQQ": 60, "CASH": 40}), "[]", "[]", 0, 0, 0.5))
    con.commit()
    sec = capitalbench_section(con)
    con.close()
    assert sec is not None
    rnd = sec["rounds"][0]
    assert rnd["max_possible_return"] == pytest.approx(0.10)
    res = rnd["results"][0]
    assert res["scored"] is True
    assert res["portfolio_return"] == pytest.approx(0.06)
    assert res["vs_sp500"] == pytest.approx(0.05)
    assert res["score"] == pytest.approx(60.0)
    assert res["regret"] == pytest.approx(0.04)
    assert res["vs_sp500_per_dollar"] == pytest.approx(0.1)


def test_capitalbench_agents_need_the_section(tmp_path: Path) -> None:
    """A capitalbench agent without [capitalbench] would never be asked: refused, one line."""
    data = _data(tmp_path)
    del data["capitalbench"]
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert len(e.value.problems) == 1
    assert "protocol 'capitalbench' needs a [capitalbench] section: a, b" in e.value.problems[0]


def test_a_roster_member_listed_twice_is_refused(tmp_path: Path) -> None:
    data = _data(tmp_path)
    data["capitalbench"]["roster"] = ["a", "b", "a"]
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert len(e.value.problems) == 1 and "roster: listed twice: a" in e.value.problems[0]


@pytest.mark.parametrize("content, error", [
    (None, "capitalbench.briefing: cannot read"),
    (b"\xff\xfe bad", "capitalbench.briefing: not UTF-8 text"),
])
def test_an_unusable_briefing_is_refused_by_check_config(
        tmp_path: Path, content: bytes | None, error: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """check-config (and run, replay) name a briefing the rounds could never copy (no round
    would be frozen), in one line; a config loaded for another purpose does not need it."""
    from daemon.app.cli import main

    briefing = tmp_path / "brief.md"
    if content is not None:
        briefing.write_bytes(content)
    cfg = tmp_path / "cb.toml"
    cfg.write_text(
        '[markets.equity]\nassets = ["QQQ"]\n[markets.polymarket]\nenabled = false\n'
        f'[capitalbench]\nbriefing = "{briefing}"\n'
        'options = [{ id = "QQQ", name = "Invesco QQQ", asset_class = "us_equity" }]\n')
    assert main(["check-config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{cfg}: {error}")
    assert load_config(cfg).capitalbench is not None


def test_a_weight_above_100_is_named_shortly() -> None:
    answer = json.dumps({"portfolio": [{"option_id": "QQQ", "weight_pct": 1e300},
                                       {"option_id": "TLT", "weight_pct": 50}],
                         "portfolio_rationale": "r"})
    with pytest.raises(InvalidOutput) as e:
        check_submission(answer, "stop", Rules(("QQQ", "TLT")))
    assert str(e.value) == "weight_pct of QQQ must be at most 100, got 1e+300"


def test_the_trailing_table_keeps_a_year_of_closes(tmp_path: Path) -> None:
    """The daemon's market state keeps ~30 sessions of closes; the round runner keeps its own
    year of them (fed at every daily mark, kept in the checkpoint), so the 6 m and 1 y columns
    are filled once that much history has passed, after a restart too."""
    from datetime import date, timedelta
    from types import SimpleNamespace

    from agents.capitalbench.runner import CapitalRunner
    from daemon.market.state import MarketState
    from daemon.timing.nyse import get_nyse_calendar

    cfg = parse_config(_data(tmp_path))
    state = MarketState({"equity": object()})  # type: ignore[dict-item]
    host = SimpleNamespace(config=cfg, clock=None, store=None, state=state)
    runner = CapitalRunner(host)  # type: ignore[arg-type]
    cal = get_nyse_calendar()
    closes: list[tuple[float, float]] = []
    d, k = date(2025, 9, 1), 0
    while d < date(2026, 10, 19):
        b = cal.session_bounds(d)
        if b is not None:
            k += 1
            closes.append((b[1].timestamp(), 100.0 + k))
            for a in ("QQQ", "TLT"):
                state.seed_history("equity", a, closes[-30:])
            runner.on_daily_closes(b[1].timestamp())
        d += timedelta(days=1)
    freeze = datetime(2026, 10, 19, 13, 30, tzinfo=UTC).timestamp()
    plan = plan_round("weekly", freeze, 3600.0)

    def table(r: CapitalRunner) -> dict[str, str]:
        csv = (r.freeze(plan) / "market_data" / "universe_trailing_returns.csv").read_text()
        head, qqq = csv.splitlines()[:2]
        return dict(zip(head.split(","), qqq.split(","), strict=True))

    row = table(runner)
    p1 = 100.0 + k  # the Oct 16 close (last before the freeze day)
    day_close = {datetime.fromtimestamp(t, UTC).date(): p for t, p in closes}
    p_6m = max((dd, p) for dd, p in day_close.items() if dd <= date(2026, 10, 18) - timedelta(182))
    p_1y = max((dd, p) for dd, p in day_close.items() if dd <= date(2026, 10, 18) - timedelta(365))
    assert float(row["return_6m"]) == pytest.approx(p1 / p_6m[1] - 1, abs=1e-6)
    assert float(row["return_1y"]) == pytest.approx(p1 / p_1y[1] - 1, abs=1e-6)
    # a restart: the runner's closes come back from the checkpoint, the same table is frozen
    again = CapitalRunner(host)  # type: ignore[arg-type]
    again.restore(json.loads(json.dumps(runner.state())))
    assert table(again) == row


def test_verify_round_names_paths_outside_the_round_and_unreadable_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hashes.json may only vouch for files inside the round; a file that cannot be read is
    named in one line (no traceback)."""
    import hashlib

    from agents.capitalbench.rounds import verify_round

    rdir = tmp_path / "r"
    rdir.mkdir()
    (tmp_path / "outside.txt").write_bytes(b"x")
    (rdir / "prompt.md").write_bytes(b"p")
    digest = {n: hashlib.sha256(b).hexdigest() for n, b in (("x", b"x"), ("p", b"p"))}
    (rdir / "hashes.json").write_text(json.dumps({"algorithm": "sha256", "files": {
        "../outside.txt": digest["x"], str(tmp_path / "outside.txt"): digest["x"],
        "prompt.md": digest["p"]}}))
    problems = verify_round(rdir)
    assert problems == [
        f"{rdir}: hashes.json lists a path outside the round: ../outside.txt",
        f"{rdir}: hashes.json lists a path outside the round: {tmp_path / 'outside.txt'}"]
    (rdir / "hashes.json").write_text(json.dumps({"files": {"prompt.md": digest["p"]}}))
    real = Path.read_bytes

    def refuse(self: Path) -> bytes:
        if self.name == "prompt.md":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert verify_round(rdir) == [f"{rdir / 'prompt.md'}: unreadable: Permission denied"]
