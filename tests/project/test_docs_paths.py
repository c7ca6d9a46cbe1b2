"""The docs name real files: every path of the project a doc cites in backticks exists (issue 25:
docs/architecture.md's path of a price and of a decision name real modules)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "examples" / "README.md"])
TOP = ("daemon/", "feeds/", "agents/", "scoring/", "tests/", "bench/", "deploy/", "systemd/",
       "grafana/", "examples/", "docs/")
CITED = re.compile(r"`([A-Za-z0-9_./-]+)`")


def cited_paths(text: str) -> list[str]:
    """Return the project paths cited in backticks in ``text`` (files, or folders ending in /)."""
    return [p for p in CITED.findall(text) if p.startswith(TOP) and "*" not in p
            and (p.endswith("/") or re.search(r"\.(py|md|toml|json|yml|sh|service|timer|html|"
                                                r"js|css|txt|gz|png)$", p))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_path_exists(doc: Path) -> None:
    missing = sorted({p for p in cited_paths(doc.read_text()) if not (ROOT / p).exists()})
    assert missing == [], f"{doc.relative_to(ROOT)} cites paths that do not exist: {missing}"


DOTTED = re.compile(
    r"`((?:daemon|feeds|agents|scoring)\.[a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")


def _module_exists(dotted: str) -> bool:
    """Return whether ``dotted`` names a module or package (possibly followed by attributes)
    whose every package part exists: ``daemon.store.store.Store`` does, ``daemon.metrics``
    does not (no such module since issue 25)."""
    parts = dotted.split(".")
    path = ROOT / parts[0]
    for part in parts[1:]:
        if (path / part).is_dir() and (path / part / "__init__.py").exists():
            path = path / part
            continue
        return (path / f"{part}.py").exists() or path != ROOT / parts[0]
    return True


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_module_exists(doc: Path) -> None:
    missing = sorted({d for d in DOTTED.findall(doc.read_text()) if not _module_exists(d)})
    assert missing == [], f"{doc.relative_to(ROOT)} cites modules that do not exist: {missing}"


def test_the_architecture_walks_a_price_and_a_decision_through_real_modules() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    for section in ("## The path of a price", "## The path of a decision"):
        body = text.split(section, 1)[1].split("\n## ", 1)[0]
        paths = cited_paths(body)
        assert len(paths) >= 10, (section, paths)
        assert all((ROOT / p).exists() for p in paths), section


def test_a_stale_path_is_caught() -> None:
    assert cited_paths("see `daemon/engine.py` and `daemon/engine/engine.py`") == [
        "daemon/engine.py", "daemon/engine/engine.py"]
    assert not (ROOT / "daemon/engine.py").exists()
    assert not _module_exists("daemon.metrics") and not _module_exists("scoring.ledger_types")
    assert _module_exists("daemon.store.store.Store") and _module_exists("agents.portbench")
