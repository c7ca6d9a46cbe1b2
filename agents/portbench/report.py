"""PortBench's sections of the report: the stage-score table (text and HTML) and the stress gate
(HTML; its text form is :func:`agents.portbench.stress_gate.format_gate`).

The leaderboard (:mod:`scoring.board.extras`) adds them to its text table and HTML report when a
store holds PortBench agents or is a stress window.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

from agents.portbench.scores import STAGES, stage_cell

__all__ = ["gate_html", "portbench_html", "portbench_lines"]


def _cell(x: Any, pct: bool = False) -> str:
    if not isinstance(x, int | float) or isinstance(x, bool) or not math.isfinite(x):
        return "–"
    return f"{100 * x:+.2f}%" if pct else f"{x:.3f}"


def _plain(x: Any) -> str:
    """Return a fraction as an unsigned percentage (drawdowns, tolerances)."""
    return _cell(x, True).lstrip("+")


def _table(kind: str, title: str, note: str, head: str, rows: list[str]) -> str:
    return (f"<section class='{kind}'><h2>{title}</h2><p class='note'>{note}</p><table><tr>"
            f"{head}</tr>{''.join(rows)}</table></section>")


def portbench_lines(portbench: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Return the text lines of the PortBench stage-score table (none without agents)."""
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


def portbench_html(portbench: Mapping[str, Mapping[str, Any]]) -> str:
    """Return the HTML section of the PortBench stage-score table (``""`` without agents)."""
    if not portbench:
        return ""
    esc = html.escape
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
    return _table(
        "portbench", "PortBench stage scores",
        "Mean S1..S5 and CEPS over the scored decisions (horizon 5 daily closes); pending:"
        " not scored yet, the horizon has not passed.",
        "<th class='l'>agent</th>" + "".join(f"<th>{s}</th>" for s in (*STAGES, "CEPS"))
        + "<th>decisions</th><th>pending</th><th>failed</th>", rows)


def gate_html(gate: Mapping[str, Mapping[str, Any]]) -> str:
    """Return the HTML section of a stress window's gate (``""`` without one)."""
    if not gate:
        return ""
    esc = html.escape
    rows = []
    for agent, g in sorted(gate.items()):
        verdict = {True: "pass", False: "FAIL", None: "–"}[g["pass"]]
        rows.append(f"<tr><td class='l'>{esc(agent)}</td><td class='l'>"
                    f"{esc(str(g['profile'] or '–'))}</td><td>{_plain(g['max_drawdown'])}"
                    f"</td><td>{_plain(g['tolerance'])}</td><td>{verdict}</td></tr>")
    return _table(
        "stress-gate", "Stress gate",
        "PortBench's gate for this window: the maximum drawdown within the investor"
        " profile's tolerance.",
        "<th class='l'>agent</th><th class='l'>profile</th><th>max drawdown</th>"
        "<th>tolerance</th><th>gate</th>", rows)
