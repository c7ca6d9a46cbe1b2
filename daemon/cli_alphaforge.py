"""``paperarena alphaforge-instability``: repeated strategy generations on a frozen input."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path


def _fail(msg: str) -> int:
    sys.stderr.write(f"paperarena: {msg}\n")
    return 2


def alphaforge_instability(args: argparse.Namespace) -> int:
    """Run the generations, print the result as JSON and store it; 0, or 2 with one line."""
    from agents.alphaforge_instability import InstabilityError, run_instability, store_result
    from daemon.config import load_config
    from daemon.logs import configure_logging, register_config_secrets
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
        result = asyncio.run(run_instability(cfg, args.recording, repeats=args.repeats,
                                             temperatures=temps, sessions=args.sessions))
    except (InstabilityError, RecordingError) as exc:
        return _fail(str(exc))
    try:
        store_result(args.db, result, time.time())
    except Exception as exc:  # a database that cannot take the row: the result is still printed
        sys.stdout.write(json.dumps(result, sort_keys=True, indent=2) + "\n")
        return _fail(f"--db {args.db}: not stored: {exc}")
    sys.stdout.write(json.dumps(result, sort_keys=True, indent=2) + "\n")
    return 0
