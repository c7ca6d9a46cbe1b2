"""The AlphaForgeBench sandbox: validation, and a worker stopping hostile strategies.

Each hostile strategy runs in a real worker process; the test's event loop keeps running (a
ticker task counts while the strategy misbehaves) and the failure is reported, not raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.alphaforgebench.sandbox import (
    InvalidStrategy,
    ProtocolError,
    SandboxError,
    SandboxLimits,
    StrategyWorker,
    check_result,
    code_sha256,
    validate_code,
)

GOOD = """
import numpy as np

def generate_signal(df):
    close = df["close"].iloc[-1]
    sma = df["sma_5"].iloc[-1]
    if np.isnan(sma):
        return {"signal": 0, "position": 0.0}
    if close > sma:
        return {"signal": 1, "position": 1.0}
    return {"signal": -1, "position": 0.0}
"""

BARS = {"AAPL": {"ts": [86_400.0 * i for i in range(8)],
                 "close": [10.0, 11, 12, 13, 14, 15, 16, 17]},
        "MSFT": {"ts": [86_400.0 * i for i in range(8)],
                 "close": [17.0, 16, 15, 14, 13, 12, 11, 10]}}

LIMITS = SandboxLimits(memory_mb=1024, cpu_s=2.0, timeout_s=4.0)


async def ticking(coro: Awaitable[Any]) -> tuple[Any, int]:
    """Run ``coro`` while a task ticks every 10 ms; return its result (or exception), ticks."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    t = asyncio.create_task(tick())
    try:
        result: Any = await coro
    except Exception as exc:
        result = exc
    t.cancel()
    return result, ticks


async def test_a_good_strategy_runs_per_asset() -> None:
    w = StrategyWorker(validate_code(GOOD), LIMITS)
    try:
        got = await w.run_bar(BARS)
        assert check_result(got["AAPL"]) == (1, 1.0)
        assert check_result(got["MSFT"]) == (-1, 0.0)
        again = await w.run_bar(BARS)  # the same process answers again
        assert again == got and w.starts == 1
    finally:
        await w.close()
    assert w.version == code_sha256(GOOD)


@pytest.mark.parametrize("code, error", [
    ("import os\ndef generate_signal(df):\n    return {}\n", "import of 'os'"),
    ("import socket\ndef generate_signal(df):\n    return {}\n", "import of 'socket'"),
    ("from subprocess import run\ndef generate_signal(df):\n    return {}\n",
     "import of 'subprocess'"),
    ("import numpy.ctypeslib\nimport ctypes\ndef generate_signal(df):\n    return {}\n",
     "import of 'ctypes'"),
    ("def generate_signal(df):\n    return __import__('os')\n", "'__import__'"),
    ("def generate_signal(df):\n    return ().__class__.__bases__\n", "'__bases__'"),
    ("def generate_signal(df):\n    return getattr(df, 'x')\n", "'getattr'"),
    ("def generate_signal(df):\n    return open('/tmp/x', 'w')\n", "'open'"),
    ("def signal(df):\n    return {}\n", "no top-level function generate_signal"),
    ("def generate_signal(df:\n", "does not parse"),
    ("", "empty"),
])
def test_validation_rejects(code: str, error: str) -> None:
    with pytest.raises(InvalidStrategy, match=None) as info:
        validate_code(code)
    assert error in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value, error", [
    ({"signal": 2, "position": 1.0}, "signal must be"),
    ({"signal": True, "position": 1.0}, "signal must be"),
    ({"signal": 1, "position": 1.5}, "position must be"),
    ({"signal": 1, "position": "nan"}, "position must be"),
    ({"signal": 1}, "position must be"),
    ({"error": "ZeroDivisionError: x"}, "raised ZeroDivisionError"),
])
def test_out_of_range_answers_are_refused(value: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        check_result(value)


@contextlib.asynccontextmanager
async def listening() -> AsyncIterator[tuple[int, list[int]]]:
    """Listen on a free loopback port; yield (port, one entry per connection received)."""
    hits: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], hits
    finally:
        server.close()


async def test_socket_is_stopped() -> None:
    async with listening() as (port, hits):
        code = ("import pandas as pd\n\ndef generate_signal(df):\n"
                f"    pd.io.common.urlopen('http://127.0.0.1:{port}/')\n"
                "    return {'signal': 1, 'position': 1.0}\n")
        w = StrategyWorker(validate_code(code), LIMITS)
        try:
            got, ticks = await ticking(w.run_bar(BARS))
            assert ticks > 0
            with pytest.raises(ValueError, match="not allowed"):
                check_result(got["AAPL"])
            assert hits == []
        finally:
            await w.close()


async def test_socket_through_a_library_module_is_stopped() -> None:
    # pandas keeps a reference to the os module: the audit hook stops what the AST cannot see.
    code = ("import pandas as pd\n\ndef generate_signal(df):\n"
            "    pd.io.common.os.system('echo pwned > /tmp/pwned')\n"
            "    return {'signal': 1, 'position': 1.0}\n")
    w = StrategyWorker(validate_code(code), LIMITS)
    try:
        got = await w.run_bar(BARS)
        with pytest.raises(ValueError, match=r"os\.system is not allowed"):
            check_result(got["AAPL"])
    finally:
        await w.close()


@pytest.mark.parametrize("where", ["host", "/tmp/written.txt", "/sandbox/lib/written.txt"])
async def test_file_write_is_stopped(tmp_path: Path, where: str) -> None:
    # A host path (not even visible in the sandbox), the sandbox's private /tmp, its read-only
    # library directory: each write fails in the strategy, and nothing appears on the host.
    target = str(tmp_path / "written.txt") if where == "host" else where
    code = ("import pandas as pd\n\ndef generate_signal(df):\n"
            f"    df.to_csv({target!r})\n"
            "    return {'signal': 1, 'position': 1.0}\n")
    w = StrategyWorker(validate_code(code), LIMITS)
    try:
        got = await w.run_bar(BARS)
        with pytest.raises(ValueError, match="the strategy raised"):
            check_result(got["AAPL"])
        assert not (tmp_path / "written.txt").exists()
        assert not Path(target).exists()
    finally:
        await w.close()


async def test_infinite_loop_is_killed_and_the_worker_restarts() -> None:
    code = "def generate_signal(df):\n    while True:\n        pass\n"
    w = StrategyWorker(validate_code(code), SandboxLimits(cpu_s=30.0, timeout_s=1.5))
    try:
        got, ticks = await ticking(w.run_bar(BARS))
        assert isinstance(got, SandboxError) and "timed out after 1.5s" in str(got)
        assert ticks >= 50  # the loop kept running (10 ms ticks during 1.5 s)
        assert w.proc is None
        got2, _ = await ticking(w.run_bar(BARS))  # started again, stopped again
        assert isinstance(got2, SandboxError) and w.starts == 2
    finally:
        await w.close()


async def test_cpu_limit_stops_a_loop_before_the_wall_clock() -> None:
    code = "def generate_signal(df):\n    x = 0\n    while True:\n        x += 1\n"
    w = StrategyWorker(validate_code(code), SandboxLimits(cpu_s=1.0, timeout_s=30.0))
    try:
        got, _ = await ticking(w.run_bar(BARS))
        assert isinstance(got, SandboxError) and "SIGXCPU" in str(got)
    finally:
        await w.close()


async def test_ten_gigabytes_are_refused() -> None:
    code = ("import numpy as np\n\ndef generate_signal(df):\n"
            "    big = np.ones(10 * 1024 ** 3, dtype=np.uint8)\n"
            "    return {'signal': 1, 'position': float(big[0])}\n")
    w = StrategyWorker(validate_code(code), LIMITS)
    try:
        got, ticks = await ticking(w.run_bar(BARS))
        assert ticks >= 0
        with pytest.raises(ValueError, match="MemoryError"):
            check_result(got["AAPL"])
        # The worker survived and still answers.
        assert (await w.run_bar(BARS)).keys() == {"AAPL", "MSFT"}
    finally:
        await w.close()


async def test_no_secret_reaches_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    code = ("import pandas as pd\n\ndef generate_signal(df):\n"
            "    env = pd.io.common.os.environ\n"
            "    return {'signal': 1 if 'OPENAI_API_KEY' in env else 0, 'position': 0.5}\n")
    w = StrategyWorker(validate_code(code), LIMITS)
    try:
        got = await w.run_bar(BARS)
        assert check_result(got["AAPL"]) == (0, 0.5)
    finally:
        await w.close()
    assert os.environ["OPENAI_API_KEY"] == "sk-secret"


def test_the_audit_hook_refuses_sockets_writes_and_foreign_reads() -> None:
    from agents.alphaforgebench.sandbox_worker import make_guard, read_roots

    roots = read_roots()
    guard = make_guard(roots, 2.0)
    for event, args in [("socket.__new__", ()), ("socket.connect", ()),
                        ("subprocess.Popen", ()), ("os.system", ("ls",)),
                        ("open", ("/tmp/x", "w", 0)), ("open", ("/tmp/x", None, os.O_CREAT)),
                        ("open", ("/etc/hostname", "r", os.O_RDONLY)),
                        ("open", (f"/proc/{os.getppid()}/environ", "r", os.O_RDONLY)),
                        ("open", ("etc/hostname", None, os.O_RDONLY)),
                        ("import", ("socket",)), ("resource.setrlimit", (0, (-1, -1))),
                        ("_thread.start_new_thread", ())]:
        with pytest.raises((PermissionError, ImportError)):
            guard(event, args)
    import pandas

    guard("open", (pandas.__file__, "r", os.O_RDONLY))  # the libraries' own files
    guard("open", (0, "r", os.O_RDONLY))  # an open descriptor
    guard("import", ("pandas.io.formats",))
    assert roots and all(os.path.isabs(r) for r in roots)


async def test_the_network_namespace_alone_has_no_route() -> None:
    # The sandbox's command with a plain probe in place of the worker (no seccomp filter, no
    # audit hook): only the namespace stands between it and a server listening on the host.
    from agents.alphaforgebench.isolation import bwrap_argv, current_policy

    bwrap = current_policy().bwrap
    assert bwrap is not None, "bubblewrap is not installed"
    argv = bwrap_argv(bwrap, {})
    exe = argv[argv.index("--") + 1]
    async with listening() as (port, hits):
        probe = ("import socket\ns = socket.socket()\ns.settimeout(2)\n"
                 f"print(s.connect_ex(('127.0.0.1', {port})), socket.if_nameindex())\n")
        proc = await asyncio.create_subprocess_exec(
            *argv[:argv.index("--") + 1], exe, "-I", "-S", "-c", probe,
            stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
    code, interfaces = out.decode().split(" ", 1)
    assert int(code) != 0 and hits == [] and interfaces.strip() == "[(1, 'lo')]"


# -- strict answers (issue 26, point 4) ---------------------------------------------------------
# One strategy answers per stock by the stock's last close: (answer, the daemon's verdict).
STRICT = [
    ({"signal": "'1'", "position": 1.0}, r"signal must be .*got str '1'"),
    ({"signal": "True", "position": 1.0}, r"signal must be .*got bool True"),
    ({"signal": "np.bool_(True)", "position": 1.0}, r"signal must be .*got bool"),
    ({"signal": "1", "position": "float('nan')"}, r"position must be .*got float nan"),
    ({"signal": "1e9", "position": 0.5}, r"signal must be .*got float 1000000000\.0"),
    ({"signal": "1", "position": "1e9"}, r"position must be .*got float 1000000000\.0"),
    ({"signal": "1", "position": "'0.5'"}, r"position must be .*got str '0.5'"),
    ({"signal": "np.float64('inf')", "position": 0.5},
     r"signal must be .*got float64 np.float64\(inf\)"),
    ({"signal": "10 ** 30", "position": 0.5}, r"signal must be .*got int 10{30}"),
    ({"signal": "1"}, r"position must be .*got nothing"),
    ({"signal": "1", "position": "0.25"}, (1, 0.25)),
    ({"signal": "-1.0", "position": "0.0"}, (-1, 0.0)),
    ({"signal": "np.int64(1)", "position": "np.float64(0.5)"}, (1, 0.5)),
    ({"signal": "np.int8(0)", "position": "np.float32(0.75)"}, (0, 0.75)),
]


def _strict_strategy() -> tuple[str, dict[str, dict[str, list[float]]]]:
    cases = ",\n".join("        {" + ", ".join(f"{k!r}: {v}" for k, v in answer.items()) + "}"
                       for answer, _ in STRICT)
    code = ("import numpy as np\n\ndef generate_signal(df):\n"
            "    return [\n" + cases + ",\n    ][int(df['close'].iloc[-1]) - 1]\n")
    bars = {f"S{k:02d}": {"ts": [86_400.0 * i for i in range(3)], "close": [50.0, 50.0, k]}
            for k in range(1, len(STRICT) + 1)}
    return code, bars


async def test_only_finite_numbers_in_range_are_answers() -> None:
    code, bars = _strict_strategy()
    w = StrategyWorker(validate_code(code), LIMITS)
    try:
        got = await w.run_bar(bars)
    finally:
        await w.close()
    assert got.keys() == bars.keys()
    for k, (_, verdict) in enumerate(STRICT, start=1):
        raw = got[f"S{k:02d}"]
        if isinstance(verdict, tuple):
            assert check_result(raw) == verdict, raw
            assert type(raw["signal"]) in (int, float), raw  # numpy scalars converted
        else:
            with pytest.raises(ValueError, match=verdict) as info:
                check_result(raw)
            assert "\n" not in str(info.value)
    # The worker coerces nothing: a string, a bool or NaN leaves it as a description.
    assert got["S01"]["signal"] == {"type": "str", "repr": "'1'"}
    assert got["S02"]["signal"] == {"type": "bool", "repr": "True"}
    assert got["S04"]["position"]["type"] == "float"


@pytest.mark.parametrize("value, error", [
    ({"signal": "1", "position": 1.0}, r"signal must be .*got str '1'"),
    ({"signal": 1, "position": True}, "position must be"),
    ({"signal": np.bool_(True), "position": 1.0}, "signal must be"),
    ({"signal": 1, "position": float("nan")}, "position must be"),
    ({"signal": 1, "position": float("inf")}, "position must be"),
    ({"signal": 1e9, "position": 0.5}, "signal must be"),
    ({"signal": 0.5, "position": 0.5}, "signal must be"),
    ({"signal": [1], "position": 0.5}, "signal must be"),
    ({"signal": {"type": "int", "repr": "1"}, "position": 0.5}, r"got int 1$"),
    ({"signal": 1, "position": 10 ** 400}, "position must be"),
    (None, "no answer for this stock"),
    ([1, 0.5], "not an object"),
    ({"error": "boom\nsecond line"}, "raised boom second line"),
])
def test_the_daemon_checks_again_whatever_the_worker_sends(value: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error) as info:
        check_result(value)
    assert "\n" not in str(info.value)


def test_numpy_numbers_are_converted_on_the_daemon_side_too() -> None:
    got = check_result({"signal": np.int64(-1), "position": np.float32(0.5)})
    assert got == (-1, 0.5) and type(got[0]) is int and type(got[1]) is float


def _forger(rid: str, results: str, when: str) -> str:
    """Return a strategy that writes a forged answer line to every descriptor from 1 on.

    It reaches ``os`` through pandas, as the outside attack did; ``rid`` is an expression for
    the id it puts in the line; it forges only when ``when`` holds (by the frame's last close
    and length, since the strategy is stateless). Its own answer is position len(df) / 100.
    """
    return ("import pandas as pd\n\n"
            "def _request_id():\n"
            "    box, found = [], []\n"
            "    def g():\n"
            "        f = box[0].gi_frame\n"
            "        while f is not None:\n"
            "            req = f.f_locals.get('req')\n"
            "            if isinstance(req, dict) and 'id' in req:\n"
            "                found.append(req['id'])\n"
            "            f = f.f_back\n"
            "        yield 1\n"
            "    box.append(g())\n"
            "    next(box[0])\n"
            "    return found[0] if found else 'none'\n\n"
            "def generate_signal(df):\n"
            f"    if {when}:\n"
            f"        line = '{{\"id\": \"%s\", \"ok\": true, \"results\": {results}}}\\n'"
            f" % {rid}\n"
            "        for fd in range(1, 64):\n"
            "            try:\n"
            "                pd.io.common.os.write(fd, line.encode())\n"
            "            except Exception:\n"
            "                pass\n"
            "    return {'signal': 1, 'position': len(df) / 100}\n")


def _bar(n: int) -> dict[str, dict[str, list[float]]]:
    """Return BARS cut to their first ``n`` rows (AAPL rises, MSFT falls)."""
    return {a: {"ts": b["ts"][:n], "close": b["close"][:n]} for a, b in BARS.items()}


FULL = '{"AAPL": {"signal": 1, "position": 1.0}, "MSFT": {"signal": 1, "position": 1.0}}'


@pytest.mark.parametrize("rid", ["'0'", "'1'", "''"])
async def test_a_forged_line_fails_its_bar_and_shifts_nothing(rid: str) -> None:
    # The attack: a valid-looking answer for every stock on the answer pipe, without the
    # request's id (none, a guessed counter or an empty one).
    code = _forger(rid, FULL, "len(df) == 6")
    w = StrategyWorker(validate_code(code), LIMITS)
    try:
        first = await w.run_bar(_bar(5))
        assert {a: check_result(v) for a, v in first.items()} == {"AAPL": (1, 0.05),
                                                                  "MSFT": (1, 0.05)}
        got, ticks = await ticking(w.run_bar(_bar(6)))
        assert isinstance(got, ProtocolError) and "not this request's answer" in str(got), got
        assert "worker killed" in str(got)
        assert w.proc is None and ticks >= 0
        # The next bars are answered with their own answers, by a new worker.
        for n in (7, 8):
            later = await w.run_bar(_bar(n))
            assert {a: check_result(v) for a, v in later.items()} == {
                "AAPL": (1, n / 100), "MSFT": (1, n / 100)}
        assert w.starts == 2
    finally:
        await w.close()


@pytest.mark.parametrize("results, verdict", [
    ('{"AAPL": {"signal": 1, "position": 1.0}}', "omitted"),
    ('{"AAPL": {"signal": 1, "position": 1.0}, "MSFT": {"signal": 1, "position": 1.0},'
     ' "EVIL": {"signal": 1, "position": 1.0}}', "not asked"),
])
async def test_a_forged_line_with_the_read_id_never_shifts_a_bar(results: str,
                                                                   verdict: str) -> None:
    # Strategy code can read the request's id from the worker's frames (or its memory): a
    # forged line then passes the id check for its own bar, never for a later one.
    code = _forger("_request_id()", results, "len(df) == 6 and df['close'].iloc[-1] == 15")
    w = StrategyWorker(validate_code(code), LIMITS)
    try:
        got, _ = await ticking(w.run_bar(_bar(6)))
        if verdict == "omitted":  # taken as this bar's answer: the stock it omits has failed
            assert isinstance(got, dict) and got.keys() == {"AAPL", "MSFT"}, got
            assert check_result(got["AAPL"]) == (1, 1.0)
            assert got["MSFT"] is None
            with pytest.raises(ValueError, match="no answer for this stock"):
                check_result(got["MSFT"])
        else:  # a stock that was not asked about: the bar is a protocol error
            assert isinstance(got, ProtocolError) and "not asked" in str(got), got
        # The worker's real answer of that bar comes later: it never passes for the next bar.
        nxt, _ = await ticking(w.run_bar(_bar(7)))
        if verdict == "omitted":
            assert isinstance(nxt, ProtocolError) and "not this request's answer" in str(nxt)
            nxt = await w.run_bar(_bar(7))
        assert {a: check_result(v) for a, v in nxt.items()} == {"AAPL": (1, 0.07),
                                                                "MSFT": (1, 0.07)}
    finally:
        await w.close()


async def test_a_top_level_loop_gets_a_bar_s_wall_clock_not_the_start_up_s() -> None:
    code = "while True:\n    pass\n\ndef generate_signal(df):\n    return {}\n"
    w = StrategyWorker(code, SandboxLimits(cpu_s=30.0, timeout_s=1.5, start_timeout_s=60.0))
    try:
        got, _ = await ticking(w.run_bar(BARS))
        assert isinstance(got, SandboxError) and "timed out after 1.5s" in str(got)
    finally:
        await w.close()


async def test_control_and_bidi_characters_never_reach_a_stored_reason() -> None:
    code = ("def generate_signal(df):\n"
            "    raise ValueError('\\x1b[31mred\\x07 \\u202eevil\\u202c \\x9b2J end')\n")
    w = StrategyWorker(code, LIMITS)
    try:
        got = await w.run_bar(BARS)
        with pytest.raises(ValueError) as info:
            check_result(got["AAPL"])
    finally:
        await w.close()
    text = str(info.value)
    assert "?[31mred? ?evil? ?2J end" in text
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u202c" for c in text)


@pytest.mark.parametrize("code", ["-" * 39_000 + "1", "(" * 30_000, "x = " + "[" * 5_000])
def test_code_the_parser_cannot_hold_is_one_line(code: str) -> None:
    # The parser's own limits (a MemoryError for a long unary chain, too many parentheses)
    # are a rejection in one line, never an exception out of the daemon.
    with pytest.raises(InvalidStrategy, match="the code does not parse"):
        validate_code(code)
