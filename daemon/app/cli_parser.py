"""The ``paperarena`` argument parser: every subcommand, its options and their argument types.

A bad argument prints one line and exits 2 (:class:`_Parser`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

from daemon.app.cli_common import EXIT_USAGE, package_version


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _Version(argparse._VersionAction):
    """``--version``: the installed version, looked up when asked (importlib.metadata costs every
    other command its import time)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        self.version = f"paperarena {package_version()}"
        super().__call__(parser, namespace, values, option_string)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep the epilog's line breaks; append "(default: ...)" where a help text does not say it.

    Unlike :class:`argparse.ArgumentDefaultsHelpFormatter`, a ``None`` or ``False`` default (an
    unset option, a flag) is not shown, and a help text that already states its default in
    words is left alone.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        help_ = action.help or ""
        default = action.default
        if (default is None or default is False or default is argparse.SUPPRESS
                or "default" in help_ or not action.option_strings):
            return help_
        return f"{help_} (default: %(default)s)"


def _command(sub: argparse._SubParsersAction[_Parser], name: str, help_: str,
             example: str) -> _Parser:
    """Add subcommand ``name``: ``help_`` in the command list, ``example`` as its help's epilog."""
    return sub.add_parser(name, help=help_, description=help_, formatter_class=_HelpFormatter,
                          epilog=f"example:\n  {example}")


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
    p = _Parser(prog="paperarena", description="Live paper-trading evaluation of trading agents.",
                formatter_class=_HelpFormatter,
                epilog="example:\n  paperarena replay examples/sample.jsonl.gz"
                       " --config examples/sample-replay.toml --db sample.db\n"
                       "  paperarena report --db sample.db\n"
                       "'paperarena <command> --help' shows each command's options.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    run = _command(sub, "run", "run the daemon on the live clock",
                   "paperarena run --config examples/default.toml --db paperarena.db")
    run.add_argument("--config", "-c", help="TOML config file (default: built-in defaults)")
    run.add_argument("--db", help="SQLite database or postgresql:// URL (overrides store.path"
                     " and store.url)")
    run.add_argument("--role", choices=["all", "feeds", "evaluator"], default="all",
                     help="process role when split over MQTT (default: all)")
    _keys_argument(run)
    run.add_argument("--duration", type=_seconds, default=None,
                     help="stop after this many seconds (default: run until signalled)")
    run.add_argument("--append", action="store_true",
                     help="continue live a database whose last run was a replay, recording the"
                          " rounds since its end as missed (default: refuse it, exit 2)")
    _role_arguments(run)

    rp = _command(sub, "replay", "replay a recording through the whole pipeline",
                  "paperarena replay examples/sample.jsonl.gz --config examples/sample-replay.toml"
                  " --db sample.db")
    rp.add_argument("recording", help="recording file (.jsonl or .jsonl.gz)")
    rp.add_argument("--config", "-c", help="TOML config file (default: built-in defaults)")
    rp.add_argument("--db", default=None,
                    help="SQLite database or postgresql:// URL (default: the config's [store] url, "
                         "else replay.db)")
    rp.add_argument("--speed", type=_speed, default=None, metavar="max|FACTOR",
                    help="'max' (default) or a speed-up factor over recorded time")
    rp.add_argument("--start", type=_when, default=None, help="replay from this time (ISO 8601)")
    rp.add_argument("--end", type=_when, default=None, help="replay until this time (ISO 8601)")
    rp.add_argument("--no-progress", action="store_true", help="no progress bar")
    _keys_argument(rp)
    rp.add_argument("--accept-damaged", action="store_true",
                    help="replay a cut recording up to its last whole event (default: exit 2)")
    rp.add_argument("--serve", action="store_true",
                    help="then serve the page and the API over the database, read-only, at the"
                         " config's [http] address until Ctrl-C")

    rpub = _command(sub, "replay-publish",
                    "publish a recording over MQTT to replay-evaluate processes",
                    "paperarena replay-publish examples/sample.jsonl.gz --config split.toml"
                    " --evaluators 2")
    rpub.add_argument("recording", help="recording file (.jsonl or .jsonl.gz)")
    rpub.add_argument("--config", "-c", help="TOML config file with an [mqtt] section")
    rpub.add_argument("--evaluators", type=int, default=1, metavar="N",
                      help="wait for N evaluators before streaming (default: 1)")
    rpub.add_argument("--window", type=int, default=500,
                      help="events in flight beyond the slowest evaluator (default: 500)")
    rpub.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                      help="how long to wait for the evaluators (default: 120)")
    rpub.add_argument("--process-id", default=None, help="MQTT process id (default: derived)")

    rev = _command(sub, "replay-evaluate",
                   "replay a recording received from replay-publish over MQTT",
                   "paperarena replay-evaluate --config split.toml --db eval-1.db"
                   " --agents momentum")
    rev.add_argument("--config", "-c", help="TOML config file with an [mqtt] section")
    rev.add_argument("--db", default=None,
                     help="SQLite database or postgresql:// URL (default: the config's "
                          "[store] url, else replay.db)")
    rev.add_argument("--stall-timeout", type=float, default=30.0, metavar="SECONDS",
                     help="fail when missing events do not arrive in time (default: 30)")
    _keys_argument(rev)
    _role_arguments(rev)

    rep = _command(sub, "report", "print the leaderboard",
                   "paperarena report --db sample.db --html report.html")
    rep.add_argument("--db", default="paperarena.db",
                     help="SQLite database or postgresql:// URL")
    rep.add_argument("--json", action="store_true", help="JSON instead of a table")
    rep.add_argument("--start", type=_when, default=None,
                     help="only from this time (ISO 8601; default: from the start)")
    rep.add_argument("--end", type=_when, default=None,
                     help="only until this time (ISO 8601; default: to the end)")
    rep.add_argument("--bundle", metavar="FILE", default=None,
                     help="the report of a season's bundle, once it verifies and its season, "
                     "replayed from the stored answers (no model, no key), yields that report "
                     "(instead of --db)")
    rep.add_argument("--html", metavar="FILE", default=None,
                     help="also write a self-contained offline HTML report to FILE")
    rep.add_argument("--password-env", default=None, metavar="VAR",
                     help="for a postgresql:// --db: environment variable holding the password"
                     " (default: PGPASSWORD)")

    cc = _command(sub, "check-config", "validate a config file",
                  "paperarena check-config examples/default.toml")
    cc.add_argument("file", help="TOML config file")
    _keys_argument(cc)

    rs = _command(sub, "resume", "resume an agent halted by a drawdown breach",
                  "paperarena resume --agent momentum --config examples/default.toml")
    rs.add_argument("--agent", required=True, help="id of the halted agent")
    rs.add_argument("--market", default=None, help="only this market (default: every market)")
    rs.add_argument("--config", "-c", help="config of the running daemon (for its HTTP address)")

    sv = _command(sub, "serve", "serve the live page and the API over a store, read-only",
                  "paperarena serve --db sample.db")
    sv.add_argument("--db", required=True, help="SQLite database or postgresql:// URL")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    sv.add_argument("--port", type=int, default=9464, help="port (default: 9464; 0: any free)")

    st = _command(sub, "status", "print the running daemon's state (from its HTTP API)",
                  "paperarena status --url http://127.0.0.1:9464")
    st.add_argument("--config", "-c", help="config of the running daemon (for its HTTP address)")
    st.add_argument("--url", default=None, help="the daemon's base URL instead, e.g. "
                    "http://127.0.0.1:9464")
    st.add_argument("--json", action="store_true", help="print /api/status as JSON")

    sg = _command(sub, "stress-gate", "PortBench's global stress gate over the stores of "
                  "several replayed stress windows",
                  "paperarena stress-gate china.db covid.db crypto.db")
    sg.add_argument("dbs", nargs="+", metavar="DB", help="the stores of the stress windows")

    bk = _command(sub, "backup", "consistent online copy of the database (daemon may run)",
                  "paperarena backup --db paperarena.db --out paperarena-backup.db")
    bk.add_argument("--out", "-o", required=True, help="backup file to write")
    bk.add_argument("--db", default="paperarena.db", help="SQLite database to copy")
    bk.add_argument("--no-verify", action="store_true", help="skip PRAGMA integrity_check")

    ex = _command(sub, "export", "export decisions, fills and equity to CSV or Parquet",
                  "paperarena export --db sample.db --out exported --format parquet")
    ex.add_argument("--db", default="paperarena.db", help="SQLite database to export")
    ex.add_argument("--out", "-o", default=None, help="output directory (required without "
                    "--bundle)")
    ex.add_argument("--bundle", metavar="FILE", default=None,
                    help="instead: write the season's verifiable bundle (store, report, chain "
                    "heads; signed with [season] signing_key of --config) to FILE")
    ex.add_argument("--config", "-c", default=None,
                    help="with --bundle: the config naming [season] signing_key")
    ex.add_argument("--format", choices=["csv", "parquet"], default="csv",
                    help="file format, one file per table")
    ex.add_argument("--what", default="decisions,fills,equity",
                    help="comma-separated tables (default: decisions,fills,equity)")

    rec = _command(sub, "record", "record live market data to a replayable file",
                   "paperarena record --out today.jsonl.gz --duration 3600")
    rec.add_argument("--out", "-o", required=True, help="recording file (.jsonl or .jsonl.gz)")
    rec.add_argument("--duration", type=_seconds, default=None,
                     help="seconds (default: until signal)")
    rec.add_argument("--config", "-c", help="TOML config file of the sources to record"
                     " (default: built-in defaults)")
    rec.add_argument("--db", default=None, help="SQLite database (default: <out>.db)")

    hist = _command(sub, "build-recording",
                    "build a recording from historical daily bars (Yahoo chart)",
                    "paperarena build-recording --tickers SPY,TLT --start 2020-02-01"
                    " --end 2020-05-31 --out covid.jsonl.gz")
    hist.add_argument("--tickers", required=True, help="comma-separated, e.g. AAPL,MSFT")
    hist.add_argument("--start", required=True, help="first day, YYYY-MM-DD")
    hist.add_argument("--end", required=True, help="last day (inclusive), YYYY-MM-DD")
    hist.add_argument("--out", "-o", required=True, help="recording file (.jsonl or .jsonl.gz)")
    hist.add_argument("--config", "-c", help="config whose sources.equity.yahoo.chart_url is used")
    hist.add_argument("--bars", choices=("yahoo", "alpaca", "finnhub"), default="yahoo",
                      help="daily OHLCV source: Yahoo's keyless chart history, or Alpaca's or"
                           " Finnhub's historical bars (keys: sources.equity.<source>.*_env)")
    hist.add_argument("--dividend-adjusted", action="store_true",
                      help="record dividend-adjusted prices (Yahoo's adjclose, Alpaca"
                           " adjustment=all, Finnhub adjusted=true); default: split-adjusted only")
    hist.add_argument("--news", choices=("finnhub", "alpaca"), default=None,
                      help="add the tickers' company news of the window, stamped with their"
                           " publication times (keys: sources.news.*_key_env)")

    vr = _command(sub, "verify-round",
                  "check a CapitalBench round directory against its hashes.json",
                  "paperarena verify-round rounds/weekly-2026-11-02")
    vr.add_argument("round_dir", help="rounds/<round_id>")
    mg = _command(sub, "migrate", "copy a SQLite store into a shared PostgreSQL store",
                  "paperarena migrate --from sample.db"
                  " --to postgresql://postgres@127.0.0.1/pa")
    mg.add_argument("--from", dest="source", required=True, metavar="SQLITE",
                    help="the SQLite database to copy (read only)")
    mg.add_argument("--to", dest="target", required=True, metavar="URL",
                    help="postgresql://user@host:5432/db (password: --password-env)")
    mg.add_argument("--scope", default=None,
                    help="scope (process) to copy into (default: migrated-<file name>)")
    mg.add_argument("--password-env", default=None,
                    help="environment variable holding the password (default: PGPASSWORD)")

    vf = _command(sub, "verify", "walk the store's hash chains; name the first row edited, "
                  "deleted or out of order", "paperarena verify --db paperarena.db")
    vf.add_argument("--db", default="paperarena.db",
                    help="SQLite database or postgresql:// URL (read only)")
    vf.add_argument("--password-env", default=None, metavar="VAR",
                    help="for a postgresql:// --db: environment variable holding the password"
                    " (default: PGPASSWORD)")

    vb = _command(sub, "verify-bundle", "check a season's bundle offline: hashes, chains, "
                  "heads, the rebuilt report, the season replayed from the stored answers, the "
                  "signature (exit 0: all hold; 1: a problem, named; 3: all else holds but the "
                  "season could not be replayed, said why)", "paperarena verify-bundle "
                  "season.tar --key publisher.pub")
    vb.add_argument("bundle", metavar="FILE", help="the bundle (paperarena export --bundle)")
    vb.add_argument("--key", default=None, metavar="PUB",
                    help="the publisher's Ed25519 public key (PEM): the signature must verify")

    pr = _command(sub, "probe", "re-issue a stored decision input K times (LLM consistency)",
                  "paperarena probe --agent my-llm --repeats 5 --db llm.db --config llm.toml")
    pr.add_argument("--agent", required=True, help="id of the LLM agent to probe")
    pr.add_argument("--repeats", type=int, default=5, help="times K to re-issue the input")
    pr.add_argument("--db", default="paperarena.db",
                    help="SQLite database holding the agent's decisions")
    pr.add_argument("--config", "-c", help="TOML config file defining the agent")
    ss = _command(sub, "stage-scores", "print PortBench's stage scores of a store",
                  "paperarena stage-scores --db pb.db --horizon 5")
    ss.add_argument("--db", required=True, help="SQLite database of a PortBench run")
    ss.add_argument("--horizon", type=int, default=5, help="daily closes after a decision")
    ss.add_argument("--recompute", action="store_true",
                    help="compute every score from the store now, not the stored ones")
    af = _command(sub, "alphaforge-instability",
                  "repeat AlphaForgeBench strategy generations on a frozen input",
                  "paperarena alphaforge-instability --config examples/alphaforgebench.toml"
                  " --recording examples/portbench-sample.jsonl.gz")
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
