"""Validate AlphaForgeBench strategy code and run it in a sandboxed worker process.

Layers (docs/protocol-alphaforgebench.md, "The sandbox"):

1. :func:`validate_code` (in the daemon, before anything runs): the code parses, defines a
   top-level ``def generate_signal(df)``, imports only :data:`ALLOWED_IMPORTS`, and uses no
   dunder name or attribute and none of :data:`FORBIDDEN_NAMES` (``eval``, ``open``,
   ``getattr``...). A rejected answer is retried like any invalid model answer.
2. :class:`StrategyWorker`: one long-lived child process per strategy version
   (``agents/alphaforgebench/sandbox_worker.py``, started as :mod:`.isolation` says: under
   bubblewrap with fresh namespaces, no capability, a read-only root of the interpreter and the
   allowed packages, an empty environment, and a libseccomp allow-list loaded before the code),
   stdin/stdout JSON lines, so a bar costs one round trip, not a spawn. The child lowers its
   own limits before it reads the code (``RLIMIT_AS``, per-request ``RLIMIT_CPU``,
   ``RLIMIT_FSIZE = 0``, ``RLIMIT_NOFILE``, ``RLIMIT_NPROC = 0``). Its first line reports what
   it sees of each layer, before any strategy code exists; a layer missing that the policy does
   not tolerate kills it (:class:`SandboxError`: the code never runs).
3. An audit hook in the child turns most refusals into clear messages; it is not a boundary
   (the namespaces and the seccomp filter are).
4. The daemon side never blocks: the pipes are asyncio streams, each request has a wall-clock
   timeout after which the child is killed; a dead or killed child is started again at the
   next request (loading the same code).
5. Nothing the child sends is trusted (strategy code shares its process, so it can write to
   the answer pipe itself): each request carries a fresh random id that its answer must echo,
   any other line is a :class:`ProtocolError` (the child is killed), an answer naming a stock
   that was not asked is one too, a stock asked but not answered is that stock's failure
   (:func:`check_result` of ``None``), and every signal and position is checked again here
   (:func:`check_result`: numbers only, never a string or a bool, finite, in range).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import hashlib
import json
import math
import os
import secrets
import signal
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import structlog

from agents.alphaforgebench.isolation import CHILD_ENV, current_policy, missing_layers, worker_argv

log = structlog.get_logger(__name__)

FUNCTION = "generate_signal"
#: Top-level modules strategy code may import (the paper's list, pydantic aside).
ALLOWED_IMPORTS = frozenset({"math", "numpy", "pandas", "datetime", "typing", "statistics"})
#: Names strategy code may not use at all (escape hatches out of the allow-list).
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr",
    "setattr", "delattr", "input", "breakpoint", "memoryview", "help", "exit", "quit",
})
MAX_CODE_CHARS = 40_000


class InvalidStrategy(ValueError):
    """Strategy code that may not run (one line)."""


class SandboxError(RuntimeError):
    """A request to the worker failed as a whole: timeout, crash, limit (one line)."""


class ProtocolError(SandboxError):
    """The worker's answer broke the protocol (wrong id, garbage, stocks not asked); the worker
    was killed (one line)."""


def code_sha256(code: str) -> str:
    """Return the SHA-256 hex digest of the strategy code (its version id)."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def validate_code(code: str) -> str:
    """Return ``code`` if it may run in the sandbox, else raise :class:`InvalidStrategy`."""
    if not isinstance(code, str) or not code.strip():
        raise InvalidStrategy("the strategy code is empty")
    if len(code) > MAX_CODE_CHARS:
        raise InvalidStrategy(f"the strategy code is longer than {MAX_CODE_CHARS} characters")
    try:
        tree = ast.parse(code, "<strategy>")
    except SyntaxError as exc:
        raise InvalidStrategy(f"the code does not parse: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # e.g. null bytes
        raise InvalidStrategy(f"the code does not parse: {exc}") from None
    except (MemoryError, RecursionError, SystemError):  # the parser's own limits (deep nesting)
        raise InvalidStrategy("the code does not parse: nested too deeply") from None
    defined = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION]
    if not defined:
        raise InvalidStrategy(f"the code defines no top-level function {FUNCTION}(df)")
    if len(defined[0].args.args) + len(defined[0].args.posonlyargs) < 1:
        raise InvalidStrategy(f"{FUNCTION} must take the bar frame as its first argument")
    for node in ast.walk(tree):
        where = f" (line {getattr(node, 'lineno', '?')})"
        if isinstance(node, ast.Import):
            for alias in node.names:
                _check_import(alias.name, where)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise InvalidStrategy(f"relative imports are not allowed{where}")
            _check_import(node.module or "", where)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            raise InvalidStrategy(f"dunder attribute {node.attr!r} is not allowed{where}")
        elif isinstance(node, ast.Name) and (node.id.startswith("__")
                                             or node.id in FORBIDDEN_NAMES):
            raise InvalidStrategy(f"name {node.id!r} is not allowed{where}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
                node.name.startswith("__")):
            raise InvalidStrategy(f"dunder definition {node.name!r} is not allowed{where}")
        elif isinstance(node, ast.arg | ast.keyword) and (node.arg or "").startswith("__"):
            raise InvalidStrategy(f"dunder argument {node.arg!r} is not allowed{where}")
        elif isinstance(node, ast.alias) and (node.asname or "").startswith("__"):
            raise InvalidStrategy(f"dunder name {node.asname!r} is not allowed{where}")
        elif isinstance(node, ast.Global | ast.Nonlocal):
            raise InvalidStrategy(f"global state is not allowed: the strategy is stateless{where}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value.startswith("__") and node.value.endswith("__")):
            raise InvalidStrategy(f"dunder string {node.value!r} is not allowed{where}")
    return code


def _check_import(name: str, where: str) -> None:
    if name.split(".")[0] not in ALLOWED_IMPORTS:
        allowed = ", ".join(sorted(ALLOWED_IMPORTS))
        raise InvalidStrategy(f"import of {name!r} is not allowed (only {allowed}){where}")


def check_result(value: Any) -> tuple[int, float]:
    """Return (signal, position) of one stock's answer or raise ``ValueError`` (one line).

    The answer must be ``{"signal": s, "position": p}``: each an int or a float (a numpy
    integer or floating scalar is converted), never a string, a bool or ``numpy.bool_``,
    finite, ``s`` one of 1, 0 and -1 and ``p`` in [0, 1]; other keys are ignored. ``None``
    is a stock the worker did not answer, ``{"error": ...}`` a call that raised. The worker
    checks the same, but what it sends is checked again here: the child is never trusted.
    """
    if value is None:
        raise ValueError("no answer for this stock")
    if not isinstance(value, dict):
        raise ValueError(f"the answer for this stock is not an object, got {_what(value)}")
    if "error" in value:
        raise ValueError(f"the strategy raised {_line(value['error'], 300)}")
    s, p = _number(value.get("signal")), _number(value.get("position"))
    if s is None or s not in (1, 0, -1):
        raise ValueError(f"signal must be 1, 0 or -1 (an int or a float), got "
                         f"{_what(value.get('signal'), 'signal' in value)}")
    if p is None or not 0 <= p <= 1:
        raise ValueError(f"position must be a finite number in [0, 1], got "
                         f"{_what(value.get('position'), 'position' in value)}")
    return int(s), float(p)


def _number(x: Any) -> int | float | None:
    """Return ``x`` as a Python int or float when it is a finite int or float, else None.

    Python ``int`` and ``float`` and numpy integer and floating scalars count; ``bool``,
    ``numpy.bool_``, strings and every other type do not (no coercion of "1" or True).
    """
    if type(x) is int or isinstance(x, np.integer):
        return int(x)
    if type(x) is float or isinstance(x, np.floating):
        f = float(x)
        return f if math.isfinite(f) else None
    return None  # bool (type bool is not int), numpy.bool_, str, subclasses, anything else


def _what(x: Any, present: bool = True) -> str:
    """Return a short description of a refused value (``type repr``), one line."""
    if not present:
        return "nothing"
    if isinstance(x, dict) and set(x) == {"type", "repr"}:  # the worker's description
        return _line(f"{x['type']} {x['repr']}", 120)
    return _line(f"{type(x).__name__} {x!r}", 120)


#: Control characters (C0, DEL, C1) and bidirectional overrides: replaced in any text the
#: worker sends, so a stored reason cannot drive a terminal or reorder what a reader sees.
_UNPRINTABLE = {c: "?" for c in [*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F,
                                 *range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def _line(x: Any, limit: int) -> str:
    """Return ``str(x)`` on one line, at most ``limit`` characters, without control or
    bidirectional-override characters."""
    text = " ".join(str(x)[:2000].split())
    return text.translate(_UNPRINTABLE)[:limit]


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """The limits of one strategy worker."""

    memory_mb: int = 1024
    """Address space of the child (``RLIMIT_AS``)."""
    cpu_s: float = 5.0
    """CPU seconds per request (``RLIMIT_CPU``, moved before each request)."""
    timeout_s: float = 10.0
    """Wall-clock seconds per request; the child is killed after it."""
    start_timeout_s: float = 60.0
    """Wall-clock seconds to start the child up to its first line (imports pandas); loading the
    code then has ``timeout_s``."""
    cpu_lifetime_s: int = 3600
    """Hard ``RLIMIT_CPU`` of a worker's whole life: reached, it is killed and started again."""
    nofile: int = 64
    """Open files of the child (``RLIMIT_NOFILE``)."""


class StrategyWorker:
    """A long-lived sandboxed process running one strategy version (see the module doc)."""

    def __init__(self, code: str, limits: SandboxLimits | None = None) -> None:
        self.code = code
        self.version = code_sha256(code)
        self.limits = limits or SandboxLimits()
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        """How many times a child was started (restarts after a kill count)."""
        self.missing: dict[str, str] | None = None
        """{layer: why} of the layers the last child reported missing (None: not started)."""

    async def _start(self) -> None:
        policy = current_policy()
        config = {"memory_mb": self.limits.memory_mb, "cpu_s": self.limits.cpu_s,
                  "nofile": self.limits.nofile, "cpu_lifetime_s": self.limits.cpu_lifetime_s}
        self.starts += 1
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *worker_argv(policy, config), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                env=CHILD_ENV, cwd="/", limit=1 << 20, start_new_session=True)
        except OSError as exc:  # e.g. bwrap missing (the start-up probe says so first)
            raise SandboxError(f"the sandbox does not start: {exc}") from None
        await self._check_layers(policy.bwrap is not None, policy.tolerated)
        # The imports are done (the first line came after them): the code's top level gets a
        # bar's wall clock, as each bar does.
        answer = await self._request({"op": "load", "code": self.code}, self.limits.timeout_s)
        if not answer.get("ok"):
            await self.close()
            raise SandboxError("the strategy does not load: "
                               + _line(answer.get("error", "?"), 300))

    async def _check_layers(self, bubblewrap: bool, tolerated: frozenset[str]) -> None:
        """Read the child's first line (written before any code exists); kill the child and
        raise :class:`SandboxError` if a layer is missing that ``tolerated`` does not name."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        line = b""
        try:
            async with asyncio.timeout(self.limits.start_timeout_s):
                line = await proc.stdout.readline()
            report = json.loads(line) if line else None
        except (TimeoutError, ValueError, RecursionError, ConnectionError):
            report = None
        missing = missing_layers(report, bubblewrap)
        if missing != self.missing:
            log.info("sandbox.layers", missing=missing or "none")
        self.missing = missing
        refused = {k: v for k, v in missing.items() if k not in tolerated}
        if refused:
            died = "" if line else f" (the worker died: {_exit_text(await self._reap())})"
            await self.close()
            why = "; ".join(f"{k}: {_line(v, 120)}" for k, v in refused.items())
            raise SandboxError(f"sandbox layer missing, the strategy does not run: {why}{died}")

    async def _request(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send ``req`` with a fresh random id; return the answer line that echoes that id.

        Any other line (no id, another id, not a JSON object) is a :class:`ProtocolError`:
        the worker is killed, so no later line can ever be read as a later request's answer.
        """
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        rid = secrets.token_hex(16)  # not guessable; see the protocol doc for what it can do
        try:
            proc.stdin.write(json.dumps({"id": rid, **req}).encode() + b"\n")
            async with asyncio.timeout(timeout):
                await proc.stdin.drain()
                line = await proc.stdout.readline()
        except TimeoutError:
            await self.close()
            raise SandboxError(f"timed out after {timeout:g}s (worker killed)") from None
        except (ConnectionError, BrokenPipeError):
            line = b""
        except ValueError:  # a line over the stream limit: not an answer of the protocol
            await self._protocol_error("the worker sent an answer over 1 MiB")
        if not line:
            code = await self._reap()
            raise SandboxError(f"the worker died ({_exit_text(code)})")
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):  # e.g. a strategy writing to the answer pipe
            await self._protocol_error("the worker sent garbage")
        if not isinstance(answer, dict) or answer.get("id") != rid:
            await self._protocol_error("the worker sent a line that is not this request's"
                                       " answer (no or another id)")
        return answer

    async def _protocol_error(self, what: str) -> NoReturn:
        """Kill the worker and raise :class:`ProtocolError` (``what``, one line)."""
        await self.close()
        raise ProtocolError(f"protocol error: {what} (worker killed)")

    async def run_bar(self, bars: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
        """Return ``{asset: raw answer}`` for one bar and every asset asked, starting the worker
        if needed.

        ``bars`` maps each asset to ``{"ts": [...], "close": [...]}`` (oldest first, the last
        entry the current bar). The raw answer of an asset the worker did not answer is
        ``None``; :func:`check_result` turns each into (signal, position) or a failure. Raises
        :class:`SandboxError` when the request fails as a whole (:class:`ProtocolError` when
        the answer breaks the protocol: then every asset of the bar has failed).
        """
        if self.proc is None or self.proc.returncode is not None:
            await self._start()
        answer = await self._request({"op": "bar", "bars": bars}, self.limits.timeout_s)
        if not answer.get("ok"):
            raise SandboxError(_line(answer.get("error", "failed"), 300))
        results = answer.get("results")
        if not isinstance(results, dict):
            await self._protocol_error("the answer has no results")
        if any(a not in bars for a in results):
            await self._protocol_error("the answer names stocks that were not asked about")
        return {a: results.get(a) for a in bars}  # a stock not answered: None, its failure

    async def _reap(self) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        try:
            async with asyncio.timeout(5):
                return await proc.wait()
        except TimeoutError:
            _kill(proc)
            return await proc.wait()

    async def close(self) -> None:
        """Kill the worker (if running) and wait for it."""
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            _kill(proc)
        await self._reap()


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own session
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _exit_text(code: int | None) -> str:
    """Return how a worker ended, in words (bubblewrap reports a signal as 128 + its number)."""
    if code is None:
        return "no exit status"
    if code < 0 or 128 < code <= 128 + 64:
        number = -code if code < 0 else code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = {"SIGXCPU": ": CPU time limit", "SIGKILL": ": killed (memory or limit)",
                "SIGSEGV": ": crashed", "SIGSYS": ": a forbidden system call"}.get(name, "")
        return f"{name}{hint}"
    return f"exit status {code}"
