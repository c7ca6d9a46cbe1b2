"""Run a command under the system-call filter and namespace restrictions a systemd unit declares.

    python tests/unit_filter.py systemd/paperarena.service -- paperarena check-config F

This machine has no systemd running as PID 1, so the shipped unit
cannot be started here. This script applies what of it decides whether the strategy sandbox can
run: ``SystemCallFilter=`` (groups expanded by ``systemd-analyze syscall-filter``, the same
systemd that will read the unit), ``SystemCallErrorNumber=``, ``SystemCallArchitectures=native``,
``RestrictNamespaces=`` (as systemd does: ``unshare``/``clone``/``setns`` refused for namespace
kinds not listed, ``clone3`` answered ``ENOSYS`` so the C library falls back to ``clone``),
``RestrictAddressFamilies=`` (``socket()`` of another family refused) and
``NoNewPrivileges=``, then execs the command. The capability bounding set and the unprivileged
user (``CapabilityBoundingSet=``, ``DynamicUser=``) are applied by the caller with ``setpriv``
(tests/unprivileged.py). Not emulated: ``PrivateUsers=`` (a user namespace around the service;
the sandbox nests its own), the mount options of ``Protect*=`` (the sandbox mounts no procfs).
"""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys
from pathlib import Path

import pyseccomp as sc

#: Address families RestrictAddressFamilies= may name (the ones the daemon's units use).
FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}
#: clone flags of each namespace kind RestrictNamespaces= names.
NAMESPACES = {"cgroup": 0x02000000, "ipc": 0x08000000, "net": 0x40000000, "mnt": 0x00020000,
              "pid": 0x20000000, "user": 0x10000000, "uts": 0x04000000}


@functools.cache
def expand(name: str) -> frozenset[str]:
    """Return the system calls of a ``@group`` (recursively), or ``{name}``."""
    if not name.startswith("@"):
        return frozenset({name})
    out = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True,
                         text=True, check=True).stdout
    calls: set[str] = set()
    for line in out.splitlines()[1:]:
        item = line.strip()
        if item and not item.startswith("#"):
            calls |= expand(item)
    return frozenset(calls)


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Return each ``[Service]`` key's values in order (repeated keys accumulate)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def allowed_calls(filters: list[str]) -> set[str]:
    """Return the calls a sequence of ``SystemCallFilter=`` values allows (systemd's rules: the
    first line decides allow-list or deny-list; later lines add to or take from it)."""
    allowed: set[str] = set()
    for i, value in enumerate(filters):
        deny = value.startswith("~")
        names = value.lstrip("~").split()
        calls = set().union(*(expand(n) for n in names)) if names else set()
        if i == 0 and deny:
            raise SystemExit("unit_filter.py: a deny-list first line is not supported")
        if deny:
            allowed -= calls
        else:
            allowed |= calls
    return allowed


def main(argv: list[str]) -> int:
    """Load the unit's filter into this process, then exec the command after ``--``."""
    unit, cmd = Path(argv[0]), argv[argv.index("--") + 1:]
    settings = unit_settings(unit)
    allowed = allowed_calls(settings.get("SystemCallFilter", []))
    errno_name = (settings.get("SystemCallErrorNumber") or ["EPERM"])[-1]
    f = sc.SyscallFilter(sc.ERRNO(getattr(errno, errno_name)))
    allowed_ns = 0
    restrict = (settings.get("RestrictNamespaces") or ["no"])[-1]
    if restrict in ("yes", "true"):
        restricting = True
    elif restrict in ("no", "false"):
        restricting = False
    else:
        restricting = True
        for kind in restrict.split():
            allowed_ns |= NAMESPACES[kind]
    refused_ns = sum(NAMESPACES.values()) & ~allowed_ns
    families = (settings.get("RestrictAddressFamilies") or [""])[-1].split()
    arch = sc.system_arch()
    for name in sorted(allowed):
        if sc.resolve_syscall(arch, name) < 0:
            continue
        if families and name == "socket":
            # socket() only of the families listed (systemd answers EAFNOSUPPORT, here the
            # filter's error number: either way the call fails).
            for family in families:
                f.add_rule(sc.ALLOW, name, sc.Arg(0, sc.EQ, FAMILIES[family]))
        elif restricting and name in ("unshare", "clone", "setns"):
            arg = 1 if name == "setns" else 0
            f.add_rule(sc.ALLOW, name, sc.Arg(arg, sc.MASKED_EQ, refused_ns, 0))
        elif restricting and name == "clone3":
            continue
        else:
            f.add_rule(sc.ALLOW, name)
    if restricting and "clone3" in allowed:
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    if (settings.get("NoNewPrivileges") or ["no"])[-1] in ("yes", "true"):
        f.set_attr(sc.Attr.CTL_NNP, 1)
    f.load()
    os.execvp(cmd[0], cmd)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
