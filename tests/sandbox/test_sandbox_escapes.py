"""Hostile strategies that pass (or nearly pass) validation and try to leave the sandbox.

Each runs in a real worker process. A strategy that tries an escape must not get it: no marker
file appears, no secret comes back in an answer, and the daemon side only ever sees a recorded
failure (a per-stock error or a :class:`SandboxError`), never another exception.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agents.alphaforgebench.sandbox import (
    InvalidStrategy,
    SandboxError,
    SandboxLimits,
    StrategyWorker,
    check_result,
    validate_code,
)

BARS = {"AAPL": {"ts": [86_400.0 * i for i in range(8)],
                 "close": [10.0, 11, 12, 13, 14, 15, 16, 17]}}
LIMITS = SandboxLimits(memory_mb=1024, cpu_s=3.0, timeout_s=6.0)
OK = "    return {'signal': 1, 'position': 1.0}\n"


async def run(code: str, bars: int = 1) -> list[dict[str, object] | SandboxError]:
    """Run ``code`` (not validated: the runtime layers are under test) for ``bars`` bars."""
    w = StrategyWorker(code, LIMITS)
    out: list[dict[str, object] | SandboxError] = []
    try:
        for _ in range(bars):
            try:
                out.append(await w.run_bar(BARS))
            except SandboxError as exc:
                out.append(exc)
    finally:
        await w.close()
    return out


def touch(marker: Path) -> str:
    return f"pd.io.common.os.system('touch {marker}')"


async def test_an_exception_message_runs_no_trusted_code(tmp_path: Path) -> None:
    # __str__ is built with a computed name, which no AST check can see.
    marker = tmp_path / "str"
    code = ("import pandas as pd\n\n"
            "def _s(self):\n"
            f"    {touch(marker)}\n"
            "    return 'boom'\n\n"
            "E = type('E', (Exception,), {'_' * 2 + 'str' + '_' * 2: _s})\n\n"
            "def generate_signal(df):\n    raise E()\n")
    got = await run(code)
    assert not marker.exists()
    assert isinstance(got[0], dict) and "AAPL" in got[0]


async def test_a_finalizer_runs_no_trusted_code(tmp_path: Path) -> None:
    marker = tmp_path / "del"
    code = ("import pandas as pd\n\n"
            "def _d(self):\n"
            f"    {touch(marker)}\n\n"
            "D = type('D', (), {'_' * 2 + 'del' + '_' * 2: _d})\n\n"
            "def generate_signal(df):\n"
            "    for _ in range(50):\n"
            "        a = D()\n"
            "        a.me = a\n" + OK)
    await run(code, bars=3)
    assert not marker.exists()


async def test_walking_frames_to_the_worker_gains_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "frame"
    code = ("import pandas as pd\n\n"
            "def generate_signal(df):\n"
            "    box = []\n"
            "    def g():\n"
            "        f = box[0].gi_frame.f_back\n"
            "        while f is not None:\n"
            "            for v in list(f.f_locals.values()):\n"
            "                if hasattr(v, 'trusted'):\n"
            "                    v.trusted = True\n"
            "            f = f.f_back\n"
            "        yield 1\n"
            "    box.append(g())\n"
            "    try:\n"
            "        next(box[0])\n"
            "    except Exception:\n"
            "        pass\n"
            f"    {touch(marker)}\n" + OK)
    await run(code)
    assert not marker.exists()


async def test_files_outside_the_libraries_and_the_daemon_environment_are_not_read(
        tmp_path: Path) -> None:
    secret = tmp_path / "provider.env"
    secret.write_text("OPENAI_API_KEY=sk-verifier-secret\n")
    for read in (f"pd.read_csv({str(secret)!r}).to_string()",
                 f"np.fromfile({str(secret)!r}, dtype=np.uint8).tobytes().decode()",
                 "open_ = pd.io.common.os.open; pd.io.common.os.read("
                 "open_('/proc/%d/environ' % pd.io.common.os.getppid(), 0), 65536).decode()"):
        code = ("import numpy as np\nimport pandas as pd\n\n"
                "def generate_signal(df):\n"
                f"    text = {read}\n" if "open_" not in read else
                "import numpy as np\nimport pandas as pd\n\n"
                "def generate_signal(df):\n"
                f"    {read.split('; ')[0]}\n    text = {read.split('; ')[1]}\n")
        code += "    raise ValueError('LEAK ' + text[:250])\n"
        got = await run(code)
        assert isinstance(got[0], dict)
        err = str(got[0]["AAPL"])
        assert "LEAK" not in err and "sk-verifier-secret" not in err, (read, err)


async def test_a_huge_answer_is_cut_to_the_contract() -> None:
    code = ("def generate_signal(df):\n"
            "    out = {str(i): 1.0 for i in range(400_000)}\n"
            "    out.update(signal=1, position=0.5)\n"
            "    return out\n")
    got = await run(code)
    assert isinstance(got[0], dict)
    assert got[0]["AAPL"] == {"signal": 1.0, "position": 0.5}


async def test_bytes_forced_into_the_answer_pipe_fail_the_bar_only() -> None:
    code = ("import pandas as pd\n\n"
            "def generate_signal(df):\n"
            "    for fd in range(3, 30):\n"
            "        try:\n"
            "            pd.io.common.os.write(fd, b'x' * (3 << 20))\n"
            "        except Exception:\n"
            "            pass\n" + OK)
    got = await run(code, bars=2)
    for g in got:  # each bar fails as a whole, and the next bar starts a new worker
        assert isinstance(g, SandboxError) and "worker killed" in str(g)


async def test_fork_is_refused_and_the_worker_lives_on() -> None:
    code = ("import pandas as pd\n\n"
            "def generate_signal(df):\n"
            "    while True:\n"
            "        pd.io.common.os.fork()\n")
    got = await run(code, bars=2)
    for g in got:
        assert isinstance(g, dict)
        with pytest.raises(ValueError, match=r"os\.fork is not allowed"):
            check_result(g["AAPL"])


@pytest.mark.parametrize("code", [
    "class E(Exception):\n    def __str__(self):\n        return ''\n"
    "def generate_signal(df):\n    raise E()\n",
    "class D:\n    def __del__(self):\n        pass\n"
    "def generate_signal(df):\n    return {}\n",
    "def generate_signal(df, __x=1):\n    return {}\n",
    "def generate_signal(df):\n    return dict(__x=1)\n",
])
def test_dunder_definitions_are_refused_in_one_line(code: str) -> None:
    with pytest.raises(InvalidStrategy, match="not allowed") as info:
        validate_code(code)
    assert "\n" not in str(info.value)


async def test_the_event_loop_keeps_running_during_hostile_bars() -> None:
    gaps: list[float] = []
    loop = asyncio.get_running_loop()

    async def tick() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            gaps.append(now - last)
            last = now

    t = asyncio.create_task(tick())
    await run("def generate_signal(df):\n    return {str(i): 1.0 for i in range(400_000)}\n")
    t.cancel()
    assert gaps and max(gaps) < 0.5


async def test_rebinding_what_the_hook_could_use_changes_nothing(tmp_path: Path) -> None:
    # Module attributes, the worker's globals (reached through a frame) and builtins are all
    # mutable from strategy code; the hook must not look any of them up when it runs.
    marker = tmp_path / "rebind"
    secret = tmp_path / "provider.env"
    secret.write_text("OPENAI_API_KEY=sk-verifier-secret\n")
    code = ("import pandas as pd\n\n"
            "def generate_signal(df):\n"
            "    os = pd.io.common.os\n"
            "    os.path.realpath = lambda p, **k: '/usr/lib/x'\n"
            "    os.path.isabs = lambda p: True\n"
            "    os.fsdecode = lambda p: '/usr/lib/x'\n"
            "    os.path._joinrealpath = lambda *a: ('/usr/lib/x', True)\n"
            "    box = []\n"
            "    def g():\n"
            "        f = box[0].gi_frame\n"
            "        while f is not None:\n"
            "            if '_DENIED_PREFIXES' in f.f_globals:\n"
            "                f.f_globals['_DENIED_PREFIXES'] = ('nothing.',)\n"
            "                f.f_globals['_DENIED_IMPORTS'] = frozenset()\n"
            "                f.f_globals['_WRITE_FLAGS'] = 0\n"
            "                f.f_globals['_check_open'] = lambda *a: None\n"
            "            b = f.f_builtins\n"
            "            b['PermissionError'] = ValueError\n"
            "            b['any'] = lambda *a: False\n"
            "            f = f.f_back\n"
            "        yield 1\n"
            "    box.append(g())\n"
            "    next(box[0])\n"
            "    out = []\n"
            f"    for step in (lambda: os.system('touch {marker}'),\n"
            f"                 lambda: open({str(secret)!r}).read(),\n"
            f"                 lambda: os.read(os.open({str(secret)!r}, 0), 99).decode()):\n"
            "        try:\n"
            "            out.append(str(step()))\n"
            "        except Exception as exc:\n"
            "            out.append('refused')\n"
            "    raise ValueError('|'.join(out))\n")
    got = await run(code, bars=2)
    assert not marker.exists()
    for g in got:
        assert isinstance(g, dict)
        err = str(g["AAPL"])
        assert "sk-verifier-secret" not in err and "refused|refused|refused" in err, err


async def test_a_path_object_that_changes_its_mind_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "provider.env"
    secret.write_text("OPENAI_API_KEY=sk-verifier-secret\n")
    code = ("import pandas as pd\n\n"
            "def _p(self):\n"
            "    self.n += 1\n"
            f"    return pd.__file__ if self.n == 1 else {str(secret)!r}\n\n"
            "P = type('P', (), {'_' * 2 + 'fspath' + '_' * 2: _p})\n\n"
            "def generate_signal(df):\n"
            "    p = P()\n"
            "    p.n = 0\n"
            "    raise ValueError(open(p).read()[:60])\n")
    got = await run(code)
    assert isinstance(got[0], dict)
    assert "sk-verifier-secret" not in str(got[0]["AAPL"]), got


async def test_forged_or_nested_answers_on_the_pipe_stay_the_strategy_s_problem() -> None:
    # The strategy writes to every descriptor that may be the answer pipe: a valid-looking answer
    # naming stocks that were not asked about, then a deeply nested line.
    forged = ('{"ok": true, "results": {"AAPL": {"signal": 1, "position": 1.0},'
              ' "EVIL": {"signal": 1, "position": 1.0}}}\\n')
    code = ("import pandas as pd\n\n"
            "def generate_signal(df):\n"
            "    for fd in range(3, 30):\n"
            "        try:\n"
            f"            pd.io.common.os.write(fd, b'{forged}')\n"
            "        except Exception:\n"
            "            pass\n" + OK)
    got = await run(code, bars=2)
    for g in got:
        assert isinstance(g, SandboxError) or set(g) == {"AAPL"}, g
    nested = ("import pandas as pd\n\n"
              "def generate_signal(df):\n"
              "    for fd in range(3, 30):\n"
              "        try:\n"
              "            pd.io.common.os.write(fd, b'[' * 200000 + b'\\n')\n"
              "        except Exception:\n"
              "            pass\n" + OK)
    got = await run(nested, bars=2)
    for g in got:
        assert isinstance(g, SandboxError) or set(g) == {"AAPL"}, g


async def test_memory_written_through_numpy_does_not_free_the_process(tmp_path: Path) -> None:
    # numpy's as_strided reads and writes any address of the worker: the strategy rewrites the
    # hook's denied prefixes in place. The kernel's seccomp filter still refuses the fork.
    marker = tmp_path / "mem"
    code = ("import numpy as np\nimport pandas as pd\n\n"
            "def generate_signal(df):\n"
            "    box, found = [], []\n"
            "    def g():\n"
            "        f = box[0].gi_frame\n"
            "        while f is not None:\n"
            "            if '_DENIED_PREFIXES' in f.f_globals:\n"
            "                found.append(f.f_globals['_DENIED_PREFIXES'])\n"
            "            f = f.f_back\n"
            "        yield 1\n"
            "    box.append(g())\n"
            "    next(box[0])\n"
            "    base = np.zeros(8, dtype=np.uint8)\n"
            "    a0 = base.ctypes.data\n"
            "    for s in found[0]:\n"
            "        if s in ('os.system', 'os.fork', 'os.exec', 'os.spawn', 'os.posix_spawn'):\n"
            "            view = np.lib.stride_tricks.as_strided(\n"
            "                base, shape=(2, 64 + len(s)), strides=(id(s) - a0, 1))\n"
            "            k = bytes(view[1]).find(s.encode())\n"
            "            view[1, k] = ord('x')\n"
            f"    status = pd.io.common.os.system('touch {marker}')\n"
            "    raise ValueError(f'system returned {status}')\n")
    got = await run(code)
    assert not marker.exists()
    assert isinstance(got[0], dict) and "system returned" in str(got[0]["AAPL"])


async def test_the_worker_reports_every_layer_on() -> None:
    w = StrategyWorker("def generate_signal(df):\n" + OK, LIMITS)
    try:
        await w.run_bar(BARS)
        assert w.missing == {}
    finally:
        await w.close()


def test_the_seccomp_policy_alone_refuses_what_no_strategy_needs(tmp_path: Path) -> None:
    # The allow-list loaded into a plain process (no namespace, no hook): every call that
    # could touch the world outside fails with EPERM, while numpy and pandas keep working.
    import subprocess
    import sys

    target = tmp_path / "f"
    target.write_text("x")
    probe = f"""
import errno, os, socket, sys, resource
sys.path.insert(0, {str(Path("agents/alphaforgebench").resolve())!r})
import numpy as np, pandas as pd
import seccomp_policy
assert seccomp_policy.install() == "on"
t = {str(target)!r}
calls = {{
    "socket": lambda: socket.socket(), "unix socket": lambda: socket.socket(socket.AF_UNIX),
    "fork": os.fork, "execv": lambda: os.execv("/bin/true", ["true"]),
    "open for write": lambda: open(t, "w"), "open to append": lambda: os.open(t, os.O_APPEND),
    "unlink": lambda: os.unlink(t), "rename": lambda: os.rename(t, t + "2"),
    "chmod": lambda: os.chmod(t, 0o777), "chown": lambda: os.chown(t, 0, 0),
    "utime": lambda: os.utime(t), "setxattr": lambda: os.setxattr(t, "user.a", b"1"),
    "removexattr": lambda: os.removexattr(t, "user.a"), "link": lambda: os.link(t, t + "3"),
    "symlink": lambda: os.symlink(t, t + "4"), "mkdir": lambda: os.mkdir(t + "d"),
    "kill": lambda: os.kill(os.getppid(), 0),
    "raise a limit": lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20)),
    "lower another limit": lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 40, 1 << 40)),
    "setuid": lambda: os.setuid(0), "chdir": lambda: os.chdir("/"),
    "pidfd": lambda: os.pidfd_open(os.getppid()),
}}
refused = []
for name, call in calls.items():
    try:
        call()
    except (PermissionError, ValueError):
        refused.append(name)
    except OSError as exc:
        if exc.errno == errno.EPERM:
            refused.append(name)
frame = pd.DataFrame({{"c": np.arange(50.0)}})
print(len(refused) == len(calls), sorted(set(calls) - set(refused)),
      float(frame.c.rolling(5).mean().iloc[-1]), open(t).read())
"""
    done = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False, env={"OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "[]", "47.0", "x"], done.stdout
    assert target.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["f"]


async def test_the_filesystem_alone_shows_only_the_libraries(tmp_path: Path) -> None:
    # The sandbox's command with a plain probe in place of the worker: what it can see.
    from agents.alphaforgebench.isolation import bwrap_argv, current_policy

    bwrap = current_policy().bwrap
    assert bwrap is not None, "bubblewrap is not installed"
    (tmp_path / "secret").write_text("sk-file-secret")
    argv = bwrap_argv(bwrap, {})
    cut = argv.index("--") + 1
    probe = f"""
import json, os
print(json.dumps([sorted(os.listdir("/")), os.listdir("/proc"), os.listdir("/tmp"),
      [os.path.exists(p) for p in ("/etc/passwd", "/etc/hostname", {str(tmp_path)!r},
                                   {str(Path.cwd())!r}, "/var", "/home", "/run")],
      os.access("/sandbox/worker.py", os.W_OK), os.access("/usr/lib", os.W_OK)]))
"""
    proc = await asyncio.create_subprocess_exec(
        *argv[:cut], argv[cut], "-I", "-S", "-c", probe, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    top, procs, tmp, exists, w1, w2 = json.loads(out)
    assert not {"etc", "home", "var", "run", "work", "srv", "opt"} & set(top), top
    assert procs == [] and tmp == [] and exists == [False] * 7 and not w1 and not w2
