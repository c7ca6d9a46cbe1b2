"""The ``paperarena`` command line: :func:`main` parses the arguments (:mod:`.cli_parser`) and
hands each command to its handler (:mod:`.cli_runs`, :mod:`.cli_store`, :mod:`.cli_daemon`,
:mod:`.cli_protocols`).

Every error caused by bad input (config, arguments, files) prints one clear line and exits 2.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from daemon.app.cli_common import EXIT_USAGE, _fail, _keys_problem, _load
from daemon.app.cli_daemon import _resume, _serve, _status
from daemon.app.cli_parser import build_parser
from daemon.app.cli_protocols import _probe, _stage_scores, _stress_gate, alphaforge_instability
from daemon.app.cli_runs import _build_recording, _record, _replay, _replay_roles, _run
from daemon.app.cli_store import (
    _backup_or_export,
    _migrate,
    _report,
    _verify,
    _verify_bundle,
)
from daemon.app.sandbox_check import sandbox_problem
from daemon.app.signals import Stopped
from daemon.config.settings import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the paperarena command line."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "check-config":
            cfg = _load(args.file, rounds=True)
            from daemon.alerts.config import parse_alerts_config

            parse_alerts_config(cfg.alerts, source=args.file)
            problem = _keys_problem(cfg, args) or sandbox_problem(cfg, sys.stdout)
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
        if args.cmd == "verify":
            return _verify(args)
        if args.cmd == "verify-bundle":
            return _verify_bundle(args)
        if args.cmd == "probe":
            return _probe(args)
        if args.cmd == "stress-gate":
            return _stress_gate(args)
        if args.cmd == "status":
            return _status(args)
        if args.cmd == "serve":
            return _serve(args)
        if args.cmd == "verify-round":
            from agents.capitalbench.rounds import verify_command

            return verify_command(args.round_dir, sys.stdout, sys.stderr)
        if args.cmd == "alphaforge-instability":
            return alphaforge_instability(args)
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
    except Stopped as exc:  # SIGTERM: unwound like SIGINT (claims withdrawn, store consistent)
        sys.stderr.write(f"paperarena {args.cmd}: {exc}; rerun the same command to resume\n")
        return exc.exit_code
    return _fail(f"unknown command {args.cmd}")


if __name__ == "__main__":
    sys.exit(main())
