"""Where a strategy worker runs: under bubblewrap with every layer on, or refused.

The layers (docs/protocol-alphaforgebench.md, "The sandbox"), each checked by the worker itself
before any strategy code exists and reported on its first line (:func:`missing_layers`):

- ``bubblewrap``: the worker is started by ``bwrap`` (Debian ``bubblewrap``): fresh user, pid,
  network, ipc, uts and mount namespaces, ``--die-with-parent``, ``--new-session``, every
  capability dropped, ``--clearenv``, uid and gid 65534 inside, no further user namespaces;
- ``filesystem``: a root holding only read-only binds of the interpreter, its standard library
  (its site-packages hidden), the system's shared libraries, the allowed packages
  (:data:`PACKAGES`) and the worker, four device nodes read-only (null, zero, random, urandom),
  a private empty ``/tmp`` and an empty ``/proc`` (no process is visible, its own included);
- ``user namespace``, ``pid namespace``, ``network namespace``, ``capabilities``: seen from
  inside (uid 65534, pid 2, only a loopback interface, ``sethostname`` refused);
- ``seccomp``: the allow-list of :mod:`agents.alphaforgebench.seccomp_policy`, loaded by the
  worker through libseccomp before the code, and seen refusing a socket;
- ``limits``: address space, file size 0, open files and processes 0, read back lowered.

:func:`probe` starts one worker at start-up (``check-config``, ``run``, ``replay``) and says which
layers this host cannot give. Unless ``[sandbox] allow_degraded = true`` an AlphaForgeBench
agent is then refused (exit 2, one line naming the layer); with it, the daemon warns at every
start, in ``/api/status``, in ``paperarena status`` and on the page, and workers run with what
the host has (without ``bwrap``: ``python -I`` directly, as the same user, with a seccomp filter
that refuses every file open once the code may run, where seccomp can be had; without that too,
strategy code can read the provider keys and every file the daemon can, which the warning
says).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

WORKER = Path(__file__).with_name("sandbox_worker.py")
POLICY = Path(__file__).with_name("seccomp_policy.py")
#: The factor library the worker builds the frames with (imports numpy and pandas only).
LIBRARY = Path(__file__).with_name("factor_library.py")
#: Top-level modules bound into the sandbox (strategy imports, what they import, the policy).
PACKAGES = ("numpy", "pandas", "dateutil", "pytz", "tzdata", "six", "pyseccomp")
#: Where the sandbox sees the packages and the worker.
LIB, WORKER_INSIDE = "/sandbox/lib", "/sandbox/worker.py"
#: The unprivileged uid and gid inside the sandbox (``nobody``).
SANDBOX_UID = 65534
#: Every layer, in the order they are reported.
LAYERS = ("bubblewrap", "user namespace", "pid namespace", "network namespace",
          "capabilities", "seccomp", "limits")
#: The worker's whole environment: no provider key or other secret reaches it.
CHILD_ENV = {"LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
             "MKL_NUM_THREADS": "1", "NUMEXPR_MAX_THREADS": "1", "HOME": "/tmp"}


class SandboxConfig(BaseModel):
    """The ``[sandbox]`` config section: how strategy code is isolated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_degraded: bool = Field(
        default=False,
        description="run AlphaForgeBench agents even when a sandbox layer cannot be had on this"
        " host (warned at every start, in /api/status, status and on the page); default: refuse")
    bwrap: str = Field(
        default="bwrap", min_length=1,
        description="the bubblewrap command (a name looked up on PATH, or a path)")


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """How workers are started here, and which missing layers are tolerated."""

    bwrap: str | None
    """The bubblewrap executable, or None: start the worker directly (degraded)."""
    tolerated: frozenset[str] = field(default_factory=frozenset)
    """Layers that may be missing (only under ``allow_degraded``)."""


_policy: SandboxPolicy | None = None
_state: dict[str, Any] = {"state": "unused", "missing": {}}


def configure(policy: SandboxPolicy, missing: dict[str, str] | None = None) -> None:
    """Make ``policy`` the one every worker of this process starts under (set at start-up
    after :func:`probe`; ``missing``: the layers it found missing)."""
    global _policy, _state
    _policy = policy
    missing = dict(missing or {})
    _state = {"state": "degraded" if missing else "on", "missing": missing}


def sandbox_state() -> dict[str, Any]:
    """Return ``{"state": "unused" | "on" | "degraded", "missing": {layer: why}}`` of this
    process (``/api/status``' ``sandbox``; "unused": no AlphaForgeBench agent here)."""
    return {"state": _state["state"], "missing": dict(_state["missing"])}


def current_policy() -> SandboxPolicy:
    """Return the configured policy; before any, the strict one (bwrap from PATH, no layer
    tolerated: without bubblewrap every worker is refused)."""
    if _policy is not None:
        return _policy
    return SandboxPolicy(bwrap=shutil.which("bwrap"))


def _module_paths(name: str) -> list[Path]:
    """Return the files and directories of top-level module ``name`` (none if not installed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or spec.origin in {"built-in", "frozen"}:
        return []
    origin = Path(spec.origin)
    if spec.submodule_search_locations:  # a package: its directory, and a wheel's vendored libs
        out = [origin.parent]
        libs = origin.parent.with_name(origin.parent.name + ".libs")
        return out + ([libs] if libs.is_dir() else [])
    return [origin]


def _system_lib_args() -> list[str]:
    """Return bwrap arguments for the shared-library directories (binds, or merged-/usr links)."""
    args: list[str] = []
    for d in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32"):
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += ["--ro-bind", d, d]
    return args


def _interpreter_args() -> tuple[list[str], str]:
    """Return (bwrap binds, executable path) of this process's base interpreter."""
    # A venv's python may be a copy of the interpreter: start the interpreter itself.
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    binds = ["--ro-bind", exe, exe]
    base = {"base": sys.base_prefix, "installed_base": sys.base_prefix,
            "platbase": sys.base_exec_prefix, "installed_platbase": sys.base_exec_prefix}
    paths = sysconfig.get_paths(vars=base)  # the interpreter's own, never a venv's
    binds += ["--ro-bind", paths["stdlib"], paths["stdlib"]]
    if paths["platstdlib"] != paths["stdlib"]:
        binds += ["--ro-bind", paths["platstdlib"], paths["platstdlib"]]
    # The interpreter's own site-packages (and Debian's) lie inside those binds: hide them.
    hidden = {paths["purelib"], paths["platlib"], "/usr/lib/python3/dist-packages"}
    for d in sorted(hidden):
        if os.path.isdir(d) and any(d.startswith(b.rstrip("/") + "/") for b in (
                paths["stdlib"], paths["platstdlib"], "/usr/lib")):
            binds += ["--tmpfs", d]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        soname = sysconfig.get_config_var("INSTSONAME") or ""
        lib = os.path.join(libdir, soname)
        if libdir and soname and os.path.exists(lib) and not lib.startswith(("/usr/lib/",
                                                                             "/lib/")):
            binds += ["--ro-bind", lib, lib]
    return binds, exe


def _device_args() -> list[str]:
    """Return read-only binds of the few device nodes a computation may read (no other)."""
    out: list[str] = []
    for dev in ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"):
        if os.path.exists(dev):
            out += ["--ro-bind", dev, dev]
    return out


def bwrap_argv(bwrap: str, config: dict[str, Any]) -> list[str]:
    """Return the argv that starts the worker under bubblewrap with ``config`` (its JSON arg)."""
    interp_binds, exe = _interpreter_args()
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid",
            str(SANDBOX_UID), "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv"]
    for k, v in CHILD_ENV.items():
        argv += ["--setenv", k, v]
    argv += _system_lib_args() + interp_binds
    zoneinfo = "/usr/share/zoneinfo"
    if os.path.isdir(zoneinfo):
        argv += ["--ro-bind", zoneinfo, zoneinfo]
    for name in PACKAGES:
        for path in _module_paths(name):
            argv += ["--ro-bind", str(path), f"{LIB}/{path.name}"]
    argv += ["--ro-bind", str(POLICY), f"{LIB}/{POLICY.name}",
             "--ro-bind", str(LIBRARY), f"{LIB}/{LIBRARY.name}",
             "--ro-bind", str(WORKER), WORKER_INSIDE,
             "--dir", "/proc", "--dir", "/dev", *_device_args(), "--tmpfs", "/tmp",
             "--chdir", "/tmp",
             "--", exe, "-I", "-S", "-B", WORKER_INSIDE,
             json.dumps({**config, "path": [LIB]})]
    return argv


def direct_argv(config: dict[str, Any]) -> list[str]:
    """Return the argv that starts the worker without bubblewrap (degraded hosts only).

    Such a worker sees the host's files and the daemon's ``/proc`` as the daemon's user, so its
    seccomp filter (where it can be had) refuses every file open once the code may run.
    """
    return [sys.executable, "-I", "-B", str(WORKER),
            json.dumps({**config, "path": [str(POLICY.parent)], "opens": False})]


def worker_argv(policy: SandboxPolicy, config: dict[str, Any]) -> list[str]:
    """Return the argv of a worker under ``policy``."""
    if policy.bwrap is None:
        return direct_argv(config)
    return bwrap_argv(policy.bwrap, config)


def missing_layers(report: Any, bubblewrap: bool) -> dict[str, str]:
    """Return {layer: why} of the layers the worker's first line shows missing.

    ``report`` is that line (parsed), written before the worker read any request; ``bubblewrap``
    whether it was started by ``bwrap``.
    """
    if not isinstance(report, dict) or report.get("ready") is not True:
        return {layer: "the worker did not report" for layer in LAYERS}
    out: dict[str, str] = {}
    if not bubblewrap:
        out["bubblewrap"] = "not used"
    if report.get("uid") != SANDBOX_UID or report.get("gid") != SANDBOX_UID:
        out["user namespace"] = f"uid {report.get('uid')} gid {report.get('gid')}"
    if not isinstance(report.get("pid"), int) or report["pid"] > 2:
        out["pid namespace"] = f"pid {report.get('pid')}"
    if report.get("net") != ["lo"]:
        out["network namespace"] = f"interfaces {report.get('net')}"
    if report.get("caps") != "none":
        out["capabilities"] = str(report.get("caps"))[:200]
    if report.get("seccomp") != "on":
        out["seccomp"] = str(report.get("seccomp"))[:200]
    if report.get("limits") != "on":
        out["limits"] = str(report.get("limits"))[:200]
    return out


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What :func:`probe` found on this host."""

    bwrap: str | None
    """The bubblewrap executable found (None: not installed)."""
    missing: dict[str, str]
    """{layer: why} of every layer this host cannot give (empty: all on)."""

    def line(self) -> str:
        """Return one line saying which layers are on or which are missing and why."""
        if not self.missing:
            return "sandbox: " + ", ".join(LAYERS) + ": on"
        return "sandbox: missing " + "; ".join(f"{k} ({v})" for k, v in self.missing.items())

    def policy(self, config: SandboxConfig) -> SandboxPolicy:
        """Return the policy workers start under (tolerating what is missing only when
        ``config.allow_degraded``)."""
        if not self.missing or not config.allow_degraded:
            return SandboxPolicy(bwrap=self.bwrap)
        return SandboxPolicy(bwrap=self.bwrap, tolerated=frozenset(self.missing))


def probe(config: SandboxConfig, timeout: float = 120.0) -> ProbeResult:
    """Start one worker as strategies would be and return which layers it reported missing.

    Blocking (at start-up, before the event loop serves anything; about a second).
    """
    found = shutil.which(config.bwrap)
    cfg = {"memory_mb": 1024, "cpu_s": 5.0, "nofile": 64, "require_seccomp": False}
    argv = bwrap_argv(found, cfg) if found else direct_argv(cfg)
    try:
        done = subprocess.run(argv, input=b"", capture_output=True, timeout=timeout,
                              env=CHILD_ENV, cwd="/", check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return ProbeResult(found, {"bubblewrap": f"could not start: {exc}"})
    first = done.stdout.split(b"\n", 1)[0]
    try:
        report = json.loads(first)
    except ValueError:
        report = None
    missing = missing_layers(report, bubblewrap=found is not None)
    if found is None:
        missing["bubblewrap"] = (f"{config.bwrap!r} not found on PATH: install the Debian"
                                 " package bubblewrap")
    elif report is None:
        why = " ".join(done.stderr.decode("utf-8", "replace").split())[-300:] or (
            f"exit status {done.returncode}")
        missing = {"bubblewrap": f"the sandbox did not start: {why}"}
    return ProbeResult(found, missing)
