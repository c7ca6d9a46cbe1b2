"""Run a command's coroutine so that SIGTERM stops it as cleanly as SIGINT.

``asyncio.run`` turns SIGINT into a cancellation of the main task (every ``finally`` runs:
databases commit or roll back, MQTT claims are withdrawn, retained statuses cleared) but leaves
SIGTERM to its default action, which kills the process at once (exit 143) with nothing cleaned
up. :func:`run_stoppable` cancels the main task on SIGTERM too and raises :class:`Stopped` once
the coroutine has unwound, so the command can say so in one line and exit ``128 + signal``.
A second SIGTERM during the clean-up is ignored (logged); systemd's ``TimeoutStopSec`` still
bounds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")


class Stopped(Exception):
    """The command was stopped by a signal after a clean shutdown."""

    def __init__(self, signum: int) -> None:
        """Remember which signal stopped the command."""
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        """Return the conventional exit code of a command ended by this signal."""
        return 128 + self.signum


def run_stoppable(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` like :func:`asyncio.run`; on SIGTERM cancel it and raise :class:`Stopped`."""
    return asyncio.run(_guarded(main))


async def _guarded(main: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    got: list[int] = []

    def on_term() -> None:
        if got:
            log.warning("SIGTERM again: still stopping cleanly")
            return
        got.append(signal.SIGTERM)
        log.warning("SIGTERM: stopping cleanly")
        task.cancel()

    installed = False
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, on_term)
        installed = True
    try:
        return await main
    except BaseException as exc:
        if got and not isinstance(exc, KeyboardInterrupt | SystemExit):
            raise Stopped(got[0]) from None  # whatever the cancellation unwound into
        raise
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGTERM)
