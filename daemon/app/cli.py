"""The ``paperarena`` command line: :func:`main` parses the arguments (:mod:`.cli_parser`) and
hands each command to its handler (:mod:`.cli_runs`, :mod:`.cli_store`, :mod:`.cli_daemon`,
:mod:`.cli_protocols`), imported only when its command runs: ``report --db`` imports no config,
feed adapter or network library (issue 27).

Every error caused by bad input (config, arguments, files) prints one clear line and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from daemon.app.cli_common import EXIT_USAGE, _fail
from daemon.app.cli_parser import build_parser
from daemon.config.errors import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the paperarena command line."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except ConfigError as exc:
        for line in exc.problems:
            sys.stderr.write(f"{exc.source}: {line}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `paperarena ... | head`: the reader left; no traceback
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer killed by it
    except Exception as exc:
        # Stopped is raised only by a command that imported its module (daemon.app.signals,
        # which imports structlog): imported here, on the way out, not by every command.
        from daemon.app.signals import Stopped

        if not isinstance(exc, Stopped):
            raise
        # SIGTERM: unwound like SIGINT (claims withdrawn, store consistent)
        sys.stderr.write(f"paperarena {args.cmd}: {exc}; rerun the same command to resume\n")
        return exc.exit_code


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args.cmd``, importing only its own handler's module."""
    if args.cmd == "check-config":
        return _check_config(args)
    if args.cmd in ("report", "backup", "export", "migrate", "verify", "verify-bundle"):
        return _store_command(args)
    if args.cmd in ("replay", "run", "replay-publish", "replay-evaluate", "record",
                    "build-recording"):
        return _run_command(args)
    if args.cmd in ("stage-scores", "probe", "stress-gate", "alphaforge-instability"):
        return _protocol_command(args)
    if args.cmd in ("resume", "status", "serve"):
        return _daemon_command(args)
    if args.cmd == "verify-round":
        from agents.capitalbench.rounds import verify_command

        return verify_command(args.round_dir, sys.stdout, sys.stderr)
    return _fail(f"unknown command {args.cmd}")


def _check_config(args: argparse.Namespace) -> int:
    """Load and check a config as a run would; say "ok" with its agents and markets."""
    from daemon.alerts.config import parse_alerts_config
    from daemon.app.cli_common import _keys_problem, _load
    from daemon.app.sandbox_check import sandbox_problem

    cfg = _load(args.file, rounds=True)
    parse_alerts_config(cfg.alerts, source=args.file)
    problem = _keys_problem(cfg, args) or sandbox_problem(cfg, sys.stdout)
    if problem:
        return _fail(f"{args.file}: {problem}")
    sys.stdout.write(f"{args.file}: ok ({len(cfg.agents)} agents, markets: "
                     f"{', '.join(cfg.enabled_markets()) or 'none'})\n")
    return 0


def _store_command(args: argparse.Namespace) -> int:
    """Run a command that reads, copies, moves or checks a store (:mod:`.cli_store`)."""
    from daemon.app import cli_store

    if args.cmd == "report":
        return cli_store._report(args)
    if args.cmd in ("backup", "export"):
        if args.db.startswith(("postgresql://", "postgres://")):
            return _fail(f"--db is a PostgreSQL store: {args.cmd} it with pg_dump "
                         "(docs/distributed.md, \"Backups\")")
        return cli_store._backup_or_export(args)
    if args.cmd == "migrate":
        return cli_store._migrate(args)
    if args.cmd == "verify":
        return cli_store._verify(args)
    return cli_store._verify_bundle(args)


def _run_command(args: argparse.Namespace) -> int:
    """Run a command that runs, replays or records (:mod:`.cli_runs`)."""
    from daemon.app import cli_runs

    if args.cmd == "replay":
        return cli_runs._replay(args)
    if args.cmd == "run":
        return cli_runs._run(args)
    if args.cmd in ("replay-publish", "replay-evaluate"):
        return cli_runs._replay_roles(args)
    if args.cmd == "record":
        return cli_runs._record(args)
    return cli_runs._build_recording(args)


def _protocol_command(args: argparse.Namespace) -> int:
    """Run a protocol's own command (:mod:`.cli_protocols`)."""
    from daemon.app import cli_protocols

    if args.cmd == "stage-scores":
        return cli_protocols._stage_scores(args)
    if args.cmd == "probe":
        return cli_protocols._probe(args)
    if args.cmd == "stress-gate":
        return cli_protocols._stress_gate(args)
    return cli_protocols.alphaforge_instability(args)


def _daemon_command(args: argparse.Namespace) -> int:
    """Run a command that starts or asks a daemon (:mod:`.cli_daemon`)."""
    from daemon.app import cli_daemon

    if args.cmd == "resume":
        return cli_daemon._resume(args)
    if args.cmd == "status":
        return cli_daemon._status(args)
    return cli_daemon._serve(args)


if __name__ == "__main__":
    sys.exit(main())
