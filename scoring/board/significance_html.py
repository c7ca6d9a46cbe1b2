"""The HTML report's significance cells and each market's Model Confidence Set band.

Issue 27's figures of a leaderboard row (PSR / DSR, MinTRL, rank stability, MCS membership,
the raw and Holm-adjusted p-values of the comparison with the next agent) as table cells, and
the market's 90% Model Confidence Set as a band above its table. Conventions: docs/scoring.md,
section "Significance".
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from scoring.board.significance import SIGNIFICANCE

_DASH = "–"


def p_text(x: float | None) -> str:
    """Format a p-value for HTML: 3 decimals, ``< 0.0001`` below (never 0: at least 1/(B+1))."""
    if x is None:
        return _DASH
    return "&lt; 0.0001" if x < 1e-4 else f"{x:.3f}"


def _num(x: float | None) -> str:
    """Format a probability-like figure with 3 decimals."""
    return _DASH if x is None else f"{x:.3f}"


def _share(x: float | None) -> str:
    """Format a share of resamples as a percentage with one decimal."""
    return _DASH if x is None else f"{100 * x:.1f}%"


def significance_cells(r: Mapping[str, Any]) -> str:
    """Return the significance cells of a row: PSR / DSR, MinTRL, rank stability, MCS, tests."""
    stab = r.get("rank_stability") or {}
    vs = r.get("vs_next") or {}
    days = r.get("min_trl_days")
    trl = ("never" if r.get("psr") is not None else _DASH) if days is None else (
        f"{days}" + ("" if r.get("distinguishable") else
                     " <span class='note' title='fewer days than the minimum track record "
                     "length: not yet distinguishable'>(not yet)</span>"))
    mcs = _DASH if r.get("in_mcs") is None else ("<b>in</b>" if r["in_mcs"] else "out")
    share = f"{_share(stab.get('top1'))} / {_share(stab.get('top3'))}" if stab else _DASH
    tests = (_DASH if not vs else
             f"{p_text(vs.get('p_value'))} ({p_text(vs.get('p_value_holm'))}); Sharpe "
             f"{p_text(vs.get('sharpe_p_value'))} ({p_text(vs.get('sharpe_p_value_holm'))})")
    return (f"<td>{_num(r.get('psr'))} / {_num(r.get('dsr'))}</td><td>{trl}</td>"
            f"<td>{share}</td><td>{p_text(stab.get('p_to_best'))}</td><td>{mcs}</td>"
            f"<td>{tests}</td>")


def holm_floor_note(sec: Mapping[str, Any]) -> str:
    """Return ``" (...: none can be significant)"`` when the market's family is so large that
    the smallest Holm-adjusted p-value its draws allow is 0.05 or more ('' otherwise)."""
    floor = sec.get("holm_floor")
    if floor is None or floor < SIGNIFICANCE:
        return ""
    return (f" (the smallest adjusted p-value the draws allow is {floor:.3g}: none can be "
            "significant)")


def mcs_band(info: Mapping[str, Any]) -> str:
    """Return the market's Model Confidence Set as a band above its table ('' without one)."""
    mcs = info.get("mcs") or {}
    if not mcs.get("agents"):
        return ""
    return (f"<p class='mcs'><b>{100 * mcs.get('level', 0.9):.0f}% Model Confidence Set</b> "
            "(Hansen, Lunde and Nason; agents not distinguishable from the best over "
            f"{mcs.get('days')} days): {html.escape(', '.join(mcs['agents']), quote=True)}. "
            f"{info.get('comparisons', 0)} paired comparisons, Holm-adjusted"
            f"{html.escape(holm_floor_note(info))}.</p>")
