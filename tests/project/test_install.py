"""deploy/install.sh in a temporary prefix: idempotent install, upgrade-safe, uninstall, purge."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "deploy" / "install.sh"
UNITS = ("paperarena.service", "paperarena-recorder.service",
         "paperarena-recorder-rotate.service", "paperarena-recorder-rotate.timer")


def run(prefix: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PAPERARENA_PREFIX": str(prefix)}
    return subprocess.run(["bash", str(INSTALL), *args], env=env, capture_output=True,
                          text=True, timeout=60)


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (p.stat().st_mode & 0o7777, digest)
    return out


def test_install_is_idempotent_and_uninstall_keeps_state(tmp_path: Path) -> None:
    prefix = tmp_path / "root"
    first = run(prefix, "--no-venv", "--no-systemctl")
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    etc = prefix / "etc" / "paperarena"
    units = prefix / "etc" / "systemd" / "system"
    assert (etc / "config.toml").read_text() == (ROOT / "examples" / "default.toml").read_text()
    assert (etc / "env").stat().st_mode & 0o777 == 0o600
    for u in UNITS:
        assert (units / u).read_bytes() == (ROOT / "systemd" / u).read_bytes()
    assert "systemctl daemon-reload && systemctl enable --now paperarena.service" in first.stdout
    before = snapshot(prefix)

    second = run(prefix, "--no-venv", "--no-systemctl")
    assert second.returncode == 0, second.stderr
    assert snapshot(prefix) == before  # same files, same modes, same contents
    assert "installed" not in second.stdout.replace("not installed", "")
    assert second.stdout.count("unchanged ") == len(UNITS)

    # An upgrade keeps the operator's config and secrets, and repairs the env file's mode.
    (etc / "config.toml").write_text("# edited by the operator\n")
    (etc / "env").write_text("OPENAI_API_KEY=sk-x\n")
    (etc / "env").chmod(0o644)
    assert run(prefix, "--no-venv").returncode == 0
    assert (etc / "config.toml").read_text() == "# edited by the operator\n"
    assert (etc / "env").read_text() == "OPENAI_API_KEY=sk-x\n"
    assert (etc / "env").stat().st_mode & 0o777 == 0o600

    # Uninstall: units and /opt go, config and state stay; twice is fine.
    state = prefix / "var" / "lib" / "paperarena"
    state.mkdir(parents=True)
    (state / "paperarena.db").write_bytes(b"db")
    (prefix / "opt" / "paperarena" / "venv").mkdir(parents=True)
    for _ in range(2):
        res = run(prefix, "--uninstall")
        assert res.returncode == 0, res.stderr
        assert not any((units / u).exists() for u in UNITS)
        assert not (prefix / "opt" / "paperarena").exists()
        assert (state / "paperarena.db").read_bytes() == b"db"
        assert (etc / "config.toml").exists()
        assert "--uninstall --purge deletes them" in res.stdout

    res = run(prefix, "--uninstall", "--purge")
    assert res.returncode == 0, res.stderr
    assert not etc.exists() and not state.exists()


def test_install_usage_errors(tmp_path: Path) -> None:
    res = run(tmp_path, "--purge")
    assert res.returncode == 2 and "--purge only goes with --uninstall" in res.stderr
    res = run(tmp_path, "--bogus")
    assert res.returncode == 2 and "unknown option --bogus" in res.stderr
    res = run(tmp_path, "--help")
    assert res.returncode == 0 and "--uninstall" in res.stdout
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_install_script_passes_shellcheck() -> None:
    res = subprocess.run(["shellcheck", str(INSTALL)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout
