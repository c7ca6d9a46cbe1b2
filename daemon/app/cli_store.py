"""``paperarena report``, ``backup``/``export``, ``migrate`` and ``verify``: the commands that
read, copy, move or check a store (no daemon needed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from daemon.app.cli_common import _fail, _window_problem


def _report(args: argparse.Namespace) -> int:
    import sqlite3

    from daemon.store.dbfile import StoreOpenError, describe_sqlite_error, inspect_database
    from daemon.store.reports import load_alphaforge, load_report
    from daemon.store.schema import SCHEMA_VERSION
    from scoring.board.text import to_json, to_table

    problem = _window_problem(args)
    if problem:
        return _fail(problem)
    if args.password_env:
        from daemon.store.pg import use_password_env

        use_password_env(args.db, args.password_env)
    if args.bundle:
        return _bundle_report(args)
    try:  # read only: the report never writes, so it works on a read-only file or file system
        if (not args.db.startswith(("postgresql://", "postgres://")) and  # shared store
                inspect_database(args.db, create=False, schema_version=SCHEMA_VERSION) == 0):
            return _fail(f"--db {args.db}: not a paperarena database (no tables)")
        # one thread here: the markets may be computed in forked processes (same bytes)
        report = load_report(args.db, window=(args.start, args.end), parallel=True,
                             curves_wanted=bool(args.html),  # the curves: for the HTML only
                             json_wanted=bool(args.json))
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
    season = _season_of(args.db)
    if season is not None and args.json:
        board = {**board, "season": season}  # which season, and its amendments (issue 32)
    sys.stdout.write(to_json(board) if args.json else to_table(board))
    if season is not None and not args.json:
        from daemon.store.integrity.season import season_lines

        sys.stdout.write("".join(f"{line}\n" for line in season_lines(season)))
    if not args.json:
        from agents.alphaforgebench.report import text_section

        sys.stdout.write(text_section(load_alphaforge(args.db)))  # versions / instability
    return 0


def _report_json(db: str, season_db: str | None = None) -> str:
    """Return ``report --json`` of the SQLite store ``db`` (the season of ``season_db``, by
    default of ``db``, included)."""
    from daemon.store.reports import load_report
    from scoring.board.text import to_json

    board = load_report(db).board
    season = _season_of(season_db or db)
    return to_json({**board, "season": season} if season is not None else board)


def _replayed_report(db: str) -> tuple[str, str | None]:
    """Return ``report --json`` of the season of the store ``db`` replayed from its stored
    answers (:mod:`daemon.app.bundle_replay`) and the first replayed decision or fill that is
    not the stored one; :class:`NotReplayed` when it cannot be replayed."""
    from daemon.app.bundle_replay import BundleReplayError, BundleReplayRefused, rebuilt_report
    from daemon.core.logs import configure_logging
    from daemon.store.integrity.bundle import BundleError, NotReplayed

    # The replay's round logs are not the command's output: errors only, on stderr.
    configure_logging("error", wrap_streams=False)
    try:
        return rebuilt_report(db, _report_json)
    except BundleReplayRefused as exc:
        raise NotReplayed(str(exc)) from None
    except BundleReplayError as exc:
        raise BundleError(f"the season cannot be replayed from its stored answers: {exc}"
                          ) from None
    except Exception as exc:  # a store the chains accept but the replay cannot read
        raise BundleError(f"the replay of the stored answers failed: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:200]}") from None


def _bundle_report(args: argparse.Namespace) -> int:
    """``report --bundle F``: verify the bundle and replay its season from the stored answers,
    then print its report (text or JSON); exit 1 with one line naming the first difference
    when the replayed report is not ``report.json``."""
    import tempfile

    from daemon.store.integrity.bundle import REPLAY_PROBLEMS, BundleError, verify_bundle

    try:
        problems, _, note = verify_bundle(args.bundle, _report_json, replay=_replayed_report)
    except BundleError as exc:
        return _fail(str(exc))
    replayed = [p for p in problems if p.startswith(REPLAY_PROBLEMS)]
    if replayed:  # the store holds (else no replay), the report is not what it yields
        sys.stderr.write(f"paperarena: {args.bundle}: {replayed[0]}\n")
        return 1
    if problems:
        return _fail(f"{args.bundle} does not verify: {problems[0]}")
    if note:
        sys.stderr.write(f"paperarena: {args.bundle}: not replayed ({note}): the report is "
                         "recomputed from the stored rows\n")
    with tempfile.TemporaryDirectory() as tmp:
        import tarfile

        with tarfile.open(args.bundle) as tar:
            tar.extract("store.db", tmp, filter="data")
        db = str(Path(tmp) / "store.db")
        if args.json:  # byte for byte the replayed report (or, not replayed, the stored one)
            sys.stdout.write(_report_json(db))
            return 0
        ns = argparse.Namespace(**{**vars(args), "bundle": None, "db": db})
        return _report(ns)


def _export_bundle(args: argparse.Namespace) -> int:
    from daemon.store.integrity.bundle import BundleError, write_bundle

    key = None
    if args.config:
        from daemon.app.cli_common import _load

        key = _load(args.config).season.signing_key
        if key is not None and not Path(key).is_absolute():  # relative to the config file
            key = str(Path(args.config).parent / key)
    try:
        manifest = write_bundle(args.db, args.bundle, _report_json, key)
    except BundleError as exc:
        return _fail(str(exc))
    rows = sum(manifest["rows"].values())
    sys.stdout.write(f"{args.bundle}: {rows} chained rows, {len(manifest['heads'])} heads"
                     f"{', signed' if key else ''}\n")
    return 0


def _verify_bundle(args: argparse.Namespace) -> int:
    """``verify-bundle F``: exit 0 with "ok", 3 when all held but the season could not be
    replayed (the line says why), or 1 with one line per problem."""
    from daemon.store.integrity.bundle import BundleError, verify_bundle

    try:
        problems, manifest, note = verify_bundle(args.bundle, _report_json, args.key,
                                                 replay=_replayed_report)
    except BundleError as exc:
        return _fail(str(exc))
    for line in problems:
        sys.stdout.write(f"{line}\n")
    if problems:
        return 1
    season = (manifest.get("season") or {}).get("name")
    replay = ("report replayed from the stored answers matches" if note == "" else
              f"not replayed: {note}")
    # A bundle whose season was not replayed is not wholly checked: exit 3, never 0 (a
    # publisher cannot pass a season off as one the replay does not support).
    sys.stdout.write(f"{'ok' if note == '' else 'not wholly checked'}: {args.bundle}: "
                     f"{sum(manifest['rows'].values())} chained rows hold, "
                     f"heads and report match, {replay}"
                     f"{', signature verified' if args.key else ''}"
                     f"{f' (season {season})' if season else ''}\n")
    return 0 if note == "" else 3


def _season_of(db: str) -> dict[str, Any] | None:
    """Return the season of the SQLite store ``db`` (None: it has none, or ``db`` is a shared
    store, whose season each scope's /api/status shows)."""
    from daemon.store.dbfile import connect_readonly
    from daemon.store.integrity.season import read_season
    from daemon.store.read import is_store_url

    if is_store_url(db):
        return None
    con = connect_readonly(db)
    try:
        return read_season(con)
    finally:
        con.close()


def _backup_or_export(args: argparse.Namespace) -> int:
    import json

    from daemon.store.backup import BackupError, backup, export

    if args.cmd == "export" and args.bundle:
        return _export_bundle(args)
    if args.cmd == "export" and not args.out:
        return _fail("export: give --out DIR (tables) or --bundle FILE (a season's bundle)")
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


def _migrate(args: argparse.Namespace) -> int:
    import asyncio

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


def _verify(args: argparse.Namespace) -> int:
    """Walk the store's hash chains: exit 0 with "ok" and the counts, or 1 naming each stream's
    first bad row (one line each)."""
    from daemon.store.integrity.verify import VerifyError, summary, verify

    if args.password_env:
        from daemon.store.pg import use_password_env

        use_password_env(args.db, args.password_env)
    try:
        checks = verify(args.db)
    except VerifyError as exc:
        return _fail(f"--db {exc}")
    problems = [c.problem for c in checks if c.problem]
    for line in problems or summary(checks):
        sys.stdout.write(f"{line}\n")
    return 1 if problems else 0
