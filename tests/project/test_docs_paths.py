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


def _defines(module: Path, name: str) -> bool:
    """Return whether ``module``'s text defines or imports ``name`` at some level."""
    pattern = (rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]"
               rf"|^\s*(?:from\s+\S+\s+)?import\b[^#\n]*\b{name}\b|^\s+{name},")
    return re.search(pattern, module.read_text(), re.M) is not None


def _module_exists(dotted: str) -> bool:
    """Return whether ``dotted`` names a module or package of the project, possibly followed by
    a name it defines: ``daemon.store.store.Store`` does, ``daemon.metrics`` and
    ``daemon.store.pgstore`` do not."""
    parts = dotted.split(".")
    path = ROOT / parts[0]
    for i, part in enumerate(parts[1:], 1):
        if (path / part / "__init__.py").exists():
            path = path / part
            continue
        if (path / f"{part}.py").exists():
            rest = parts[i + 1:]
            return not rest or _defines(path / f"{part}.py", rest[0])
        return _defines(path / "__init__.py", part)
    return True


FILE_NAME = re.compile(r"`([a-z0-9_]+\.py)`")
TRACKED = {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_file_name_exists(doc: Path) -> None:
    missing = sorted({n for n in FILE_NAME.findall(doc.read_text()) if n not in TRACKED})
    assert missing == [], f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


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
    assert not _module_exists("daemon.store.pgstore") and not _module_exists("daemon.core.clock")
    assert not _module_exists("daemon.store.store.NoSuchName")


def test_every_doc_page_is_listed_in_the_docs_index() -> None:
    """docs/README.md links every page in docs/ (issue 28: one line per page on what it is for)."""
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([A-Za-z0-9_.-]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert sorted(pages - linked) == [], "docs/README.md does not list these pages"
    assert sorted(linked - pages - {"README.md"}) == [], "docs/README.md lists missing pages"


def test_the_readme_links_the_docs_index() -> None:
    assert "(docs/README.md)" in (ROOT / "README.md").read_text()
