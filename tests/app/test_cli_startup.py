"""A failed start closes what it opened, prints one line and exits 2 at once; missing keys too.

Faults: a database locked by a foreign write transaction, a port already bound after the store
was opened, a read-only file system (a tmpfs remounted read-only in a private mount namespace)
and a read-only file (as user nobody: root ignores file modes). ``report`` only reads, so it
works on both. Every command runs in a subprocess with a timeout, so a hang fails the test.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store.test_cli_database import QUIET, ROOT, SAMPLE, cli, one_line, quiet_run_db

NOBODY = 65534


@pytest.fixture(scope="module")
def made_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database written by a short ``run`` (schema, a run row, books)."""
    return quiet_run_db(tmp_path_factory.mktemp("made"))


def _copy(db: Path, where: Path) -> Path:
    out = where / "copy.db"
    shutil.copyfile(db, out)
    return out


def test_locked_database_fails_fast_with_one_line(made_db: Path, tmp_path: Path) -> None:
    db = _copy(made_db, tmp_path)
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(QUIET)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a foreign process holding a write transaction
    try:
        for args in (["run", "--config", str(cfg), "--db", str(db), "--duration", "5"],
                     ["replay", str(SAMPLE), "--config", str(cfg), "--db", str(db),
                      "--no-progress"]):
            line = one_line(cli(*args))
            assert f"--db {db}" in line and "locked" in line
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_failure_after_the_store_opened_closes_it(made_db: Path, tmp_path: Path) -> None:
    """A port already in use fails the start after the store is open: one line, exit 2, the
    run is marked stopped and the database lock is released (a second start works)."""
    db = _copy(made_db, tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = tmp_path / "busy.toml"
        cfg.write_text(f"[sources]\nenabled = false\n[http]\nport = {port}\n")
        r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "5")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]  # after the start-up's own log lines
    assert line.startswith("paperarena: config: http: cannot listen"), line
    assert "address already in use" in line
    con = sqlite3.connect(db)
    runs = con.execute("SELECT stopped_ts FROM runs ORDER BY id").fetchall()
    con.close()
    assert len(runs) == 2 and all(r[0] is not None for r in runs)
    cfg.write_text(QUIET)
    r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3")
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.fixture
def readonly_mount(made_db: Path) -> Iterator[str]:
    """Yield a shell prefix that runs a command with a read-only tmpfs holding the database
    at /mnt/ro/p.db, in a private mount namespace (nothing leaks to the host)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a read-only tmpfs")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                           capture_output=True, timeout=20)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode()[:200]}")
    yield (f"mkdir -p /mnt && mount -t tmpfs -o size=16m tmpfs /mnt && mkdir /mnt/ro && "
           f"cp {made_db} /mnt/ro/p.db && mount -o remount,ro /mnt && ")


def _in_namespace(prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = " ".join(["timeout", "120", sys.executable, "-m", "daemon.app.cli", *args])
    return subprocess.run(["unshare", "-m", "sh", "-c", prefix + cmd], cwd=ROOT,
                          capture_output=True, text=True, timeout=150)


def test_read_only_file_system(readonly_mount: str, tmp_path: Path) -> None:
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(QUIET)
    line = one_line(_in_namespace(readonly_mount, "run", "--config", str(cfg),
                                  "--db", "/mnt/ro/p.db", "--duration", "5"))
    assert "--db /mnt/ro/p.db" in line and "Read-only file system" in line
    r = _in_namespace(readonly_mount, "report", "--db", "/mnt/ro/p.db", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.lstrip().startswith("{")


@pytest.fixture
def nobody_dir(made_db: Path) -> Iterator[Path]:
    """A world-writable directory holding a read-only (0444, root-owned) copy of the database."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to run as nobody")
    d = Path(tempfile.mkdtemp(prefix="pa-ro-"))
    try:
        d.chmod(0o777)
        db = d / "p.db"
        shutil.copyfile(made_db, db)
        db.chmod(0o444)
        (d / "quiet.toml").write_text(QUIET)
        (d / "quiet.toml").chmod(0o644)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         sys.executable, "-m", "daemon.app.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=20, env={**os.environ, "HOME": "/tmp"})


def test_read_only_database_file(nobody_dir: Path) -> None:
    db = nobody_dir / "p.db"
    before = db.read_bytes()
    line = one_line(_as_nobody("run", "--config", str(nobody_dir / "quiet.toml"),
                               "--db", str(db), "--duration", "5"))
    assert f"--db {db}" in line and "read-only" in line
    r = _as_nobody("report", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert db.read_bytes() == before


# -- missing provider keys (issue 11 point 3) ----------------------------------------------------

LLM_AGENTS = """
[[agents]]
id = "remote1"
kind = "llm"
model = "openai/gpt-4o"
api_key_env = "PA_TEST_KEY_ONE"

[[agents]]
id = "remote2"
kind = "llm"
model = "anthropic/claude"
api_key_env = "PA_TEST_KEY_TWO"

[[agents]]
id = "local"
kind = "llm"
model = "openai/qwen"
api_base = "http://127.0.0.1:8000/v1"
api_key_env = "PA_TEST_KEY_LOCAL"
"""


def _env(**keys: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PA_TEST_KEY")}
    return {**env, **keys}


@pytest.fixture
def llm_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "llm.toml"
    cfg.write_text(QUIET + LLM_AGENTS)
    return cfg


@pytest.mark.parametrize("cmd", ["check-config", "run", "replay", "replay-evaluate"])
def test_unset_key_variables_are_named_in_one_line(llm_config: Path, tmp_path: Path,
                                                    cmd: str) -> None:
    db = tmp_path / "k.db"
    args = {"check-config": [str(llm_config)],
            "run": ["--config", str(llm_config), "--db", str(db), "--duration", "5"],
            "replay": [str(SAMPLE), "--config", str(llm_config), "--db", str(db)],
            "replay-evaluate": ["--config", str(llm_config), "--db", str(db)]}[cmd]
    line = one_line(cli(cmd, *args, env=_env(PA_TEST_KEY_TWO="")))
    assert "PA_TEST_KEY_ONE (agent remote1)" in line
    assert "PA_TEST_KEY_TWO (agent remote2)" in line  # set but empty is unset
    assert "PA_TEST_KEY_LOCAL" not in line  # a loopback api_base needs no key
    assert "--allow-missing-keys" in line
    assert not db.exists()


def test_keys_set_or_explicitly_allowed(llm_config: Path) -> None:
    r = cli("check-config", str(llm_config), env=_env(PA_TEST_KEY_ONE="a", PA_TEST_KEY_TWO="b"))
    assert r.returncode == 0, r.stderr
    r = cli("check-config", "--allow-missing-keys", str(llm_config), env=_env())
    assert r.returncode == 0, r.stderr


async def test_loopback_agent_without_key_calls_its_server(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The start-up check lets a loopback agent run without its key, so it must work: the
    agent calls its local server instead of failing every decision."""
    from agents.config import AgentConfig
    from agents.llm import LlmAgent
    from tests.agents.test_llm_agent import GOOD, equity_obs
    from tests.llm_server import FakeLlmServer, ok

    monkeypatch.delenv("PA_TEST_KEY_LOCAL", raising=False)
    async with FakeLlmServer(default=ok(GOOD)) as server:
        agent = LlmAgent(AgentConfig(id="local", kind="llm", model="openai/test-model",
                                     api_base=server.api_base, api_key_env="PA_TEST_KEY_LOCAL",
                                     timeout=5.0, max_attempts=1))
        d = await agent.decide(equity_obs())
    assert len(server.requests) == 1
    assert d.outcome == "ok", d.reason


def _counts(db: Path) -> dict[str, int]:
    con = sqlite3.connect(db)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: con.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        con.close()


def test_run_refuses_a_replayed_database_unless_append(tmp_path: Path) -> None:
    """``run`` on a replay's database would record every round from its end to now as missed:
    it refuses in one line (exit 2, nothing written) unless ``--append``."""
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(QUIET)
    db = tmp_path / "replayed.db"
    r = cli("replay", str(SAMPLE), "--config", str(cfg), "--db", str(db), "--no-progress",
            timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    before = _counts(db)
    line = one_line(cli("run", "--config", str(cfg), "--db", str(db), "--duration", "5"))
    assert line == (f"paperarena: --db {db} holds a replay (recording {SAMPLE.name}); run on "
                    "another database or pass --append to continue it live")
    assert _counts(db) == before
    r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3", "--append")
    assert r.returncode == 0, r.stderr[-2000:]
    con = sqlite3.connect(db)
    modes = [m for (m,) in con.execute("SELECT mode FROM runs ORDER BY id")]
    con.close()
    assert modes == ["replay", "live"]
    # Continued live once, it is a live database: a plain `run` starts.
    r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "0.3")
    assert r.returncode == 0, r.stderr[-2000:]
