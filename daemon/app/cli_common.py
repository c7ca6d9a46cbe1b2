"""What the ``paperarena`` commands share: loading the config, one-line failures, input checks.

Every error caused by bad input (config, arguments, files) prints one clear line (:func:`_fail`)
and exits :data:`EXIT_USAGE`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings import every section's types (feed adapters included): at load
    from daemon.config.settings import Config

EXIT_USAGE = 2


def package_version() -> str:
    """Return the installed paperarena version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("paperarena")
    except PackageNotFoundError:
        return "0+unknown"


def _load(path: str | None, *, rounds: bool = False) -> Config:
    """Load the config; ``rounds``: a command that may freeze CapitalBench rounds (its briefing
    must be readable from the working directory)."""
    from daemon.config.settings import ConfigError, load_config

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
