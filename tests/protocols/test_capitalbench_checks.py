"""CapitalBench checks found by an outside verification: the report scores from the store alone
(whatever the working directory, with the round folder gone), and bad configs or answers get one
short line."""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.capitalbench.agent import Rules, check_submission
from agents.capitalbench.rounds import plan_round, round_files
from agents.capitalbench.scores import capitalbench_section
from agents.llm_output import InvalidOutput
from daemon.config.settings import ConfigError, load_config, parse_config
from daemon.store.schema import MIGRATIONS

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
    manifest = yaml.safe_load(files["manifest.yaml"])
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
         json.dumps(manifest), "0" * 64, "resolved",
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
    real = os.open

    def refuse(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == "prompt.md":
            raise PermissionError(13, "Permission denied")
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", refuse)
    assert verify_round(rdir) == [f"{rdir / 'prompt.md'}: unreadable: Permission denied"]


# -- verify-round never follows links (issue 26, point 6) ----------------------------------------

ROOT = Path(__file__).resolve().parents[2]
FREEZE = datetime(2026, 10, 19, 13, 30, tzinfo=UTC).timestamp()


def _package(tmp: Path) -> tuple[str, dict[str, bytes]]:
    """The round id and input files of a small weekly round (the config of ``_data``)."""
    cap = parse_config(_data(tmp)).capitalbench
    assert cap is not None
    plan = plan_round("weekly", FREEZE, 3600.0)
    return plan.round_id, round_files(plan, cap, b"Facts only.\n", {}, "$round_id\n$briefing\n",
                                      "v1")


def _frozen(tmp: Path) -> Path:
    """A frozen round package in ``tmp/rounds``, with an official run file (outside hashes)."""
    from agents.capitalbench.rounds import freeze_round, write_round_file

    rid, files = _package(tmp)
    rdir = freeze_round(tmp / "rounds", files, rid)
    write_round_file(rdir, "runs/official/a.json", b"{}\n")
    return rdir


def _verify_cli(rdir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    from daemon.app.cli import main

    code = main(["verify-round", str(rdir)])
    got = capsys.readouterr()
    return code, got.err.splitlines(), got.out


def _replace(p: Path) -> Path:
    p.unlink()
    return p


def _link_to_identical_copy(rdir: Path, tmp: Path) -> list[tuple[str, str]]:
    copy = tmp / "copy-of-briefing.md"
    copy.write_bytes((rdir / "briefing.md").read_bytes())
    _replace(rdir / "briefing.md").symlink_to(copy)
    return [("briefing.md", f"symlink to {copy}")]


def _link_to_etc_passwd(rdir: Path, tmp: Path) -> list[tuple[str, str]]:
    _replace(rdir / "briefing.md").symlink_to("/etc/passwd")
    return [("briefing.md", "symlink to /etc/passwd")]


def _dangling_links(rdir: Path, tmp: Path) -> list[tuple[str, str]]:
    _replace(rdir / "briefing.md").symlink_to(tmp / "gone.md")
    (rdir / "runs" / "official" / "b.json").symlink_to("../../../nowhere.json")
    return [("briefing.md", f"symlink to {tmp / 'gone.md'}"),
            ("runs/official/b.json", "symlink to ../../../nowhere.json")]


def _linked_sub_directory(rdir: Path, tmp: Path) -> list[tuple[str, str]]:
    (rdir / "market_data").rename(tmp / "market_data")  # the same bytes, moved out
    (rdir / "market_data").symlink_to(tmp / "market_data", target_is_directory=True)
    return [("market_data", f"symlink to {tmp / 'market_data'}")]  # not also "missing"


def _hard_link_outside(rdir: Path, tmp: Path) -> list[tuple[str, str]]:
    os.link(rdir / "market_data" / "universe_trailing_returns.csv", tmp / "outside.csv")
    return [("market_data/universe_trailing_returns.csv", "hard link (2 links)")]


def _socket(rdir: Path, tmp: Path) -> list[tuple[str, str]]:
    import contextlib
    import socket

    with contextlib.chdir(rdir), socket.socket(socket.AF_UNIX) as s:
        s.bind("sock")  # relative: a tmp path may be longer than sun_path allows
    return [("sock", "socket")]


@pytest.mark.parametrize("tamper", [_link_to_identical_copy, _link_to_etc_passwd,
                                    _dangling_links, _linked_sub_directory, _hard_link_outside,
                                    _socket])
def test_verify_round_refuses_links_by_name_and_kind(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], tamper: Any) -> None:
    """Nothing in a round is followed: a symlink (even to identical bytes, to a directory, or
    dangling, under runs/ too), a hard link to a file elsewhere, a socket is named with its kind,
    one line each, exit 1; the files behind a refused entry are not reported again."""
    rdir = _frozen(tmp_path)
    assert _verify_cli(rdir, capsys) == (0, [], f"{rdir}: ok (6 files match hashes.json)\n")
    expected = tamper(rdir, tmp_path)
    code, err, out = _verify_cli(rdir, capsys)
    assert (code, out) == (1, "")
    assert err == [f"paperarena verify-round: {rdir / rel}: {kind}" for rel, kind in expected]


def test_verify_round_never_opens_a_fifo(tmp_path: Path) -> None:
    """A FIFO (a new entry, or in place of a listed file) is refused without being opened:
    opening it would wait for a writer forever. The command runs in a child process with a
    generous guard; it returns at once."""
    import subprocess
    import sys

    rdir = _frozen(tmp_path)
    os.mkfifo(rdir / "pipe")
    os.mkfifo(_replace(rdir / "briefing.md"))
    p = subprocess.run([sys.executable, "-m", "daemon.app.cli", "verify-round", str(rdir)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (1, "")
    assert p.stderr.splitlines() == [f"paperarena verify-round: {rdir / 'briefing.md'}: FIFO",
                                     f"paperarena verify-round: {rdir / 'pipe'}: FIFO"]


def test_verify_round_refuses_device_nodes(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Character and block devices are refused by kind (never opened)."""
    import stat

    if os.geteuid() != 0:
        pytest.skip("creating device nodes (os.mknod) needs root")
    rdir = _frozen(tmp_path)
    try:
        os.mknod(rdir / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(rdir / "market_data" / "disk", 0o600 | stat.S_IFBLK, os.makedev(7, 0))
    except PermissionError:
        pytest.skip("root without CAP_MKNOD here (container): cannot create device nodes")
    code, err, _ = _verify_cli(rdir, capsys)
    assert code == 1 and err == [
        f"paperarena verify-round: {rdir / 'market_data' / 'disk'}: block device",
        f"paperarena verify-round: {rdir / 'null'}: character device"]


def test_the_round_directory_itself_may_be_named_through_a_symlink(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The path on the command line is the user's choice and is followed (a symlinked rounds
    folder is common); only what is inside the round is never followed."""
    rdir = _frozen(tmp_path)
    alias = tmp_path / "latest"
    alias.symlink_to(rdir, target_is_directory=True)
    assert _verify_cli(alias, capsys) == (0, [], f"{alias}: ok (6 files match hashes.json)\n")
    _replace(rdir / "briefing.md").symlink_to("/etc/passwd")
    code, err, _ = _verify_cli(alias, capsys)
    assert code == 1 and err == [
        f"paperarena verify-round: {alias / 'briefing.md'}: symlink to /etc/passwd"]


@pytest.mark.parametrize("swap", ["symlink", "linked directory", "fifo"])
def test_a_link_swapped_in_after_the_check_is_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str) -> None:
    """The contents are read with O_NOFOLLOW (every path component) and O_NONBLOCK: a link or
    FIFO put in place between the lstat walk and the read is refused, not followed or waited
    on."""
    import threading

    from agents.capitalbench import nofollow, rounds

    rdir = _frozen(tmp_path)
    real_walk = nofollow.walk
    table = rdir / "market_data"
    copy = tmp_path / "copy"
    copy.write_bytes((rdir / "briefing.md").read_bytes())

    def walk_then_swap(fd: int, prefix: str, tree: Any, depth: int = 0) -> None:
        real_walk(fd, prefix, tree, depth)
        if prefix == "" and not copy.with_suffix(".done").exists():
            copy.with_suffix(".done").touch()
            if swap == "symlink":
                _replace(rdir / "briefing.md").symlink_to(copy)
            elif swap == "linked directory":
                table.rename(tmp_path / "md")
                table.symlink_to(tmp_path / "md", target_is_directory=True)
            else:
                os.mkfifo(_replace(rdir / "briefing.md"))

    monkeypatch.setattr(nofollow, "walk", walk_then_swap)
    done, hung = threading.Event(), []

    def guard() -> None:  # a blocked open of the FIFO is released after 60 s, and noted
        if not done.wait(60) and swap == "fifo":
            hung.append(True)
            fd = os.open(rdir / "briefing.md", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)

    t = threading.Thread(target=guard, daemon=True)
    t.start()
    try:
        problems = rounds.verify_round(rdir)
    finally:
        done.set()
        t.join()
    assert not hung
    assert problems == {
        "symlink": [f"{rdir / 'briefing.md'}: symlink to {copy}"],
        "linked directory": [f"{table}: symlink to {tmp_path / 'md'}"],
        "fifo": [f"{rdir / 'briefing.md'}: FIFO"],
    }[swap]


def _plant(rdir: Path, victim: Path, what: str) -> tuple[str, str]:
    """Put ``what`` in a round directory before it is frozen; return (relative path, kind)."""
    if what == "round":
        rdir.symlink_to(victim.parent, target_is_directory=True)
        return "", f"symlink to {victim.parent}"
    rdir.mkdir()
    if what == "file":
        (rdir / "briefing.md").symlink_to(victim)
        return "briefing.md", f"symlink to {victim}"
    if what == "dangling hashes":
        (rdir / "hashes.json").symlink_to(victim.parent / "hashes.json")
        return "hashes.json", f"symlink to {victim.parent / 'hashes.json'}"
    if what == "directory":
        (rdir / "market_data").symlink_to(victim.parent, target_is_directory=True)
        return "market_data", f"symlink to {victim.parent}"
    if what == "hard link":
        os.link(victim, rdir / "prompt.md")
        return "prompt.md", "hard link (2 links)"
    os.mkfifo(rdir / "prompt.md")
    return "prompt.md", "FIFO"


@pytest.mark.parametrize("what", ["round", "file", "dangling hashes", "directory", "hard link",
                                  "fifo"])
def test_freezing_never_writes_through_a_planted_entry(tmp_path: Path, what: str) -> None:
    """A symlink at the round's path or at one of its files or folders (dangling too), a hard
    link or a FIFO there is refused in one line before anything is written; nothing outside the
    round changes. Once it is removed the round is frozen and verifies."""
    from agents.capitalbench.rounds import RoundConflict, freeze_round, verify_round

    rid, files = _package(tmp_path)
    (tmp_path / "rounds").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.md"
    victim.write_bytes(b"keep\n")
    rdir = tmp_path / "rounds" / rid
    rel, kind = _plant(rdir, victim, what)
    with pytest.raises(RoundConflict) as e:
        freeze_round(tmp_path / "rounds", files, rid)
    where = rdir / rel if rel else rdir
    tail = "" if what == "dangling hashes" else "; not written"
    assert str(e.value) == f"round {rid}: {where}: {kind}{tail}"
    assert sorted(outside.iterdir()) == [victim] and victim.read_bytes() == b"keep\n"
    assert sorted((tmp_path / "rounds").iterdir()) == [rdir]
    (where if what == "round" else rdir / rel).unlink()
    assert freeze_round(tmp_path / "rounds", files, rid) == rdir
    assert verify_round(rdir) == [] and victim.read_bytes() == b"keep\n"


def test_run_files_are_never_written_through_links(tmp_path: Path) -> None:
    """Run and results files (written after the freeze) do not follow a symlinked runs/ folder,
    and replace a hard-linked file rather than writing into the other name."""
    from agents.capitalbench.rounds import write_round_file

    rdir = _frozen(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (rdir / "runs").rename(tmp_path / "runs-moved")
    (rdir / "runs").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError):
        write_round_file(rdir, "runs/official/results.json", b"new\n")
    assert list(outside.iterdir()) == []
    (rdir / "runs").unlink()
    (tmp_path / "runs-moved").rename(rdir / "runs")
    victim = outside / "victim.json"
    victim.write_bytes(b"keep\n")
    os.link(victim, rdir / "runs" / "official" / "results.json")
    write_round_file(rdir, "runs/official/results.json", b"new\n")
    assert victim.read_bytes() == b"keep\n"
    out = rdir / "runs" / "official" / "results.json"
    assert out.read_bytes() == b"new\n" and out.stat().st_nlink == 1
