"""``python3 dev.py run``: an interrupt of the script (Ctrl-C, or SIGINT/SIGTERM sent to it
alone) stops the daemon cleanly and exits with the daemon's code, without a traceback.
``python3 dev.py test``: the suite runs in parallel unless the arguments choose otherwise."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import tests.conftest as suite
from tests.store.test_cli_database import QUIET, ROOT


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_dev_run_stops_the_daemon_cleanly(tmp_path: Path,
                                                         sig: signal.Signals) -> None:
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(QUIET)
    db = tmp_path / "d.db"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "dev.py"), "run", "--config", str(cfg), "--db", str(db)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not db.exists() and time.monotonic() < deadline:  # the daemon has started
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(sig)  # to dev.py only, not its process group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err, err[-2000:]
    assert "daemon stopped" in err, err[-2000:]
    assert proc.returncode in (0, 143), (proc.returncode, err[-2000:])


def test_a_daemon_whose_log_stream_has_gone_still_stops_cleanly(tmp_path: Path) -> None:
    """The reader of the daemon's stderr exits (a closed pipe): SIGINT still stops it, the
    store is closed and the process exits instead of hanging on the store's thread."""
    cfg = tmp_path / "quiet.toml"
    cfg.write_text(QUIET)
    db = tmp_path / "d.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.app.cli", "run", "--config", str(cfg), "--db", str(db)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not db.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        assert proc.stderr is not None and proc.stdout is not None
        proc.stderr.close()
        proc.stdout.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    con = sqlite3.connect(db)  # the run was ended and the store closed (WAL checkpointed)
    try:
        assert con.execute("SELECT COUNT(*) FROM runs WHERE stopped_ts IS NULL").fetchone() == (0,)
    finally:
        con.close()
    assert not db.with_name(db.name + "-wal").exists()


def _dev_module() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("paperarena_dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dev_test_runs_files_in_parallel_unless_told_otherwise() -> None:
    dev = _dev_module()
    args = dev.pytest_args  # type: ignore[attr-defined]
    parallel = ["-n", str(dev.workers()), "--dist", "loadfile",  # type: ignore[attr-defined]
                "--no-loadscope-reorder", "--max-worker-restart", "0"]
    assert args([]) == parallel
    assert args(["tests/core/test_bus.py", "-k", "drain"]) == [*parallel, "tests/core/test_bus.py",
    "-k",
                                                          "drain"]
    for own in (["-n", "0"], ["-n3", "tests"], ["--numprocesses=2"], ["-p", "no:xdist"],
                ["-x", "-pno:xdist"]):
        assert args(own) == own


def test_the_suite_writes_bytecode_even_where_the_environment_says_not_to(
        monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _dev_module()
    called: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(dev, "ensure_venv", lambda: None)
    monkeypatch.setattr(dev, "ensure_system_tools", lambda: None)
    monkeypatch.setattr(dev, "_call", lambda args, env: called.append((args, env)) or 0)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert dev.main(["test", "-n", "0", "tests/project"]) == 0  # type: ignore[attr-defined]
    assert dev.main(["paperarena", "report"]) == 0  # type: ignore[attr-defined]
    (suite, suite_env), (_, other_env) = called
    assert suite[-3:] == ["-n", "0", "tests/project"]
    assert "PYTHONDONTWRITEBYTECODE" not in suite_env and suite_env["PATH"]
    assert other_env["PYTHONDONTWRITEBYTECODE"] == "1"  # only the suite's is changed


@pytest.mark.parametrize(("cores", "workers"), [(1, 2), (2, 3), (3, 4), (4, 4), (16, 4)])
def test_three_workers_for_every_two_cores(cores: int, workers: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    assert _dev_module().workers() == workers  # type: ignore[attr-defined]


def test_a_crashed_worker_ends_the_run_naming_its_test(tmp_path: Path) -> None:
    """A segfault in one file fails the run at once (pytest-xdist's replacement worker can hang
    under --dist loadfile), and says which test took the worker down."""
    for i in range(4):
        (tmp_path / f"test_ok{i}.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "test_crash.py").write_text(
        "import ctypes\n\ndef test_fine():\n    pass\n\n"
        "def test_segfault():\n    ctypes.string_at(0)\n\ndef test_after():\n    pass\n")
    args = _dev_module().pytest_args(["-p", "no:cacheprovider", str(tmp_path)])  # type: ignore[attr-defined]
    args[args.index("-n") + 1] = "2"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)  # hang guard
    assert run.returncode != 0
    assert "crashed while running 'test_crash.py::test_segfault'" in run.stdout


def test_the_heaviest_files_are_handed_out_first(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's files ordered by their recorded seconds, a file's tests kept together in
    their order, the files not recorded after them in collection order; a run asked to
    records each file's seconds, its tests' setup, call and teardown added up."""
    seconds = tmp_path / "seconds.json"
    seconds.write_text('{"b.py": 5, "c.py": 30, "e.py": 1}')
    monkeypatch.setattr(suite, "FILE_SECONDS", seconds)
    ids = ["a.py::t", "b.py::t1", "c.py::t1", "d.py::t", "b.py::t2", "c.py::t2", "e.py::t"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    suite.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["c.py::t1", "c.py::t2", "b.py::t1", "b.py::t2",
                                         "e.py::t", "a.py::t", "d.py::t"]
    # the files whose tests fork come first, whatever their seconds: a worker's first files,
    # before any other file could leave a thread running there
    monkeypatch.setattr(suite, "FORKING_FILES", ("d.py", "e.py"))
    items = [SimpleNamespace(nodeid=i) for i in ids]
    suite.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["e.py::t", "d.py::t", "c.py::t1", "c.py::t2",
                                         "b.py::t1", "b.py::t2", "a.py::t"]

    recorder = suite._FileSeconds()
    for nodeid, duration in (("x.py::t", 0.5), ("x.py::t", 1.25), ("y.py::t", 0.25),
                             ("x.py::u[1]", 2.0)):
        recorder.pytest_runtest_logreport(SimpleNamespace(  # type: ignore[arg-type]
            nodeid=nodeid, duration=duration))
    recorder.pytest_sessionfinish()
    assert seconds.read_text() == '{\n"x.py": 4\n}\n'


def test_every_test_file_that_forks_is_handed_out_first() -> None:
    """A test file that asks for forked markets (``parallel=True``) is in FORKING_FILES, so no
    earlier file's leftover thread makes its worker refuse to fork."""
    root = Path(__file__).resolve().parents[2]
    forking = sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                     if "parallel=True" in p.read_text(encoding="utf-8")
                     and p.name != Path(__file__).name)
    assert forking and set(forking) <= set(suite.FORKING_FILES), forking
