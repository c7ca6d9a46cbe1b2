"""CapitalBench rounds replayed from the stored rows (issue 32).

A replay runs the season's own :class:`~agents.capitalbench.runner.CapitalRunner`: each stored
round (``capital_rounds``) is frozen again at its stored freeze time (the track's job fires at
the stored times, not at the calendar's: the stored round is the one to repeat), into a
directory of the replay's own (the live round package is never touched), from the briefing and
the closes the replayed market state holds; every ``capitalbench`` agent is its own protocol
code whose model calls are answered, in order, by the calls stored with its submission
(``capital_submissions.calls_json``, :func:`agents.prompt_replay.answer_from_store`), each
answer checked again by the protocol; a submission ends at its stored time (a late one is late
again; a round the live run froze but stopped before storing its submissions is frozen only);
the start and end closes are stored again at the daily marks. No price is fetched: with
``[capitalbench] adjusted_closes``, a round is frozen again from the trailing table's closes the
live freeze fetched, stored with it (``trailing_json``, schema v16; a round stored before has
none and is not frozen again: a named difference), and its adjusted start and end closes are
the stored ones. :func:`first_capital_difference` names the first replayed round or submission
that is not the stored one.

The briefing: a round frozen since schema v17 names its briefing's SHA-256 in its manifest
(``briefing_sha256``) and the store holds that briefing's text (``capital_briefings``). When
the configured ``briefing`` file is missing or is another text, the round is frozen again from
the stored one, written into the replay's scratch directory (``<rounds_dir>/.briefings/<sha256>/
<name>``) and the round code pointed at it; so a bundle replays on a machine without the file.
A round frozen before v17 (no hash in its manifest, its briefing not stored) needs the file:
without it the replay is refused in one line (:func:`capital_refusal`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from apscheduler.triggers.base import BaseTrigger

from agents.capitalbench.config import CapitalBenchConfig
from agents.capitalbench.runner import trailing_from_json
from agents.prompt_replay import StoredCall, answer_from_store
from daemon.app.bundle_replay.rows import first_row_difference
from daemon.app.replay import ReplayError
from daemon.store.dbfile import connect_readonly
from daemon.store.integrity.capital import round_briefing
from daemon.timing.clock import SimClock, utc_datetime
from feeds.daily_bars import HistoryError

__all__ = ["StoredCapital", "capital_refusal", "first_capital_difference", "replay_capital",
           "stored_capital"]

JobCallback = Callable[[str, float, bool], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Submission:
    ts: float
    calls: tuple[StoredCall, ...]


@dataclass(frozen=True, slots=True)
class StoredCapital:
    """The stored CapitalBench rounds and submissions a replay repeats."""

    rounds: Mapping[tuple[str, float], str] = field(default_factory=dict)
    """(track, freeze time) -> round id."""
    submissions: Mapping[tuple[str, str], tuple[_Submission, ...]] = field(default_factory=dict)
    """(agent, round id) -> its submissions in the order they were asked."""
    trailing: Mapping[str, str] = field(default_factory=dict)
    """Round id -> the trailing table's closes its live freeze fetched (``trailing_json``)."""
    closes: Mapping[tuple[str, str], tuple[str | None, str | None]] = field(
        default_factory=dict)
    """(start day, end day) -> the stored start and end closes (JSON) of a round."""
    briefings: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """SHA-256 -> (file name, text) of every stored briefing (``capital_briefings``, v17)."""
    round_briefings: Mapping[str, str] = field(default_factory=dict)
    """Round id -> the SHA-256 of the briefing its manifest names (a round since v17)."""


def capital_refusal(cap: CapitalBenchConfig, stored: StoredCapital | None = None
                    ) -> str | None:
    """Return why the stored CapitalBench rounds of ``cap`` cannot be replayed here (None:
    they can): a round whose briefing is neither in the configured file nor in the store.

    Without ``stored`` nothing is known of the rounds: None (:func:`replay_capital` asks again
    with them before any round is replayed, and raises :class:`~daemon.app.replay.ReplayError`).
    """
    if stored is None or Path(cap.briefing).is_file():
        return None
    for rid in sorted(set(stored.rounds.values())):
        if stored.round_briefings.get(rid) not in stored.briefings:
            return (f"the CapitalBench briefing {cap.briefing} is not here and the store holds "
                    f"no copy of the briefing round {rid} was frozen from (a store written "
                    "before schema v17 keeps only its SHA-256)")
    return None


def _has(con: sqlite3.Connection, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                       (table,)).fetchone() is not None


def stored_capital(con: sqlite3.Connection) -> StoredCapital:
    """Return the stored CapitalBench rounds and submissions (empty: none)."""
    if not _has(con, "capital_rounds"):
        return StoredCapital()
    rounds = {(str(t), float(f)): str(r) for r, t, f in con.execute(
        "SELECT round_id, track, frozen_ts FROM capital_rounds")}
    subs: dict[tuple[str, str], list[_Submission]] = {}
    for rid, agent, ts, calls_json in con.execute(
            "SELECT round_id, agent, ts, calls_json FROM capital_submissions ORDER BY rowid"):
        calls = tuple(_call(c) for c in json.loads(calls_json or "[]"))
        subs.setdefault((agent, rid), []).append(_Submission(float(ts), calls))
    cols = {r[1] for r in con.execute("PRAGMA table_info(capital_rounds)")}
    trailing = {} if "trailing_json" not in cols else {str(r): str(t) for r, t in con.execute(
        "SELECT round_id, trailing_json FROM capital_rounds WHERE trailing_json IS NOT NULL")}
    closes = {(str(a), str(b)): (s, e) for a, b, s, e in con.execute(
        "SELECT start_day, end_day, start_prices_json, end_prices_json FROM capital_rounds")}
    briefings = {} if not _has(con, "capital_briefings") else {
        str(h): (str(n), str(t)) for h, n, t in con.execute(
            "SELECT sha256, name, text FROM capital_briefings ORDER BY id")}
    named = {str(r): sha for r, m in con.execute(
        "SELECT round_id, manifest_json FROM capital_rounds")
        if (sha := round_briefing(m)) is not None}
    return StoredCapital(rounds, {k: tuple(v) for k, v in subs.items()}, trailing, closes,
                         briefings, named)


def _briefing_path(own: str, stored: StoredCapital, rid: str | None, scratch: Path) -> str:
    """Return the briefing file round ``rid`` is frozen again from: the configured one
    (``own``) unless it is missing or another text than the one the round's manifest names and
    the store holds, which is then written under ``scratch`` (once)."""
    sha = None if rid is None else stored.round_briefings.get(rid)
    if sha is None or sha not in stored.briefings:
        return own  # a round stored before v17 (or its briefing not stored: named later)
    try:
        if hashlib.sha256(Path(own).read_bytes()).hexdigest() == sha:
            return own
    except OSError:
        pass
    name, text = stored.briefings[sha]
    base = Path(name).name
    path = scratch / ".briefings" / sha / (base if base not in ("", ".", "..") else
                                           "briefing.md")
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    return str(path)


_USAGE = ("ts", "model", "tokens_in", "tokens_out", "latency_s", "cost_usd")


def _call(c: Mapping[str, Any]) -> StoredCall:
    return StoredCall(int(c.get("attempt", 0)), c.get("step"), c.get("input_sha256"),
                      c.get("raw_response"), c.get("error"), c.get("finish_reason"),
                      c.get("outcome"), {k: c[k] for k in _USAGE if k in c})


class _StoredTimes(BaseTrigger):  # type: ignore[misc]
    """Fire at the given times only."""

    def __init__(self, times: list[float]) -> None:
        self.times = sorted(times)

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        """Return the first time after ``previous_fire_time`` (none: at or after ``now``)."""
        after = previous_fire_time.timestamp() if previous_fire_time else None
        for t in self.times:
            if (t > after) if after is not None else (t >= now.timestamp()):
                return utc_datetime(t)
        return None


def replay_capital(engine: Any, sched: Any, job: JobCallback, clock: SimClock,
                   stored: StoredCapital, rounds_dir: Path, live: bool) -> None:
    """Make ``engine``'s CapitalBench runner repeat the stored rounds (see the module doc).

    ``sched``/``job``: the replay's scheduler and job callback; ``live``: the stored run was
    live (its rounds were not built from history).
    """
    runner = engine.capital
    if runner is None:
        return
    why = capital_refusal(runner.cap, stored)
    if why:  # before any round (the caller's refusal, given the stored rows, comes earlier)
        raise ReplayError(why)
    runner.retrospective = not live
    own_briefing = runner.cap.briefing
    runner.cap = runner.cap.model_copy(update={"rounds_dir": str(rounds_dir)})
    current: list[str | None] = [None]
    used: dict[tuple[str, str], int] = {}
    own_build = runner._build

    async def stored_closes(first: date, last: date, assets: Any) -> dict[str, dict[date, float]]:
        """Answer the fetch of a round's adjusted start and end closes with the stored ones."""
        start, end = stored.closes.get((first.isoformat(), last.isoformat()), (None, None))
        if start is None or end is None:
            raise HistoryError("a replay fetches no prices (the round's closes are not stored)")
        s, e = json.loads(start), json.loads(end)
        return {a: {first: float(s[a]), last: float(e[a])} for a in assets if a in s and a in e}

    async def stored_trailing(plan: Any) -> dict[str, list[tuple[date, float]]] | None:
        """Return the trailing table's closes stored with the round (never fetched)."""
        if not runner.live_adjusted:
            return None
        got = stored.trailing.get(plan.round_id)
        if got is None:
            raise HistoryError("a replay fetches no prices (the round's trailing closes are "
                               "not stored: it was stored before schema v16)")
        return trailing_from_json(got)

    runner.adjusted = stored_closes
    runner.trailing_closes = stored_trailing

    def build(acfg: Any) -> Any:
        agent = own_build(acfg)
        _answer_stored(agent, stored, current, used, clock)
        return agent

    runner._build = build
    runner.reload()

    own_collect = runner.collect

    async def collect(plan: Any, rdir: Path) -> None:
        if runner.agents and not any(rid == plan.round_id for _, rid in stored.submissions):
            return  # the live run stopped before the round's submissions were stored
        await own_collect(plan, rdir)

    runner.collect = collect

    async def on_job(job_id: str, fire_ts: float, missed: bool) -> None:
        current[0] = rid = stored.rounds.get((job_id.split(":", 1)[1], fire_ts))
        # frozen from the briefing it was (the stored text when the file is not it), its
        # manifest naming the briefing's hash as the stored one does (not before v17)
        runner.cap = runner.cap.model_copy(update={
            "rounds_dir": str(rounds_dir),
            "briefing": _briefing_path(own_briefing, stored, rid, rounds_dir)})
        runner.name_briefing = rid is None or rid in stored.round_briefings
        try:
            await job(job_id, fire_ts, missed)
        finally:
            current[0] = None

    for job_id, _ in runner.triggers():
        track = job_id.split(":", 1)[1]
        sched.remove_job(job_id)
        sched.add_job(job_id, _StoredTimes([t for (k, t) in stored.rounds if k == track]),
                      on_job, start=clock.now())


def _answer_stored(agent: Any, stored: StoredCapital, current: list[str | None],
                   used: dict[tuple[str, str], int], clock: Any) -> None:
    """Make ``agent`` answer each submission from the calls stored with it, in order, and
    end it at its stored time."""
    got: list[_Submission | None] = [None]
    answer_from_store(agent, lambda _: None if got[0] is None else got[0].calls)
    own = agent.submit

    async def submit(*args: Any) -> Any:
        key = (agent.id, current[0] or "")
        k = used.get(key, 0)
        used[key] = k + 1
        subs = stored.submissions.get(key, ())
        got[0] = subs[k] if k < len(subs) else None
        res = await own(*args)
        if got[0] is not None:
            clock.at = got[0].ts  # the round's submissions end when they did live
        return res

    agent.submit = submit


_ROUND = ("track", "frozen_ts", "deadline_ts", "start_day", "start_ts", "end_day", "end_ts",
          "manifest_json", "hashes_sha256", "status", "start_prices_json", "end_prices_json",
          "trailing_json")
_SUBMISSION = ("official", "ts", "model", "outcome", "reason", "holdings_json",
               "submission_json", "raw_responses_json", "calls_json", "tokens_in", "tokens_out",
               "cost_usd", "template_version")


def _rows(con: sqlite3.Connection, table: str, key: str, columns: tuple[str, ...]
          ) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    if not _has(con, table):
        return {}
    n = key.count(",") + 1
    have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
    cols = ", ".join(c if c in have else "NULL" for c in columns)  # a store of an older schema
    return {tuple(r[:n]): tuple(r[n:]) for r in con.execute(
        f"SELECT {key}, {cols} FROM {table} ORDER BY rowid")}


def _from_difference(x: str, y: str, width: int = 60) -> tuple[str, str]:
    """Return ``x`` and ``y`` from a little before their first differing character (a long
    JSON column differs deep inside)."""
    i = next((k for k, (a, b) in enumerate(zip(x, y, strict=False)) if a != b),
             min(len(x), len(y)))
    lo = max(0, i - 20)
    pre = "..." if lo else ""
    return pre + x[lo:lo + width], pre + y[lo:lo + width]


def first_capital_difference(src: str, out: str) -> str | None:
    """Return the first CapitalBench round or submission of ``out`` that is not the stored one
    of ``src``, in one line (None: every one is)."""
    a, b = connect_readonly(Path(src)), connect_readonly(Path(out))
    try:
        for table, key, columns in (
                ("capital_rounds", "round_id", _ROUND),
                ("capital_submissions", "round_id, agent, run_id, replicate", _SUBMISSION)):
            want, got = _rows(a, table, key, columns), _rows(b, table, key, columns)
            found = first_row_difference(
                want, got, columns, [*want, *(k for k in got if k not in want)],
                lambda k: (f"CapitalBench round {k[0]}" if len(k) == 1 else
                           f"CapitalBench submission of {k[1]} in round {k[0]} ({k[2]} {k[3]})"),
                _from_difference)
            if found:
                return found
        return None
    finally:
        a.close()
        b.close()
