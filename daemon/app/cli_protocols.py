"""The protocols' commands and the LLM consistency probe: PortBench's ``stage-scores`` and
``stress-gate``, AlphaForgeBench's ``alphaforge-instability`` (repeated strategy generations on a
frozen input, stored with :func:`daemon.store.append.append_rows`) and ``probe`` (a stored decision
input re-issued).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import time
from pathlib import Path

from daemon.app.cli_common import _fail, _load


def _stage_scores(args: argparse.Namespace) -> int:
    """Print the PortBench stage scores of a store (one line per agent)."""
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
    from agents.portbench.profile_scores import format_stress_windows
    from agents.portbench.stress_gate import format_global, global_gate, window_gate
    from daemon.store.reports import leaderboard

    windows = []
    ceps = []  # issue 29: the secondary criterion, stress CEPS against Table 6
    for db in args.dbs:
        try:
            board = leaderboard(db)
            windows.append(window_gate(board["rows"]))
            ceps.append((board.get("portbench_profiles") or {}).get("stress_ceps") or {})
        except Exception as exc:  # one line, never a traceback
            reason = " ".join(str(exc).split())[:200]
            sys.stderr.write(f"paperarena stress-gate: {db}: cannot read: {reason}\n")
            return 2
    sys.stdout.write(format_global(global_gate(windows)) + format_stress_windows(ceps))
    return 0


def alphaforge_instability(args: argparse.Namespace) -> int:
    """Run the generations, print the result as JSON and store it; 0, or 2 with one line."""
    from agents.alphaforgebench.instability import (
        INSTABILITY_SCOPE,
        InstabilityError,
        instability_row,
        run_instability,
    )
    from daemon.config.settings import load_config
    from daemon.core.logs import configure_logging, register_config_secrets
    from daemon.store.append import append_rows
    from feeds.recording import RecordingError

    try:
        temps = tuple(float(t) for t in args.temperatures.split(",") if t.strip())
    except ValueError:
        return _fail(f"--temperatures must be numbers separated by commas, got "
                     f"{args.temperatures!r}")
    if not temps or any(not 0.0 <= t <= 2.0 for t in temps):
        return _fail("--temperatures must be between 0 and 2")
    if args.repeats < 2:
        return _fail("--repeats must be at least 2")
    if args.sessions is not None and args.sessions < 2:
        return _fail("--sessions must be at least 2")
    if not Path(args.recording).is_file():
        return _fail(f"{args.recording}: no such recording")
    cfg = load_config(args.config)
    configure_logging(cfg.logging.level, cfg.logging.format)  # logs to stderr: stdout is JSON
    register_config_secrets(cfg)
    try:
        result = asyncio.run(run_instability(cfg.agents, cfg.markets.equity.assets, args.recording,
                                             repeats=args.repeats, temperatures=temps,
                                             sessions=args.sessions))
    except (InstabilityError, RecordingError) as exc:
        return _fail(str(exc))
    try:
        append_rows(args.db, [instability_row(result, time.time())], scope=INSTABILITY_SCOPE)
    except Exception as exc:  # a database that cannot take the row: the result is still printed
        sys.stdout.write(json.dumps(result, sort_keys=True, indent=2) + "\n")
        return _fail(f"--db {args.db}: not stored: {exc}")
    sys.stdout.write(json.dumps(result, sort_keys=True, indent=2) + "\n")
    return 0


def _probe(args: argparse.Namespace) -> int:
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
    from daemon.store.dbfile import StoreSchemaError
    from daemon.store.store import record_probe

    try:
        record_probe(args.db, result, time.time())
    except StoreSchemaError as exc:
        return _fail(str(exc))
    sys.stdout.write(json.dumps(result, sort_keys=True, indent=2, default=str) + "\n")
    return 0
