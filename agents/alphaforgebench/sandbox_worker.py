"""The sandboxed child process that runs one AlphaForgeBench strategy (see
agents/alphaforgebench/sandbox.py).

Run as ``python -I sandbox_worker.py '<limits json>'`` (never imported by the daemon: it imports
nothing of paperarena). It speaks JSON lines: on stdin one request per line, on its own copy of
the original stdout one answer per line (the strategy's prints go to stderr).

Requests (each with the daemon's ``"id"``, which the answer echoes):

- ``{"id": "...", "op": "load", "code": "..."}``: run the code's top level, find
  ``generate_signal``; the answer is ``{"id": "...", "ok": true, "seccomp": ..., "landlock": ...}``;
- ``{"id": "...", "op": "bar", "bars": {asset: {"ts": [...], "close": [...]}}}``: build each
  asset's frame (OHLCV and indicators, oldest row first, the last row the current bar) and call
  ``generate_signal(df)`` once per asset, each time from a fresh run of the code's top level
  (the strategy is stateless: module-level objects do not carry over between calls); the
  answer is ``{"id": "...", "ok": true, "results": {asset: {"signal": s, "position": p} or
  {"error": "..."}}}``, one entry per asset asked.

A failed request is answered ``{"id": "...", "ok": false, "error": "..."}``. ``signal`` and
``position`` are sent as returned when they are an int or a float (a numpy integer or floating
scalar converted), finite; anything else (a string, a bool, ``numpy.bool_``, NaN...) is never
coerced into a number but sent as ``{"type": ..., "repr": ...}``, which the daemon refuses.
The daemon checks everything again: strategy code shares this process, so it can read the id
(frames, memory) and write to the answer pipe itself; what stops it is the daemon's check of
every line (see agents/alphaforgebench/sandbox.py).

Before reading any request it imports the allowed libraries, then lowers its resource limits
(address space, file size 0, open files, processes) and installs an audit hook (``make_guard``)
that refuses sockets, subprocesses, writes, deletions, ``ctypes``, threads, limit changes,
introspection of the garbage collector and reading files outside Python's and the libraries'
own directories. The hook has no "trusted" state: from its installation on it applies to the
worker's own code as well, so strategy code that runs at unexpected moments (an exception's
message, a finalizer, a thread) gains nothing. Before the hook it installs Landlock (opens
only to read, beneath the same directories) and a seccomp filter (see ``install_seccomp``):
the kernel's backstop for code that rewrites the hook's data in memory. CPU time is limited
per request: the soft ``RLIMIT_CPU`` is moved to the CPU time used so far plus the
per-request budget before each request (SIGXCPU ends the process).

Why one module over 500 lines: the child runs this file as a script under ``python -I``, with
no package on its path and nothing of paperarena imported, so everything it runs before and
around strategy code (limits, hook, kernel filters, frames, answers) must live in this file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import signal
import sys
import traceback
from typing import Any

_DENIED_PREFIXES = (
    "socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
    "os.forkpty", "os.kill", "os.killpg", "os.remove", "os.unlink", "os.rename", "os.rmdir",
    "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.symlink", "os.link", "os.putenv",
    "os.unsetenv", "os.chdir", "os.setuid", "shutil.", "ctypes.", "resource.", "gc.",
    "sys.settrace", "sys.setprofile", "builtins.input", "pty.", "fcntl.",
    "mmap.", "urllib.", "http.", "ftplib.", "smtplib.", "telnetlib.", "webbrowser.",
    "_thread.start_new_thread", "sys.addaudithook",
)
_DENIED_IMPORTS = frozenset({
    "socket", "_socket", "subprocess", "_posixsubprocess", "ctypes", "_ctypes", "multiprocessing",
    "urllib", "http", "ftplib", "smtplib", "ssl", "_ssl", "asyncio", "selectors", "pty",
    "shutil", "tempfile", "resource", "signal", "threading", "_thread", "importlib",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Read-only data the libraries may open besides their own files (time zones).
_EXTRA_READ_ROOTS = ("/usr/share/zoneinfo",)


def read_roots() -> tuple[str, ...]:
    """Return the directories files may be read from: Python's and the libraries' own."""
    import numpy
    import pandas as pd  # type: ignore[import-untyped]

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.dirname(numpy.__file__)),
            os.path.dirname(os.path.dirname(pd.__file__)), *_EXTRA_READ_ROOTS}
    dirs.update(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p))
    return tuple(sorted({os.path.realpath(d) for d in dirs}))


def make_guard(roots: tuple[str, ...], cpu_s: float) -> Any:
    """Return the audit hook of the worker (see the module doc).

    It is installed once the worker's own setup is done and then applies to everything the
    process runs, with no switch and no state a strategy could change: exception messages,
    finalizers, threads or frames reached by the strategy run under the same rules. It refuses
    sockets, subprocesses, forks, signals to other processes, file writes, deletions,
    ``ctypes``, threads, imports of networking and process modules, and reading any file
    outside ``roots`` (so neither the daemon's files nor ``/proc/<pid>/environ`` can be read).
    The worker's own per-request ``RLIMIT_CPU`` move is the one limit change allowed: soft CPU
    time up to the time used plus ``cpu_s`` + 2 s.

    Everything the hook uses is bound here, at creation: when called it looks up no global,
    builtin or module attribute (strategy code can rebind ``os.path.realpath``, the worker's
    globals through a frame, or builtins), and it resolves paths itself with ``os.lstat`` and
    ``os.readlink`` taken now. Paths must be exact ``str`` or ``bytes`` (or a descriptor), so a
    path object cannot name one file to the hook and another to ``open``.
    """
    denied_prefixes, denied_imports, write_flags = (
        tuple(_DENIED_PREFIXES), frozenset(_DENIED_IMPORTS), int(_WRITE_FLAGS))
    cpu_res, getrusage, rusage_self = resource.RLIMIT_CPU, resource.getrusage, \
        resource.RUSAGE_SELF
    lstat, readlink = os.lstat, os.readlink
    root_set = frozenset(roots)
    prefixes = tuple(r.rstrip("/") + "/" for r in roots)
    type_, str_, bytes_, int_, tuple_, len_ = type, str, bytes, int, tuple, len
    perm, import_error, os_error = PermissionError, ImportError, OSError
    fmt_mask, fmt_link = 0o170000, 0o120000

    def resolve(name: str) -> str | None:
        """Return ``name`` absolute, without '.', '..' or symbolic links (None: refuse)."""
        if not name.startswith("/") or "\x00" in name:
            return None
        todo = name.split("/")
        todo.reverse()
        parts: list[str] = []
        links = 0
        while todo:
            c = todo.pop()
            if c == "" or c == ".":
                continue
            if c == "..":
                if parts:
                    parts.pop()
                continue
            here = "/" + "/".join([*parts, c])
            try:
                mode = lstat(here).st_mode
            except os_error:
                parts.append(c)  # missing: the open fails by itself
                continue
            if mode & fmt_mask != fmt_link:
                parts.append(c)
                continue
            links += 1
            if links > 40:
                return None
            target = readlink(here)
            if type_(target) is not str_:
                return None
            if target.startswith("/"):
                parts = []
            more = target.split("/")
            more.reverse()
            todo.extend(more)
        return "/" + "/".join(parts)

    def guard(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path: Any = args[0] if len_(args) > 0 else None
            mode = args[1] if len_(args) > 1 else None
            flags = args[2] if len_(args) > 2 else 0
            if mode is not None and (type_(mode) is not str_ or "w" in mode or "a" in mode
                                     or "x" in mode or "+" in mode):
                raise perm("sandbox: writing files is not allowed")
            if type_(flags) is not int_ or flags & write_flags:
                raise perm("sandbox: writing files is not allowed")
            if type_(path) is int_:
                return  # an already open descriptor
            if type_(path) is bytes_:
                name = path.decode("utf-8", "surrogateescape")
            elif type_(path) is str_:
                name = path
            else:
                raise perm("sandbox: open a path given as str or bytes")
            real = resolve(name)
            if real is None or not (real in root_set or real.startswith(prefixes)):
                raise perm(f"sandbox: reading {name[:120]!r} is not allowed")
            return
        if event == "import":
            name = args[0] if len_(args) > 0 and type_(args[0]) is str_ else ""
            if name.split(".")[0] in denied_imports:
                raise import_error(f"sandbox: import of {name} is not allowed")
            return
        if event == "resource.setrlimit" and len_(args) == 2 and args[0] == cpu_res:
            limits = args[1]
            if type_(limits) is tuple_ and len_(limits) == 2 and type_(limits[0]) is int_:
                used = getrusage(rusage_self)
                if 0 <= limits[0] <= used.ru_utime + used.ru_stime + cpu_s + 2:
                    return
        if event.startswith(denied_prefixes):
            raise perm(f"sandbox: {event} is not allowed")

    return guard


# -- seccomp (Linux x86_64): the kernel-level backstop of the audit hook ------------------------
# Strategy code can write any byte of its own process through numpy (``as_strided`` over an
# address from ``id()``), so the audit hook, plain Python data, can be rewritten. The filter,
# installed before any strategy code runs and irrevocable, refuses what must never happen
# whatever the process runs: network sockets, new processes and threads, exec, signals to other
# processes, tracing, namespaces, file writes and changes, and limit changes other than the
# worker's own RLIMIT_CPU move. Refused calls fail with EPERM.
_AUDIT_ARCH_X86_64 = 0xC000003E
_X86_64_DENIED = (
    41, 53,  # socket, socketpair
    56, 57, 58, 59, 322, 435,  # clone, fork, vfork, execve, execveat, clone3
    62, 200, 234, 424, 434, 438,  # kill, tkill, tgkill, pidfd_send_signal/open/getfd
    101, 310, 311,  # ptrace, process_vm_readv/writev
    272, 308, 165, 166, 155, 161,  # unshare, setns, mount, umount2, pivot_root, chroot
    76, 77, 82, 83, 84, 85, 86, 87, 88, 90, 91, 92, 93, 94, 133,  # truncate .. mknod
    258, 259, 260, 263, 264, 265, 266, 268, 316, 452,  # the *at variants, renameat2, fchmodat2
    105, 106, 113, 114, 116, 117, 119, 122, 123,  # set*id, setgroups
    437, 425, 426, 427,  # openat2 (flags out of reach), io_uring
    321, 323, 298, 246, 175, 313, 176, 248, 249, 250,  # bpf, userfaultfd, perf, modules, keys
)
_X86_64_OPEN, _X86_64_OPENAT, _X86_64_SETRLIMIT, _X86_64_PRLIMIT64 = 2, 257, 160, 302
_OPEN_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # WRONLY RDWR CREAT TRUNC APPEND


def seccomp_program(cpu_resource: int) -> list[tuple[int, int, int, int]]:
    """Return the x86_64 filter as (code, jt, jf, k) BPF instructions."""
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO(EPERM)

    def arg(i: int, high: bool = False) -> int:
        return 16 + 8 * i + (4 if high else 0)  # struct seccomp_data, little endian

    prog: list[tuple[int, int, int, int]] = [
        (ld, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH_X86_64), (ret, 0, 0, deny),
        (ld, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, deny)]  # x32 calls
    for nr in _X86_64_DENIED:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, deny)]
    def when(nr: int, block: list[tuple[int, int, int, int]]) -> None:
        """Run ``block`` (which ends in returns) for syscall ``nr``; others skip it."""
        prog.append((jeq, 0, len(block), nr))
        prog.extend(block)

    for nr, flags_arg in ((_X86_64_OPEN, 1), (_X86_64_OPENAT, 2)):
        when(nr, [(ld, 0, 0, arg(flags_arg)), (jset, 0, 1, _OPEN_WRITE_FLAGS),
                  (ret, 0, 0, deny), (ret, 0, 0, allow)])
    # setrlimit(resource, new): RLIMIT_CPU only.
    when(_X86_64_SETRLIMIT, [(ld, 0, 0, arg(0)), (jeq, 0, 1, cpu_resource),
                             (ret, 0, 0, allow), (ret, 0, 0, deny)])
    # prlimit64(pid, resource, new, old): reading any, setting RLIMIT_CPU of itself only.
    when(_X86_64_PRLIMIT64, [
        (ld, 0, 0, arg(2)), (jeq, 0, 3, 0),  # new == NULL (both halves): a read
        (ld, 0, 0, arg(2, True)), (jeq, 0, 1, 0), (ret, 0, 0, allow),
        (ld, 0, 0, arg(0)), (jeq, 0, 3, 0),  # pid 0: this process
        (ld, 0, 0, arg(1)), (jeq, 0, 1, cpu_resource), (ret, 0, 0, allow),
        (ret, 0, 0, deny)])
    prog.append((ret, 0, 0, allow))
    return prog


def install_seccomp() -> str:
    """Install :func:`seccomp_program` for this process; return "on" or "off: <why>"."""
    import platform

    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return f"off: no filter for {sys.platform}/{platform.machine()}"
    try:
        import ctypes

        class SockFilter(ctypes.Structure):
            _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                        ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

        prog = seccomp_program(resource.RLIMIT_CPU)
        table = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
        fprog = SockFprog(len(prog), table)
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
        if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
            return f"off: PR_SET_NO_NEW_PRIVS failed (errno {ctypes.get_errno()})"
        if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
            return f"off: PR_SET_SECCOMP failed (errno {ctypes.get_errno()})"
    except (OSError, AttributeError, ImportError) as exc:
        return f"off: {exc}"
    return "on"


def install_landlock(roots: tuple[str, ...]) -> str:
    """Let this process open files only to read them, and only beneath ``roots`` (Landlock,
    Linux 5.13+); return "on" or "off: <why>".

    The kernel-level backstop of the hook's read check, which strategy code could rewrite in
    memory: with it, neither the daemon's files nor ``/proc/<pid>/environ`` can be opened.
    """
    if not sys.platform.startswith("linux"):
        return f"off: no Landlock on {sys.platform}"
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        create, add_rule, restrict = 444, 445, 446  # the same numbers on every architecture
        u32, size = ctypes.c_uint32, ctypes.c_size_t
        abi = libc.syscall(create, None, size(0), u32(1))  # LANDLOCK_CREATE_RULESET_VERSION
        if abi < 1:
            return f"off: Landlock unavailable (errno {ctypes.get_errno()})"
        handled = (1 << 13) - 1  # ABI 1: execute .. make_sym
        handled |= (1 << 13) if abi >= 2 else 0  # refer
        handled |= (1 << 14) if abi >= 3 else 0  # truncate
        handled |= (1 << 15) if abi >= 5 else 0  # ioctl_dev

        class RulesetAttr(ctypes.Structure):
            _fields_ = [("handled_access_fs", ctypes.c_uint64)]

        class PathBeneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        attr = RulesetAttr(handled)
        ruleset = libc.syscall(create, ctypes.byref(attr), size(ctypes.sizeof(attr)), u32(0))
        if ruleset < 0:
            return f"off: landlock_create_ruleset failed (errno {ctypes.get_errno()})"
        try:
            read_file, read_dir = 1 << 2, 1 << 3
            for root in roots:
                try:
                    fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    rights = read_file | (read_dir if os.path.isdir(root) else 0)
                    rule = PathBeneath(rights, fd)
                    if libc.syscall(add_rule, ctypes.c_int(ruleset), ctypes.c_int(1),
                                    ctypes.byref(rule), u32(0)) != 0:
                        return f"off: landlock_add_rule failed (errno {ctypes.get_errno()})"
                finally:
                    os.close(fd)
            if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
                return f"off: PR_SET_NO_NEW_PRIVS failed (errno {ctypes.get_errno()})"
            if libc.syscall(restrict, ctypes.c_int(ruleset), u32(0)) != 0:
                return f"off: landlock_restrict_self failed (errno {ctypes.get_errno()})"
        finally:
            os.close(ruleset)
    except (OSError, AttributeError, ImportError) as exc:
        return f"off: {exc}"
    return "on"


def _limit(which: int, value: int) -> None:
    with contextlib.suppress(ValueError, OSError):  # e.g. a hard limit already lower: keep it
        resource.setrlimit(which, (value, value))


def factors(close: Any) -> Any:
    """Return the frame of one asset: OHLCV (open = high = low = close) and the indicators."""
    import numpy as np
    import pandas as pd  # type: ignore[import-untyped]

    c = close.astype("float64")
    df = pd.DataFrame({"open": c, "high": c, "low": c, "close": c,
                       "volume": np.nan}, index=c.index)
    ret = c.pct_change()
    cols: dict[str, Any] = {"ret_1": ret}
    for w in (5, 10, 20, 50, 100, 200):
        sma = c.rolling(w, min_periods=w).mean()
        cols[f"sma_{w}"] = sma
        cols[f"ma_{w}"] = sma / c
        cols[f"ema_{w}"] = c.ewm(span=w, adjust=False, min_periods=w).mean()
        cols[f"roc_{w}"] = c.shift(w) / c
        cols[f"std_{w}"] = ret.rolling(w, min_periods=w).std()
    for w in (12, 26):
        cols[f"ema_{w}"] = c.ewm(span=w, adjust=False, min_periods=w).mean()
    for w in (6, 14, 24):
        delta = c.diff()
        gain = delta.clip(lower=0).ewm(alpha=1 / w, adjust=False, min_periods=w).mean()
        loss = (-delta.clip(upper=0)).ewm(alpha=1 / w, adjust=False, min_periods=w).mean()
        cols[f"rsi_{w}"] = 100 - 100 / (1 + gain / loss)
    macd = cols["ema_12"] - cols["ema_26"]
    cols["macd"] = macd
    cols["macd_signal"] = macd.ewm(span=9, adjust=False, min_periods=9).mean()
    cols["macd_hist"] = macd - cols["macd_signal"]
    for w in (10, 20):
        mid = c.rolling(w, min_periods=w).mean()
        sd = c.rolling(w, min_periods=w).std(ddof=0)
        cols[f"bb_middle_{w}"], cols[f"bb_upper_{w}"] = mid, mid + 2 * sd
        cols[f"bb_lower_{w}"] = mid - 2 * sd
    for w in (14, 20):
        hi = c.rolling(w, min_periods=w).max()
        lo = c.rolling(w, min_periods=w).min()
        cols[f"stoch_k_{w}"] = (c - lo) / (hi - lo) * 100
        cols[f"stoch_d_{w}"] = cols[f"stoch_k_{w}"].rolling(3, min_periods=3).mean()
        cols[f"atr_{w}"] = c.diff().abs().rolling(w, min_periods=w).mean()
    return pd.concat([df, pd.DataFrame(cols, index=c.index)], axis=1)


def _number(x: Any) -> Any:
    """Return ``x`` as a JSON number when it is a finite int or float, else its description.

    Python ``int`` and ``float`` (exact types) and numpy integer and floating scalars count;
    ``bool``, ``numpy.bool_``, strings (``"1"``), other types and non-finite values are never
    coerced: they go out as ``{"type": ..., "repr": ...}``, which is not a number.
    """
    import numpy as np

    t = type(x)
    v: Any = None
    try:
        if t is int or t is float:
            v = x
        elif issubclass(t, np.integer):
            v = int(x)
        elif issubclass(t, np.floating):
            v = float(x)
    except BaseException:
        v = None
    if type(v) is int and -(1 << 63) <= v < (1 << 63):
        return v
    if type(v) is float and math.isfinite(v):
        return v
    return {"type": _type_name(x), "repr": _repr(x)}


def _repr(x: Any) -> str:
    try:
        return str(repr(x))[:80]
    except BaseException:
        return "?"


def main() -> int:
    """Serve requests until stdin closes."""
    limits = json.loads(sys.argv[1])
    import datetime  # noqa: F401  (the allowed libraries are imported before the limits)
    import statistics  # noqa: F401
    import typing  # noqa: F401

    import numpy as np  # noqa: F401
    import pandas as pd  # type: ignore[import-untyped]

    factors(pd.Series([1.0, 2.0, 3.0]))  # warm every code path the frames use
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the strategy's prints go to stderr, never into the answers
    sys.stdout = sys.stderr
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past 0 bytes fails, never kills
    _limit(resource.RLIMIT_AS, int(limits["memory_mb"]) * 1024 * 1024)
    _limit(resource.RLIMIT_FSIZE, 0)
    _limit(resource.RLIMIT_NOFILE, int(limits["nofile"]))
    _limit(resource.RLIMIT_NPROC, 0)
    cpu_s = float(limits["cpu_s"])
    roots = read_roots()
    landlock = install_landlock(roots)
    seccomp = install_seccomp()
    # From here on the hook applies to everything, the worker's own code included: no
    # reference to it is kept, and it has no switch (see make_guard).
    sys.addaudithook(make_guard(roots, cpu_s))
    code: Any = None
    stdin = sys.stdin
    while True:
        line = stdin.readline()
        if not line:
            return 0
        used = resource.getrusage(resource.RUSAGE_SELF)
        budget = int(used.ru_utime + used.ru_stime + cpu_s) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (budget, hard))
        rid: Any = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            if req["op"] == "load":
                code = compile(req["code"], "<strategy>", "exec")
                _load(code)
                answer: dict[str, Any] = {"ok": True, "seccomp": seccomp,
                                          "landlock": landlock}
            elif req["op"] == "bar":
                results: dict[str, Any] = {}
                for asset, bar in sorted(req["bars"].items()):
                    idx = pd.to_datetime(bar["ts"], unit="s", utc=True)
                    df = factors(pd.Series(bar["close"], index=idx, dtype="float64"))
                    results[asset] = _call(code, df)
                answer = {"ok": True, "results": results}
            else:
                answer = {"ok": False, "error": f"unknown op {req.get('op')!r}"}
        except BaseException as exc:
            answer = {"ok": False, "error": _describe(exc)}
        answer["id"] = rid
        out.write(json.dumps(answer) + "\n")
        out.flush()


def _call(code: Any, df: Any) -> dict[str, Any]:
    """Return the strategy's answer for one frame: only ``signal`` and ``position``, or error.

    Each call starts from a fresh run of the code's top level (nothing carries over).
    """
    try:
        got = _load(code)(df)
        if not isinstance(got, dict):
            return {"error": f"returned {_type_name(got)}, not a dict"}
        return {k: _number(got[k]) for k in ("signal", "position") if k in got}
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return {"error": f"{_type_name(exc)} raised"}
        return {"error": _describe(exc)}


def _type_name(x: Any) -> str:
    try:
        return str(type.__dict__["__name__"].__get__(type(x)))[:80]
    except BaseException:
        return "object"


def _load(code: Any) -> Any:
    """Run the strategy's top level in a fresh namespace; return its ``generate_signal``."""
    if code is None:
        raise RuntimeError("no strategy loaded")
    namespace: dict[str, Any] = {"__name__": "strategy"}
    exec(code, namespace)
    fn = namespace.get("generate_signal")
    if not callable(fn):
        raise TypeError("generate_signal is not defined")
    return fn


def _describe(exc: BaseException) -> str:
    """Return one line: the exception and the strategy line it came from, if any.

    The exception is the strategy's object: its message may run strategy code, which runs
    under the audit hook like any other (and any failure of it is itself described plainly).
    """
    try:
        where = ""
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename == "<strategy>":
                where = f" (strategy line {frame.lineno})"
                break
        text = " ".join(f"{_type_name(exc)}: {exc}"[:2000].split())
        return str(text[:300] + where)
    except BaseException:
        return f"{_type_name(exc)} (its message could not be read)"


if __name__ == "__main__":
    sys.exit(main())
