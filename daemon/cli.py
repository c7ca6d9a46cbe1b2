"""The ``paperarena`` command line (placeholder until the engine lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the paperarena command line."""
    del argv
    sys.stderr.write("paperarena: not wired yet\n")
    return 2
