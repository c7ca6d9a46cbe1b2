"""The sandboxed child process that runs one AlphaForgeBench strategy (see agents/sandbox.py).

Run as ``python -I sandbox_worker.py '<limits json>'`` (never imported by the daemon: it imports
nothing of paperarena). It speaks JSON lines: on stdin one request per line, on its own copy of
the original stdout one answer per line (the strategy's prints go to stderr).

Requests:

- ``{"op": "load", "code": "..."}``: run the code's top level, find ``generate_signal``;
- ``{"op": "bar", "bars": {asset: {"ts": [...], "close": [...]}}}``: build each asset's frame
  (OHLCV and indicators, oldest row first, the last row the current bar) and call
  ``generate_signal(df)`` once per asset, each time from a fresh run of the code's top level
  (the strategy is stateless: module-level objects do not carry over between calls).

Before reading any request it imports the allowed libraries, then lowers its resource limits
(address space, file size 0, open files, processes) and installs an audit hook that refuses
sockets, subprocesses, writes, deletions, ``ctypes``, limit changes and introspection of the
garbage collector. CPU time is limited per request: the soft ``RLIMIT_CPU`` is moved to the CPU
time used so far plus the per-request budget before each request (SIGXCPU ends the process).
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
    "sys.settrace", "sys.setprofile", "sys._getframe", "builtins.input", "pty.", "fcntl.",
    "mmap.", "urllib.", "http.", "ftplib.", "smtplib.", "telnetlib.", "webbrowser.",
)
_DENIED_IMPORTS = frozenset({
    "socket", "_socket", "subprocess", "_posixsubprocess", "ctypes", "_ctypes", "multiprocessing",
    "urllib", "http", "ftplib", "smtplib", "ssl", "_ssl", "asyncio", "selectors", "pty",
    "shutil", "tempfile", "resource", "signal", "threading", "_thread", "importlib",
})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Guard:
    """The audit hook: everything is allowed while :attr:`trusted` (the worker's own code)."""

    def __init__(self) -> None:
        self.trusted = True

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.trusted:
            return
        if event == "open":
            mode = args[1] if len(args) > 1 else None
            flags = args[2] if len(args) > 2 else 0
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    isinstance(flags, int) and flags & _WRITE_FLAGS):
                raise PermissionError(f"sandbox: writing files is not allowed ({args[0]!r})")
            return
        if event == "import":
            top = str(args[0]).split(".")[0]
            if top in _DENIED_IMPORTS:
                raise ImportError(f"sandbox: import of {args[0]} is not allowed")
            return
        if event.startswith(_DENIED_PREFIXES):
            raise PermissionError(f"sandbox: {event} is not allowed")


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
    if isinstance(x, bool):
        return x
    try:
        f = float(x)
    except (TypeError, ValueError, OverflowError):
        return repr(x)[:80]
    return f if math.isfinite(f) else str(f)


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
    guard = _Guard()
    sys.addaudithook(guard)
    code: Any = None
    stdin = sys.stdin
    while True:
        guard.trusted = True
        line = stdin.readline()
        if not line:
            return 0
        used = resource.getrusage(resource.RUSAGE_SELF)
        budget = int(used.ru_utime + used.ru_stime + cpu_s) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (budget, hard))
        try:
            req = json.loads(line)
            if req["op"] == "load":
                code = compile(req["code"], "<strategy>", "exec")
                guard.trusted = False
                _load(code)
                guard.trusted = True
                answer: dict[str, Any] = {"ok": True}
            elif req["op"] == "bar":
                results: dict[str, Any] = {}
                for asset, bar in sorted(req["bars"].items()):
                    idx = pd.to_datetime(bar["ts"], unit="s", utc=True)
                    df = factors(pd.Series(bar["close"], index=idx, dtype="float64"))
                    guard.trusted = False
                    try:
                        got = _load(code)(df)  # a fresh module per call: nothing carries over
                        results[asset] = ({k: _number(v) for k, v in got.items()}
                                          if isinstance(got, dict)
                                          else {"error": f"returned {type(got).__name__},"
                                                         " not a dict"})
                    except BaseException as exc:
                        guard.trusted = True
                        if isinstance(exc, KeyboardInterrupt | SystemExit):
                            exc = RuntimeError(f"{type(exc).__name__} raised")
                        results[asset] = {"error": _describe(exc)}
                    guard.trusted = True
                answer = {"ok": True, "results": results}
            else:
                answer = {"ok": False, "error": f"unknown op {req.get('op')!r}"}
        except BaseException as exc:
            guard.trusted = True
            answer = {"ok": False, "error": _describe(exc)}
        guard.trusted = True
        out.write(json.dumps(answer) + "\n")
        out.flush()


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
    """Return one line: the exception and the strategy line it came from, if any."""
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == "<strategy>":
            where = f" (strategy line {frame.lineno})"
            break
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return (text[:300] + where)


if __name__ == "__main__":
    sys.exit(main())
