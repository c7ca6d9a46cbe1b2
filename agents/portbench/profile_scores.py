"""PortBench's investor-profile and stress scores: PAS, adaptation and stress CEPS (Table 6).

- **Profile alignment score (PAS)** of one decision: the mean of its evaluable checks, each in
  [0, 1]: the equity cap (the share of the weights stage's answers that kept it), the bond floor
  (likewise) and the VaR limit (1 when the one-day 95 % VaR of the target weights by historical
  simulation over the lookback window, the workflow's ``risk_truth``, is no worse than the
  profile's ``var_limit``, else 0). By default (the paper's) the applied target is checked
  after the fact (``alignment`` counts one answer); with ``enforce_profile`` a breaking answer
  is rejected and retried, and the first two checks score the share of the answers that kept
  the limit. A workflow that stopped before the weights stage has no PAS. An agent's PAS is
  the mean over its decisions.
- **Adaptation score**: per model (the agents' ``model``), the standard deviation (population,
  ``ddof = 0``) of its mean PAS per investor profile, when it runs under at least two profiles
  (the paper's Eq. 15 over conservative, balanced and aggressive).
- **Stress CEPS** (the paper's secondary criterion): when every portbench decision of a store
  falls inside one of the three stress windows (:data:`STRESS_WINDOWS`), each agent's mean CEPS
  is compared with that window's risk-safe threshold: ``risk_safe`` when it is at least the
  threshold.
"""

from __future__ import annotations

import html
import math
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from agents.portbench.scores import DECISIONS_SQL, parse_decisions
from scoring.stats.benchmarks import RISK_PROFILES

#: The paper's stress windows (Table 6): name, first day, last day, risk-safe CEPS threshold.
STRESS_WINDOWS: tuple[tuple[str, date, date, float], ...] = (
    ("2015 China Shock", date(2015, 8, 1), date(2016, 2, 29), 0.40),
    ("2020 COVID Crash", date(2020, 2, 1), date(2020, 5, 31), 0.45),
    ("2022 Crypto Collapse", date(2022, 5, 1), date(2022, 12, 31), 0.50),
)
PROFILES = ("conservative", "balanced", "aggressive")


def decision_pas(summary: Mapping[str, Any]) -> float | None:
    """Return the profile alignment score of one workflow (``None``: not evaluable)."""
    profile = summary.get("profile")
    if profile not in RISK_PROFILES:
        return None
    checks: list[float] = []
    counts = summary.get("alignment")
    if isinstance(counts, Mapping) and counts.get("answers"):
        n = float(counts["answers"])
        checks.append(1.0 - float(counts.get("equity_cap", 0)) / n)
        checks.append(1.0 - float(counts.get("bond_floor", 0)) / n)
    truth = summary.get("risk_truth")
    var = truth.get("var_95") if isinstance(truth, Mapping) else None
    if isinstance(var, int | float) and math.isfinite(var):
        checks.append(1.0 if var >= RISK_PROFILES[profile].var_limit else 0.0)
    return math.fsum(checks) / len(checks) if checks else None


def stress_window(stamps: Sequence[float]) -> tuple[str, float] | None:
    """Return (name, CEPS threshold) of the stress window holding every decision time of
    ``stamps`` (UTC days), ``None`` when there is none or they are not all inside one."""
    if not stamps:
        return None
    first = datetime.fromtimestamp(min(stamps), UTC).date()
    last = datetime.fromtimestamp(max(stamps), UTC).date()
    for name, start, end, threshold in STRESS_WINDOWS:
        if start <= first and last <= end:
            return name, threshold
    return None


def profile_scores(
    decisions: Sequence[tuple[str, float, Mapping[str, Any]]],
    agents_cfg: Mapping[str, Mapping[str, Any]],
    ceps: Mapping[str, float | None],
) -> dict[str, Any]:
    """Return PAS per agent, the adaptation score per model and, in a stress window, each
    agent's stress CEPS against the window's threshold (``ceps``: mean CEPS per agent)."""
    per_agent: dict[str, list[float]] = {}
    profiles: dict[str, str] = {}
    for agent, _, summary in decisions:
        profiles.setdefault(agent, str(summary.get("profile", "")))
        pas = decision_pas(summary)
        if pas is not None:
            per_agent.setdefault(agent, []).append(pas)
    pas_rows: dict[str, dict[str, Any]] = {}
    for agent in sorted({a for a, _, _ in decisions}):
        vals = per_agent.get(agent, [])
        cfg = agents_cfg.get(agent, {})
        pas_rows[agent] = {
            "profile": profiles.get(agent) or cfg.get("risk_profile"),
            "model": cfg.get("model"),
            "PAS": math.fsum(vals) / len(vals) if vals else None,
            "decisions": len(vals),
        }
    by_model: dict[str, dict[str, list[float]]] = {}
    for row in pas_rows.values():
        if row["model"] and row["PAS"] is not None:
            by_model.setdefault(str(row["model"]), {}).setdefault(
                str(row["profile"]), []).append(row["PAS"])
    adaptation: dict[str, dict[str, Any]] = {}
    for model, got in sorted(by_model.items()):
        means = {p: math.fsum(v) / len(v) for p, v in got.items()}
        adaptation[model] = {
            "profiles": means,
            "adapt_score": float(np.std(list(means.values()))) if len(means) > 1 else None,
        }
    out: dict[str, Any] = {"pas": pas_rows, "adaptation": adaptation}
    window = stress_window([ts for _, ts, _ in decisions])
    if window is not None:
        name, threshold = window
        out["stress_ceps"] = {
            "window": name, "threshold": threshold,
            "agents": {a: {"CEPS": c, "risk_safe": (c >= threshold) if c is not None else None}
                       for a, c in sorted(ceps.items())},
        }
    return out


def read_profile_scores(
    con: sqlite3.Connection, agents_cfg: Mapping[str, Mapping[str, Any]],
    ceps: Mapping[str, float | None],
) -> dict[str, Any]:
    """Return :func:`profile_scores` of the portbench decisions read through ``con`` (``{}``
    without portbench agents)."""
    protocol = sorted(a for a, c in agents_cfg.items() if c.get("protocol") == "portbench")
    if not protocol:
        return {}
    rows = con.execute(DECISIONS_SQL.format(marks=",".join("?" * len(protocol))),
                       protocol).fetchall()
    decisions = parse_decisions(rows)
    return profile_scores(decisions, agents_cfg, ceps) if decisions else {}


def _num(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, int | float) and math.isfinite(x) else "-"


def _verdict(x: Any) -> str:
    return {True: "risk-safe", False: "risk-UNSAFE", None: "-"}[x]


def profile_lines(section: Mapping[str, Any]) -> list[str]:
    """Return the text lines of the PAS, adaptation and stress-CEPS tables."""
    if not section:
        return []
    lines = ["", "PortBench profile alignment (PAS: equity cap, bond floor and VaR limit kept)",
             f"{'agent':<20}{'profile':<14}{'model':<32}{'PAS':>7}{'decisions':>11}"]
    for agent, r in sorted(section["pas"].items()):
        lines.append(f"{agent[:19]:<20}{r['profile'] or '-'!s:<14}{str(r['model'] or '-')[:31]:<32}"
                     f"{_num(r['PAS']):>7}{r['decisions']:>11}")
    if section.get("adaptation"):
        lines += ["", "PortBench adaptation score (std of the mean PAS per profile)",
                  f"{'model':<32}" + "".join(f"{p:>14}" for p in PROFILES) + f"{'adapt':>8}"]
        for model, a in sorted(section["adaptation"].items()):
            lines.append(f"{model[:31]:<32}" + "".join(
                f"{_num(a['profiles'].get(p)):>14}" for p in PROFILES)
                + f"{_num(a['adapt_score']):>8}")
    stress = section.get("stress_ceps")
    if stress:
        lines += ["", f"PortBench stress CEPS of this window ({stress['window']}: risk-safe when"
                  f" CEPS >= {stress['threshold']:.2f})", f"{'agent':<20}{'CEPS':>7}  verdict"]
        for agent, s in sorted(stress["agents"].items()):
            lines.append(f"{agent[:19]:<20}{_num(s['CEPS']):>7}  {_verdict(s['risk_safe'])}")
    return lines


def profile_html(section: Mapping[str, Any]) -> str:
    """Return the HTML section of the PAS, adaptation and stress-CEPS tables."""
    if not section:
        return ""
    esc = html.escape
    rows = "".join(
        f"<tr><td class='l'>{esc(agent)}</td><td class='l'>{esc(str(r['profile'] or '-'))}</td>"
        f"<td class='l'>{esc(str(r['model'] or '-'))}</td><td>{_num(r['PAS'])}</td>"
        f"<td>{r['decisions']}</td></tr>" for agent, r in sorted(section["pas"].items()))
    out = ["<section class='portbench-profiles'><h2>PortBench profile alignment</h2><p"
           " class='note'>PAS: the mean of the equity-cap, bond-floor and VaR-limit checks.</p>"
           "<table><tr><th class='l'>agent</th><th class='l'>profile</th><th class='l'>model"
           f"</th><th>PAS</th><th>decisions</th></tr>{rows}</table>"]
    if section.get("adaptation"):
        rows = "".join(
            f"<tr><td class='l'>{esc(m)}</td>"
            + "".join(f"<td>{_num(a['profiles'].get(p))}</td>" for p in PROFILES)
            + f"<td>{_num(a['adapt_score'])}</td></tr>"
            for m, a in sorted(section["adaptation"].items()))
        out.append("<h3>Adaptation score</h3><table><tr><th class='l'>model</th>"
                   + "".join(f"<th>{p}</th>" for p in PROFILES)
                   + f"<th>adapt</th></tr>{rows}</table>")
    stress = section.get("stress_ceps")
    if stress:
        rows = "".join(f"<tr><td class='l'>{esc(a)}</td><td>{_num(s['CEPS'])}</td>"
                       f"<td>{_verdict(s['risk_safe'])}</td></tr>"
                       for a, s in sorted(stress["agents"].items()))
        out.append(f"<h3>Stress CEPS: {esc(stress['window'])} (risk-safe when CEPS &gt;="
                   f" {stress['threshold']:.2f})</h3><table><tr><th class='l'>agent</th>"
                   f"<th>CEPS</th><th>verdict</th></tr>{rows}</table>")
    return "".join(out) + "</section>"


def format_stress_windows(windows: Sequence[Mapping[str, Any]]) -> str:
    """Return the secondary criterion over several stores' ``stress_ceps`` sections (Table 6):
    per agent its CEPS and verdict in each window, and ``risk-safe`` only when every window
    that holds it is (``""`` when no store is a stress window)."""
    named = [w for w in windows if w]
    if not named:
        return ""
    agents = sorted({a for w in named for a in w["agents"]})
    cols = [f"{w['window'][:22]} (>= {w['threshold']:.2f})" for w in named]
    lines = ["", "Stress CEPS against Table 6 (risk-safe when CEPS >= the window's threshold)",
             f"{'agent':<20}" + "".join(f"{c:>32}" for c in cols) + "  overall"]
    for agent in agents:
        cells, verdicts = [], []
        for w in named:
            got = w["agents"].get(agent)
            if got is None:
                cells.append("-")
                continue
            verdicts.append(got["risk_safe"])
            cells.append(f"{_num(got['CEPS'])} {_verdict(got['risk_safe'])}")
        overall = (_verdict(False) if False in verdicts else
                   _verdict(True) if verdicts and all(v is True for v in verdicts) else "-")
        lines.append(f"{agent[:19]:<20}" + "".join(f"{c:>32}" for c in cells) + f"  {overall}")
    return "\n".join(lines) + "\n"
