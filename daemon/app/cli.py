"""The ``paperarena`` command line.

Every error caused by bad input (config, arguments, files) prints one clear line and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from daemon.app.signals import Stopped, run_stoppable
from daemon.config.settings import Config, ConfigError, load_config

EXIT_USAGE = 2


def package_version() -> str:
    """Return the installed paperarena version."""
    try:
        return version("paperarena")
    except PackageNotFoundError:
        return "0+unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
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


def _seconds(value: str) -> float:
    try:
        f = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds {value!r}") from None
    if not (math.isfinite(f) and f > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {value}")
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
    run.add_argument("--db", help="SQLite database or postgresql:// URL (overrides store.path"
                     " and store.url)")
    run.add_argument("--role", choices=["all", "feeds", "evaluator"], default="all",
                     help="process role when split over MQTT (default: all)")
    _keys_argument(run)
    run.add_argument("--duration", type=_seconds, default=None,
                     help="stop after this many seconds (default: run until signalled)")
    _role_arguments(run)

    rp = sub.add_parser("replay", help="replay a recording through the whole pipeline")
    rp.add_argument("recording")
    rp.add_argument("--config", "-c")
    rp.add_argument("--db", default=None,
                    help="SQLite database or postgresql:// URL (default: replay.db)")
    rp.add_argument("--speed", type=_speed, default=None, metavar="max|FACTOR",
                    help="'max' (default) or a speed-up factor over recorded time")
    rp.add_argument("--start", type=_when, default=None, help="replay from this time (ISO 8601)")
    rp.add_argument("--end", type=_when, default=None, help="replay until this time (ISO 8601)")
    rp.add_argument("--no-progress", action="store_true", help="no progress bar")
    _keys_argument(rp)
    rp.add_argument("--accept-damaged", action="store_true",
                    help="replay a cut recording up to its last whole event (default: exit 2)")

    rpub = sub.add_parser("replay-publish",
                          help="publish a recording over MQTT to replay-evaluate processes")
    rpub.add_argument("recording")
    rpub.add_argument("--config", "-c", help="TOML config file with an [mqtt] section")
    rpub.add_argument("--evaluators", type=int, default=1, metavar="N",
                      help="wait for N evaluators before streaming (default: 1)")
    rpub.add_argument("--window", type=int, default=500,
                      help="events in flight beyond the slowest evaluator (default: 500)")
    rpub.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                      help="how long to wait for the evaluators (default: 120)")
    rpub.add_argument("--process-id", default=None, help="MQTT process id (default: derived)")

    rev = sub.add_parser("replay-evaluate",
                         help="replay a recording received from replay-publish over MQTT")
    rev.add_argument("--config", "-c", help="TOML config file with an [mqtt] section")
    rev.add_argument("--db", default=None,
                     help="SQLite database or postgresql:// URL (default: replay.db)")
    rev.add_argument("--stall-timeout", type=float, default=30.0, metavar="SECONDS",
                     help="fail when missing events do not arrive in time (default: 30)")
    _keys_argument(rev)
    _role_arguments(rev)

    rep = sub.add_parser("report", help="print the leaderboard")
    rep.add_argument("--db", default="paperarena.db")
    rep.add_argument("--json", action="store_true", help="JSON instead of a table")
    rep.add_argument("--start", type=_when, default=None)
    rep.add_argument("--end", type=_when, default=None)
    rep.add_argument("--html", metavar="FILE", default=None,
                     help="also write a self-contained offline HTML report to FILE")
    rep.add_argument("--password-env", default=None, metavar="VAR",
                     help="for a postgresql:// --db: environment variable holding the password"
                     " (default: PGPASSWORD)")

    cc = sub.add_parser("check-config", help="validate a config file")
    cc.add_argument("file")
    _keys_argument(cc)

    rs = sub.add_parser("resume", help="resume an agent halted by a drawdown breach")
    rs.add_argument("--agent", required=True)
    rs.add_argument("--market", default=None, help="only this market (default: every market)")
    rs.add_argument("--config", "-c", help="config of the running daemon (for its HTTP address)")

    st = sub.add_parser("status", help="print the running daemon's state (from its HTTP API)")
    st.add_argument("--config", "-c", help="config of the running daemon (for its HTTP address)")
    st.add_argument("--url", default=None, help="the daemon's base URL instead, e.g. "
                    "http://127.0.0.1:9464")
    st.add_argument("--json", action="store_true", help="print /api/status as JSON")

    sg = sub.add_parser("stress-gate", help="PortBench's global stress gate over the stores of "
                        "several replayed stress windows")
    sg.add_argument("dbs", nargs="+", metavar="DB", help="the stores of the stress windows")

    bk = sub.add_parser("backup", help="consistent online copy of the database (daemon may run)")
    bk.add_argument("--out", "-o", required=True, help="backup file to write")
    bk.add_argument("--db", default="paperarena.db")
    bk.add_argument("--no-verify", action="store_true", help="skip PRAGMA integrity_check")

    ex = sub.add_parser("export", help="export decisions, fills and equity to CSV or Parquet")
    ex.add_argument("--db", default="paperarena.db")
    ex.add_argument("--out", "-o", required=True, help="output directory")
    ex.add_argument("--format", choices=["csv", "parquet"], default="csv")
    ex.add_argument("--what", default="decisions,fills,equity",
                    help="comma-separated tables (default: decisions,fills,equity)")

    rec = sub.add_parser("record", help="record live market data to a replayable file")
    rec.add_argument("--out", "-o", required=True, help="recording file (.jsonl or .jsonl.gz)")
    rec.add_argument("--duration", type=_seconds, default=None,
                     help="seconds (default: until signal)")
    rec.add_argument("--config", "-c")
    rec.add_argument("--db", default=None, help="SQLite database (default: <out>.db)")

    hist = sub.add_parser("build-recording",
                          help="build a recording from historical daily bars (Yahoo chart)")
    hist.add_argument("--tickers", required=True, help="comma-separated, e.g. AAPL,MSFT")
    hist.add_argument("--start", required=True, help="first day, YYYY-MM-DD")
    hist.add_argument("--end", required=True, help="last day (inclusive), YYYY-MM-DD")
    hist.add_argument("--out", "-o", required=True, help="recording file (.jsonl or .jsonl.gz)")
    hist.add_argument("--config", "-c", help="config whose sources.equity.yahoo.chart_url is used")

    vr = sub.add_parser("verify-round",
                        help="check a CapitalBench round directory against its hashes.json")
    vr.add_argument("round_dir", help="rounds/<round_id>")
    mg = sub.add_parser("migrate", help="copy a SQLite store into a shared PostgreSQL store")
    mg.add_argument("--from", dest="source", required=True, metavar="SQLITE",
                    help="the SQLite database to copy (read only)")
    mg.add_argument("--to", dest="target", required=True, metavar="URL",
                    help="postgresql://user@host:5432/db (password: --password-env)")
    mg.add_argument("--scope", default=None,
                    help="scope (process) to copy into (default: migrated-<file name>)")
    mg.add_argument("--password-env", default=None,
                    help="environment variable holding the password (default: PGPASSWORD)")

    pr = sub.add_parser("probe", help="re-issue a stored decision input K times (LLM consistency)")
    pr.add_argument("--agent", required=True)
    pr.add_argument("--repeats", type=int, default=5)
    pr.add_argument("--db", default="paperarena.db")
    pr.add_argument("--config", "-c")
    ss = sub.add_parser("stage-scores", help="print PortBench's stage scores of a store")
    ss.add_argument("--db", required=True)
    ss.add_argument("--horizon", type=int, default=5, help="daily closes after a decision")
    ss.add_argument("--recompute", action="store_true",
                    help="compute every score from the store now, not the stored ones")
    af = sub.add_parser("alphaforge-instability",
                        help="repeat AlphaForgeBench strategy generations on a frozen input")
    af.add_argument("--config", "-c", required=True,
                    help="config whose alphaforgebench agents are the models")
    af.add_argument("--recording", required=True, help="recording giving the frozen daily bars")
    af.add_argument("--db", default="paperarena.db", help="database the result is stored in")
    af.add_argument("--repeats", type=int, default=5, help="generations per model (default 5)")
    af.add_argument("--temperatures", default="0,0.7", help="comma-separated (default 0,0.7)")
    af.add_argument("--sessions", type=int, default=None, help="only the last N daily bars")
    return p


def _keys_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-missing-keys", action="store_true",
                        help="start although an LLM agent's api_key_env variable is unset "
                             "(its decisions then fail)")


def _role_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", default=None, metavar="A,B",
                        help="agents this evaluator owns (default: [evaluator] agents, else all)")
    parser.add_argument("--process-id", default=None,
                        help="stable MQTT process id (default: role + hash of host and db)")


def _load(path: str | None, *, rounds: bool = False) -> Config:
    """Load the config; ``rounds``: a command that may freeze CapitalBench rounds (its briefing
    must be readable from the working directory)."""
    cfg = load_config(path)
    if rounds and cfg.capitalbench is not None:
        from agents.capitalbench.config import briefing_problems

        problems = briefing_problems(cfg.capitalbench)
        if problems:
            raise ConfigError(str(path), problems)
    return cfg


def _fail(msg: str) -> int:
    sys.stderr.write(f"paperarena: {msg}\n")
    return EXIT_USAGE


def _keys_problem(cfg: Config, args: argparse.Namespace) -> str | None:
    """Return one line naming every unset provider key variable, unless allowed."""
    from daemon.config.settings import missing_api_keys, missing_keys_line

    if getattr(args, "allow_missing_keys", False) or getattr(args, "role", "all") == "feeds":
        return None
    missing = missing_api_keys(cfg, os.environ)
    return missing_keys_line(missing) if missing else None


def _window_problem(args: argparse.Namespace) -> str | None:
    if args.start is not None and args.end is not None and args.start >= args.end:
        return "--start must be before --end"
    return None


def _recording_problem(path: str) -> str | None:
    p = Path(path)
    if p.is_dir():
        return f"{path}: is a directory, not a recording file"
    if not p.exists():
        return f"{path}: no such recording"
    if not p.is_file():
        return f"{path}: not a regular file"
    return None


def _db_flag(args: argparse.Namespace) -> str:
    """Name the argument that chose the database (for error lines)."""
    return "--db" if getattr(args, "db", None) else "store.path"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the paperarena command line."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "check-config":
            cfg = _load(args.file, rounds=True)
            from daemon.alerts.config import parse_alerts_config

            parse_alerts_config(cfg.alerts, source=args.file)
            problem = _keys_problem(cfg, args)
            if problem:
                return _fail(f"{args.file}: {problem}")
            sys.stdout.write(f"{args.file}: ok ({len(cfg.agents)} agents, markets: "
                             f"{', '.join(cfg.enabled_markets()) or 'none'})\n")
            return 0
        if args.cmd == "report":
            return _report(args)
        if args.cmd == "stage-scores":
            return _stage_scores(args)
        if args.cmd in ("backup", "export"):
            if args.db.startswith(("postgresql://", "postgres://")):
                return _fail(f"--db is a PostgreSQL store: {args.cmd} it with pg_dump "
                             "(docs/distributed.md, \"Backups\")")
            return _backup_or_export(args)
        if args.cmd == "replay":
            return _replay(args)
        if args.cmd == "run":
            return _run(args)
        if args.cmd in ("replay-publish", "replay-evaluate"):
            return _replay_roles(args)
        if args.cmd == "record":
            return _record(args)
        if args.cmd == "build-recording":
            return _build_recording(args)
        if args.cmd == "resume":
            return _resume(args)
        if args.cmd == "migrate":
            return _migrate(args)
        if args.cmd == "probe":
            return _probe(args)
        if args.cmd == "stress-gate":
            return _stress_gate(args)
        if args.cmd == "status":
            return _status(args)
        if args.cmd == "verify-round":
            from agents.capitalbench.rounds import verify_command

            return verify_command(args.round_dir, sys.stdout, sys.stderr)
        if args.cmd == "alphaforge-instability":
            from daemon.app.cli_alphaforge import alphaforge_instability

            return alphaforge_instability(args)
    except ConfigError as exc:
        for line in exc.problems:
            sys.stderr.write(f"{exc.source}: {line}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Stopped as exc:  # SIGTERM: unwound like SIGINT (claims withdrawn, store consistent)
        sys.stderr.write(f"paperarena {args.cmd}: {exc}; rerun the same command to resume\n")
        return exc.exit_code
    return _fail(f"unknown command {args.cmd}")


def _backup_or_export(args: argparse.Namespace) -> int:
    import json

    from daemon.store.backup import BackupError, backup, export

    try:
        if args.cmd == "backup":
            info = backup(args.db, args.out, verify=not args.no_verify)
            sys.stdout.write(json.dumps(info, sort_keys=True) + "\n")
        else:
            what = [w.strip() for w in args.what.split(",") if w.strip()]
            for path in export(args.db, args.out, args.format, what):
                sys.stdout.write(f"{path}\n")
    except BackupError as exc:
        return _fail(str(exc))
    return 0


def _stage_scores(args: argparse.Namespace) -> int:
    """Print the PortBench stage scores of a store (one line per agent)."""
    import sqlite3

    from agents.portbench.scores import format_table
    from daemon.store.reports import portbench_scores

    if args.horizon < 1:
        return _fail(f"--horizon must be at least 1 daily close, got {args.horizon}")
    try:
        by_agent = portbench_scores(args.db, horizon=args.horizon, stored=not args.recompute)
    except (sqlite3.Error, OSError) as exc:
        return _fail(f"cannot read {args.db}: {exc}")
    sys.stdout.write(format_table(by_agent) + "\n")
    return 0


def _stress_gate(args: argparse.Namespace) -> int:
    """Print the global stress gate of several stress windows' stores (one line per agent)."""
    from agents.portbench.stress_gate import format_global, global_gate, window_gate
    from daemon.store.reports import leaderboard

    windows = []
    for db in args.dbs:
        try:
            windows.append(window_gate(leaderboard(db)["rows"]))
        except Exception as exc:  # one line, never a traceback
            reason = " ".join(str(exc).split())[:200]
            sys.stderr.write(f"paperarena stress-gate: {db}: cannot read: {reason}\n")
            return 2
    sys.stdout.write(format_global(global_gate(windows)))
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from daemon.store.pg import redact, url_problem
    from daemon.store.pg_migrate import MigrateError, migrate

    problem = url_problem(args.target)
    if problem:
        return _fail(f"--to {redact(args.target)}: {problem}")
    from daemon.core.logs import configure_logging

    configure_logging("warning")  # stdout is the summary line; warnings go to stderr
    try:
        summary = asyncio.run(migrate(args.source, args.target, scope=args.scope,
                                      password_env=args.password_env))
    except MigrateError as exc:
        return _fail(str(exc))
    sys.stdout.write(f"paperarena migrate: {summary.line()}\n")
    return 0


def _report(args: argparse.Namespace) -> int:
    import sqlite3

    from daemon.store.dbfile import StoreOpenError, describe_sqlite_error, inspect_database
    from daemon.store.reports import load_alphaforge, load_report
    from daemon.store.schema import SCHEMA_VERSION
    from scoring.board.leaderboard import to_json, to_table

    problem = _window_problem(args)
    if problem:
        return _fail(problem)
    if args.password_env:
        from daemon.store.pg import use_password_env

        use_password_env(args.db, args.password_env)
    try:  # read only: the report never writes, so it works on a read-only file or file system
        if (not args.db.startswith(("postgresql://", "postgres://")) and  # shared store
                inspect_database(args.db, create=False, schema_version=SCHEMA_VERSION) == 0):
            return _fail(f"--db {args.db}: not a paperarena database (no tables)")
        report = load_report(args.db, window=(args.start, args.end))
    except StoreOpenError as exc:
        return _fail(f"--db {exc}")
    except FileNotFoundError as exc:
        return _fail(f"--db {exc}")
    except sqlite3.Error as exc:
        return _fail(f"--db {describe_sqlite_error(args.db, exc)}")
    if args.html:
        from scoring.board.report_html import render_html

        try:
            Path(args.html).write_text(render_html(report), encoding="utf-8")
        except OSError as exc:
            return _fail(f"{args.html}: cannot write: {exc.strerror or exc}")
        sys.stderr.write(f"paperarena report: wrote the HTML report to "
                         f"{Path(args.html).resolve()}\n")  # stderr: stdout stays the table/JSON
    board = report.board
    sys.stdout.write(to_json(board) if args.json else to_table(board))
    if not args.json:
        from agents.alphaforgebench.report import text_section

        sys.stdout.write(text_section(load_alphaforge(args.db)))  # versions / instability
    return 0


def _replay(args: argparse.Namespace) -> int:
    from daemon.app.replay import ReplayError, replay
    from daemon.core.logs import configure_logging, register_config_secrets
    from daemon.store.store import StoreOpenError, StoreWriteError
    from feeds.recording import RecordingError

    cfg = _load(args.config, rounds=True)
    problem = (_window_problem(args) or _recording_problem(args.recording)
               or _keys_problem(cfg, args))
    if problem:
        return _fail(problem)
    configure_logging(cfg.logging.level, cfg.logging.format)
    register_config_secrets(cfg)
    db = args.db or "replay.db"
    try:
        from daemon.app.components import default_components

        summary = run_stoppable(replay(args.recording, cfg, db, speed=args.speed,
                                       progress=False if args.no_progress else None,
                                       window=(args.start, args.end), version=package_version(),
                                       components=default_components(cfg, mode="replay"),
                                       accept_damaged=args.accept_damaged))
    except StoreOpenError as exc:
        return _fail(f"--db {exc}")
    except (ReplayError, RecordingError, StoreWriteError) as exc:
        return _fail(str(exc))
    if summary.complete:
        sys.stderr.write(f"{summary.complete}\n")
        return 0
    sys.stderr.write(
        f"replayed {summary.events} events (resumed at {summary.resumed_from}), "
        f"{summary.decisions} scheduled jobs, {summary.events_per_s:,.0f} events/s into {db}\n"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from daemon.app.roles import RoleError, parse_agents, with_overrides
    from daemon.app.run import StartupError, run_live
    from daemon.core.logs import configure_logging, register_config_secrets
    from daemon.store.store import StoreWriteError

    try:
        cfg = with_overrides(_load(args.config, rounds=True), agents=parse_agents(args.agents),
                             process_id=args.process_id)
    except RoleError as exc:
        return _fail(str(exc))
    problem = _keys_problem(cfg, args)
    if problem:
        return _fail(problem)
    configure_logging(cfg.logging.level, cfg.logging.format)
    register_config_secrets(cfg)
    try:
        return asyncio.run(run_live(cfg, db=args.db, role=args.role, duration=args.duration,
                                    version=package_version(), config_path=args.config))
    except StartupError as exc:
        return _fail(_startup_line(args, exc))
    except (StoreWriteError, RoleError) as exc:
        return _fail(str(exc))


def _startup_line(args: argparse.Namespace, exc: Exception) -> str:
    """Prefix a database start-up failure with the argument that named the database."""
    import sqlite3

    from daemon.store.dbfile import StoreOpenError

    if isinstance(exc.__cause__, StoreOpenError | sqlite3.Error):
        return f"{_db_flag(args)} {exc}"
    return str(exc)


def _replay_roles(args: argparse.Namespace) -> int:
    from daemon.app.components import default_components
    from daemon.app.replay import ReplayError
    from daemon.app.replay_publish import replay_publish, summary_line
    from daemon.app.replay_roles import replay_evaluate
    from daemon.app.roles import RoleError, parse_agents, with_overrides
    from daemon.core.logs import configure_logging, register_config_secrets
    from daemon.store.store import StoreOpenError
    from feeds.recording import RecordingError

    if TYPE_CHECKING:
        from daemon.app.replay_publish import PublishSummary
        from daemon.app.replay_roles import EvaluateSummary

    try:
        cfg = with_overrides(_load(args.config, rounds=True),
                             agents=parse_agents(getattr(args, "agents", None)),
                             process_id=args.process_id)
    except RoleError as exc:
        return _fail(str(exc))
    problem = (_recording_problem(args.recording) if args.cmd == "replay-publish"
               else _keys_problem(cfg, args))
    if problem:
        return _fail(problem)
    configure_logging(cfg.logging.level, cfg.logging.format)
    register_config_secrets(cfg)
    try:
        summary: PublishSummary | EvaluateSummary
        if args.cmd == "replay-publish":
            if args.evaluators < 1 or args.window < 1:
                return _fail("--evaluators and --window must be at least 1")
            summary = run_stoppable(replay_publish(
                args.recording, cfg, evaluators=args.evaluators, window=args.window,
                wait_timeout=args.wait))
        else:
            summary = run_stoppable(replay_evaluate(
                cfg, args.db or "replay.db", version=package_version(),
                stall_timeout=args.stall_timeout,
                components=default_components(cfg, mode="replay")))
    except StoreOpenError as exc:
        return _fail(f"--db {exc}")
    except (ReplayError, RoleError, RecordingError) as exc:
        return _fail(str(exc))
    sys.stderr.write(summary_line(summary) + "\n")
    return 0


def _build_recording(args: argparse.Namespace) -> int:
    from datetime import date

    from feeds.history_recording import HistoryError, build_history_recording, parse_tickers

    if Path(args.out).is_dir():
        return _fail(f"--out {args.out}: is a directory, not a recording file")
    try:
        start, end = date.fromisoformat(args.start), date.fromisoformat(args.end)
    except ValueError as exc:
        return _fail(f"build-recording: invalid date: {exc} (use YYYY-MM-DD)")
    cfg = _load(args.config)
    from daemon.core.logs import configure_logging

    # Configured like every command (stderr, the config's level): the unconfigured default
    # printed debug lines (nyse_calendar_built) beside a bad input's one-line error.
    configure_logging(cfg.logging.level, cfg.logging.format, wrap_streams=False)
    try:
        tickers = parse_tickers(args.tickers)
        n = build_history_recording(cfg.sources.equity.yahoo, tickers, start, end, args.out)
    except (HistoryError, OSError) as exc:
        return _fail(f"build-recording: {exc}")
    sys.stdout.write(f"{args.out}: {n} events, {len(tickers)} tickers, {start}..{end}\n")
    return 0


def _record(args: argparse.Namespace) -> int:
    from daemon.app.record import recorder_components
    from daemon.app.run import StartupError, run_live
    from daemon.core.logs import configure_logging

    if Path(args.out).is_dir():
        return _fail(f"--out {args.out}: is a directory, not a recording file")
    cfg = _load(args.config)
    configure_logging(cfg.logging.level, cfg.logging.format)
    from daemon.core.logs import register_config_secrets

    register_config_secrets(cfg)
    cfg = cfg.model_copy(update={"agents": ()})  # record market data only
    components = recorder_components(args.out, cfg)
    try:
        code = asyncio.run(run_live(cfg, db=args.db or f"{args.out}.db", duration=args.duration,
                                    version=package_version(), components=components))
    except StartupError as exc:
        return _fail(_startup_line(args, exc) if args.db else str(exc))
    from daemon.app.record import Recorder

    recorder = next(c for c in components if isinstance(c, Recorder))
    sys.stderr.write(f"paperarena record: {recorder.summary()}\n")
    return code or (0 if recorder.market_events else 1)


def _resume(args: argparse.Namespace) -> int:
    import json
    import urllib.error
    import urllib.request

    cfg = _load(args.config)
    host = "127.0.0.1" if cfg.http.host in ("0.0.0.0", "::") else cfg.http.host
    url = f"http://{host}:{cfg.http.port}/api/agents/{args.agent}/resume"
    body = {"by": "cli"} | ({"market": args.market} if args.market else {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            sys.stdout.write(resp.read().decode() + "\n")
    except urllib.error.HTTPError as exc:
        return _fail(f"resume refused ({exc.code}): {exc.read().decode(errors='replace')[:200]}")
    except OSError as exc:
        return _fail(f"no daemon answering at {url}: {exc}")
    return 0


def _status(args: argparse.Namespace) -> int:
    import json

    from daemon.web.status import StatusError, fetch_status, render_status

    if args.url:
        base = args.url
    else:
        cfg = _load(args.config)
        host = "127.0.0.1" if cfg.http.host in ("0.0.0.0", "::") else cfg.http.host
        base = f"http://{host}:{cfg.http.port}"
    try:
        st = fetch_status(base)
    except StatusError as exc:
        sys.stderr.write(f"paperarena status: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(st, sort_keys=True) + "\n" if args.json
                     else render_status(st, base))
    return 0


def _probe(args: argparse.Namespace) -> int:
    import json

    if args.repeats < 2:
        return _fail("--repeats must be at least 2")
    if not Path(args.db).exists():
        return _fail(f"{args.db}: no such database")
    from agents.probe import ProbeError, run_probe_command
    from daemon.core.logs import configure_logging, register_config_secrets

    cfg = _load(args.config)
    configure_logging(cfg.logging.level, cfg.logging.format)  # logs to stderr: stdout is JSON
    register_config_secrets(cfg)
    try:
        result = asyncio.run(run_probe_command(cfg.agents, args.config or "the default config",
                                                args.db, args.agent, args.repeats))
    except (ProbeError, LookupError, ValueError) as exc:
        return _fail(str(exc))
    import time

    from daemon.store.store import StoreSchemaError, record_probe

    try:
        record_probe(args.db, result, time.time())
    except StoreSchemaError as exc:
        return _fail(str(exc))
    sys.stdout.write(json.dumps(result, sort_keys=True, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
