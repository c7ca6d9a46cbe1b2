#!/usr/bin/env python3
"""Bootstrap and run paperarena from a fresh clone with nothing but Python 3.11+.

    python3 dev.py run [paperarena args...]   # create .venv if needed, then run the daemon
    python3 dev.py test [pytest args...]      # create .venv if needed, then run the whole suite
                                              # (in parallel: pytest-xdist, -n 0 for serial);
                                              # without args, the import contracts first
    python3 dev.py bench                      # run the benchmarks
    python3 dev.py paperarena <args...>       # any paperarena command inside the venv

The venv is (re)installed when pyproject.toml changes. ``test`` also installs what the end-to-end
tests need from Debian packages (Prometheus, Alertmanager, Mosquitto, Chromium and its driver,
ShellCheck, bubblewrap for the strategy sandbox) when run as root; elsewhere it says what to
install and those tests are skipped with that reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".paperarena-installed"
EXTRAS = "dev,llm"
APT_PACKAGES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "mosquitto": "mosquitto",
    "chromium": "chromium",  # the live page's browser tests (tests/web/test_page_browser.py)
    "chromedriver": "chromium-driver",
    "shellcheck": "shellcheck",  # deploy/install.sh's lint (tests/project/test_install.py)
    "bwrap": "bubblewrap",  # the AlphaForgeBench strategy sandbox (agents/alphaforgebench/)
    "systemd-analyze": "systemd",  # the unit's syscall filter, for the sandbox-under-unit test
}


def _say(msg: str) -> None:
    sys.stderr.write(f"[dev] {msg}\n")
    sys.stderr.flush()


def _fingerprint() -> str:
    data = (ROOT / "pyproject.toml").read_bytes() + EXTRAS.encode()
    return hashlib.sha256(data).hexdigest()


def ensure_venv() -> None:
    """Create .venv and install the project (editable) with its extras when needed."""
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py may be run by an older python3
        sys.exit("paperarena needs Python 3.11 or newer")
    if not PY.exists():
        _say("creating .venv")
        venv.EnvBuilder(with_pip=True).create(VENV)
    if STAMP.exists() and STAMP.read_text() == _fingerprint():
        return
    _say(f"installing paperarena[{EXTRAS}] into .venv (first run: about 2 minutes)")
    subprocess.run(
        [str(PY), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e",
         f".[{EXTRAS}]"],
        cwd=ROOT,
        check=True,
    )
    STAMP.write_text(_fingerprint())


def ensure_system_tools() -> None:
    """Install the Debian packages the end-to-end tests use, when root and apt-get exist."""
    missing = sorted({pkg for tool, pkg in APT_PACKAGES.items() if not _have(tool)})
    if not missing:
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        _say(f"installing {' '.join(missing)} with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False, env=env,
                       stdout=subprocess.DEVNULL)
    else:
        _say(f"not root: install {' '.join(missing)} (Debian packages) to run every e2e test")


def _have(tool: str) -> bool:
    if shutil.which(tool):
        return True
    return Path(f"/usr/bin/{tool}").exists() or Path(f"/usr/sbin/{tool}").exists()


def workers() -> int:
    """Return how many pytest-xdist workers ``test`` runs: three for every two cores (at least
    two, at most 4).

    A test spends about half its time waiting (on subprocesses, servers, a live clock and the
    busy timeouts it tests), so one worker per core left the cores half idle: on two cores a
    third worker took the suite from 11m19 to 7m53 (a fourth: 7m41, within the machine's noise,
    with more contention)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(4, max(2, 3 * (cores or 1) // 2))


def pytest_args(rest: list[str]) -> list[str]:
    """Return pytest's arguments for ``test``: ``rest``, run by pytest-xdist with
    :func:`workers` workers, each taking whole files (a file's module fixtures run once), unless
    ``rest`` chooses the workers itself (``-n 0`` runs in this one process) or turns xdist off.

    A worker that crashes ends the run (``--max-worker-restart 0``) naming the test it died
    in: pytest-xdist's replacement worker can wait forever under ``--dist loadfile``
    (pytest-xdist issue 784), which turned one crash into a CI timeout. The files are handed
    out in the order tests/conftest.py gives them, heaviest first (``--no-loadscope-reorder``:
    pytest-xdist would otherwise sort them by their count of tests, which sent a long file of
    three tests last, to run alone on one worker)."""
    for i, arg in enumerate(rest):
        if arg in {"-n", "--numprocesses"} or arg.startswith(("-n", "--numprocesses=")):
            return rest
        if arg == "-pno:xdist" or (arg == "-p" and rest[i + 1:i + 2] == ["no:xdist"]):
            return rest
    return ["-n", str(workers()), "--dist", "loadfile", "--no-loadscope-reorder",
            "--max-worker-restart", "0", *rest]


def suite_env(env: dict[str, str]) -> dict[str, str]:
    """Return ``env`` for the suite: without ``PYTHONDONTWRITEBYTECODE``, so the bytecode of the
    project and of pytest's rewritten test modules is written once and read after.

    Where that variable is set (some CI images and sandboxes set it), every one of the three
    workers rewrote and compiled all 280 test modules again (collection 11 s of CPU each, 5 s
    from bytecode) and every ``paperarena`` subprocess of the suite compiled the modules it
    imports (about 0.25 s each, a few hundred of them). The files go to ``__pycache__``
    folders, which git ignores."""
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _call(args: list[str], env: dict[str, str]) -> int:
    """Become ``args`` (exec): signals sent to this script (Ctrl-C, SIGTERM) reach the command
    itself, which stops cleanly and gives its own exit code; where exec is not available, run
    it as a child and return its code."""
    os.chdir(ROOT)
    if os.name == "posix":
        os.execve(args[0], args, env)  # does not return
    return subprocess.call(args, env=env)


def main(argv: list[str]) -> int:
    """Dispatch ``run``, ``test``, ``bench`` or ``paperarena``."""
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    ensure_venv()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if cmd == "run":
        return _call([str(BIN / "paperarena"), "run", *rest], env)
    if cmd == "test":
        ensure_system_tools()
        if not rest:  # the whole suite: the import contracts first, in a second (pyproject.toml)
            layers = subprocess.run([str(BIN / "lint-imports"), "--no-cache", "--no-logo"],
                                    cwd=ROOT, env=env, check=False)
            if layers.returncode != 0:
                _say("import contracts broken (above): fix the imports before the suite runs")
                return layers.returncode
        return _call([str(PY), "-m", "pytest", *pytest_args(rest)], suite_env(env))
    if cmd == "bench":
        return _call([str(PY), "bench/run_all.py", *rest], env)
    if cmd == "paperarena":
        return _call([str(BIN / "paperarena"), *rest], env)
    _say(f"unknown command {cmd!r}: use run, test, bench or paperarena")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
