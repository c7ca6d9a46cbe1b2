"""The strategy worker's system-call allow-list, built and loaded with libseccomp.

Loaded by the worker (agents/alphaforgebench/sandbox_worker.py) after its own imports and before
any strategy code, through ``pyseccomp`` (the ctypes binding of the system's libseccomp). Every
system call not named here fails with ``EPERM``; a call of another architecture (x32, i386)
kills the process. What a numpy/pandas computation on its pipes needs is allowed: memory, reads
of open descriptors and of files opened read-only, time, signals to itself, exit. What is not,
among others: sockets, ``clone``/``fork``/``execve``, file writes, renames, deletions, ``chmod``,
``chown``, ``utime``, every ``*xattr`` call, ``ptrace`` and ``process_vm_*``, ``kill`` of any
process, namespaces, mounts, ``bpf``, ``io_uring``, ``userfaultfd``, ``perf_event_open``, keys,
and raising or setting any resource limit other than the worker's own per-request CPU limit.

This module is imported both by the daemon (tests, ``paperarena check-config`` reports) and,
as a top-level module bound read-only into the sandbox, by the worker: it imports nothing but
the standard library and ``pyseccomp``.
"""

from __future__ import annotations

import errno
import os
import resource
from typing import Any

#: System calls allowed whatever their arguments.
ALLOWED: tuple[str, ...] = (
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
    # descriptors already open (the pipes, stderr, files opened read-only below)
    "read", "readv", "pread64", "write", "writev", "lseek", "close", "dup", "dup2", "dup3",
    "fstat", "newfstatat", "stat", "lstat", "statx", "fstatfs", "getdents64", "readlink",
    "readlinkat", "access", "faccessat", "faccessat2", "getcwd",
    # time, waiting, randomness
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "futex", "sched_yield", "getrandom", "restart_syscall",
    # signals of this process (rt_sigreturn is how a handler returns)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
    # facts about itself
    "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
    "getresuid", "getresgid", "getrusage", "getrlimit", "uname", "sysinfo", "times",
    "sched_getaffinity",
    # the end
    "exit", "exit_group",
)

#: ``open``/``openat`` flags that write, create or truncate: refused.
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: ``ioctl`` requests allowed: isatty (TCGETS) and close-on-exec flags (FIOCLEX, FIONCLEX).
IOCTLS = (0x5401, 0x5451, 0x5450)
#: ``fcntl`` commands allowed: descriptor and status flags, duplication.
FCNTLS = (0, 1, 2, 3, 4, 1030)  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC


def build(pyseccomp: Any, *, opens: bool = True) -> Any:
    """Return the filter (a ``pyseccomp.SyscallFilter``, not loaded) of the allow-list.

    ``opens=False`` (a degraded worker started without bubblewrap, which sees the host's files
    and the daemon's ``/proc``): no file may be opened at all once the filter is on.
    """
    sc = pyseccomp
    f = sc.SyscallFilter(sc.ERRNO(errno.EPERM))
    f.set_attr(sc.Attr.CTL_NNP, 1)  # no_new_privs: set before loading, as the kernel requires
    for name in ALLOWED:
        _allow(f, sc, name)
    masked = sc.MASKED_EQ
    if opens:
        _allow(f, sc, "open", sc.Arg(1, masked, WRITE_FLAGS, 0))
        _allow(f, sc, "openat", sc.Arg(2, masked, WRITE_FLAGS, 0))
    for request in IOCTLS:
        _allow(f, sc, "ioctl", sc.Arg(1, sc.EQ, request))
    for cmd in FCNTLS:
        _allow(f, sc, "fcntl", sc.Arg(1, sc.EQ, cmd))
    cpu = resource.RLIMIT_CPU
    # Limits: reading any; setting only this process's RLIMIT_CPU (the per-request budget,
    # which without CAP_SYS_RESOURCE can never rise above the hard limit).
    _allow(f, sc, "prlimit64", sc.Arg(2, sc.EQ, 0))
    _allow(f, sc, "prlimit64", sc.Arg(0, sc.EQ, 0), sc.Arg(1, sc.EQ, cpu))
    _allow(f, sc, "setrlimit", sc.Arg(0, sc.EQ, cpu))
    return f


def _allow(f: Any, sc: Any, name: str, *args: Any) -> None:
    """Allow ``name`` (with argument conditions) if this architecture has it."""
    if sc.resolve_syscall(sc.system_arch(), name) < 0:
        return  # e.g. "open" or "time" on aarch64, which has only the *at forms
    try:
        f.add_rule(sc.ALLOW, name, *args)
    except OSError as exc:
        if exc.errno != errno.EDOM:  # a call libseccomp cannot filter on this architecture
            raise


def install(*, opens: bool = True) -> str:
    """Load the allow-list into this process; return "on" or "off: <why>" (one line).

    Irrevocable and inherited: once on, nothing this process runs can remove or widen it.
    """
    try:
        import pyseccomp
    except (ImportError, OSError) as exc:  # no binding, or no libseccomp.so.2 to load
        return f"off: libseccomp is not available ({type(exc).__name__}: {exc})"
    try:
        build(pyseccomp, opens=opens).load()
    except (OSError, ValueError, RuntimeError) as exc:
        return f"off: the kernel refused the filter ({type(exc).__name__}: {exc})"
    return "on"
