"""CapitalBench rounds: submissions, frozen packages and hashes, scoring, comparison sets, and a
whole round run by a replay against the local OpenAI-compatible server (real LiteLLM path).

Why one module over 500 lines: CapitalBench's round tests share one frozen round package and the
local model server.
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.capitalbench.agent import Rules, check_submission
from agents.capitalbench.rounds import (
    TrackTrigger,
    plan_round,
    trailing_returns,
    verify_command,
    verify_round,
)
from agents.capitalbench.scores import comparison_set
from agents.llm_output import InvalidOutput
from daemon.config.settings import ConfigError, parse_config
from daemon.core.events import PriceEvent
from daemon.timing.triggers import fire_times
from feeds.recording import RecordingHeader, RecordingWriter
from tests.llm_server import FakeLlmServer, ok
from tests.pg import pg_database, requires_pg

RULES = Rules(("QQQ", "TLT", "GLD", "CASH"))


def portfolio(*pairs: tuple[str, Any], **extra: Any) -> str:
    return json.dumps({"portfolio": [{"option_id": o, "weight_pct": w} for o, w in pairs],
                       "portfolio_rationale": "because", **extra})


# ------------------------------------------------------------------------------- submissions
def test_a_valid_portfolio() -> None:
    sub = check_submission(portfolio(("QQQ", 60), ("TLT", 25.0), ("CASH", 15)), "stop", RULES)
    assert dict(sub.holdings) == {"QQQ": 60, "TLT": 25, "CASH": 15}
    assert sub.rationale == "because"


@pytest.mark.parametrize(("answer", "error"), [
    (portfolio(("QQQ", 60), ("TLT", 35)), "sum to exactly 100%, got 95%"),
    (portfolio(("QQQ", 62), ("TLT", 38)), "multiple of 5"),
    (portfolio(("QQQ", 50), ("QQQ", 50)), "listed twice"),
    (portfolio(("SPY", 100)), "unknown option 'SPY'"),
    (portfolio(("QQQ", 100.5)), "whole percent"),
    (portfolio(("QQQ", 0), ("TLT", 100)), "must be > 0"),
    (portfolio(("QQQ", True)), "not a number"),
    (portfolio(*[(o, 20) for o in ("QQQ", "TLT", "GLD", "CASH", "QQQ", "TLT")]),
     "1 to 5 options"),
    (portfolio(), "1 to 5 options"),
    (json.dumps({"portfolio": [{"option_id": "QQQ", "weight_pct": 100}]}),
     "'portfolio_rationale' must be a non-empty string"),
    (portfolio(("QQQ", 100), confidence=2), "confidence"),
    ("I like QQQ", "no JSON object"),
])
def test_invalid_portfolios_are_refused(answer: str, error: str) -> None:
    with pytest.raises(InvalidOutput, match=error):
        check_submission(answer, "stop", RULES)


def test_six_holdings_are_too_many_and_truncation_is_invalid() -> None:
    rules = Rules(("A", "B", "C", "D", "E", "F"))
    six = portfolio(*[(o, 15) for o in "ABCD"], ("E", 20), ("F", 20))
    with pytest.raises(InvalidOutput, match="1 to 5 options, got 6"):
        check_submission(six, "stop", rules)
    with pytest.raises(InvalidOutput, match="truncated"):
        check_submission(portfolio(("A", 100)), "length", rules)


def test_single_allocation_rounds() -> None:
    rules = Rules(("QQQ", "TLT"), submission_format="single_allocation")
    ans = json.dumps({"selected_option_id": "TLT", "rationale": "rates"})
    assert dict(check_submission(ans, "stop", rules).holdings) == {"TLT": 100}
    legacy = json.dumps({"selected_option_id": "TLT", "selected_option_ids": ["TLT"],
                         "rationale": "x"})
    with pytest.raises(InvalidOutput, match="legacy"):
        check_submission(legacy, "stop", rules)


# ------------------------------------------------------------------------- schedule and plan
def test_tracks_fire_on_the_first_session_of_the_week_or_month() -> None:
    lo = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    hi = datetime(2027, 1, 31, tzinfo=UTC).timestamp()
    weekly = [datetime.fromtimestamp(t, UTC).date() for t in
              fire_times(TrackTrigger("weekly", "open-30m"), lo, hi)]
    monthly = [datetime.fromtimestamp(t, UTC).date() for t in
               fire_times(TrackTrigger("monthly", "close-1m"), lo, hi)]
    assert monthly == [date(2026, 11, 2), date(2026, 12, 1), date(2027, 1, 4)]  # Jan 1 closed
    assert weekly[:4] == [date(2026, 11, 2), date(2026, 11, 9), date(2026, 11, 16),
                          date(2026, 11, 23)]
    assert date(2026, 11, 23) in weekly and date(2026, 11, 24) not in weekly
    assert date(2027, 1, 19) in weekly  # Monday Jan 18 is MLK day: Tuesday opens the week


def test_plan_weekly_and_monthly() -> None:
    freeze = datetime(2026, 11, 2, 14, 30, tzinfo=UTC).timestamp()  # Mon 09:30 ET
    w = plan_round("weekly", freeze, 3600.0)
    assert w.round_id == "weekly-2026-11-02"
    assert (w.start_day, w.end_day) == (date(2026, 11, 2), date(2026, 11, 9))
    m = plan_round("monthly", datetime(2026, 12, 31, 20, 59, tzinfo=UTC).timestamp(), 3600.0)
    assert m.start_day == date(2027, 1, 4)  # the deadline is after Dec 31's close
    assert m.end_day == date(2027, 2, 4)


def test_trailing_returns() -> None:
    closes = [(date(2026, 1, 1) + timedelta(days=i), 100.0 + i) for i in range(60)]
    r = trailing_returns(closes, date(2026, 3, 1))  # last close: day 59 = Mar 1
    assert r["7d"] == pytest.approx(159 / 152 - 1)
    assert r["30d"] == pytest.approx(159 / 129 - 1)
    assert r["6m"] is None and r["1y"] is None


# ------------------------------------------------------------------------- comparison sets
def _round(rid: str, track: str, scored: dict[str, float], status: str = "resolved"
           ) -> dict[str, Any]:
    return {"round_id": rid, "track": track, "status": status, "results": [
        {"agent": a, "scored": True, "portfolio_return": r, "max_possible_return": 0.1,
         "vs_sp500": r - 0.01, "regret": 0.1 - r, "cost_usd": 0.0}
        for a, r in scored.items()]}


def test_comparison_set_counts_only_rounds_every_member_resolved() -> None:
    rounds = [_round(f"w{i}", "weekly", {"a": 0.02, "b": 0.05}) for i in range(5)]
    rounds.append(_round("w5", "weekly", {"a": 0.09}))  # b missed it: excluded for both
    rounds.append(_round("w6", "weekly", {"a": 0.5, "b": 0.5}, status="collected"))
    cs = comparison_set(rounds, "weekly", ["a", "b"])
    assert (cs["shared_rounds"], cs["qualified"], cs["excluded_rounds"]) == (5, False, ["w5"])
    assert [r["agent"] for r in cs["rows"]] == ["b", "a"]
    assert cs["rows"][0]["overall_score"] == pytest.approx(50.0)
    rounds.append(_round("w7", "weekly", {"a": 0.0, "b": 0.01}))
    cs = comparison_set(rounds, "weekly", ["a", "b"])
    assert (cs["shared_rounds"], cs["required"], cs["qualified"]) == (6, 6, True)
    monthly = [_round(f"m{i}", "monthly", {"a": 0.01, "b": 0.0}) for i in range(3)]
    cs = comparison_set(monthly, "monthly", ["a", "b"])
    assert (cs["shared_rounds"], cs["required"], cs["qualified"]) == (3, 3, True)
    assert comparison_set(monthly[:2], "monthly", ["a", "b"])["qualified"] is False


# ------------------------------------------------------------------------------ end to end
SESSIONS_FROM = date(2026, 10, 19)
GROWTH = {"SPY": 0.005, "QQQ": 0.01, "TLT": 0.0, "GLD": -0.005}
BASE = {"SPY": 400.0, "QQQ": 300.0, "TLT": 90.0, "GLD": 180.0}


def _recording(path: Path) -> list[date]:
    """Oct 19 - Nov 13 2026: every price constant through a session, session k's price
    ``base * (1 + g)^k`` (so each close is known exactly)."""
    from daemon.timing.nyse import get_nyse_calendar

    cal = get_nyse_calendar()
    sessions, evs = [], []
    d = SESSIONS_FROM
    while d <= date(2026, 11, 13):
        b = cal.session_bounds(d)
        if b is not None:
            k = len(sessions)
            sessions.append(d)
            t = b[0].timestamp() + 60
            while t < b[1].timestamp():
                for a in sorted(BASE):
                    px = round(BASE[a] * (1 + GROWTH[a]) ** k, 6)
                    evs.append(PriceEvent(ts=t, recv_ts=t, market="equity", asset=a, price=px))
                t += 600
        d += timedelta(days=1)
    start = datetime(2026, 10, 19, tzinfo=UTC).timestamp()
    end = datetime(2026, 11, 13, 22, tzinfo=UTC).timestamp()
    with RecordingWriter(path, RecordingHeader(start=start, end=end,
                                               equities=tuple(sorted(BASE)))) as w:
        for e in evs:
            w.write(e)
    return sessions


class CapitalModel(FakeLlmServer):
    """Answers by model: gpt-4o-mini a fixed valid portfolio; beta always 95%; gamma garbage
    first, then all gold."""

    async def _respond(self, body: dict[str, Any]) -> Any:
        model = body["model"]
        if model == "gpt-4o-mini":
            self.push(ok(portfolio(("QQQ", 60), ("TLT", 25), ("CASH", 15))))
        elif model == "beta":
            self.push(ok(portfolio(("QQQ", 60), ("TLT", 35))))
        else:
            n = sum(1 for r in self.requests if r["model"] == "gamma")
            self.push(ok("let me think" if n % 3 == 1 else portfolio(("GLD", 100))))
        return await super()._respond(body)


def _config(tmp: Path, api_base: str, repeats: int = 2) -> dict[str, Any]:
    (tmp / "briefing.md").write_text("Facts: rates unchanged (2026-10-15).\n")
    llm = {"kind": "llm", "protocol": "capitalbench", "api_base": api_base, "timeout": 10,
           "api_key_env": "CB_TEST_KEY", "max_attempts": 2, "markets": ["equity"]}
    return {
        "markets": {"equity": {"assets": ["SPY", "QQQ", "TLT", "GLD"]},
                    "polymarket": {"enabled": False}},
        "agents": [{"id": "bh", "kind": "buy_and_hold", "markets": ["equity"]},
                   {"id": "alpha", "model": "openai/gpt-4o-mini", **llm},
                   {"id": "beta", "model": "openai/beta", **llm},
                   {"id": "gamma", "model": "openai/gamma", **llm}],
        "capitalbench": {
            "rounds_dir": str(tmp / "rounds"), "briefing": str(tmp / "briefing.md"),
            "options": [{"id": "QQQ", "name": "Invesco QQQ", "asset_class": "us_equity"},
                        {"id": "TLT", "name": "iShares 20+ Year Treasury", "asset_class": "bond"},
                        {"id": "GLD", "name": "SPDR Gold", "asset_class": "commodity"},
                        {"id": "CASH", "name": "Cash", "asset_class": "cash"}],
            "tracks": [{"kind": "weekly", "consistency_repeats": repeats}],
            "show_retrospective": True,  # a replay's rounds are built from history
        },
    }


async def test_a_round_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.app.cli import main
    from daemon.app.replay import replay
    from daemon.store.reports import leaderboard
    from scoring.board.text import to_table

    monkeypatch.setenv("CB_TEST_KEY", "sk-test")
    sessions = _recording(tmp_path / "rec.jsonl")
    async with CapitalModel() as model:
        cfg = parse_config(_config(tmp_path, model.api_base))
        await replay(tmp_path / "rec.jsonl", cfg, tmp_path / "cb.db", progress=False)
        calls = len(model.requests)
    # 4 weekly rounds (Oct 19, 26, Nov 2, 9) x 3 agents x (1 official + 2 repeats);
    # beta makes 2 calls per ask, gamma 2 on every third-numbered ask.
    rdir = tmp_path / "rounds" / "weekly-2026-11-02"
    assert sorted(p.name for p in (tmp_path / "rounds").iterdir()) == [
        "weekly-2026-10-19", "weekly-2026-10-26", "weekly-2026-11-02", "weekly-2026-11-09"]
    # 1. frozen package: verified, the exact prompt sent, the mechanical table
    assert verify_round(rdir) == []
    prompt = (rdir / "prompt.md").read_text()
    assert model.prompts()[0] == (tmp_path / "rounds" / "weekly-2026-10-19" /
                                  "prompt.md").read_text()
    assert "Facts: rates unchanged" in prompt and "- TLT: iShares 20+ Year Treasury" in prompt
    manifest = yaml.safe_load((rdir / "manifest.yaml").read_text())
    assert manifest["start_day"] == "2026-11-02" and manifest["end_day"] == "2026-11-09"
    assert (manifest["max_holdings"], manifest["increment_pct"]) == (5, 5)
    table = (rdir / "market_data" / "universe_trailing_returns.csv").read_text().splitlines()
    qqq = dict(zip(table[0].split(","), table[1].split(","), strict=True))
    assert float(qqq["return_7d"]) == pytest.approx(1.01 ** 5 - 1, abs=1e-6)
    assert qqq["return_6m"] == ""  # not enough history: n/a
    # 2. submissions: every raw answer kept, invalid ones unscored
    con = sqlite3.connect(tmp_path / "cb.db")
    rows = con.execute("SELECT agent, run_id, replicate, outcome, raw_responses_json, calls_json"
                       " FROM capital_submissions WHERE round_id='weekly-2026-11-02'"
                       " ORDER BY agent, run_id, replicate").fetchall()
    assert [(a, r, k, o) for a, r, k, o, _, _ in rows] == [
        ("alpha", "consistency", 1, "ok"), ("alpha", "consistency", 2, "ok"),
        ("alpha", "official", 1, "ok"),
        ("beta", "consistency", 1, "invalid"), ("beta", "consistency", 2, "invalid"),
        ("beta", "official", 1, "invalid"),
        ("gamma", "consistency", 1, "ok"), ("gamma", "consistency", 2, "ok"),
        ("gamma", "official", 1, "ok")]
    beta = rows[5]
    assert len(json.loads(beta[4])) == 2 and "95%" in json.loads(beta[5])[-1]["error"]
    assert calls == sum(len(json.loads(r[0])) for r in con.execute(
        "SELECT raw_responses_json FROM capital_submissions"))
    beta_file = json.loads((rdir / "runs" / "official" / "beta.json").read_text())
    assert (beta_file["outcome"], beta_file["is_official_score"],
            beta_file["replicate_count"]) == ("invalid", True, 1)
    rep2 = json.loads((rdir / "runs" / "consistency" / "alpha-2.json").read_text())
    assert (rep2["is_official_score"], rep2["replicate_index"], rep2["replicate_count"]) == \
        (False, 2, 2)
    statuses = dict(con.execute("SELECT round_id, status FROM capital_rounds"))
    assert statuses["weekly-2026-11-09"] == "started"  # start close stored; ends Nov 16
    con.close()
    # 3. scored from the stored closes
    board = leaderboard(tmp_path / "cb.db")
    rounds = {r["round_id"]: r for r in board["capitalbench"]["rounds"]}
    r = rounds["weekly-2026-11-02"]
    k = sessions.index(date(2026, 11, 9)) - sessions.index(date(2026, 11, 2))
    q, s, g = 1.01 ** k - 1, 1.005 ** k - 1, 0.995 ** k - 1
    res = {i["agent"]: i for i in r["results"]}
    assert set(res) == {"alpha", "gamma"} and r["not_scored"][0]["agent"] == "beta"
    a = res["alpha"]
    assert a["portfolio_return"] == pytest.approx(0.6 * q, rel=1e-6)
    assert a["sp500_return"] == pytest.approx(s, rel=1e-6)
    assert a["vs_sp500"] == pytest.approx(0.6 * q - s, rel=1e-6)
    assert a["max_possible_return"] == pytest.approx(q, rel=1e-6)
    assert a["score"] == pytest.approx(60.0)
    assert a["regret"] == pytest.approx(0.4 * q, rel=1e-6)
    assert a["cost_usd"] > 0 and a["vs_sp500_per_dollar"] == pytest.approx(
        (0.6 * q - s) / a["cost_usd"], rel=1e-6)
    assert res["gamma"]["portfolio_return"] == pytest.approx(g, rel=1e-6)
    assert res["gamma"]["vs_sp500_per_dollar"] is None  # a model without a known price
    assert rounds["weekly-2026-11-09"]["results"][0].get("scored") is None  # pending
    results_file = json.loads((rdir / "runs" / "official" / "results.json").read_text())
    assert {i["agent"] for i in results_file["results"]} == {"alpha", "gamma"}
    # 4. rounds frozen in a replay are built from history: marked retrospective in their
    # manifest, and off the public board unless asked for (issue 29, point 5).
    assert manifest["retrospective"] is True and r["retrospective"] is True
    from agents.capitalbench.scores import capitalbench_section, to_text

    con = sqlite3.connect(tmp_path / "cb.db")
    hidden = capitalbench_section(con, retrospective=False)
    shown = capitalbench_section(con)  # the run's config asks for them
    con.close()
    assert hidden is not None and hidden["rounds"] == [] and hidden["retrospective_hidden"] == 4
    assert "4 retrospective round(s) built from history not shown" in to_text(hidden)
    assert shown is not None and len(shown["rounds"]) == 4 and shown["retrospective_hidden"] == 0
    assert "(retrospective: built from history)" in to_text(shown)
    # 4. comparison set of the roster (every capitalbench agent): beta never valid -> none shared
    cs = board["capitalbench"]["comparison_sets"]["weekly"]
    assert cs["roster"] == ["alpha", "beta", "gamma"] and cs["shared_rounds"] == 0
    hist = {h["agent"]: h for h in board["capitalbench"]["history"]["weekly"]}
    assert hist["alpha"]["rounds"] == 3 and hist["alpha"]["overall_score"] == pytest.approx(60)
    cons = {c["agent"]: c for c in board["capitalbench"]["consistency"]["weekly"]}
    assert cons["alpha"]["consistency"] == pytest.approx(1.0)
    text = to_table(board)
    assert "CapitalBench rounds" in text and "not qualified: 0 of 6" in text
    # verify-round: a changed input is caught, exit 1, one line
    out, err = io.StringIO(), io.StringIO()
    assert verify_command(str(rdir), out, err) == 0 and "ok (6 files" in out.getvalue()
    (rdir / "briefing.md").write_text("Facts: rates cut.\n")
    assert main(["verify-round", str(rdir)]) == 1
    assert verify_round(rdir) == [f"{rdir / 'briefing.md'}: changed (SHA-256 differs from"
                                  " hashes.json)"]


async def test_a_changed_round_is_never_overwritten(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay over an existing identical round re-uses it; a different briefing is refused
    before any model is called."""
    from daemon.app.replay import replay

    monkeypatch.setenv("CB_TEST_KEY", "sk-test")
    _recording(tmp_path / "rec.jsonl")
    end = datetime(2026, 10, 20, tzinfo=UTC).timestamp()
    async with CapitalModel() as model:
        cfg = parse_config(_config(tmp_path, model.api_base, repeats=0))
        await replay(tmp_path / "rec.jsonl", cfg, tmp_path / "a.db", progress=False,
                     window=(None, end))
        first = len(model.requests)
        await replay(tmp_path / "rec.jsonl", cfg, tmp_path / "b.db", progress=False,
                     window=(None, end))
        second = len(model.requests)
        assert first >= 4 and second - first >= 4  # the same round again: re-used, asked
        (tmp_path / "briefing.md").write_text("another briefing\n")
        await replay(tmp_path / "rec.jsonl", cfg, tmp_path / "c.db", progress=False,
                     window=(None, end))
        assert len(model.requests) == second  # refused: no model called
    con = sqlite3.connect(tmp_path / "c.db")
    assert con.execute("SELECT COUNT(*) FROM capital_rounds").fetchone()[0] == 0
    con.close()


def test_config_problems_are_one_line_each(tmp_path: Path) -> None:
    data = _config(tmp_path, "http://127.0.0.1:1/v1")
    data["capitalbench"]["options"].append({"id": "IWM", "name": "Russell", "asset_class": "x"})
    data["capitalbench"]["roster"] = ["alpha", "bh"]
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert e.value.problems == [
        "(top level): capitalbench.options: not in markets.equity.assets (no prices): IWM;"
        " capitalbench.roster: not a capitalbench agent: bh"]
    data = _config(tmp_path, "http://127.0.0.1:1/v1")
    data["capitalbench"]["increment_pct"] = 7
    with pytest.raises(ConfigError, match="increment_pct must divide 100"):
        parse_config(data)


class SampleModel(FakeLlmServer):
    """model_a holds AAPL and MSFT half and half; model_b all JNJ."""

    async def _respond(self, body: dict[str, Any]) -> Any:
        if body["model"] == "qwen2.5-7b-instruct":
            self.push(ok(portfolio(("AAPL", 50), ("MSFT", 50))))
        else:
            self.push(ok(portfolio(("JNJ", 100))))
        return await super()._respond(body)


async def test_example_config_replays_the_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    from daemon.app.cli import main
    from daemon.app.replay import replay

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "examples" / "capitalbench.toml").read_text())
    data["capitalbench"]["rounds_dir"] = str(tmp_path / "rounds")
    data["capitalbench"]["briefing"] = str(root / "examples" / "capitalbench-briefing.md")
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    end = datetime(2026, 11, 3, tzinfo=UTC).timestamp()
    async with SampleModel() as model:
        for a in data["agents"][:2]:
            a["api_base"] = model.api_base
        await replay(root / "examples" / "sample.jsonl.gz", parse_config(data),
                     tmp_path / "cb.db", progress=False, window=(None, end))
    assert len(model.requests) == 3 * 2 * 3 + 2  # 3 weekly rounds x 2 models x 3 + monthly
    rounds = sorted(p.name for p in (tmp_path / "rounds").iterdir())
    assert rounds == ["monthly-2026-11-02", "weekly-2026-10-19", "weekly-2026-10-26",
                      "weekly-2026-11-02"]
    assert main(["verify-round", str(tmp_path / "rounds" / "weekly-2026-10-19")]) == 0
    assert "ok (6 files match hashes.json)" in capsys.readouterr().out
    assert main(["report", "--db", str(tmp_path / "cb.db"), "--json"]) == 0
    board = json.loads(capsys.readouterr().out)
    first = board["capitalbench"]["rounds"][1]
    assert first["round_id"] == "weekly-2026-10-19" and first["status"] == "resolved"
    assert first["sp500_return"] is None  # no SPY in the sample
    res = {r["agent"]: r for r in first["results"]}
    assert res["model_a"]["score"] is not None or first["max_possible_return"] <= 0
    assert res["model_a"]["vs_sp500"] is None and res["model_b"]["regret"] >= 0
    assert main(["report", "--db", str(tmp_path / "cb.db")]) == 0
    text = capsys.readouterr().out
    assert "comparison set, weekly: roster model_a, model_b; 2 shared resolved round(s)" in text
    # The missing benchmark is named, not a bare n/a.
    assert "S&P 500 (SPY) n/a (no SPY closes stored)" in text


async def test_api_serves_the_rounds(tmp_path: Path) -> None:
    from tests.web.test_metrics_http import start_daemon, stop_daemon

    d = await start_daemon(tmp_path)
    try:
        status, body = await d.get("/api/capitalbench")
        assert status == 200 and body["rounds"] == []
        con = sqlite3.connect(tmp_path / "d.db")
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "options.json").write_text(json.dumps(
            {"options": [{"id": "QQQ"}, {"id": "CASH"}]}))
        con.execute(
            "INSERT INTO capital_rounds VALUES('weekly-x', 'weekly', 0, 1, '2026-11-02', 2,"
            " '2026-11-09', 3, ?, '{\"benchmark\": \"SPY\"}', 'h', 'resolved',"
            " '{\"QQQ\": 100, \"SPY\": 10}', '{\"QQQ\": 110, \"SPY\": 10.5}',"
            " NULL, NULL)",  # no chain, no trailing closes
            (str(tmp_path / "r"),))
        con.execute(
            "INSERT INTO capital_submissions VALUES('weekly-x', 'official', 'm', 1, 1, 1, 'x',"
            " 'ok', '', '{\"QQQ\": 50, \"CASH\": 50}', '{}', '[]', '[]', 1, 1, 0.5, 'v', NULL)")
        con.commit()
        con.close()
        status, body = await d.get("/api/capitalbench")
        res = body["rounds"][0]["results"][0]
        assert status == 200 and res["portfolio_return"] == pytest.approx(0.05)
        assert res["score"] == pytest.approx(50.0) and res["vs_sp500"] == pytest.approx(0.0)
        assert res["vs_sp500_per_dollar"] == pytest.approx(0.0)
    finally:
        await stop_daemon(d)


async def test_capitalbench_agents_never_trade_even_after_a_reload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.engine.engine import Engine
    from daemon.store.store import Store
    from daemon.timing.clock import SimClock

    monkeypatch.setenv("CB_TEST_KEY", "sk-test")
    data = _config(tmp_path, "http://127.0.0.1:9/v1")
    store = await Store.open(tmp_path / "e.db")
    try:
        eng = Engine(parse_config(data), clock=SimClock(0.0), store=store)
        eng.build_agents()
        assert set(eng.slots["equity"]) == {"bh"}
        assert eng.capital is not None and set(eng.capital.agents) == {"alpha", "beta", "gamma"}
        assert [j for j, _ in eng.triggers() if j.startswith("capital:")] == ["capital:weekly"]
        data["agents"][1]["max_attempts"] = 3
        await eng.reload(parse_config(data))
        assert set(eng.slots["equity"]) == {"bh"}
        assert eng.capital.agents["alpha"].cfg.max_attempts == 3
        assert eng.capital.agents["alpha"].cfg.temperature == 0.0
    finally:
        await store.close()


async def test_the_daily_budget_pauses_further_calls(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.app.replay import replay

    monkeypatch.setenv("CB_TEST_KEY", "sk-test")
    _recording(tmp_path / "rec.jsonl")
    async with CapitalModel() as model:
        data = _config(tmp_path, model.api_base, repeats=2)
        data["agents"][1]["daily_budget_tokens"] = 100  # one call is 120 tokens
        await replay(tmp_path / "rec.jsonl", parse_config(data), tmp_path / "a.db",
                     progress=False, window=(None, datetime(2026, 10, 20, tzinfo=UTC).timestamp()))
    con = sqlite3.connect(tmp_path / "a.db")
    got = con.execute("SELECT run_id, replicate, outcome, tokens_in + tokens_out FROM"
                      " capital_submissions WHERE agent='alpha' ORDER BY official DESC,"
                      " replicate").fetchall()
    con.close()
    assert got == [("official", 1, "ok", 120), ("consistency", 1, "paused", 0),
                   ("consistency", 2, "paused", 0)]


@requires_pg
async def test_example_config_replays_into_a_shared_store_as_into_sqlite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19: CapitalBench's rounds and submissions go into PostgreSQL (the submissions of
    agents this process owns: the ownership trigger checks them) and report as from SQLite."""
    import tomllib

    from daemon.app.replay import replay
    from daemon.store.reports import leaderboard
    from scoring.board.text import to_json

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "examples" / "capitalbench.toml").read_text())
    data["capitalbench"]["briefing"] = str(root / "examples" / "capitalbench-briefing.md")
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    end = datetime(2026, 10, 27, tzinfo=UTC).timestamp()
    reports = []
    with pg_database() as url:
        for db in (str(tmp_path / "cb.db"), url):
            shutil.rmtree(tmp_path / "rounds", ignore_errors=True)  # the reports name it
            data["capitalbench"]["rounds_dir"] = str(tmp_path / "rounds")
            async with SampleModel() as model:
                for a in data["agents"][:2]:
                    a["api_base"] = model.api_base
                await replay(root / "examples" / "sample.jsonl.gz", parse_config(data), db,
                             progress=False, window=(None, end))
            reports.append(to_json(leaderboard(db)))
    board = json.loads(reports[1])
    assert [(r["round_id"], r["status"]) for r in board["capitalbench"]["rounds"]] == [
        ("weekly-2026-10-19", "resolved"), ("weekly-2026-10-26", "started")]
    assert reports[1] == reports[0]


async def test_an_evaluator_answers_rounds_for_its_own_capitalbench_agents_only(
        tmp_path: Path) -> None:
    """Split roles: the CapitalBench agents an evaluator owns (``--agents``) are the only ones it
    asks and claims, so two evaluators never submit for one agent."""
    import tomllib

    from daemon.engine.engine import Engine
    from daemon.store.store import Store
    from daemon.timing.clock import SimClock

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "examples" / "capitalbench.toml").read_text())
    data["capitalbench"]["rounds_dir"] = str(tmp_path / "rounds")
    data["capitalbench"]["briefing"] = str(root / "examples" / "capitalbench-briefing.md")
    cfg = parse_config(data)
    store = await Store.open(":memory:")
    try:
        eng = Engine(cfg, clock=SimClock(0.0), store=store)
        eng.build_agents(["model_b", "buy_and_hold"])
        assert eng.capital is not None and set(eng.capital.agents) == {"model_b"}
        assert eng._capital_agent_ids(cfg) == ["model_b"]
        every = Engine(cfg, clock=SimClock(0.0), store=store)
        every.build_agents()
        assert every.capital is not None and set(every.capital.agents) == {"model_a", "model_b"}
    finally:
        await store.close()
