"""Validators and the frozen base model shared by every section of the config.

Durations, wall times (``HH:MM``), host names and URLs are checked here once; each section's
fields (daemon/config/markets.py, daemon/config/runtime.py, agents/config.py) use them.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from daemon.core.durations import parse_duration

_HHMM = re.compile(r"^(\d{1,2}):(\d{2})$")
_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def positive_duration(value: Any, minimum: float = 0.0) -> float:
    """Parse a duration that must be greater than 0 (and at least ``minimum`` seconds)."""
    seconds = parse_duration(value)
    if seconds <= 0 or seconds < minimum:
        floor = f"at least {minimum:g} s" if minimum else "greater than 0"
        raise ValueError(f"duration must be {floor}")
    return seconds


#: A :data:`daemon.core.durations.Duration` greater than 0.
PositiveDuration = Annotated[float, BeforeValidator(positive_duration)]


def check_hhmm(value: str) -> str:
    """Return ``value`` if it is a wall time ``HH:MM`` (00:00 to 23:59), else raise."""
    if not _HHMM.match(value) or not _valid_hhmm(value):
        raise ValueError(f"invalid time {value!r} (use HH:MM, 00:00 to 23:59)")
    return value


def _valid_hhmm(value: str) -> bool:
    """Return False for an ``HH:MM`` time out of range (True for anything else)."""
    m = _HHMM.match(value)
    return m is None or (int(m.group(1)) <= 23 and int(m.group(2)) <= 59)


def host_problem(host: str) -> str | None:
    """Return why ``host`` is not an IP address or DNS name, or None if it is one."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if (not host or len(host) > 253 or not all(_HOST_LABEL.match(x) for x in labels)
            or all(x.isdigit() for x in labels)):
        return f"not an IP address or host name: {host!r}"
    return None


def url_problem(url: str, schemes: tuple[str, ...]) -> str | None:
    """Return why ``url`` is not an absolute URL with one of ``schemes``, or None if it is."""
    want = " or ".join(f"{s}://" for s in schemes)
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return f"not a valid URL: {url!r}"
    if parts.scheme not in schemes:
        return f"expected a {want} URL, got {url!r}"
    if not parts.hostname or any(c.isspace() for c in url) or not port_ok:
        return f"not a valid URL (host or port): {url!r}"
    return host_problem(parts.hostname)


def _duration_field(default: float, description: str) -> Any:
    return Field(default=default, description=description)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

def is_loopback_url(url: str) -> bool:
    """Return whether ``url``'s host is a loopback address (``localhost``, 127.0.0.0/8, ::1)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
