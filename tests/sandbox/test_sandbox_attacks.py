"""The outside attack suite: hostile strategies against the sandbox with its in-process hook off.

Every strategy here first switches the worker's audit hook off (:data:`HOOK_OFF`: it finds the
worker's globals through a generator frame and rewrites the hook's denied prefixes and imports
in place through numpy), then attacks with ``ctypes`` and ``os`` directly: only the kernel
layers (bubblewrap's namespaces and read-only root, the seccomp allow-list, the limits) stand
in the way. Each test checks on the host that nothing happened: no file written, changed or
deleted, no attribute or mode changed, no connection received, no secret in any answer, no
signal delivered, the daemon's event loop running throughout.

Run twice by CI: in the suite as whoever runs it (root in CI), and again as ``nobody`` with no
capability (tests/sandbox/test_sandbox_unprivileged.py).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.alphaforgebench.sandbox import SandboxError, SandboxLimits, StrategyWorker

BARS = {"AAPL": {"ts": [86_400.0 * i for i in range(8)],
                 "close": [10.0, 11, 12, 13, 14, 15, 16, 17]}}
LIMITS = SandboxLimits(memory_mb=1024, cpu_s=3.0, timeout_s=8.0)
SECRET = "sk-attack-suite-secret-0123456789"

#: Switches the worker's audit hook off and binds W (the worker's globals), OS, SYS, CT (ctypes,
#: already imported by the worker) and LIBC. Modules the hook would not let it import are taken
#: from ``sys.modules`` instead.
HOOK_OFF = """
import numpy as np

def _worker_globals():
    box, found = [], []
    def g():
        f = box[0].gi_frame
        while f is not None:
            if '_DENIED_PREFIXES' in f.f_globals:
                found.append(f.f_globals)
            f = f.f_back
        yield 1
    box.append(g())
    next(box[0])
    return found[0]

def _scribble(s):
    base = np.zeros(8, dtype=np.uint8)
    view = np.lib.stride_tricks.as_strided(base, shape=(2, 64 + len(s)),
                                           strides=(id(s) - base.ctypes.data, 1))
    k = bytes(view[1]).find(s.encode())
    if k >= 0:
        view[1, k] = ord('~')

W = _worker_globals()
for _s in W['_DENIED_PREFIXES']:  # dotted, never interned identifiers shared with other code
    _scribble(_s)
OS, SYS = W['os'], W['sys']
CT = SYS.modules['ctypes']
LIBC = CT.CDLL(None, use_errno=True)

def report(**what):
    raise ValueError('REPORT ' + W['json'].dumps(what, separators=(',', ':')))

def verdict(rc):  # 'R': refused with EPERM, 'E<errno>': failed otherwise, 'A': allowed
    if rc != -1:
        return 'A'
    e = CT.get_errno()
    return 'R' if e == 1 else 'E%d' % e
"""


async def attack(body: str, *, limits: SandboxLimits = LIMITS, bars: int = 1) -> list[Any]:
    """Run ``HOOK_OFF`` + ``def generate_signal(df):`` + ``body``; return each bar's outcome:
    the strategy's report (a dict), another per-stock answer, or the SandboxError."""
    code = HOOK_OFF + "\ndef generate_signal(df):\n" + "".join(
        "    " + line + "\n" for line in body.strip("\n").splitlines())
    w = StrategyWorker(code, limits)
    out: list[Any] = []
    try:
        for _ in range(bars):
            try:
                answer = (await w.run_bar(BARS))["AAPL"]
            except SandboxError as exc:
                out.append(exc)
                continue
            err = str(answer.get("error", "")) if isinstance(answer, dict) else ""
            if "REPORT " in err:
                text = err.split("REPORT ", 1)[1].rsplit(" (strategy line", 1)[0]
                out.append(json.loads(text))
            else:
                out.append(answer)
    finally:
        await w.close()
    return out


async def test_the_prelude_really_switches_the_hook_off() -> None:
    # Without the hook, a read of a library file through ctypes works: the attacks below are
    # stopped by the kernel layers, not by the hook.
    got = await attack("""
fd = LIBC.open(b'/sandbox/worker.py', 0)
OS.listdir('/sandbox')
report(fd=fd, socket=bool(SYS.modules.get('socket')))
""")
    assert got[0]["fd"] >= 0 and got[0]["socket"] is True, got


async def test_network_and_dns() -> None:
    from tests.sandbox.test_sandbox import listening

    async with listening() as (port, hits):
        got = await attack(f"""
socket = SYS.modules['socket']
out = {{}}
for fam in (2, 10, 1, 16, 17):  # inet, inet6, unix, netlink, packet
    out[str(fam)] = verdict(LIBC.socket(fam, 1 if fam in (1, 2, 10) else 3, 0))
try:
    socket.getaddrinfo('example.com', 80)
    out['dns'] = 'resolved'
except Exception as e:
    out['dns'] = type(e).__name__
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2)
    out['tcp'] = 'connected'
except Exception as e:
    out['tcp'] = type(e).__name__
report(**out)
""")
    r = got[0]
    assert [r[f] for f in ("2", "10", "1", "16", "17")] == ["R"] * 5, r
    assert r["dns"] != "resolved" and r["tcp"] != "connected" and hits == []


async def test_files_outside_are_neither_read_written_nor_deleted(tmp_path: Path) -> None:
    secret = tmp_path / "provider.env"
    secret.write_text(f"OPENAI_API_KEY={SECRET}\n")
    secret.chmod(0o600)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    got = await attack(f"""
out = {{}}
leak = ''
for name, path, flags in (('read', {str(secret)!r}, 0), ('write', {str(victim)!r}, 0o1101),
                          ('passwd', '/etc/passwd', 0), ('shadow', '/etc/shadow', 0),
                          ('tmp', '/tmp/x', 0o1101), ('lib', '/sandbox/lib/x', 0o1101),
                          ('worker', '/sandbox/worker.py', 0o2)):
    fd = LIBC.open(path.encode(), flags, 0o644)
    out[name] = verdict(fd)
    if fd >= 0:
        buf = CT.create_string_buffer(200)
        LIBC.read(fd, buf, 200)
        leak += buf.value.decode(errors='replace')
out['leak'] = {SECRET!r} in leak
out['unlink'] = verdict(LIBC.unlink({str(victim)!r}.encode()))
out['rename'] = verdict(LIBC.rename({str(victim)!r}.encode(), b'/tmp/moved'))
out['mkdir'] = verdict(LIBC.mkdir({str(tmp_path / 'd')!r}.encode(), 0o777))
report(**out)
""")
    r = got[0]
    assert r.pop("leak") is False, r
    # Outside paths do not exist in the sandbox (ENOENT), writes are refused (EPERM).
    assert r == {"read": "E2", "write": "R", "passwd": "E2", "shadow": "E2", "tmp": "R",
                 "lib": "R", "worker": "R", "unlink": "R", "rename": "R", "mkdir": "R"}, r
    assert victim.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["provider.env", "victim.txt"]


async def test_file_metadata_and_attributes_are_untouched(tmp_path: Path) -> None:
    # The escape the first review found: setxattr of an ACL or a file capability, utime, chmod.
    victim = tmp_path / "root-only"
    victim.write_text("x")
    victim.chmod(0o600)
    before = os.stat(victim)
    xattrs_before = os.listxattr(victim)
    got = await attack(f"""
acl = bytes([2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 4, 0, 6, 0, 255, 255, 255, 255,
             16, 0, 6, 0, 255, 255, 255, 255, 32, 0, 6, 0, 255, 255, 255, 255])
out = {{}}
for key, target in (('host', {str(victim)!r}), ('lib', '/sandbox/lib/seccomp_policy.py'),
                    ('worker', '/sandbox/worker.py'), ('tmp', '/tmp')):
    t = target.encode()
    out[key] = ''.join(verdict(rc) for rc in (
        LIBC.setxattr(t, b'system.posix_acl_access', acl, len(acl), 0),
        LIBC.setxattr(t, b'security.capability', b'\\x01' * 20, 20, 0),
        LIBC.setxattr(t, b'trusted.x', b'1', 1, 0), LIBC.setxattr(t, b'user.x', b'1', 1, 0),
        LIBC.removexattr(t, b'user.x'), LIBC.chmod(t, 0o777), LIBC.chown(t, 65534, 65534),
        LIBC.utime(t, None), LIBC.truncate(t, 0)))
report(**out)
""")
    r = got[0]
    assert r == {"host": "R" * 9, "lib": "R" * 9, "worker": "R" * 9, "tmp": "R" * 9}, r
    after = os.stat(victim)
    assert (after.st_mode, after.st_uid, after.st_mtime_ns, after.st_size) == (
        before.st_mode, before.st_uid, before.st_mtime_ns, before.st_size)
    assert os.listxattr(victim) == xattrs_before and stat.S_IMODE(after.st_mode) == 0o600


async def test_other_processes_and_the_environment_are_out_of_sight(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    me = os.getpid()
    got = await attack(f"""
out = {{'env': sorted(OS.environ), 'leak': {SECRET!r} in repr(OS.environ),
        'proc': OS.listdir('/proc')}}
for path in ('/proc/{me}/environ', '/proc/1/environ', '/proc/self/environ'):
    out[path] = verdict(LIBC.open(path.encode(), 0))
report(**out)
""")
    r = got[0]
    assert r["leak"] is False and r["proc"] == [], r
    assert set(r["env"]) <= {"LC_ALL", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "PWD",
                             "MKL_NUM_THREADS", "NUMEXPR_MAX_THREADS", "HOME"}, r["env"]
    assert [r[p] for p in (f"/proc/{me}/environ", "/proc/1/environ", "/proc/self/environ")] == [
        "E2", "E2", "E2"], r


async def test_processes_signals_tracing_and_namespaces_are_refused() -> None:
    import pyseccomp

    nr = {name: pyseccomp.resolve_syscall(pyseccomp.system_arch(), name)
          for name in ("vfork", "clone", "process_vm_readv", "bpf", "io_uring_setup",
                       "userfaultfd")}
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        got = await attack(f"""
calls = (('fork', lambda: LIBC.fork()), ('vfork', lambda: LIBC.syscall({nr["vfork"]})),
         ('clone', lambda: LIBC.syscall({nr["clone"]}, 17, 0, 0, 0, 0)),
         ('execve', lambda: LIBC.execv(b'/sandbox/worker.py', None)),
         ('kill host', lambda: LIBC.kill({victim.pid}, 9)),
         ('kill parent', lambda: LIBC.kill(OS.getppid(), 9)),
         ('kill init', lambda: LIBC.kill(1, 9)), ('kill group', lambda: LIBC.kill(0, 9)),
         ('ptrace', lambda: LIBC.ptrace(16, {victim.pid}, 0, 0)),
         ('vm_readv', lambda: LIBC.syscall({nr['process_vm_readv']}, {victim.pid}, 0, 0, 0, 0, 0)),
         ('unshare', lambda: LIBC.unshare(0x10000000)), ('setns', lambda: LIBC.setns(0, 0)),
         ('mount', lambda: LIBC.mount(b'none', b'/tmp', b'tmpfs', 0, None)),
         ('bpf', lambda: LIBC.syscall({nr['bpf']}, 0, 0, 0)),
         ('io_uring', lambda: LIBC.syscall({nr['io_uring_setup']}, 8, 0)),
         ('userfaultfd', lambda: LIBC.syscall({nr['userfaultfd']}, 0)),
         ('setuid', lambda: LIBC.setuid(0)),
         ('chroot', lambda: LIBC.chroot(b'/tmp')), ('personality', lambda: LIBC.personality(8)))
report(v=''.join(verdict(call()) for _, call in calls), n=len(calls))
""")
        assert victim.poll() is None, "a host process was killed"
    finally:
        victim.kill()
        victim.wait()
    r = got[0]
    assert r["v"] == "R" * r["n"] and r["n"] == 19, r


async def test_limits_cannot_be_raised_and_hold() -> None:
    got = await attack("""
resource = SYS.modules['resource']
out = {}
for name in ('RLIMIT_AS', 'RLIMIT_NOFILE', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_CPU'):
    which = getattr(resource, name)
    try:
        resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        out[name] = 'raised'
    except (ValueError, OSError) as e:
        out[name] = type(e).__name__
out['as'] = resource.getrlimit(resource.RLIMIT_AS)[0]
# The CPU soft limit may move up to the lifetime hard limit, never past it.
resource.setrlimit(resource.RLIMIT_CPU, (resource.getrlimit(resource.RLIMIT_CPU)[1],) * 2)
out['cpu'] = resource.getrlimit(resource.RLIMIT_CPU)
report(**out)
""")
    r = got[0]
    assert "raised" not in r.values() and r["as"] == 1024 * 1024 * 1024, r
    assert r["cpu"] == [LIMITS.cpu_lifetime_s, LIMITS.cpu_lifetime_s], r


async def test_memory_cpu_and_recursion_end_in_a_recorded_failure() -> None:
    from tests.sandbox.test_sandbox import ticking

    async def all_four() -> tuple[list[Any], ...]:
        memory = await attack("x = bytearray(10 * 1024 ** 3)\nreport(got=len(x))")
        cpu = await attack("while True:\n    pass", limits=SandboxLimits(cpu_s=1.0,
                                                                          timeout_s=30.0))
        wall = await attack("import time\ntime.sleep(60)",
                            limits=SandboxLimits(cpu_s=30.0, timeout_s=1.5))
        deep = await attack("def f(n):\n    return f(n + 1)\nSYS.setrecursionlimit(10 ** 7)\n"
                            "f(0)")
        return memory, cpu, wall, deep

    (memory, cpu, wall, deep), ticks = await ticking(all_four())
    assert isinstance(memory[0], dict) and "MemoryError" in str(memory[0].get("error")), memory
    assert isinstance(cpu[0], SandboxError) and "SIGXCPU" in str(cpu[0])
    assert isinstance(wall[0], SandboxError) and "timed out after 1.5s" in str(wall[0])
    assert isinstance(deep[0], SandboxError | dict)  # a crash or an error, both recorded
    assert ticks > 50  # the daemon's loop kept running throughout


async def test_inherited_descriptors_and_huge_output_fail_only_the_bar() -> None:
    got = await attack("""
for fd in range(3, 64):
    try:
        OS.write(fd, b'{"id": "forged", "ok": true}\\n' + b'x' * 65536)
    except OSError:
        pass
OS.write(2, b'y' * (8 << 20))
return {'signal': 1, 'position': 1.0}
""", bars=2)
    for g in got:  # the answer pipe is not among them, or the bar fails as a protocol error
        assert isinstance(g, SandboxError) or g == {"signal": 1, "position": 1.0}, g


def test_killing_the_daemon_side_kills_the_sandbox(tmp_path: Path) -> None:
    # --die-with-parent: when the process that started bwrap dies, every process of the sandbox
    # dies with it (no orphan keeps running strategy code).
    script = f"""
import asyncio, os, sys
sys.path.insert(0, {str(Path.cwd())!r})
from agents.alphaforgebench.sandbox import StrategyWorker
async def main():
    w = StrategyWorker("def generate_signal(df):\\n    while True:\\n        pass\\n")
    task = asyncio.create_task(w.run_bar({json.dumps(BARS)}))
    while w.proc is None or w.missing is None:
        await asyncio.sleep(0.05)
    print("PID", w.proc.pid, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        while line and not line.startswith("PID "):  # the worker's log lines come first
            line = proc.stdout.readline()
        bwrap_pid = int(line.split()[1])
        children = _descendants(bwrap_pid)
        assert children, "the sandbox has no process"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    import time

    deadline = time.monotonic() + 60  # a hang guard: the kernel acts at once
    while any(_alive(p) for p in [bwrap_pid, *children]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in [bwrap_pid, *children])


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_a_degraded_worker_without_bubblewrap_opens_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # allow_degraded on a host without bubblewrap: the worker runs as the daemon's user and
    # sees its files and /proc; its seccomp filter then refuses every open once code may run.
    from agents.alphaforgebench import isolation

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    secret = tmp_path / "provider.env"
    secret.write_text(SECRET)
    tolerated = frozenset({"bubblewrap", "user namespace", "pid namespace",
                           "network namespace", "capabilities"})
    saved = (isolation._policy, isolation._state)
    isolation.configure(isolation.SandboxPolicy(bwrap=None, tolerated=tolerated))
    try:
        got = await attack(f"""
out = {{}}
for key, path in (('daemon environ', '/proc/%d/environ' % OS.getppid()),
                  ('secret', {str(secret)!r}), ('passwd', '/etc/passwd')):
    out[key] = verdict(LIBC.open(path.encode(), 0))
report(**out)
""")
        works = await attack("return {'signal': 1, 'position': float(df['close'].iloc[-1] / 100)}")
    finally:
        isolation._policy, isolation._state = saved
    assert got[0] == {"daemon environ": "R", "secret": "R", "passwd": "R"}, got
    assert works[0] == {"signal": 1, "position": 0.17}, works
