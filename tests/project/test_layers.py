"""The package layout's import contracts hold, and a wrong import breaks them (issue 25).

The contracts are ``[tool.importlinter]`` in pyproject.toml, checked by import-linter's
``lint-imports``: the roof over the services, the engine, the config, the store and market
state, then agents, feeds and scoring, then the ground; feeds, agents and scoring never import
the runtime above them; no protocol imports another; no circle between the modules of a package.
Every import counts, including those inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("daemon", "feeds", "agents", "scoring")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` (from this interpreter's environment) on the tree at ``cwd``."""
    exe = Path(sys.executable).with_name("lint-imports")
    assert exe.exists(), f"import-linter is not installed next to {sys.executable}"
    env = {**os.environ, "PYTHONPATH": str(cwd)}  # this tree's packages, not the installed ones
    return subprocess.run([str(exe), "--no-cache", "--no-logo"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_project_keeps_every_contract() -> None:
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout
    assert "12 kept" in out.stdout, out.stdout  # every contract of pyproject.toml was checked


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree)
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tree / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tree


@pytest.mark.parametrize(("module", "line", "contract", "named"), [
    # a feed reaching into the store
    ("feeds/polymarket/source.py", "from daemon.store.store import Store",
     "feeds, agents and scoring never import", "feeds.polymarket.source -> daemon.store.store"),
    # the ground importing a source adapter, even only for type checking
    ("daemon/core/events.py",
     "from typing import TYPE_CHECKING\n"
     "if TYPE_CHECKING:\n    from feeds.polymarket.source import PolymarketSource",
     "The ground (events, bus, clock, formats)", "daemon.core.events -> feeds.polymarket.source"),
    # one protocol using another's code
    ("agents/portbench/agent.py", "from agents.stockbench.agent import StockBenchAgent",
     "Each protocol's home stands alone", "agents.portbench.agent -> agents.stockbench.agent"),
    # a circle inside the store: the schema importing the store that migrates it
    ("daemon/store/schema.py", "def _late() -> None:\n    from daemon.store.store import Store",
     "No circle between the modules", "daemon.store"),
    # the accounting core reaching into the ground's events
    ("scoring/ledger/ledger.py", "from daemon.core.events import PriceEvent",
     "The accounting core and the statistics", "scoring.ledger.ledger -> daemon.core.events"),
    # the leaderboard reaching into the LLM machinery instead of a protocol's home
    ("scoring/board/figures.py", "from agents.llm import LlmAgent",
     "The leaderboard reads the protocols' homes only", "scoring.board.figures -> agents.llm"),
    # the engine reaching up into the web
    ("daemon/engine/rounds.py", "from daemon.web.page import Page",
     "Layers: the roof wires everything", "daemon.engine.rounds -> daemon.web.page"),
])
def test_a_wrong_import_breaks_its_contract(tmp_path: Path, module: str, line: str,
                                            contract: str, named: str) -> None:
    tree = _copy(tmp_path)
    assert lint_imports(tree).returncode == 0  # the copy is as clean as the project
    path = tree / module
    path.write_text(path.read_text() + f"\n\n{line}  # noqa\n")
    out = lint_imports(tree)
    assert out.returncode == 1, out.stdout + out.stderr
    broken = [block for block in out.stdout.split("\n\n") if contract in block]
    assert broken and any(" BROKEN" in b for b in broken), out.stdout
    assert named in out.stdout, out.stdout
