"""Issue 17.10: Grafana shows what the leaderboard shows, with each agent's own limits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BOARDS = ROOT / "grafana" / "dashboards"


def _board(name: str) -> dict[str, Any]:
    return json.loads((BOARDS / f"paperarena-{name}.json").read_text())


def _panels(name: str) -> list[dict[str, Any]]:
    return [p for p in _board(name)["panels"] if p.get("type") != "row"]


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [t["expr"] for t in panel.get("targets", [])]


def test_dashboards_are_current() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "grafana" / "generate.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_every_panel_has_a_description() -> None:
    for name in ("overview", "agent", "system", "llm"):
        for p in _panels(name):
            assert p.get("description", "").strip(), (name, p["title"])


def test_leaderboard_table_shows_rank_composite_capitalbench_sorted_by_return() -> None:
    table = next(p for p in _panels("overview") if p["title"] == "Leaderboard")
    exprs = " ".join(_exprs(table))
    for figure in ("rank", "composite_score", "capitalbench_score", "s_corr"):
        assert f'figure="{figure}"' in exprs, figure
    assert table["options"]["sortBy"] == [{"displayName": "return", "desc": True}]


def test_agent_drawdown_is_coloured_against_its_own_limit() -> None:
    panels = _panels("agent")
    for p in panels:
        steps = p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps")
        if "drawdown" in p["title"].lower() and steps:
            assert [s["value"] for s in steps] != [None, 0.1, 0.2], p["title"]
    used = next(p for p in panels if p["title"] == "Drawdown used of its limit")
    (expr,) = _exprs(used)
    assert "paperarena_portfolio_drawdown_ratio" in expr
    assert "/" in expr and "paperarena_portfolio_drawdown_limit_ratio" in expr
    steps = used["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 0.5, 1]


def test_llm_agent_list_holds_only_agents_that_call_a_model() -> None:
    var = next(v for v in _board("llm")["templating"]["list"] if v["name"] == "agent")
    assert "paperarena_llm_calls_total" in var["definition"] and "> 0" in var["definition"]
    assert var["regex"]


def test_process_panels_follow_the_instance_selector() -> None:
    for name in ("overview", "agent", "system", "llm"):
        for p in _panels(name):
            for expr in _exprs(p):
                if "process_" in expr or expr.startswith("min(up{"):
                    assert 'instance=~"$instance"' in expr, (name, p["title"], expr)
