"""PortBench's stress gate: a drawdown within the investor profile's tolerance.

The paper's gate (its Appendix C.2, primary criterion): a model passes for an investor profile
when its maximum drawdown stays within the profile's drawdown tolerance (10 / 20 / 35 % for
conservative / balanced / aggressive, Table 7) in every stress window. A report of one replayed
window gives each equity agent its gate for that window (:func:`window_gate`); the global gate
over the three windows is ``paperarena stress-gate A.db B.db C.db``: an agent passes when
it passes in every store that holds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Agent kinds whose presence makes a report show the gate (PortBench's baselines).
PORTBENCH_KINDS = frozenset({"sixty_forty", "risk_parity", "equal_risk_contribution",
                             "min_variance"})


def wants_gate(agents_cfg: Mapping[str, Mapping[str, Any]]) -> bool:
    """Tell whether a store's agents make it a PortBench evaluation (a portbench agent or one
    of PortBench's baselines)."""
    return any(a.get("protocol") == "portbench" or a.get("kind") in PORTBENCH_KINDS
               for a in agents_cfg.values())


def window_gate(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return per equity agent its drawdown, its profile's tolerance, their ratio and the gate
    (``pass`` is ``None`` without a drawdown)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("market") != "equity":
            continue
        mdd, limit = r.get("max_drawdown"), r.get("max_drawdown_limit")
        known = isinstance(mdd, int | float) and isinstance(limit, int | float) and limit > 0
        out[r["agent"]] = {
            "profile": r.get("risk_profile"),
            "max_drawdown": mdd,
            "tolerance": limit,
            "used": mdd / limit if known else None,  # type: ignore[operator]
            "pass": (mdd <= limit + 1e-12) if known else None,  # type: ignore[operator]
        }
    return out


def format_gate(gate: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Return the text lines of the gate table."""
    if not gate:
        return []

    def pct(x: Any) -> str:
        return "-" if not isinstance(x, int | float) else f"{100 * x:.2f}%"

    lines = ["", "PortBench stress gate of this window: max drawdown within the investor "
             "profile's tolerance (a stress window passes when every agent row says pass)",
             f"{'agent':<20}{'profile':<14}{'max dd':>9}{'tolerance':>11}{'used':>8}  gate"]
    for agent, g in sorted(gate.items()):
        verdict = {True: "pass", False: "FAIL", None: "-"}[g["pass"]]
        lines.append(f"{agent[:19]:<20}{g['profile'] or '-'!s:<14}{pct(g['max_drawdown']):>9}"
                     f"{pct(g['tolerance']):>11}{pct(g['used']):>8}  {verdict}")
    return lines


def global_gate(windows: Sequence[Mapping[str, Mapping[str, Any]]]
                ) -> dict[str, dict[str, Any]]:
    """Combine the gates of several windows: the worst drawdown, and pass only if every window
    that holds the agent passes."""
    out: dict[str, dict[str, Any]] = {}
    for gate in windows:
        for agent, g in gate.items():
            cur = out.setdefault(agent, {"profile": g["profile"], "tolerance": g["tolerance"],
                                         "max_drawdown": None, "windows": 0, "pass": True})
            cur["windows"] += 1
            if g["max_drawdown"] is not None and (cur["max_drawdown"] is None
                                                  or g["max_drawdown"] > cur["max_drawdown"]):
                cur["max_drawdown"] = g["max_drawdown"]
            if g["pass"] is not True:
                cur["pass"] = None if g["pass"] is None and cur["pass"] else False
    return out


def format_global(gate: Mapping[str, Mapping[str, Any]]) -> str:
    """Return the global gate (:func:`global_gate`) as a table, one agent a line."""
    lines = [f"{'agent':<20}{'profile':<14}{'worst dd':>9}{'tolerance':>11}{'windows':>9}  gate"]
    for agent, g in sorted(gate.items()):
        dd = "-" if g["max_drawdown"] is None else f"{100 * g['max_drawdown']:.2f}%"
        tol = "-" if g["tolerance"] is None else f"{100 * g['tolerance']:.2f}%"
        verdict = {True: "pass", False: "FAIL", None: "-"}[g["pass"]]
        lines.append(f"{agent[:19]:<20}{g['profile'] or '-'!s:<14}{dd:>9}{tol:>11}"
                     f"{g['windows']:>9}  {verdict}")
    return "\n".join(lines) + "\n"
