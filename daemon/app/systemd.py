"""systemd integration: ``sd_notify`` over ``$NOTIFY_SOCKET`` and a watchdog on the event loop.

The protocol is one datagram per message, newline-separated ``KEY=VALUE`` assignments, sent to
the AF_UNIX socket named by ``$NOTIFY_SOCKET`` (a leading ``@`` means the Linux abstract
namespace). Everything here is a no-op when ``$NOTIFY_SOCKET`` is unset, so the daemon runs the
same in a terminal, in tests and under systemd.

The watchdog pings ``WATCHDOG=1`` every ``WATCHDOG_USEC / 2`` from a task on the event loop: a
loop blocked by synchronous work stops the pings and systemd restarts the service
(``WatchdogSec=``), which is exactly the failure a thread-based pinger would hide.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from typing import Any

import structlog

log = structlog.get_logger(__name__)

_warned: set[str] = set()


def _address(raw: str) -> str:
    return "\0" + raw[1:] if raw.startswith("@") else raw


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``) to systemd; return whether a datagram was sent."""
    raw = os.environ.get("NOTIFY_SOCKET")
    if not raw:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), _address(raw))
    except OSError as exc:
        if raw not in _warned:  # once per socket: a dead manager must not flood the logs
            _warned.add(raw)
            log.warning("sd_notify failed", socket=raw, error=str(exc))
        return False
    return True


def watchdog_interval() -> float | None:
    """Return the ping period (half of ``$WATCHDOG_USEC``) in seconds, or ``None`` if disabled."""
    usec = os.environ.get("WATCHDOG_USEC")
    if not usec or not os.environ.get("NOTIFY_SOCKET"):
        return None
    pid = os.environ.get("WATCHDOG_PID")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None  # meant for another process (e.g. a wrapper that exec'd us)
        except ValueError:
            return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2e6 if value > 0 else None


class SystemdNotifier:
    """Component telling systemd about readiness, liveness and shutdown.

    ``start`` starts the watchdog task (and sends ``READY=1`` if ``ready_on_start``);
    :class:`daemon.app.live.LiveDaemon` calls :meth:`on_ready` once the store is open, the sources
    and the scheduler run, which sends ``READY=1``. ``stop`` sends ``STOPPING=1``.
    """

    name = "systemd"

    def __init__(self, *, ready_on_start: bool = False, status: str = "") -> None:
        """Create the notifier; ``ready_on_start`` sends READY=1 from :meth:`start`."""
        self.ready_on_start = ready_on_start
        self.status = status
        self.sent_ready = False
        self.pings = 0
        self._task: asyncio.Task[None] | None = None
        self._engine: Any = None

    @property
    def enabled(self) -> bool:
        """Return whether ``$NOTIFY_SOCKET`` is set."""
        return bool(os.environ.get("NOTIFY_SOCKET"))

    async def start(self, engine: Any, *, sources: list[Any]) -> None:
        """Start the watchdog task; send READY=1 now if ``ready_on_start``."""
        self._engine = engine
        del sources
        interval = watchdog_interval()
        if interval is not None and self._task is None:
            self._task = asyncio.create_task(self._watchdog(interval), name="systemd-watchdog")
            log.info("systemd watchdog enabled", ping_every_s=round(interval, 3))
        if self.ready_on_start:
            await self.on_ready()
        elif self.enabled:
            notify("STATUS=starting")

    async def on_ready(self) -> None:
        """Send READY=1 with a STATUS line (once)."""
        if self.sent_ready:
            return
        self.sent_ready = notify(f"READY=1\nSTATUS={self._status()}")
        if self.sent_ready:
            log.info("systemd notified ready")

    def _status(self) -> str:
        if self.status:
            return self.status
        eng = self._engine
        if eng is None:
            return "running"
        agents = sorted({a for slots in eng.slots.values() for a in slots})
        return f"running: {len(agents)} agents in {', '.join(eng.markets) or 'no markets'}"

    async def _watchdog(self, interval: float) -> None:
        """Ping WATCHDOG=1 every ``interval`` seconds while the loop is responsive."""
        while True:
            if notify("WATCHDOG=1"):
                self.pings += 1
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        """Send STOPPING=1 and stop the watchdog task."""
        notify("STOPPING=1")
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def monotonic_usec() -> int:
    """Return CLOCK_MONOTONIC in microseconds (for ``MONOTONIC_USEC=`` on reload)."""
    return int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
