"""Issue 13's additions to the leaderboard: run groups, PortBench stage scores, stress gate.

:func:`board_extras` adds to the board (``report --json``, ``/api/leaderboard``) only the keys
that apply to the store, so a board without them is unchanged:

- ``run_groups``: one entry per (market, ``run_group``) with the mean and spread of the runs'
  figures (:mod:`scoring.board.run_groups`);
- ``portbench``: per ``portbench`` agent its mean S1..S5, mean CEPS, decision, pending and failed
  counts and the pending count per stage (:mod:`agents.portbench.scores`, horizon
  :data:`~agents.portbench.scores.HORIZON` daily closes, every decision of the store; the
  scores the daemon stored once each horizon had passed, :mod:`agents.portbench.stage_scoring`);
- ``portbench_profiles``: per ``portbench`` agent its profile alignment score, per model the
  adaptation score and, in a stress window, each agent's stress CEPS against the window's
  threshold (:mod:`agents.portbench.profile_scores`; issue 29);
- ``stress_gate``: per equity agent the drawdown against its profile's tolerance, for stores of a
  PortBench evaluation (:mod:`agents.portbench.stress_gate`);
- ``alphaforge``: AlphaForgeBench versions and the latest instability run, without the per-run
  audit data (:mod:`agents.alphaforgebench.report`; issue 14).

:func:`extras_text` and :func:`extras_html` render them for the table and the HTML report.
"""

from __future__ import annotations

import html
import math
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from agents.alphaforgebench.report import board_section, html_section
from agents.portbench.profile_scores import profile_html, profile_lines, read_profile_scores
from agents.portbench.report import gate_html, portbench_html, portbench_lines
from agents.portbench.scores import score_connection, summarise
from agents.portbench.stress_gate import format_gate, wants_gate, window_gate
from scoring.board.run_groups import format_groups, run_groups


def board_extras(con: sqlite3.Connection, rows: Sequence[Mapping[str, Any]],
                 agents_cfg: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Return the extra board keys that apply to the store read through ``con``."""
    out: dict[str, Any] = {}
    portbench = {agent: summarise(scores) for agent, scores in score_connection(con).items()}
    if portbench:
        out["portbench"] = portbench
    ceps = {a: {"CEPS": m.get("CEPS")} for a, m in portbench.items()}
    profiles = read_profile_scores(con, agents_cfg, {a: m.get("CEPS") for a, m in
                                                     portbench.items()})
    if profiles:  # issue 29: PAS, adaptation, stress CEPS (Table 6)
        out["portbench_profiles"] = profiles
    groups = run_groups(rows, agents_cfg, ceps if ceps else None)
    if groups:
        out["run_groups"] = groups
    if wants_gate(agents_cfg):
        out["stress_gate"] = window_gate(rows)
    alphaforge = board_section(lambda sql, params: con.execute(sql, params).fetchall())
    if alphaforge is not None:  # issue 14: AlphaForgeBench versions and instability
        out["alphaforge"] = alphaforge
    return out


def extras_text(board: Mapping[str, Any]) -> str:
    """Return the text blocks of the extras (``""`` when the board has none)."""
    lines = (format_groups(board.get("run_groups") or [])
             + portbench_lines(board.get("portbench") or {})
             + profile_lines(board.get("portbench_profiles") or {})
             + format_gate(board.get("stress_gate") or {}))
    return "\n".join(lines) + "\n" if lines else ""


def _cell(x: Any, pct: bool | str = False, digits: int = 3) -> str:
    """Format a figure: ``pct`` True a signed percentage, ``"unsigned"`` one without a sign."""
    if not isinstance(x, int | float) or isinstance(x, bool) or not math.isfinite(x):
        return "–"
    if pct == "unsigned":
        return f"{100 * x:.2f}%"
    return f"{100 * x:+.2f}%" if pct else f"{x:.{digits}f}"


def _section(kind: str, title: str, note: str, head: str, rows: list[str]) -> str:
    """Return one extras section: its title, a note, and a table with ``head`` and ``rows``."""
    return (f"<section class='{kind}'><h2>{title}</h2><p class='note'>{note}</p><table><tr>"
            f"{head}</tr>{''.join(rows)}</table></section>")


def extras_html(board: Mapping[str, Any]) -> str:
    """Return the HTML sections of the extras (``""`` when the board has none)."""
    esc = html.escape
    out: list[str] = []
    groups = board.get("run_groups") or []
    if groups:
        rows = []
        for g in groups:
            f = g["figures"]
            cells = "".join(
                f"<td>{_cell(s.get('mean'), pct, 2)} ±{_cell(s.get('std'), pct, 2).lstrip('+')} "
                f"<span class='note'>[{_cell(s.get('min'), pct, 2)}, "
                f"{_cell(s.get('max'), pct, 2)}]</span></td>"
                for s, pct in ((f["cumulative_return"], True), (f["sharpe"], False),
                               (f["max_drawdown"], "unsigned"), (f["composite_score"], False),
                               (f["valid_decision_rate"], "unsigned")))
            rows.append(f"<tr><td class='l'>{esc(g['market'])}</td><td class='l'>"
                        f"{esc(g['group'])}<div class='note'>{esc(', '.join(g['agents']))}"
                        f"</div></td><td>{g['runs']}</td>{cells}</tr>")
        out.append(_section(
            "run-groups", "Runs of one model",
            "Agents with the same <code>run_group</code>: mean ± standard deviation [min, max]"
            " over the runs; each run keeps its own row and rank.",
            "<th class='l'>market</th><th class='l'>group</th><th>runs</th><th>return</th>"
            "<th>Sharpe</th><th>max drawdown</th><th>composite</th><th>valid</th>", rows))
    out.append(portbench_html(board.get("portbench") or {}))
    out.append(profile_html(board.get("portbench_profiles") or {}))
    out.append(gate_html(board.get("stress_gate") or {}))
    out.append(html_section(board.get("alphaforge")))
    return "".join(out)
