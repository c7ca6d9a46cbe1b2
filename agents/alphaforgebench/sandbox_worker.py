"""The sandboxed process that runs one AlphaForgeBench strategy (see
agents/alphaforgebench/sandbox.py and agents/alphaforgebench/isolation.py).

Run by bubblewrap as ``python -I -S -B /sandbox/worker.py '<config json>'`` (never imported by
the daemon: it imports nothing of paperarena). The config names the limits and the directories
put first on ``sys.path`` (inside the sandbox, ``/sandbox/lib``: the allowed packages and
``seccomp_policy.py``). It speaks JSON lines: its first line, written before it reads anything,
reports the isolation it sees (:func:`layers`); then on stdin one request per line, on its own
copy of the original stdout one answer per line (the strategy's prints go to stderr).

Requests (each with the daemon's ``"id"``, which the answer echoes):

- ``{"id": "...", "op": "load", "code": "..."}``: run the code's top level, find
  ``generate_signal``; the answer is ``{"id": "...", "ok": true}``;
- ``{"id": "...", "op": "bar", "bars": {asset: {"ts": [...], "close": [...]}}}`` (and, with
  recorded bars, ``"open"``, ``"high"``, ``"low"``, ``"volume"`` lists, null for unknown): build
  each asset's frame (OHLCV and the factor library of ``factor_library.py``, with the windows the
  code names beyond the defaults; oldest row first, the last row the current bar) and call
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

Before reading any request it imports the allowed libraries, lowers its resource limits
(address space, file size 0, open files, processes), loads the seccomp allow-list through
libseccomp (``seccomp_policy.install``: the kernel refuses every other system call, whatever
the process runs from then on) and installs an audit hook (``make_guard``) refusing sockets,
subprocesses, writes, deletions, ``ctypes``, threads, limit changes and reads outside Python's
and the libraries' directories. The hook is not a boundary (PEP 578; strategy code can rewrite
its data through numpy): it turns most refusals into a clear message, while bubblewrap's
namespaces and read-only root and the seccomp filter hold whatever the process does. CPU time
is limited per request: the soft ``RLIMIT_CPU`` is moved to the CPU time used so far plus the
per-request budget before each request (SIGXCPU ends the process).

Why everything in one module: the child runs this file as a script, with no package on its path
and nothing of paperarena imported, so everything it runs before and around strategy code
(limits, hook, frames, answers) must live here or in the bound ``seccomp_policy``.
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


def _limit(which: int, value: int) -> None:
    with contextlib.suppress(ValueError, OSError):  # e.g. a hard limit already lower: keep it
        resource.setrlimit(which, (value, value))


def factors(close: Any, ohlv: Any = None, extra: tuple[str, ...] = ()) -> Any:
    """Return the frame of one asset: OHLCV and the factor library (``factor_library.frame``,
    bound next to this file; ``extra``: the windows the strategy names beyond the defaults).

    ``ohlv``: the recorded ``open``/``high``/``low``/``volume`` series (None values NaN);
    without it open = high = low = close and volume is NaN (closes only).
    """
    import factor_library  # type: ignore[import-not-found]

    return factor_library.frame(close, ohlv, extra)


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


def layers(install_seccomp: Any) -> dict[str, Any]:
    """Return the first line: what this process sees of each isolation layer.

    Checked from inside, before any strategy code exists: uid and gid (65534 in the sandbox's
    user namespace), pid (2 in its pid namespace, under bubblewrap's init), the network
    interfaces (only ``lo`` in its network namespace), whether a capability-guarded call
    (``setgroups`` to the same groups, harmless) is refused, and whether, once the seccomp
    filter is loaded (``install_seccomp``), a socket is refused.
    """
    import socket

    try:
        net: Any = sorted(name for _, name in socket.if_nameindex())
    except OSError as exc:
        net = f"unknown: {exc}"
    try:
        os.setgroups(os.getgroups())
        caps = "present: setgroups allowed"
    except PermissionError:
        caps = "none"
    except OSError as exc:
        caps = f"unknown: {exc}"
    seccomp = install_seccomp()
    if seccomp == "on":
        try:
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
            seccomp = "off: a socket could still be opened"
        except PermissionError:
            pass
    return {"ready": True, "uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid(),
            "net": net, "caps": caps, "seccomp": seccomp}


def main() -> int:
    """Report the layers, then serve requests until stdin closes."""
    limits = json.loads(sys.argv[1])
    sys.path[:0] = [p for p in limits.get("path", []) if isinstance(p, str)]
    import ctypes.util

    # The sandbox has no ldconfig: name the two libraries pyseccomp asks for by soname.
    found = ctypes.util.find_library
    sonames = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}
    ctypes.util.find_library = lambda name: sonames.get(name) or found(name)
    import datetime  # noqa: F401  (the allowed libraries are imported before the limits)
    import statistics  # noqa: F401
    import typing  # noqa: F401

    import factor_library  # type: ignore[import-not-found]
    import numpy as np  # noqa: F401
    import pandas as pd  # type: ignore[import-untyped]
    import seccomp_policy  # type: ignore[import-not-found]

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
    want = {"RLIMIT_AS": int(limits["memory_mb"]) * 1024 * 1024, "RLIMIT_FSIZE": 0,
            "RLIMIT_NOFILE": int(limits["nofile"]), "RLIMIT_NPROC": 0}
    # A lifetime hard CPU limit: the per-request soft limit (which strategy code may raise,
    # up to this) moves below it; reached, the kernel kills the worker, restarted next bar.
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    lifetime = int(limits.get("cpu_lifetime_s", 3600))
    if hard == resource.RLIM_INFINITY or hard > lifetime:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CPU, (lifetime, lifetime))
    opens = bool(limits.get("opens", True))
    report = layers(lambda: seccomp_policy.install(opens=opens))
    unset = [name for name, value in want.items()
             if resource.getrlimit(getattr(resource, name))[0] > value]
    if resource.getrlimit(resource.RLIMIT_CPU)[1] > lifetime:
        unset.append("RLIMIT_CPU (hard)")
    report["limits"] = "on" if not unset else "off: not lowered: " + ", ".join(unset)
    roots = read_roots()
    # From here on the hook applies to everything, the worker's own code included: no
    # reference to it is kept, and it has no switch (see make_guard).
    sys.addaudithook(make_guard(roots, cpu_s))
    out.write(json.dumps(report) + "\n")  # before any request: no strategy code exists yet
    out.flush()
    code: Any = None
    extra: tuple[str, ...] = ()
    stdin = sys.stdin
    while True:
        line = stdin.readline()
        if not line:
            return 0
        used = resource.getrusage(resource.RUSAGE_SELF)
        budget = int(used.ru_utime + used.ru_stime + cpu_s) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (min(budget, hard), hard))
        rid: Any = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            if req["op"] == "load":
                code = compile(req["code"], "<strategy>", "exec")
                _load(code)
                extra = factor_library.requested(code)
                answer: dict[str, Any] = {"ok": True}
            elif req["op"] == "bar":
                results: dict[str, Any] = {}
                for asset, bar in sorted(req["bars"].items()):
                    idx = pd.to_datetime(bar["ts"], unit="s", utc=True)
                    ohlv = None
                    if "high" in bar:  # recorded OHLCV bars (None: unknown, NaN)
                        ohlv = {k: pd.Series([math.nan if v is None else v for v in bar[k]],
                                             index=idx, dtype="float64")
                                for k in ("open", "high", "low", "volume")}
                    df = factors(pd.Series(bar["close"], index=idx, dtype="float64"), ohlv,
                                 extra)
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
