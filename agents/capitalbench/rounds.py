"""CapitalBench round packages: plan, freeze (files + SHA-256 hashes) and verify a round directory.

A round lives in ``<rounds_dir>/<round_id>/``. Everything a model sees is written there before
any model is called, then hashed into ``hashes.json`` (SHA-256 of every input file, by relative
path); :func:`verify_round` checks a directory against it later (``paperarena verify-round``).
Run artifacts (answers, results) go under ``runs/`` and are not inputs. Neither side follows a
link inside the round: entries are examined with lstat and opened with ``O_NOFOLLOW``.

Input files: ``manifest.yaml`` (rules and dates; a daemon's round also the briefing's SHA-256,
``briefing_sha256``), ``prompt.md`` (the exact text sent),
``briefing.md`` (the operator's neutral briefing, copied byte for byte), ``options.yaml``,
``submission_schema.json`` and ``market_data/universe_trailing_returns.csv`` (7 d, 30 d, 6 m,
1 y returns from daily closes of completed sessions before the freeze). Rounds frozen before the
manifest and options were YAML hold ``manifest.json`` and ``options.json``; :func:`load_manifest`
and :func:`read_data` read both.

Every file is a function of the config, the briefing, the stored closes and the (simulated)
freeze time only: a replay writes the same bytes, so it re-uses an existing identical round and
refuses (:class:`RoundConflict`) to overwrite a different one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo

import yaml  # type: ignore[import-untyped]

from agents.capitalbench import nofollow
from agents.capitalbench.config import CASH, CapitalBenchConfig
from daemon.timing.nyse import NyseCalendar, get_nyse_calendar
from daemon.timing.triggers import NyseSessionTrigger

NY = ZoneInfo("America/New_York")
HASHES = "hashes.json"
MANIFEST = "manifest.yaml"
OPTIONS = "options.yaml"
#: The JSON names of rounds frozen before the manifest and options were YAML (read only).
LEGACY_MANIFEST = "manifest.json"
LEGACY_OPTIONS = "options.json"
RUNS = "runs"
TABLE = "market_data/universe_trailing_returns.csv"
#: Trailing-return windows: (label, calendar days).
WINDOWS: tuple[tuple[str, int], ...] = (("7d", 7), ("30d", 30), ("6m", 182), ("1y", 365))


class RoundConflict(RuntimeError):
    """A round directory already holds different inputs (never overwritten); one line."""


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """When a round is frozen, collected, started and ended."""

    round_id: str
    track: str
    freeze_ts: float
    deadline_ts: float
    start_day: date
    start_ts: float
    end_day: date
    end_ts: float


class TrackTrigger(NyseSessionTrigger):
    """Fire at a session time on the first NYSE session of each week or month only."""

    def __init__(self, kind: str, at: str, calendar: NyseCalendar | None = None) -> None:
        """Fire at ``at`` (``open-30m``...) on the first session of each ``kind`` period."""
        super().__init__((at,), calendar=calendar)
        self.kind = kind

    def fires_on(self, day: date) -> list[datetime]:
        """Return the fire times on ``day`` if it is its period's first session."""
        cal = self.calendar
        if cal.session_bounds(day) is None:
            return []
        first = day.replace(day=1) if self.kind == "monthly" else day - timedelta(day.weekday())
        d = first
        while d < day:
            if cal.session_bounds(d) is not None:
                return []
            d += timedelta(days=1)
        return super().fires_on(day)

    def __str__(self) -> str:
        """Describe the trigger."""
        return f"capitalbench[{self.kind} {self.times[0]}]"


def _add_month(d: date) -> date:
    y, m = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
    for day in range(d.day, 27, -1):
        try:
            return date(y, m, day)
        except ValueError:
            continue
    return date(y, m, min(d.day, 28))


def plan_round(track: str, freeze_ts: float, collect_window: float,
               calendar: NyseCalendar | None = None) -> RoundPlan:
    """Return the round frozen at ``freeze_ts``: start = close of the first NYSE session ending
    after the deadline; end = close of the last session on or before start + 7 days (weekly)
    or + 1 calendar month (monthly)."""
    cal = calendar or get_nyse_calendar()
    deadline = freeze_ts + collect_window
    day = datetime.fromtimestamp(deadline, NY).date()
    for _ in range(30):
        b = cal.session_bounds(day)
        if b is not None and b[1].timestamp() >= deadline:
            break
        day += timedelta(days=1)
    else:  # pragma: no cover - the calendar has sessions every week
        raise ValueError("no NYSE session within 30 days of the deadline")
    start_day, start_ts = day, b[1].timestamp()
    target = _add_month(start_day) if track == "monthly" else start_day + timedelta(days=7)
    end = target
    while (eb := cal.session_bounds(end)) is None:
        end -= timedelta(days=1)
    rid = f"{track}-{datetime.fromtimestamp(freeze_ts, NY).date().isoformat()}"
    return RoundPlan(rid, track, freeze_ts, deadline, start_day, start_ts, end,
                     eb[1].timestamp())


def trailing_returns(closes: Sequence[tuple[date, float]], asof: date
                     ) -> dict[str, float | None]:
    """Return 7 d, 30 d, 6 m (182 d) and 1 y (365 d) returns from daily ``closes`` (oldest
    first): the last close on or before ``asof`` over the last close on or before ``asof`` minus
    the window (``None`` when no close is that old)."""
    def at(d: date) -> float | None:
        best = None
        for day, price in closes:
            if day <= d:
                best = price
            else:
                break
        return best

    p1 = at(asof)
    out: dict[str, float | None] = {}
    for label, days in WINDOWS:
        p0 = at(asof - timedelta(days=days))
        ok = p0 is not None and p1 is not None and p0 > 0 and math.isfinite(p1 / p0)
        out[label] = (p1 / p0 - 1.0) if ok and p0 and p1 is not None else None
    return out


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.2f}%"


def _table(cap: CapitalBenchConfig, rets: Mapping[str, Mapping[str, float | None]]
           ) -> tuple[str, str]:
    """Return (CSV file text, prompt text) of the trailing-return table, in option order."""
    labels = [w[0] for w in WINDOWS]
    csv = ["option_id," + ",".join(f"return_{w}" for w in labels)]
    lines = [f"{'option':<12}" + "".join(f"{w:>10}" for w in labels)]
    for o in cap.options:
        r = rets.get(o.id, {})
        csv.append(o.id + "," + ",".join("" if r.get(w) is None else f"{r[w]:.6f}"
                                         for w in labels))
        lines.append(f"{o.id:<12}" + "".join(f"{_fmt_pct(r.get(w)):>10}" for w in labels))
    return "\n".join(csv) + "\n", "\n".join(lines)


def _rules_text(cap: CapitalBenchConfig) -> tuple[str, str]:
    if cap.submission_format == "single_allocation":
        return ("- Choose exactly one option; it receives 100% of the capital.",
                'Reply with a single JSON object and nothing else:\n'
                '{"selected_option_id": "<option id>", "rationale": "<a few sentences>",'
                ' "confidence": <0 to 1>, "key_risks": ["<risk>", ...]}')
    return (f"- Hold 1 to {cap.max_holdings} options, each weight a multiple of"
            f" {cap.increment_pct}% and above 0, summing to exactly 100%.",
            'Reply with a single JSON object and nothing else:\n'
            '{"portfolio": [{"option_id": "<option id>", "weight_pct": <whole percent>}, ...],'
            ' "portfolio_rationale": "<a few sentences>", "confidence": <0 to 1>,'
            ' "key_risks": ["<risk>", ...]}')


def _schema(cap: CapitalBenchConfig) -> dict[str, Any]:
    ids = list(cap.option_ids)
    extras = {"confidence": {"type": "number", "minimum": 0, "maximum": 1},
              "key_risks": {"type": "array", "items": {"type": "string"}}}
    if cap.submission_format == "single_allocation":
        return {"type": "object", "required": ["selected_option_id", "rationale"],
                "properties": {"selected_option_id": {"enum": ids},
                               "rationale": {"type": "string", "minLength": 1}, **extras}}
    item = {"type": "object", "required": ["option_id", "weight_pct"],
            "properties": {"option_id": {"enum": ids},
                           "weight_pct": {"type": "integer", "minimum": cap.increment_pct,
                                          "maximum": 100, "multipleOf": cap.increment_pct}}}
    return {"type": "object", "required": ["portfolio", "portfolio_rationale"],
            "properties": {"portfolio": {"type": "array", "minItems": 1,
                                         "maxItems": cap.max_holdings, "items": item},
                           "portfolio_rationale": {"type": "string", "minLength": 1},
                           **extras},
            "x-total-weight-pct": 100}


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def dump_yaml(obj: Any) -> str:
    """Return ``obj`` as block YAML with sorted keys (the same bytes for the same object)."""
    text: str = yaml.safe_dump(obj, sort_keys=True, allow_unicode=True,
                               default_flow_style=False, width=100)
    return text


def read_data(path: Path) -> Any:
    """Return the object of a round's YAML (``.yaml``) or older JSON file."""
    text = path.read_text("utf-8")
    if path.suffix in (".yaml", ".yml"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    return json.loads(text)


def round_files(plan: RoundPlan, cap: CapitalBenchConfig, briefing: bytes,
                closes: Mapping[str, Sequence[tuple[date, float]]], template: str,
                prompt_version: str, *, retrospective: bool = False,
                adjusted: bool = False, name_briefing: bool = False) -> dict[str, bytes]:
    """Return relative path -> bytes of every input file of the round (hashes excluded).

    ``retrospective``: the round is built from history (frozen in a replay, after its window
    was known): its manifest says ``"retrospective": true`` (a live round's has no such key).
    ``adjusted``: the closes are Yahoo's dividend-adjusted ones, fetched live (the manifest's
    ``price_basis`` says so; otherwise it is unchanged). ``name_briefing``: the manifest names
    the briefing's SHA-256 (``briefing_sha256``: the daemon's rounds since schema v17, whose
    store holds the briefing's text under that hash; a round frozen before has no such key).
    """
    freeze_day = datetime.fromtimestamp(plan.freeze_ts, NY).date()
    asof = freeze_day - timedelta(days=1)
    rets = {o: trailing_returns(closes.get(o, ()), asof) for o in cap.tickers}
    csv, table = _table(cap, rets)
    rules, answer = _rules_text(cap)
    span = "7 calendar days" if plan.track == "weekly" else "1 calendar month"
    start_rule = (f"close of the first NYSE session ending after the deadline"
                  f" ({plan.start_day.isoformat()})")
    end_rule = (f"close of the last NYSE session on or before the start session + {span}"
                f" ({plan.end_day.isoformat()})")
    options = [o.facts() for o in cap.options]
    prompt = string.Template(template).substitute(
        round_id=plan.round_id, track=plan.track, deadline=_utc(plan.deadline_ts),
        start_rule=start_rule, end_rule=end_rule, format_rules=rules,
        briefing=briefing.decode("utf-8").strip(),
        options="\n".join(o.line() for o in cap.options),
        returns=table, table_asof=asof.isoformat(), answer_format=answer)
    manifest = {
        "round_id": plan.round_id, "track": plan.track,
        "methodology_version": cap.methodology_version,
        "universe_version": cap.universe_version, "prompt_version": prompt_version,
        "frozen_ts": plan.freeze_ts, "frozen_utc": _utc(plan.freeze_ts),
        "deadline_ts": plan.deadline_ts, "deadline_utc": _utc(plan.deadline_ts),
        "start_rule": start_rule, "start_day": plan.start_day.isoformat(),
        "start_ts": plan.start_ts, "end_rule": end_rule, "end_day": plan.end_day.isoformat(),
        "end_ts": plan.end_ts,
        "price_basis": ("dividend-adjusted daily close (Yahoo adjclose), start and end fetched"
                        " together after the end session" if adjusted
                        else "daily close (last regular-session price)"),
        "submission_format": cap.submission_format, "max_holdings": cap.max_holdings,
        "increment_pct": cap.increment_pct, "total_pct": 100,
        "cash_allowed": CASH in cap.option_ids, "benchmark": cap.benchmark,
        "options_file": OPTIONS, "option_ids": list(cap.option_ids),
        "trailing_returns_asof": asof.isoformat(),
    }
    if retrospective:
        manifest["retrospective"] = True
    if name_briefing:
        manifest["briefing_sha256"] = sha256(briefing)
    return {
        MANIFEST: dump_yaml(manifest).encode("utf-8"),
        "prompt.md": prompt.encode("utf-8"),
        "briefing.md": briefing,
        OPTIONS: dump_yaml({"universe_version": cap.universe_version,
                            "options": options}).encode("utf-8"),
        "submission_schema.json": _dump(_schema(cap)).encode(),
        TABLE: csv.encode(),
    }


def sha256(data: bytes) -> str:
    """Return the hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def freeze_round(root: Path, files: Mapping[str, bytes], round_id: str) -> Path:
    """Write ``files`` and ``hashes.json`` into ``root/round_id`` (before any model call).

    An existing round with exactly these inputs is re-used (a replay, a restart); one with other
    inputs raises :class:`RoundConflict`, never overwritten. ``root`` (the configured
    ``rounds_dir``) may be a symlink; nothing below it is followed: a symlink, hard link, FIFO,
    device or socket already at the round's path or inside it is refused (one line), and every
    file is written to a new temporary file renamed into place, never through an existing entry.
    """
    rdir = root / round_id
    hashes = _dump({"algorithm": "sha256",
                    "files": {p: sha256(b) for p, b in sorted(files.items())}}).encode()
    root.mkdir(parents=True, exist_ok=True)
    fd = _open_round(rdir, create=True)
    try:
        if nofollow.lstat_at(fd, HASHES) is not None:
            problems, _ = _verify_at(fd, rdir)
            if problems:
                raise RoundConflict(f"round {round_id}: {problems[0]}")
            if nofollow.read_at(fd, HASHES) != hashes and not _legacy_same(fd, files):
                raise RoundConflict(f"round {round_id}: {rdir} holds other inputs;"
                                    " not overwritten")
            return rdir
        tree = nofollow.Tree()
        nofollow.walk(fd, "", tree)  # left by an interrupted freeze: plain files and folders only
        if tree.refused:
            rel, kind = min(tree.refused.items())
            raise RoundConflict(f"round {round_id}: {rdir / rel}: {kind}; not written")
        for rel, data in files.items():
            nofollow.write_at(fd, rel, data)
        nofollow.write_at(fd, HASHES, hashes)  # last: a round without it was never frozen
    finally:
        os.close(fd)
    return rdir


def _legacy_same(fd: int, files: Mapping[str, bytes]) -> bool:
    """Return whether the intact round at ``fd`` is an older JSON-format freeze of ``files``:
    its ``manifest.json`` and ``options.json`` hold the objects of the new YAML files (the
    manifest's ``options_file`` aside) and every other file has the same bytes."""
    listed = json.loads(nofollow.read_at(fd, HASHES).decode("utf-8"))["files"]
    names = {MANIFEST: LEGACY_MANIFEST, OPTIONS: LEGACY_OPTIONS}
    if set(listed) != {names.get(rel, rel) for rel in files}:
        return False
    for rel, data in files.items():
        old = nofollow.read_at(fd, names.get(rel, rel))
        if rel not in names:
            if old != data:
                return False
            continue
        new_obj, old_obj = yaml.safe_load(data.decode("utf-8")), json.loads(old.decode("utf-8"))
        if rel == MANIFEST:
            new_obj.pop("options_file", None)
            old_obj.pop("options_file", None)
        if new_obj != old_obj:
            return False
    return True


def write_round_file(rdir: Path, rel: str, data: bytes) -> None:
    """Write ``data`` to ``rdir/rel`` (a run file) without following any link below the rounds
    directory: a new temporary file renamed into place (``OSError`` when it cannot be;
    :class:`RoundConflict` when the round's own path is a symlink or not a directory)."""
    fd = _open_round(rdir, create=False)
    try:
        nofollow.write_at(fd, rel, data)
    finally:
        os.close(fd)


def _open_round(rdir: Path, create: bool) -> int:
    """Open the round directory: its parent (the rounds directory, or the path the user named)
    followed, the round itself never (a symlink there: :class:`RoundConflict`)."""
    pfd = os.open(rdir.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(rdir.name, dir_fd=pfd)
        try:
            return os.open(rdir.name, nofollow.DIR_FLAGS, dir_fd=pfd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            kind = nofollow.describe(pfd, rdir.name, "not a directory")
            raise RoundConflict(f"round {rdir.name}: {rdir}: {kind}; not written") from None
    finally:
        os.close(pfd)


def verify_round(rdir: Path) -> list[str]:
    """Return one line per problem of ``rdir`` against its ``hashes.json`` (empty: intact).

    ``rdir`` itself may be a symlink (the path a user names); nothing inside it is followed or
    opened other than as a regular file: symlinks, hard links (a file with more than one link),
    FIFOs, devices and sockets are refused by name and kind, before the changed, missing and
    unlisted files."""
    return _verify(rdir)[0]


def _verify(rdir: Path) -> tuple[list[str], int]:
    """Return the problems of ``rdir`` and the number of files ``hashes.json`` lists."""
    try:
        fd = os.open(rdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return [f"{rdir}: not a directory"], 0
    try:
        return _verify_at(fd, rdir)
    finally:
        os.close(fd)


def _verify_at(fd: int, rdir: Path) -> tuple[list[str], int]:
    hp = rdir / HASHES
    tree = nofollow.Tree()
    nofollow.walk(fd, "", tree)
    out = [f"{rdir / rel}: {kind}" for rel, kind in sorted(tree.refused.items())]
    out += [f"{rdir / rel}: unreadable: {why}" for rel, why in sorted(tree.unreadable.items())]
    if HASHES in tree.refused:
        return out, 0
    try:
        listed = json.loads(nofollow.read_at(fd, HASHES).decode("utf-8"))["files"]
        if not isinstance(listed, dict):
            raise TypeError("files is not an object")
    except FileNotFoundError:
        return [*out, f"{hp}: missing (round never frozen)"], 0
    except nofollow.Refused as exc:
        return [*out, f"{hp}: {exc.kind}"], 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [*out, f"{hp}: unreadable: {exc}"], 0
    names = set()
    for rel, digest in sorted(listed.items()):
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            out.append(f"{rdir}: {HASHES} lists a path outside the round: {rel}")
            continue
        key = "/".join(parts)
        names.add(key)
        if any("/".join(parts[:i]) in tree.refused for i in range(1, len(parts) + 1)):
            continue  # already named by its kind
        p = rdir / rel
        if key not in tree.files:
            out.append(f"{p}: missing")
            continue
        try:
            data = nofollow.read_at(fd, key)
        except nofollow.Refused as exc:
            out.append(f"{rdir / exc.where}: {exc.kind}")
            continue
        except (FileNotFoundError, NotADirectoryError):
            out.append(f"{p}: missing")
            continue
        except OSError as exc:
            out.append(f"{p}: unreadable: {exc.strerror or exc}")
            continue
        if sha256(data) != digest:
            out.append(f"{p}: changed (SHA-256 differs from {HASHES})")
    for rel in sorted(tree.files):
        if rel != HASHES and rel not in names and not rel.startswith(RUNS + "/"):
            out.append(f"{rdir / rel}: not listed in {HASHES}")
    return out, len(listed)


def load_manifest(rdir: Path) -> dict[str, Any]:
    """Return the round's manifest (``manifest.yaml``; an older round's ``manifest.json``)."""
    path = rdir / MANIFEST
    if not path.exists() and (rdir / LEGACY_MANIFEST).exists():
        path = rdir / LEGACY_MANIFEST
    data = read_data(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the manifest is not a mapping")
    return data


def verify_command(round_dir: str, out: TextIO, err: TextIO) -> int:
    """``paperarena verify-round DIR``: 0 and one ok line, or 1 and one line per problem."""
    problems, n = _verify(Path(round_dir))
    if problems:
        for line in problems:
            err.write(f"paperarena verify-round: {line}\n")
        return 1
    out.write(f"{round_dir}: ok ({n} files match {HASHES})\n")
    return 0
