"""The config's one error type, in a module of its own so that catching it imports no config.

:class:`ConfigError` is raised by :mod:`.settings` (and the sections checked after load); the
command line catches it for every command, including those that never load a config
(``report``), without importing the settings and the feed adapters they assemble.
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))
