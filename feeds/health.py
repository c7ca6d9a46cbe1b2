"""Source health for people: short error names and one rate-limited summary line.

:func:`short_error` turns an exception (following its ``__cause__`` chain) into a few words such
as ``connect refused``, ``DNS failure``, ``timeout`` or ``HTTP 429``, never a long repr.

:class:`SourceHealth` watches every source's ``state`` and ``last_error`` and logs one line

    sources: 0/4 live (yahoo: connect refused, polymarket: connect refused, ...); standby:
    yahoo-rest; rounds skip until prices arrive

once the sources have settled after start, then on every change of who is live and why (at most
one line per ``min_gap``; changes in between are merged into the next line), and as a reminder
every ``repeat`` while some source is not live. Flapping between connecting and backing off with
the same error is not a change. Sources may expose ``standby`` (a fallback not needed now: listed,
not counted) and ``provides_prices`` (default True; news and history backfills say False).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import structlog
from websockets.exceptions import ConnectionClosed, InvalidStatus

__all__ = ["SourceHealth", "failure_is_news", "short_error"]

log = structlog.get_logger(__name__)


def _one(exc: BaseException) -> str | None:
    """Return the short name of ``exc`` itself, or None to look at its cause."""
    if isinstance(exc, ConnectionRefusedError):
        return "connect refused"
    if isinstance(exc, socket.gaierror | aiohttp.ClientConnectorDNSError):
        return "DNS failure"
    if isinstance(exc, ssl.SSLError | aiohttp.ClientSSLError):
        return "TLS error"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return "timeout"
    if isinstance(exc, InvalidStatus):
        return f"HTTP {exc.response.status_code}"
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status >= 300:
        return f"HTTP {status}"
    if isinstance(exc, ConnectionClosed):
        code = exc.rcvd.code if exc.rcvd is not None else 1006
        return f"closed (code {code})"
    if isinstance(exc, aiohttp.ServerDisconnectedError | ConnectionResetError):
        return "connection reset"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _one(exc.os_error) or "connect failed"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return None


def short_error(exc: BaseException | None, limit: int = 60) -> str:
    """Return a few words naming ``exc`` (its cause chain first), at most ``limit`` characters."""
    seen: list[BaseException] = []
    cur = exc
    while cur is not None and cur not in seen and len(seen) < 8:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in reversed(seen):  # the root cause names the problem best
        name = _one(e)
        if name:
            return name
    if exc is None:
        return ""
    text = str(exc).split("\n", 1)[0] or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_is_news(n: int) -> bool:
    """Return whether the ``n``-th failure in a row deserves a warning (1st, 8th, 16th, 32nd...).

    The others are logged at debug: the health line already says the source is down and why.
    """
    return n == 1 or (n >= 8 and n & (n - 1) == 0)


def _state(src: Any) -> str:
    st = getattr(src, "state", "live")
    return str(getattr(st, "value", st))


class SourceHealth:
    """Log one summary line of source health at start, on every change and as a reminder."""

    def __init__(
        self,
        sources: Sequence[Any],
        *,
        min_gap: float = 10.0,
        repeat: float = 900.0,
        settle: float = 5.0,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Watch ``sources``; nothing is logged before :meth:`check` or :meth:`run`."""
        self.sources = list(sources)
        self.min_gap = min_gap
        self.repeat = repeat
        self.settle = settle
        self.interval = interval
        self._clock = clock
        self._started = clock()
        self._logged: tuple[Any, ...] | None = None
        self._logged_at = -float("inf")
        self.lines: list[str] = []

    def snapshot(self) -> tuple[tuple[str, str, str], ...]:
        """Return (name, kind, reason) per source; kind is live, standby or down."""
        out = []
        for src in self.sources:
            name = str(getattr(src, "name", "?"))
            state = _state(src)
            if getattr(src, "standby", False):
                out.append((name, "standby", ""))
            elif state == "live":
                out.append((name, "live", ""))
            else:
                out.append((name, "down", str(getattr(src, "last_error", "") or state)))
        return tuple(out)

    def line(self, snap: tuple[tuple[str, str, str], ...] | None = None) -> str:
        """Return the summary line for ``snap`` (default: now)."""
        snap = self.snapshot() if snap is None else snap
        counted = [s for s in snap if s[1] != "standby"]
        live = [s for s in counted if s[1] == "live"]
        text = f"sources: {len(live)}/{len(counted)} live"
        down = [f"{n}: {r}" for n, k, r in counted if k == "down"]
        if down:
            text += f" ({', '.join(down)})"
        standby = [n for n, k, _ in snap if k == "standby"]
        if standby:
            text += f"; standby: {', '.join(standby)}"
        by_name = {getattr(s, "name", "?"): s for s in self.sources}
        price_live = any(
            k == "live" and getattr(by_name.get(n), "provides_prices", True) for n, k, _ in snap
        )
        if not price_live:
            text += "; rounds skip until prices arrive"
        return text

    def _settled(self, snap: tuple[tuple[str, str, str], ...], now: float) -> bool:
        if now - self._started >= self.settle:
            return True
        return all(r not in ("connecting", "") for _, k, r in snap if k == "down")

    def check(self) -> str | None:
        """Log and return the summary line if it is due now, else return None."""
        now = self._clock()
        snap = self.snapshot()
        if self._logged is None and not self._settled(snap, now):
            return None
        changed = snap != self._logged
        healthy = all(k != "down" for _, k, _ in snap)
        due = changed and now - self._logged_at >= self.min_gap
        reminder = not changed and not healthy and now - self._logged_at >= self.repeat
        if not (due or reminder):
            return None
        text = self.line(snap)
        self._logged, self._logged_at = snap, now
        self.lines.append(text)
        if healthy:
            log.info(text)
        else:
            log.warning(text)
        return text

    async def run(self) -> None:
        """Check every ``interval`` seconds until cancelled."""
        while True:
            try:
                self.check()
            except Exception as exc:  # a health line must never stop the daemon
                log.error("source health check failed", error=repr(exc))
            await asyncio.sleep(self.interval)
