"""The daemon's modules import each other without circles (issue 16, point 7).

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: a circle that
only type checking sees still ties the two modules together (neither can be read, tested or
replaced alone).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(module: str) -> set[str]:
    """Return the project modules ``module`` imports anywhere in its source."""
    path = ROOT / (module.replace(".", "/") + ".py")
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if (ROOT / (m.replace(".", "/") + ".py")).exists()}


def _reaches(src: str, dst: str) -> list[str] | None:
    """Return an import path from ``src`` to ``dst`` (``None`` if there is none)."""
    seen = {src}
    stack: list[list[str]] = [[src]]
    while stack:
        path = stack.pop()
        for nxt in sorted(_imports(path[-1])):
            if nxt == dst:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append([*path, nxt])
    return None


def test_rounds_does_not_import_the_engine() -> None:
    """The engine runs rounds; a round sees only the narrow host it needs, not the engine."""
    assert _reaches("daemon.engine", "daemon.rounds") is not None
    assert _reaches("daemon.rounds", "daemon.engine") is None, _reaches("daemon.rounds",
                                                                       "daemon.engine")


def test_the_live_daemon_does_not_import_the_roles() -> None:
    """Roles build live daemons; starting one by role (``run_live``) lives above both."""
    assert _reaches("daemon.roles", "daemon.live") is not None
    assert _reaches("daemon.live", "daemon.roles") is None, _reaches("daemon.live",
                                                                     "daemon.roles")


def test_role_wiring_does_not_import_replay_streaming() -> None:
    """Live role wiring stands alone; replay through roles builds on it, never the reverse."""
    for stream in ("daemon.replay_roles", "daemon.replay_publish"):
        assert _reaches(stream, "daemon.roles") is not None
        assert _reaches("daemon.roles", stream) is None, _reaches("daemon.roles", stream)
        assert _reaches("daemon.live", stream) is None, _reaches("daemon.live", stream)


def test_the_postgresql_backend_sits_below_the_store() -> None:
    """The store opens its PostgreSQL backend; the backend never imports the store back."""
    assert _reaches("daemon.store", "daemon.pgstore") is not None
    for module in ("daemon.store", "daemon.pgstore", "daemon.pgowners", "daemon.pgsnapshot",
                   "daemon.pgmigrate", "daemon.board_cache", "scoring.leaderboard",
                   "scoring.board_load", "scoring.board_figures", "scoring.board_rank",
                   "scoring.board_text"):
        assert _reaches(module, module) is None, _reaches(module, module)
    for backend in ("daemon.pgstore", "daemon.pgowners"):
        assert _reaches(backend, "daemon.store") is None, _reaches(backend, "daemon.store")


def test_config_sections_sit_below_the_config_entry() -> None:
    """daemon.config assembles the section modules; none of them imports it back."""
    for section in ("daemon.config_fields", "daemon.config_markets", "daemon.config_agents",
                    "daemon.config_runtime"):
        assert _reaches("daemon.config", section) is not None
        assert _reaches(section, "daemon.config") is None, _reaches(section, "daemon.config")
        assert _reaches(section, section) is None, _reaches(section, section)


def test_leaderboard_parts_sit_below_the_leaderboard_entry() -> None:
    """scoring.leaderboard assembles the board modules; none of them imports it back."""
    for part in ("scoring.board_load", "scoring.board_figures", "scoring.board_rank",
                 "scoring.board_text"):
        assert _reaches("scoring.leaderboard", part) is not None
        assert _reaches(part, "scoring.leaderboard") is None, _reaches(part, "scoring.leaderboard")


def test_no_module_of_the_four_packages_imports_itself_back() -> None:
    """No circle anywhere in daemon, feeds, agents and scoring (every import counts)."""
    modules = sorted(
        (p.parent.name + "." + p.stem) for pkg in ("daemon", "feeds", "agents", "scoring")
        for p in (ROOT / pkg).glob("*.py") if p.stem != "__init__")
    circles = []
    for m in modules:
        back = next((path for n in sorted(_imports(m)) if n != m
                     for path in [_reaches(n, m)] if path is not None), None)
        if back is not None:
            circles.append(" -> ".join([m, *back]))
    assert circles == [], "\n".join(circles)
