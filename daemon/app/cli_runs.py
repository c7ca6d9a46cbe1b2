"""``paperarena run``, ``replay``, ``replay-publish``/``replay-evaluate``, ``record`` and
``build-recording``: the commands that run the pipeline on the live clock or on a recording.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.app.cli_common import _fail, _keys_problem, _load, _window_problem, package_version
from daemon.app.sandbox_check import sandbox_problem
from daemon.app.signals import run_stoppable

if TYPE_CHECKING:
    from daemon.config.settings import Config


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


def _replay_db(args: argparse.Namespace, cfg: Config) -> tuple[str, str]:
    """Return the database of ``replay``/``replay-evaluate`` and the argument naming it.

    ``--db`` wins (saying so in one line on stderr when it overrides ``[store] url``), then
    ``[store] url``, then ``replay.db``. ``[store] path`` is the live store, never a replay's.
    """
    from daemon.store.pg import redact

    url = cfg.store.url
    if args.db:
        if url and args.db != url:
            sys.stderr.write(f"paperarena: --db {redact(args.db)} overrides [store] url "
                             f"{redact(url)}\n")
        return args.db, "--db"
    if url:
        return url, "store.url"
    return "replay.db", "--db"


def _destination(db: str) -> str:
    """Name ``db`` in a message: a URL without its password."""
    from daemon.store.pg import is_url, redact

    return redact(db) if is_url(db) else db


def _replay(args: argparse.Namespace) -> int:
    from daemon.app.replay import ReplayError, replay
    from daemon.core.logs import configure_logging, register_config_secrets
    from daemon.store.dbfile import StoreOpenError
    from daemon.store.store import StoreWriteError
    from feeds.recording import RecordingError

    cfg = _load(args.config, rounds=True)
    problem = (_window_problem(args) or _recording_problem(args.recording)
               or _keys_problem(cfg, args) or sandbox_problem(cfg))
    if problem:
        return _fail(problem)
    configure_logging(cfg.logging.level, cfg.logging.format)
    register_config_secrets(cfg)
    db, flag = _replay_db(args, cfg)
    try:
        from daemon.app.components import default_components

        summary = run_stoppable(replay(args.recording, cfg, db, speed=args.speed,
                                       progress=False if args.no_progress else None,
                                       window=(args.start, args.end), version=package_version(),
                                       components=default_components(cfg, mode="replay"),
                                       accept_damaged=args.accept_damaged))
    except StoreOpenError as exc:
        return _fail(f"{flag} {exc}")
    except (ReplayError, RecordingError, StoreWriteError) as exc:
        return _fail(str(exc))
    if summary.complete:
        sys.stderr.write(f"{summary.complete}\n")
    else:
        sys.stderr.write(
            f"replayed {summary.events} events (resumed at {summary.resumed_from}), "
            f"{summary.decisions} scheduled jobs, {summary.events_per_s:,.0f} events/s "
            f"into {_destination(db)}\n"
        )
    if getattr(args, "serve", False):  # keep the page up over the replayed database
        from daemon.app.cli_daemon import serve_db

        return serve_db(db, cfg.http.host, cfg.http.port)
    return 0


def _run(args: argparse.Namespace) -> int:
    from daemon.app.live import StartupError
    from daemon.app.roles import RoleError, parse_agents, with_overrides
    from daemon.app.run import run_live
    from daemon.core.logs import configure_logging, register_config_secrets
    from daemon.store.store import StoreWriteError

    try:
        cfg = with_overrides(_load(args.config, rounds=True), agents=parse_agents(args.agents),
                             process_id=args.process_id)
    except RoleError as exc:
        return _fail(str(exc))
    problem = _keys_problem(cfg, args) or (None if args.role == "feeds"
                                           else sandbox_problem(cfg))
    if problem:
        return _fail(problem)
    configure_logging(cfg.logging.level, cfg.logging.format)
    register_config_secrets(cfg)
    try:
        return asyncio.run(run_live(cfg, db=args.db, role=args.role, duration=args.duration,
                                    version=package_version(), config_path=args.config,
                                    append=args.append))
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
    from daemon.store.dbfile import StoreOpenError
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
               else _keys_problem(cfg, args) or sandbox_problem(cfg))
    if problem:
        return _fail(problem)
    configure_logging(cfg.logging.level, cfg.logging.format)
    register_config_secrets(cfg)
    db, flag = _replay_db(args, cfg) if args.cmd == "replay-evaluate" else ("", "--db")
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
                cfg, db, version=package_version(),
                stall_timeout=args.stall_timeout,
                components=default_components(cfg, mode="replay")))
    except StoreOpenError as exc:
        return _fail(f"{flag} {exc}")
    except (ReplayError, RoleError, RecordingError) as exc:
        return _fail(str(exc))
    into = "" if args.cmd == "replay-publish" else f" into {_destination(db)}"
    sys.stderr.write(summary_line(summary) + into + "\n")
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
    notes: list[str] = []
    try:
        tickers = parse_tickers(args.tickers)
        n = build_history_recording(cfg.sources.equity.yahoo, tickers, start, end, args.out,
                                    news=cfg.sources.news if args.news else None,
                                    provider=args.news or "finnhub", notes=notes,
                                    bars=args.bars, equity=cfg.sources.equity,
                                    dividends=args.dividend_adjusted)
    except (HistoryError, OSError) as exc:
        return _fail(f"build-recording: {exc}")
    for note in notes:  # bars left out or missing days: one line per ticker
        sys.stderr.write(f"paperarena: build-recording: {note}\n")
    sys.stdout.write(f"{args.out}: {n} events, {len(tickers)} tickers, {start}..{end}\n")
    return 0


def _record(args: argparse.Namespace) -> int:
    from daemon.app.live import StartupError
    from daemon.app.record import recorder_components
    from daemon.app.run import run_live
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
                                    version=package_version(), components=components,
                                    append=True))  # no agents: nothing to miss; never refused
    except StartupError as exc:
        return _fail(_startup_line(args, exc) if args.db else str(exc))
    from daemon.app.record import Recorder

    recorder = next(c for c in components if isinstance(c, Recorder))
    sys.stderr.write(f"paperarena record: {recorder.summary()}\n")
    return code or (0 if recorder.market_events else 1)
