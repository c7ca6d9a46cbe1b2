"""structlog setup: JSON lines in production (not a terminal, or under systemd), console in a tty.

Secrets never reach the output: values of keys that look like credentials and any occurrence of
the values of registered secrets (API keys read from the environment) are replaced.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_SECRET_KEYS = re.compile(r"(key|secret|token|password|authorization|api_key)", re.IGNORECASE)
_secrets: set[str] = set()
REDACTED = "[redacted]"


def register_secret(value: str | None) -> None:
    """Make sure ``value`` never appears in a log line."""
    if value and len(value) >= 4:
        _secrets.add(value)


def redact_text(text: str) -> str:
    """Replace every registered secret and URL token parameter in ``text``."""
    for s in _secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return re.sub(r"((?:token|apikey|api_key|key|secret)=)[^&\s\"']+", r"\1" + REDACTED, text,
                  flags=re.IGNORECASE)


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for k, v in list(event.items()):
        if _SECRET_KEYS.search(k) and k not in ("event", "api_key_env", "key_env"):
            event[k] = REDACTED
        elif isinstance(v, str):
            event[k] = redact_text(v)
        elif isinstance(v, list | tuple | dict):
            event[k] = redact_text(repr(v))
    return event


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """Configure structlog (and stdlib logging) once for the process."""
    if fmt == "auto":
        under_systemd = bool(os.environ.get("INVOCATION_ID") or os.environ.get("JOURNAL_STREAM"))
        fmt = "json" if under_systemd or not sys.stderr.isatty() else "console"
    lvl = getattr(logging, level.upper(), logging.INFO)
    renderer: Any = (structlog.processors.JSONRenderer() if fmt == "json"
                     else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(lvl, logging.WARNING), stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
