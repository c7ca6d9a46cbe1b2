"""Durations in config files: ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` or a number of seconds.

Kept apart from :mod:`daemon.config.settings` so that the ``[sources.*]`` settings (``feeds/``),
which ``daemon.config.settings`` imports, parse durations the same way without an import cycle.
"""

from __future__ import annotations

import math
import re
import time
from email.utils import parsedate_to_datetime
from typing import Annotated, Any

from pydantic import BeforeValidator

__all__ = ["MAX_DURATION", "Duration", "parse_duration", "retry_after_seconds"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}

#: The longest duration any setting accepts (10 years): longer ones overflow date arithmetic.
MAX_DURATION = 3650 * 86400.0


def parse_duration(value: Any) -> float:
    """Parse ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` or a number of seconds into seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '30s', '15m' or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"invalid duration {value!r} (use e.g. '30s', '15m', '2h', '1d')")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ValueError("expected a duration such as '30s', '15m' or a number of seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("duration must be a finite, non-negative number of seconds")
    if seconds > MAX_DURATION:
        raise ValueError(f"duration {value!r} is too long (at most 3650d)")
    return seconds


#: A float field of seconds that also accepts duration strings (``"20s"``, ``"5m"``).
Duration = Annotated[float, BeforeValidator(parse_duration)]


def retry_after_seconds(value: str | None, *, ms: str | None = None,
                        now: float | None = None) -> float | None:
    """Return the delay a ``Retry-After`` header asks for, in seconds: a number of seconds or an
    HTTP date (one already past: 0); ``ms``, a ``retry-after-ms`` header, comes first when
    present. ``None`` unless it is a finite delay >= 0."""
    if ms is not None:
        try:
            seconds = float(ms) / 1000.0
        except ValueError:
            return None
    elif not value:
        return None
    else:
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = parsedate_to_datetime(value).timestamp()
            except (TypeError, ValueError, OverflowError, IndexError):
                return None
            return max(0.0, when - (time.time() if now is None else now))
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
