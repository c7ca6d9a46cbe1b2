"""The ``paperarena`` argument parser: every subcommand, its options and their argument types.

A bad argument prints one line and exits 2 (:class:`_Parser`).
"""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime
from typing import NoReturn

from daemon.app.cli_common import EXIT_USAGE, package_version


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
