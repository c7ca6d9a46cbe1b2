"""Suite-wide settings: no test may reach the internet (LiteLLM must use its bundled cost map),
and the heaviest test files run first (see :func:`pytest_collection_modifyitems`)."""

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The ``backend`` fixture: a test taking it runs on SQLite and on PostgreSQL (tests/pg.py).
from tests.pg import backend  # noqa: F401

#: Each test file's seconds in a whole run (setup, call and teardown of its tests), as
#: ``--record-file-seconds`` wrote them: only their order matters.
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--record-file-seconds``."""
    parser.addoption("--record-file-seconds", action="store_true",
                     help=f"write each test file's seconds in this run to {FILE_SECONDS.name} "
                          "(files under a second left out), which orders the next runs")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


#: Files whose tests fork (the report's markets in forked processes): handed out first, so each
#: is a worker's first file and no thread an earlier file left running makes the worker unsafe
#: to fork (``scoring.board.forked.fork_safe``; their tests then assert that it forked).
FORKING_FILES = ("tests/scoring/test_report_batches.py", "tests/scoring/test_batched_equal.py",
                 "tests/scoring/test_leaderboard.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files by their recorded seconds, heaviest first (a file's tests keep their
    order; files not recorded follow in collection order), the :data:`FORKING_FILES` before all.

    ``python3 dev.py test`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``,
    which hands out whole files in this order: the long files start at once and the run ends on
    short ones, instead of one worker finishing a long file alone while the other idles."""
    seconds: dict[str, float] = (json.loads(FILE_SECONDS.read_text())
                                 if FILE_SECONDS.exists() else {})
    files: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        files[_file(item.nodeid)].append(item)
    order = sorted(files, key=lambda f: (f not in FORKING_FILES, -seconds.get(f, 0.0)))
    items[:] = [item for f in order for item in files[f]]


class _FileSeconds:
    """Add up each file's test seconds (in the controller, from every worker's reports)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        kept = {f: round(s) for f, s in sorted(self.seconds.items()) if s >= 1.0}
        FILE_SECONDS.write_text(json.dumps(kept, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    """Record the files' seconds when asked, once (not in pytest-xdist's workers)."""
    if config.getoption("record_file_seconds") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_FileSeconds(), "file-seconds")
