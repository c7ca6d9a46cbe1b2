"""sd_notify and the event-loop watchdog against a local datagram socket; the unit files."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from daemon.app import systemd
from daemon.app.components import default_components
from daemon.app.live import STOP_GRACE, LiveDaemon
from daemon.app.systemd import SystemdNotifier, notify, watchdog_interval
from daemon.config.settings import parse_config
from tests.helpers import HANG_GUARD, wait_for

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "systemd"


class Listener:
    """A bound AF_UNIX datagram socket recording (monotonic time, message) from a thread."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.05)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def texts(self) -> list[str]:
        return [m for _, m in self.messages]

    def wait_for(self, needle: str, timeout: float = HANG_GUARD) -> float:
        deadline = time.monotonic() + max(timeout, HANG_GUARD)
        while time.monotonic() < deadline:
            for t, m in list(self.messages):
                if needle in m:
                    return t
            time.sleep(0.01)
        raise AssertionError(f"{needle!r} not received; got {self.texts()}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def listener(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    path = str(tmp_path / "notify.sock")
    lst = Listener(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield lst
    lst.close()


def test_notify_is_a_noop_without_notify_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    assert notify("READY=1") is False
    assert watchdog_interval() is None
    comps = default_components(parse_config({"http": {"enabled": False}}), mode="live")
    assert not any(c.name == "systemd" for c in comps)


def test_notify_path_socket(listener: Listener) -> None:
    assert notify("READY=1\nSTATUS=hello")
    listener.wait_for("READY=1")
    assert listener.texts() == ["READY=1\nSTATUS=hello"]


def test_notify_abstract_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"paperarena-test-{uuid.uuid4().hex}"
    lst = Listener("\0" + name)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("WATCHDOG=1")
        lst.wait_for("WATCHDOG=1")
    finally:
        lst.close()


def test_notify_to_a_dead_socket_returns_false(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    assert notify("READY=1") is False


def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch, listener: Listener) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert watchdog_interval() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert watchdog_interval() is None  # meant for another process
    monkeypatch.delenv("WATCHDOG_PID")
    for bad in ("0", "abc", ""):
        monkeypatch.setenv("WATCHDOG_USEC", bad)
        assert watchdog_interval() is None


def _fake_engine() -> SimpleNamespace:
    return SimpleNamespace(markets=("equity",), slots={"equity": {"a": None, "b": None}})


async def test_notifier_lifecycle(listener: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "100000")  # ping every 50 ms
    n = SystemdNotifier()
    await n.start(_fake_engine(), sources=[])
    await asyncio.sleep(0.3)
    assert not any(m.startswith("READY=1") for m in listener.texts())  # not before on_ready
    await n.on_ready()
    await n.on_ready()  # once only
    await n.stop()
    listener.wait_for("STOPPING=1")
    texts = listener.texts()
    assert texts.count("READY=1\nSTATUS=running: 2 agents in equity") == 1
    assert texts.count("WATCHDOG=1") >= 3
    assert texts.index("STOPPING=1") > texts.index("READY=1\nSTATUS=running: 2 agents in equity")
    after = len(listener.messages)
    await asyncio.sleep(0.2)
    assert len(listener.messages) == after  # no pings after stop


async def test_ready_on_start(listener: Listener) -> None:
    n = SystemdNotifier(ready_on_start=True, status="recording")
    await n.start(_fake_engine(), sources=[])
    listener.wait_for("READY=1\nSTATUS=recording")
    await n.stop()
    assert n._task is None  # no WATCHDOG_USEC: no watchdog task


async def test_watchdog_stops_while_the_loop_is_blocked(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    interval = 0.05
    monkeypatch.setenv("WATCHDOG_USEC", str(int(interval * 2e6)))
    n = SystemdNotifier()

    def pings() -> list[float]:
        return [t for t, m in list(listener.messages) if m == "WATCHDOG=1"]

    await n.start(_fake_engine(), sources=[])
    await wait_for(lambda: len(pings()) >= 4)  # pinging (event-bound, not a set pause)
    block = 2.0  # 40 watchdog intervals: far longer than any stall of a busy machine
    t_block = time.monotonic()
    time.sleep(block)  # a blocked event loop: synchronous work on the loop thread
    await wait_for(lambda: sum(t > t_block + block for t in pings()) >= 4)  # pinging again
    await n.stop()
    got = pings()
    gaps = [b - a for a, b in itertools.pairwise(got)]
    assert max(gaps) >= block - 0.02, gaps
    # The long gap is the blocked one; every other gap is much shorter.
    assert sorted(gaps)[-2] < block / 2, gaps
    i = max(range(len(gaps)), key=gaps.__getitem__)
    assert got[i] <= t_block + block / 4 and got[i + 1] >= t_block + block - 0.02


async def test_live_daemon_sends_ready_after_the_scheduler_runs(
    listener: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    cfg = parse_config({"sources": {"enabled": False}, "http": {"enabled": False}})
    comps = default_components(cfg, mode="live")
    assert [c.name for c in comps][-1:] == ["systemd"]
    assert not any(c.name == "systemd" for c in default_components(cfg, mode="replay"))
    seen: dict[str, bool] = {}
    notifier = comps[-1]
    assert isinstance(notifier, SystemdNotifier)
    daemon = LiveDaemon(cfg, db=str(tmp_path / "d.db"), components=comps)
    original = notifier.on_ready

    async def on_ready() -> None:
        assert daemon.scheduler is not None
        seen["scheduler_running"] = daemon.scheduler.running
        seen["store_open"] = daemon.engine is not None
        await original()

    notifier.on_ready = on_ready  # type: ignore[method-assign]
    await daemon.start()
    try:
        listener.wait_for("READY=1")
        assert seen == {"scheduler_running": True, "store_open": True}
        await wait_for(lambda: "WATCHDOG=1" in listener.texts())  # pings come (no set pause)
    finally:
        await daemon.stop()
    listener.wait_for("STOPPING=1")


def test_daemon_subprocess_notifies_systemd(tmp_path: Path) -> None:
    sock = str(tmp_path / "n.sock")
    lst = Listener(sock)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[sources]\nenabled = false\n[http]\nenabled = false\n")
    env = {**os.environ, "NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "400000",
           "INVOCATION_ID": "test"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.app.cli", "run", "--config", str(cfg), "--db",
         str(tmp_path / "d.db")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        lst.wait_for("READY=1", timeout=30)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        lst.close()
    assert proc.returncode == 0, err
    texts = lst.texts()
    assert texts[0] == "STATUS=starting"
    assert any(t.startswith("READY=1\nSTATUS=running: 4 agents") for t in texts)
    assert "WATCHDOG=1" in texts and "STOPPING=1" in texts
    # JSON lines under systemd (INVOCATION_ID set).
    assert err.strip() and all(line.startswith("{") for line in err.strip().splitlines())


# -- unit files --------------------------------------------------------------------------------


def _directives(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z]+)=(.*)$", line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


def test_main_unit_directives() -> None:
    d = _directives(UNITS / "paperarena.service")
    assert d["Type"] == ["notify"]
    assert d["ExecStart"] == ["/opt/paperarena/venv/bin/paperarena run --config "
                              "/etc/paperarena/config.toml --db /var/lib/paperarena/paperarena.db"]
    assert d["Restart"] == ["on-failure"]
    assert "StartLimitIntervalSec" in d and "StartLimitBurst" in d
    assert d["EnvironmentFile"] == ["-/etc/paperarena/env"]
    assert d["StateDirectory"] == ["paperarena"]
    assert d["ConfigurationDirectory"] == ["paperarena"]
    stop = float(d["TimeoutStopSec"][0].removesuffix("s"))
    assert stop >= STOP_GRACE + 20  # the daemon's grace, then components and the final flush
    assert d["WatchdogSec"] == ["60s"]
    for key, value in {"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
                       "NoNewPrivileges": "yes", "ProtectKernelTunables": "yes",
                       "ProtectControlGroups": "yes", "LockPersonality": "yes",
                       "CapabilityBoundingSet": "", "DynamicUser": "yes",
                       "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                       "RestrictNamespaces": "user pid net ipc uts mnt"}.items():
        assert d[key] == [value], key
    assert "@system-service" in d["SystemCallFilter"]
    assert d["MemoryDenyWriteExecute"] == ["no"]  # decided and commented in the unit


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify refuses ExecStart binaries that do not exist on this machine: check copies whose
    # /opt/paperarena path points at /bin/true (everything else is checked as shipped).
    names = sorted(p.name for p in UNITS.iterdir() if p.suffix in (".service", ".timer"))
    assert {"paperarena.service", "paperarena-recorder.service",
            "paperarena-recorder-rotate.timer"} <= set(names)
    for name in names:
        text = (UNITS / name).read_text().replace("/opt/paperarena/venv/bin/paperarena",
                                                  "/bin/true")
        (tmp_path / name).write_text(text)
    res = subprocess.run(["systemd-analyze", "verify", *[str(tmp_path / n) for n in names]],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip() == "", res.stderr


def test_systemd_module_has_no_print() -> None:
    assert "print(" not in Path(systemd.__file__).read_text()
