"""Issue 13's additions to the leaderboard: run groups, PortBench stage scores, stress gate.

:func:`board_extras` adds to the board (``report --json``, ``/api/leaderboard``) only the keys
that apply to the store, so a board without them is unchanged:

- ``run_groups``: one entry per (market, ``run_group``) with the mean and spread of the runs'
  figures (:mod:`scoring.board.run_groups`);
- ``portbench``: per ``portbench`` agent its mean S1..S5, mean CEPS, decision, pending and failed
  counts and the pending count per stage (:mod:`agents.portbench.scores`, horizon
  :data:`~agents.portbench.scores.HORIZON` daily closes, every decision of the store; the
  scores the daemon stored once each horizon had passed, :mod:`agents.portbench.stage_scoring`);
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
from agents.portbench.scores import STAGES, score_connection, stage_cell, summarise
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
    groups = run_groups(rows, agents_cfg, ceps if ceps else None)
    if groups:
        out["run_groups"] = groups
    if wants_gate(agents_cfg):
        out["stress_gate"] = window_gate(rows)
    alphaforge = board_section(lambda sql, params: con.execute(sql, params).fetchall())
    if alphaforge is not None:  # issue 14: AlphaForgeBench versions and instability
        out["alphaforge"] = alphaforge
    return out


def portbench_lines(portbench: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Return the text lines of the PortBench stage-score table."""
    if not portbench:
        return []

    head = (f"{'agent':<20}" + "".join(f"{s:>9}" for s in (*STAGES, "CEPS"))
            + f"{'decisions':>11}{'pending':>9}{'failed':>8}")
    lines = ["", "PortBench stage scores (horizon 5 daily closes; pending: not scored yet, the"
             " horizon has not passed)", head]
    for agent, m in sorted(portbench.items()):
        lines.append(f"{agent[:19]:<20}" + "".join(f"{stage_cell(m, s):>9}" for s in
                                                   (*STAGES, "CEPS"))
                     + f"{m['decisions']:>11}{m['pending']:>9}{m['failed']:>8}")
    return lines


def extras_text(board: Mapping[str, Any]) -> str:
    """Return the text blocks of the extras (``""`` when the board has none)."""
    lines = (format_groups(board.get("run_groups") or [])
             + portbench_lines(board.get("portbench") or {})
             + format_gate(board.get("stress_gate") or {}))
    return "\n".join(lines) + "\n" if lines else ""


def _cell(x: Any, pct: bool = False, digits: int = 3) -> str:
    if not isinstance(x, int | float) or isinstance(x, bool) or not math.isfinite(x):
        return "–"
    return f"{100 * x:+.2f}%" if pct else f"{x:.{digits}f}"


def _plain(x: Any) -> str:
    """Return a fraction as an unsigned percentage (drawdowns, tolerances)."""
    return _cell(x, True).lstrip("+")


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
                               (f["max_drawdown"], True), (f["composite_score"], False),
                               (f["valid_decision_rate"], True)))
            rows.append(f"<tr><td class='l'>{esc(g['market'])}</td><td class='l'>"
                        f"{esc(g['group'])}<div class='note'>{esc(', '.join(g['agents']))}"
                        f"</div></td><td>{g['runs']}</td>{cells}</tr>")
        out.append(_section(
            "run-groups", "Runs of one model",
            "Agents with the same <code>run_group</code>: mean ± standard deviation [min, max]"
            " over the runs; each run keeps its own row and rank.",
            "<th class='l'>market</th><th class='l'>group</th><th>runs</th><th>return</th>"
            "<th>Sharpe</th><th>max drawdown</th><th>composite</th><th>valid</th>", rows))
    portbench = board.get("portbench") or {}
    if portbench:
        rows = []
        for agent, m in sorted(portbench.items()):
            cells = "".join(f"<td>{_cell(m.get(s))}</td>" if m.get(s) is not None else
                            f"<td class='note'>pending ({m.get(f'{s}_pending', 0)})</td>"
                            if m.get(f"{s}_pending") else "<td>-</td>"
                            for s in STAGES)
            ceps = (_cell(m.get("CEPS")) if m.get("CEPS") is not None else
                    "pending" if m.get("pending") else "-")
            rows.append(f"<tr><td class='l'>{esc(agent)}</td>{cells}<td>{ceps}</td>"
                        f"<td>{m['decisions']}</td><td>{m['pending']}</td>"
                        f"<td>{m['failed']}</td></tr>")
        out.append(_section(
            "portbench", "PortBench stage scores",
            "Mean S1..S5 and CEPS over the scored decisions (horizon 5 daily closes); pending:"
            " not scored yet, the horizon has not passed.",
            "<th class='l'>agent</th>" + "".join(f"<th>{s}</th>" for s in (*STAGES, "CEPS"))
            + "<th>decisions</th><th>pending</th><th>failed</th>", rows))
    gate = board.get("stress_gate") or {}
    if gate:
        rows = []
        for agent, g in sorted(gate.items()):
            verdict = {True: "pass", False: "FAIL", None: "–"}[g["pass"]]
            rows.append(f"<tr><td class='l'>{esc(agent)}</td><td class='l'>"
                        f"{esc(str(g['profile'] or '–'))}</td><td>{_plain(g['max_drawdown'])}"
                        f"</td><td>{_plain(g['tolerance'])}</td><td>{verdict}</td></tr>")
        out.append(_section(
            "stress-gate", "Stress gate",
            "PortBench's gate for this window: the maximum drawdown within the investor"
            " profile's tolerance.",
            "<th class='l'>agent</th><th class='l'>profile</th><th>max drawdown</th>"
            "<th>tolerance</th><th>gate</th>", rows))
    out.append(html_section(board.get("alphaforge")))
    return "".join(out)
