"""The ``paperarena`` command line.

Every error caused by bad input (config, arguments, files) prints one clear line and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from daemon.config import Config, ConfigError, load_config

EXIT_USAGE = 2


def package_version() -> str:
    """Return the installed paperarena version."""
    try:
        return version("paperarena")
    except PackageNotFoundError:
        return "0+unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _speed(value: str) -> float | None:
    if value == "max":
        return None
    try:
        f = float(value)
    except ValueError:
        msg = f"invalid speed {value!r}: use 'max' or a factor"
        raise argparse.ArgumentTypeError(msg) from None
    if not f > 0:
        raise argparse.ArgumentTypeError("speed factor must be > 0")
    return f


def _when(value: str) -> float:
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {value!r}: use ISO 8601, e.g. 2026-11-02 or 2026-11-02T15:00Z"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of every subcommand."""
    p = _Parser(prog="paperarena", description="Live paper-trading evaluation of trading agents.")
    p.add_argument("--version", action="version", version=f"paperarena {package_version()}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run the daemon on the live clock")
    run.add_argument("--config", "-c", help="TOML config file (default: built-in defaults)")
    run.add_argument("--db", help="SQLite database (overrides store.path)")
    run.add_argument("--role", choices=["all", "feeds", "evaluator"], default="all",
                     help="process role when split over MQTT (default: all)")
    run.add_argument("--duration", type=float, default=None,
                     help="stop after this many seconds (default: run until signalled)")

    rp = sub.add_parser("replay", help="replay a recording through the whole pipeline")
    rp.add_argument("recording")
    rp.add_argument("--config", "-c")
    rp.add_argument("--db", default=None, help="SQLite database (default: replay.db)")
    rp.add_argument("--speed", type=_speed, default=None, metavar="max|FACTOR",
                    help="'max' (default) or a speed-up factor over recorded time")
    rp.add_argument("--start", type=_when, default=None, help="replay from this time (ISO 8601)")
    rp.add_argument("--end", type=_when, default=None, help="replay until this time (ISO 8601)")
    rp.add_argument("--no-progress", action="store_true", help="no progress bar")

    rep = sub.add_parser("report", help="print the leaderboard")
    rep.add_argument("--db", default="paperarena.db")
    rep.add_argument("--json", action="store_true", help="JSON instead of a table")
    rep.add_argument("--start", type=_when, default=None)
    rep.add_argument("--end", type=_when, default=None)

    cc = sub.add_parser("check-config", help="validate a config file")
    cc.add_argument("file")

    rec = sub.add_parser("record", help="record live market data to a replayable file")
    rec.add_argument("--out", "-o", required=True, help="recording file (.jsonl or .jsonl.gz)")
    rec.add_argument("--duration", type=float, default=None, help="seconds (default: until signal)")
    rec.add_argument("--config", "-c")
    rec.add_argument("--db", default=None, help="SQLite database (default: <out>.db)")

    pr = sub.add_parser("probe", help="re-issue a stored decision input K times (LLM consistency)")
    pr.add_argument("--agent", required=True)
    pr.add_argument("--repeats", type=int, default=5)
    pr.add_argument("--db", default="paperarena.db")
    pr.add_argument("--config", "-c")
    return p


def _load(path: str | None) -> Config:
    return load_config(path)


def _fail(msg: str) -> int:
    sys.stderr.write(f"paperarena: {msg}\n")
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the paperarena command line."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "check-config":
            cfg = _load(args.file)
            sys.stdout.write(f"{args.file}: ok ({len(cfg.agents)} agents, markets: "
                             f"{', '.join(cfg.enabled_markets()) or 'none'})\n")
            return 0
        if args.cmd == "report":
            return _report(args)
        if args.cmd == "replay":
            return _replay(args)
        if args.cmd == "run":
            return _run(args)
        if args.cmd == "record":
            return _record(args)
        if args.cmd == "probe":
            return _probe(args)
    except ConfigError as exc:
        for line in exc.problems:
            sys.stderr.write(f"{exc.source}: {line}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return _fail(f"unknown command {args.cmd}")


def _report(args: argparse.Namespace) -> int:
    from scoring.leaderboard import leaderboard, to_json, to_table

    try:
        board = leaderboard(args.db, window=(args.start, args.end))
    except FileNotFoundError as exc:
        return _fail(str(exc))
    sys.stdout.write(to_json(board) if args.json else to_table(board))
    return 0


def _replay(args: argparse.Namespace) -> int:
    from daemon.logs import configure_logging
    from daemon.replay import ReplayError, replay
    from daemon.store import StoreLockedError
    from feeds.recording import RecordingError

    cfg = _load(args.config)
    configure_logging(cfg.logging.level, cfg.logging.format)
    db = args.db or "replay.db"
    if not Path(args.recording).exists():
        return _fail(f"{args.recording}: no such recording")
    try:
        from daemon.components import default_components

        summary = asyncio.run(replay(args.recording, cfg, db, speed=args.speed,
                                     progress=False if args.no_progress else None,
                                     window=(args.start, args.end), version=package_version(),
                                     components=default_components(cfg, mode="replay")))
    except (ReplayError, RecordingError, StoreLockedError) as exc:
        return _fail(str(exc))
    sys.stderr.write(
        f"replayed {summary.events} events (resumed at {summary.resumed_from}), "
        f"{summary.decisions} scheduled jobs, {summary.events_per_s:,.0f} events/s into {db}\n"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from daemon.live import run_live
    from daemon.logs import configure_logging
    from daemon.store import StoreLockedError

    cfg = _load(args.config)
    configure_logging(cfg.logging.level, cfg.logging.format)
    try:
        return asyncio.run(run_live(cfg, db=args.db, role=args.role, duration=args.duration,
                                    version=package_version()))
    except StoreLockedError as exc:
        return _fail(str(exc))


def _record(args: argparse.Namespace) -> int:
    from daemon.live import run_live
    from daemon.logs import configure_logging
    from daemon.record import recorder_components
    from daemon.store import StoreLockedError

    cfg = _load(args.config)
    configure_logging(cfg.logging.level, cfg.logging.format)
    cfg = cfg.model_copy(update={"agents": ()})  # record market data only
    try:
        return asyncio.run(run_live(cfg, db=args.db or f"{args.out}.db", duration=args.duration,
                                    version=package_version(),
                                    components=recorder_components(args.out, cfg)))
    except StoreLockedError as exc:
        return _fail(str(exc))


def _probe(args: argparse.Namespace) -> int:
    import json

    if args.repeats < 2:
        return _fail("--repeats must be at least 2")
    if not Path(args.db).exists():
        return _fail(f"{args.db}: no such database")
    from agents.probe import ProbeError, run_probe_command

    try:
        result = asyncio.run(run_probe_command(args.config, args.db, args.agent, args.repeats))
    except (ProbeError, LookupError, ValueError) as exc:
        return _fail(str(exc))
    sys.stdout.write(json.dumps(result, sort_keys=True, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
