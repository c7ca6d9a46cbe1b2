"""Faults the daemon survives: one log line each, counted for ``paperarena_faults_total``.

A fault that the daemon handles (a store that stops answering, a background write that fails
while stopping) is reported by :func:`report_fault`: one ``error`` line naming it and the
exception in one line (never a traceback), and one more in :data:`FAULTS` under its kind. The
metrics export the tally as the counter ``paperarena_faults_total{kind=...}``.

The tally is per process: several daemons in one process (tests) share it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: How many faults of each kind this process reported (see :func:`report_fault`).
FAULTS: Counter[str] = Counter()

#: The kinds reported (the counter's ``kind`` label), each with what it means.
KINDS = {
    "store_write": "a store write failed (logged once per fault, until a write succeeds)",
    "performance_refresh": "the metrics' periodic read of the store failed",
    "round_store": "a decision round could not read or write the store",
    "job": "a scheduled job failed for another reason",
    "http_store": "an HTTP request could not read the store (answered 503)",
    "alert_store": "an alert or a halted agent's state could not be stored",
    "background_write": "a store write no caller waited for failed (e.g. while stopping)",
}


def one_line(exc: BaseException) -> str:
    """Return ``exc`` as one line: its type and its message, whitespace collapsed."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}"[:500] if text else name


def report_fault(logger: Any, kind: str, event: str, exc: BaseException | None = None,
                 **fields: Any) -> None:
    """Log ``event`` as one error line (``exc`` in one line, no traceback) and count ``kind``."""
    FAULTS[kind] += 1
    if exc is not None:
        fields["error"] = one_line(exc)
    logger.error(event, fault=kind, **fields)
