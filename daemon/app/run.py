"""Start the daemon in a role (``paperarena run`` / ``paperarena demo``) until a signal or a
duration: signals, start-up errors in one line, exit code.

Above both :mod:`daemon.app.live` (the daemon) and :mod:`daemon.app.roles` (which builds one per
role), so neither imports the other back.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import structlog

from daemon.app.components import Component
from daemon.app.live import StartupError
from daemon.config.settings import Config

log = structlog.get_logger(__name__)

__all__ = ["run_live", "startup_error_line"]


async def run_live(config: Config, *, db: str | None = None, role: str = "all",
                   duration: float | None = None, version: str = "",
                   components: list[Component] | None = None,
                   config_path: str | None = None, append: bool = False) -> int:
    """Run the daemon until SIGINT/SIGTERM (or ``duration``); return the exit code.

    SIGHUP re-reads ``config_path`` and applies agent and alert changes (see
    :meth:`daemon.app.live.LiveDaemon.reload`). A database whose last run was a replay is
    refused at start unless ``append``.
    """
    from daemon.app.roles import role_daemon
    from daemon.app.systemd import notify

    # all: sources + agents in one process; feeds / evaluator: split over MQTT
    # (daemon/app/roles.py).
    daemon = role_daemon(config, role, db=db, version=version, components=components)
    daemon.append = append
    loop = asyncio.get_running_loop()

    def on_stop_signal() -> None:
        notify("STOPPING=1")
        daemon.request_stop()

    reloads: set[asyncio.Task[bool]] = set()

    def on_hup() -> None:
        if daemon.ready.is_set():
            task = loop.create_task(daemon.reload(config_path), name="config-reload")
            reloads.add(task)
            task.add_done_callback(reloads.discard)
        else:
            log.warning("SIGHUP ignored: the daemon is not ready yet")

    for sig, handler in ((signal.SIGINT, on_stop_signal), (signal.SIGTERM, on_stop_signal),
                         (signal.SIGHUP, on_hup)):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, handler)
    t0 = time.monotonic()
    try:
        await daemon.start()
    except BaseException as exc:
        await daemon.abort_start()
        if isinstance(exc, Exception):
            raise StartupError(startup_error_line(exc, daemon.db)) from exc
        raise
    try:
        await daemon.wait(duration)
    finally:
        await daemon.stop()
    log.info("daemon exited", uptime_s=round(time.monotonic() - t0, 3), role=role)
    return 0


def startup_error_line(exc: BaseException, db: str) -> str:
    """Return one line for a start-up failure: the message of errors meant for the user, else
    what failed and why."""
    import sqlite3

    from daemon.app.roles import RoleError
    from daemon.config.settings import ConfigError
    from daemon.store.dbfile import StoreOpenError, describe_sqlite_error

    text = " ".join(str(exc).split())
    if isinstance(exc, ConfigError):
        return "; ".join(f"{exc.source}: {p}" for p in exc.problems)
    if isinstance(exc, StoreOpenError | RoleError):
        return text
    if isinstance(exc, sqlite3.Error):
        return describe_sqlite_error(db, exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot start: {exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return f"cannot start: {type(exc).__name__}: {text}"
