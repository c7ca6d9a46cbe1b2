"""The strategy sandbox under the shipped systemd unit, and the daemon refusing a host without it.

The unit's syscall filter and namespace restrictions are applied by tests/unit_filter.py (no
systemd runs here as PID 1), as an unprivileged user with no capability and no_new_privs
(tests/unprivileged.py, when the suite runs as root): what ``DynamicUser=`` and
``CapabilityBoundingSet=`` give the service. ``paperarena check-config`` then probes the sandbox
exactly as ``run`` does at start: one worker started as strategies are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "paperarena.service"
CONFIG = ROOT / "examples" / "alphaforgebench.toml"
BIN = Path(sys.executable).parent
ALL_ON = ("sandbox: bubblewrap, user namespace, pid namespace, network namespace, capabilities,"
          " seccomp, limits: on")


def _check_config(config: Path, unit: Path | None, *, env: dict[str, str] | None = None,
                  opened: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``paperarena check-config config`` (under ``unit``'s filter, as nobody when root)."""
    cmd = [str(BIN / "paperarena"), "check-config", str(config)]
    if unit is not None:
        cmd = [sys.executable, str(ROOT / "tests" / "unit_filter.py"), str(unit), "--", *cmd]
        if os.geteuid() == 0:
            paths = [sys.base_prefix, str(ROOT), *map(str, opened)]
            cmd = [sys.executable, str(ROOT / "tests" / "unprivileged.py"), *paths, "--", *cmd]
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp",
                "LOCAL_LLM_KEY": "x", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                          env=full_env, cwd=ROOT)


def test_every_layer_is_on_under_the_shipped_unit() -> None:
    done = _check_config(CONFIG, UNIT)
    assert done.returncode == 0, done.stderr
    assert ALL_ON in done.stdout.splitlines(), done.stdout


@pytest.mark.parametrize(("shipped", "before"), [
    ("RestrictNamespaces=user pid net ipc uts mnt", "RestrictNamespaces=yes"),
    ("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
     "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"),
    ("SystemCallFilter=mount umount2 pivot_root seccomp capset",
     "SystemCallFilter=seccomp capset"),
])
def test_a_unit_without_the_sandbox_s_allowances_is_refused_in_one_line(
        tmp_path: Path, shipped: str, before: str) -> None:
    # The unit as shipped before the sandbox: bubblewrap cannot start (no namespaces, no netlink
    # socket for its loopback, no mount), and the daemon says so in one line instead of running
    # strategies without it. Each allowance of the shipped unit is needed.
    old = UNIT.read_text().replace(shipped, before)
    assert old != UNIT.read_text()
    tmp_path.chmod(0o755)
    unit = tmp_path / "old.service"
    unit.write_text(old)
    unit.chmod(0o644)
    done = _check_config(CONFIG, unit, opened=(tmp_path,))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "sandbox: missing bubblewrap (the sandbox did not start" in lines[0]
    assert "refusing to run the AlphaForgeBench agent(s) alphaforge" in lines[0]
    assert "Traceback" not in done.stderr


def _without_bwrap(tmp_path: Path) -> str:
    """Return a PATH with every tool of this one but bubblewrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = bin_dir / name
            if name != "bwrap" and not target.exists():
                target.symlink_to(os.path.join(d, name))
    return str(bin_dir)


def test_no_bubblewrap_refuses_the_protocol_with_one_line(tmp_path: Path) -> None:
    done = _check_config(CONFIG, None, env={"PATH": _without_bwrap(tmp_path)})
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert ("sandbox: missing bubblewrap ('bwrap' not found on PATH: install the Debian package"
            " bubblewrap)") in lines[0]
    assert "allow_degraded = true" in lines[0]


def test_allow_degraded_runs_and_warns(tmp_path: Path) -> None:
    config = tmp_path / "degraded.toml"
    config.write_text(CONFIG.read_text().replace("allow_degraded = false",
                                                 "allow_degraded = true"))
    done = _check_config(config, None, env={"PATH": _without_bwrap(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("warning: sandbox: missing bubblewrap")
    assert "run DEGRADED" in done.stderr and ALL_ON not in done.stdout


def test_a_config_without_strategy_code_never_probes(tmp_path: Path) -> None:
    # No AlphaForgeBench agent: no sandbox needed, nothing refused even without bubblewrap.
    done = _check_config(ROOT / "examples" / "default.toml", None,
                         env={"PATH": _without_bwrap(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "sandbox" not in done.stdout + done.stderr


@pytest.mark.parametrize("layer", ["seccomp", "limits"])
def test_a_layer_the_worker_reports_missing_is_named(layer: str) -> None:
    from agents.alphaforgebench.isolation import missing_layers

    report = {"ready": True, "uid": 65534, "gid": 65534, "pid": 2, "net": ["lo"],
              "caps": "none", "seccomp": "on", "limits": "on"}
    assert missing_layers(report, bubblewrap=True) == {}
    report[layer] = "off: refused"
    assert missing_layers(report, bubblewrap=True) == {layer: "off: refused"}
    assert set(missing_layers({"ready": True}, bubblewrap=True)) == {
        "user namespace", "pid namespace", "network namespace", "capabilities", "seccomp",
        "limits"}


@pytest.mark.parametrize("cmd", ["replay", "run"])
def test_run_and_replay_refuse_before_anything_starts(tmp_path: Path, cmd: str) -> None:
    db = tmp_path / "af.db"
    args = (["replay", str(ROOT / "examples" / "sample.jsonl.gz")] if cmd == "replay"
            else ["run", "--duration", "5"])
    done = subprocess.run(
        [str(BIN / "paperarena"), *args, "--config", str(CONFIG), "--db", str(db)],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
        env={"PATH": _without_bwrap(tmp_path), "HOME": str(tmp_path), "LOCAL_LLM_KEY": "x",
             "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "sandbox: missing bubblewrap" in lines[0], done.stderr
    assert not db.exists()  # refused before the store was opened
