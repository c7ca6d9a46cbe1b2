"""Mosquitto for the MQTT tests: the system broker (started once if down) and private brokers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import HANG_GUARD

HOST = "127.0.0.1"
PORT = 1883
SYSTEM_CONF = "/etc/mosquitto/mosquitto.conf"


def listening(port: int, host: str = HOST) -> bool:
    """Return whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def ensure_system_broker() -> bool:
    """Return whether a broker listens on 127.0.0.1:1883, starting Mosquitto once if not."""
    if listening(PORT):
        return True
    if shutil.which("mosquitto") and Path(SYSTEM_CONF).exists():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["mosquitto", "-d", "-c", SYSTEM_CONF], check=False, timeout=5,
                           capture_output=True)
        deadline = time.monotonic() + 30.0  # a busy machine starts it slowly
        while time.monotonic() < deadline:
            if listening(PORT):
                return True
            time.sleep(0.05)
    return False


requires_broker = pytest.mark.skipif(
    not ensure_system_broker(),
    reason="no MQTT broker listens on 127.0.0.1:1883 and `mosquitto -d` could not start one",
)


async def until(pred: Callable[[], bool], timeout: float = HANG_GUARD,
                what: str = "condition") -> None:
    """Wait until ``pred()`` holds, failing the test after ``timeout`` seconds (at least
    :data:`~tests.helpers.HANG_GUARD`: a hang guard, not a speed requirement)."""
    deadline = time.monotonic() + max(timeout, HANG_GUARD)
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class PrivateBroker:
    """A Mosquitto with persistence on a free port, which a test may stop, restart or kill."""

    def __init__(self, root: Path, *, max_queued_messages: int | None = None) -> None:
        with socket.socket() as s:
            s.bind((HOST, 0))
            self.port: int = s.getsockname()[1]
        self.conf = root / "mosquitto.conf"
        lines = [f"listener {self.port} {HOST}", "allow_anonymous true", "persistence true",
                 f"persistence_location {root}/", f"log_dest file {root}/mosquitto.log"]
        if max_queued_messages is not None:  # Mosquitto's default (1000) drops beyond it
            lines.append(f"max_queued_messages {max_queued_messages}")
        if os.geteuid() == 0:
            lines.append("user root")
        self.conf.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        """Start the broker and wait until it listens."""
        self.proc = subprocess.Popen(["mosquitto", "-c", str(self.conf)])
        await until(lambda: listening(self.port), timeout=5.0, what="private broker")

    async def stop(self) -> None:
        """Stop gracefully: the broker saves sessions and retained messages to disk."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        await asyncio.get_running_loop().run_in_executor(None, self.proc.wait, 5.0)
        self.proc = None

    def kill(self) -> None:
        """Crash: whatever changed since the last save is lost."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5.0)
            self.proc = None
