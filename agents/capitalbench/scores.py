"""CapitalBench results from the store: per round, all-available history, comparison sets.

Everything is computed from stored rows only (``capital_rounds``: the closes of the start and
end sessions; ``capital_submissions``: the submissions), so a report of the same database is
always the same. Per valid official submission of a resolved round (formulas of seed 004):

- option return ``r_i = end_i / start_i - 1`` (CASH: 0);
- portfolio return ``pr = sum_i w_i r_i``; return versus the S&P 500 ``pr - r_SPY`` (the
  benchmark's stored closes; ``None`` without them);
- maximum possible return ``max_i r_i`` over the options with both closes (CASH included as 0
  when it is an option); CapitalBench score ``100 pr / max`` (``None`` when ``max <= 0``);
  regret ``max - pr``; S&P difference per dollar ``(pr - r_SPY) / cost_usd`` (``None`` when the
  calls cost nothing known).

Invalid, late, failed and consistency submissions are listed but never scored officially. A
held option without both closes makes the submission unscorable (reason given).

All-available history (per track and agent): rounds scored, mean return, overall score
``100 * sum(pr) / sum(max)`` (seed: summed returns over summed oracle returns), mean difference
to the S&P 500, mean regret. Comparison sets: a fixed roster (``[capitalbench] roster`` of the
latest run's config, else every ``capitalbench`` agent of it) ranked on the resolved rounds of a
track that every member has scored; qualified (the current benchmark) at 6 shared weekly or 3
shared monthly rounds. Consistency (per track and agent, run ``consistency``): mean score of the
repeated calls and mean pairwise overlap ``1 - L1/2`` of their portfolios (1 = identical).
"""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from daemon.core.run_configs import run_configs

CASH = "CASH"
#: Shared resolved rounds a comparison set needs to qualify, per track (seed 004).
QUALIFY = {"weekly": 6, "monthly": 3}


def _has_tables(con: sqlite3.Connection) -> bool:
    row = con.execute("SELECT COUNT(*) FROM sqlite_master WHERE type='table'"
                      " AND name='capital_rounds'").fetchone()
    return bool(row and row[0])


def option_returns(options: Sequence[str], start: Mapping[str, float],
                   end: Mapping[str, float]) -> dict[str, float]:
    """Return the window return of every option with both closes (CASH: 0)."""
    out = {}
    for o in options:
        if o == CASH:
            out[o] = 0.0
        elif start.get(o) and end.get(o) is not None and float(start[o]) > 0:
            out[o] = float(end[o]) / float(start[o]) - 1.0
    return out


def score_submission(holdings_pct: Mapping[str, float], rets: Mapping[str, float],
                     bench: float | None, cost_usd: float) -> dict[str, Any]:
    """Return the seed's figures for one submission (``scored`` False with a reason when a
    held option has no return)."""
    missing = sorted(a for a in holdings_pct if a not in rets)
    if missing:
        return {"scored": False, "reason": f"no start/end close for {', '.join(missing)}"}
    pr = math.fsum(float(w) / 100.0 * rets[a] for a, w in holdings_pct.items())
    best = max(rets.values()) if rets else math.nan
    alpha = None if bench is None else pr - bench
    return {
        "scored": True,
        "portfolio_return": pr,
        "sp500_return": bench,
        "vs_sp500": alpha,
        "max_possible_return": best,
        "score": 100.0 * pr / best if best > 0 else None,
        "regret": best - pr,
        "vs_sp500_per_dollar": (alpha / cost_usd if alpha is not None and cost_usd > 0
                                else None),
        "cost_usd": cost_usd,
    }


def _rounds(con: sqlite3.Connection, round_id: str | None = None) -> list[dict[str, Any]]:
    sql = ("SELECT round_id, track, status, start_day, end_day, manifest_json,"
           " start_prices_json, end_prices_json, dir FROM capital_rounds")
    rows = con.execute(sql + (" WHERE round_id=?" if round_id else "") + " ORDER BY round_id",
                       (round_id,) if round_id else ()).fetchall()
    subs: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    q = ("SELECT round_id, run_id, agent, replicate, official, outcome, reason, holdings_json,"
         " cost_usd, model FROM capital_submissions ORDER BY round_id, run_id, agent, replicate")
    for s in con.execute(q):
        subs[s[0]].append(s)
    out = []
    for rid, track, status, sday, eday, man, sp, ep, rdir in rows:
        manifest = json.loads(man)
        options = _options(manifest, rdir)
        entry: dict[str, Any] = {"round_id": rid, "track": track, "status": status,
                                 "start_day": sday, "end_day": eday,
                                 "benchmark": manifest.get("benchmark", "SPY"),
                                 "retrospective": manifest.get("retrospective") is True,
                                 "results": [], "not_scored": [], "consistency": []}
        rets: dict[str, float] = {}
        bench = None
        if status == "resolved" and sp and ep:
            start, end = json.loads(sp), json.loads(ep)
            rets = option_returns(options, start, end)
            b = entry["benchmark"]
            if start.get(b) and end.get(b) is not None:
                bench = float(end[b]) / float(start[b]) - 1.0
            entry["sp500_return"] = bench
            entry["max_possible_return"] = max(rets.values()) if rets else None
            entry["best_option"] = max(rets, key=lambda k: (rets[k], k)) if rets else None
        for _, run_id, agent, rep, official, outcome, reason, hj, cost, model in subs[rid]:
            base = {"agent": agent, "model": model, "run_id": run_id, "replicate": rep,
                    "outcome": outcome}
            if outcome != "ok" or hj is None:
                if official:
                    entry["not_scored"].append({**base, "reason": reason})
                continue
            holdings = json.loads(hj)
            item = {**base, "holdings": holdings}
            if status == "resolved":
                item.update(score_submission(holdings, rets, bench, float(cost or 0.0)))
            (entry["results"] if official else entry["consistency"]).append(item)
        out.append(entry)
    return out


def _options(manifest: Mapping[str, Any], rdir: str) -> list[str]:
    """Return the option ids of a round: from its stored manifest (so a report needs the store
    only), else from its frozen options file (rounds frozen before the manifest named them)."""
    ids = manifest.get("option_ids")
    if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
        return list(ids)
    # Here only: the round machinery imports the NYSE calendar (pandas), YAML and the config
    # models, which a report of a store without such old rounds does not need (issue 27).
    from agents.capitalbench.rounds import LEGACY_OPTIONS, read_data

    p = Path(rdir) / str(manifest.get("options_file", LEGACY_OPTIONS))
    try:
        return [o["id"] for o in read_data(p)["options"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def score_round_db(db_path: str | Path, round_id: str) -> dict[str, Any]:
    """Return the scored results of one round of the database at ``db_path``."""
    con = sqlite3.connect(f"file:{Path(db_path).resolve()}?mode=ro", uri=True)
    try:
        rounds = _rounds(con, round_id)
    finally:
        con.close()
    if not rounds:
        raise KeyError(f"no round {round_id}")
    return rounds[0]


def _scored(entry: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["agent"]: r for r in entry["results"] if r.get("scored")}


def _aggregate(agent: str, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    n = len(items)
    pr = math.fsum(i["portfolio_return"] for i in items)
    best = math.fsum(i["max_possible_return"] for i in items)
    alphas = [i["vs_sp500"] for i in items if i["vs_sp500"] is not None]
    return {
        "agent": agent, "rounds": n,
        "mean_return": pr / n if n else None,
        "overall_score": 100.0 * pr / best if n and best > 0 else None,
        "mean_vs_sp500": math.fsum(alphas) / len(alphas) if alphas else None,
        "mean_regret": math.fsum(i["regret"] for i in items) / n if n else None,
        "cost_usd": math.fsum(i["cost_usd"] for i in items),
    }


def _sort(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(r: Mapping[str, Any]) -> tuple[float, str]:
        s = r["overall_score"]
        return (-(s if s is not None else -math.inf), r["agent"])

    return sorted(rows, key=key)


def comparison_set(rounds: Sequence[Mapping[str, Any]], track: str,
                   roster: Sequence[str]) -> dict[str, Any]:
    """Return the comparison set of ``roster`` on ``track``: only resolved rounds every member
    scored count, for everyone."""
    resolved = [r for r in rounds if r["track"] == track and r["status"] == "resolved"]
    shared = [r for r in resolved if roster and all(a in _scored(r) for a in roster)]
    need = QUALIFY.get(track, 6)
    rows = _sort([_aggregate(a, [_scored(r)[a] for r in shared]) for a in roster])
    for i, row in enumerate(rows, 1):
        row["rank"] = i
    return {"roster": list(roster), "shared_rounds": len(shared), "required": need,
            "qualified": len(shared) >= need,
            "excluded_rounds": [r["round_id"] for r in resolved if r not in shared],
            "rows": rows}


def _overlap(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    keys = set(a) | set(b)
    return 1.0 - sum(abs(float(a.get(k, 0)) - float(b.get(k, 0))) for k in keys) / 200.0


def _consistency(rounds: Sequence[Mapping[str, Any]], track: str) -> list[dict[str, Any]]:
    by_agent: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rounds:
        if r["track"] != track:
            continue
        reps: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for item in r["consistency"]:
            reps[item["agent"]].append(item)
        for agent, items in reps.items():
            by_agent[agent].append({"items": items})
    out = []
    for agent, per_round in sorted(by_agent.items()):
        scores = [i["score"] for pr in per_round for i in pr["items"]
                  if i.get("scored") and i.get("score") is not None]
        overlaps = []
        for pr in per_round:
            pairs = list(itertools.combinations([i["holdings"] for i in pr["items"]], 2))
            if pairs:
                overlaps.append(math.fsum(_overlap(a, b) for a, b in pairs) / len(pairs))
        out.append({"agent": agent, "rounds": len(per_round),
                    "valid_calls": sum(len(pr["items"]) for pr in per_round),
                    "mean_score": math.fsum(scores) / len(scores) if scores else None,
                    "consistency": math.fsum(overlaps) / len(overlaps) if overlaps else None})
    return out


def _latest_cap(con: sqlite3.Connection) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (config, its ``[capitalbench]`` section) of the latest config the store ran with
    (a run's or a reload's; ``{}``: none)."""
    configs = run_configs(con)
    cfg = json.loads(configs[-1]) if configs and configs[-1] else {}
    return cfg, cfg.get("capitalbench") or {}


def _roster(con: sqlite3.Connection, rounds: Sequence[Mapping[str, Any]]) -> list[str]:
    cfg, cap = _latest_cap(con)
    if cfg:
        if cap.get("roster"):
            return sorted(cap["roster"])
        ours = [a["id"] for a in cfg.get("agents", []) if a.get("protocol") == "capitalbench"]
        if ours:
            return sorted(ours)
    return sorted({i["agent"] for r in rounds for i in r["results"] + r["not_scored"]})


def capitalbench_section(con: sqlite3.Connection, *, retrospective: bool | None = None
                         ) -> dict[str, Any] | None:
    """Return the CapitalBench part of the report (``None`` when the store has no round).

    Rounds built from history (``retrospective`` in their manifest) are left out of the
    public board (seed 004 excludes retrospective runs) unless ``retrospective`` is true, or,
    when it is ``None``, the latest run's ``[capitalbench] show_retrospective`` is; the
    section then says how many were left out (``retrospective_hidden``).
    """
    if not _has_tables(con):
        return None
    rounds = _rounds(con)
    if not rounds:
        return None
    if retrospective is None:
        retrospective = _latest_cap(con)[1].get("show_retrospective") is True
    hidden = 0 if retrospective else sum(1 for r in rounds if r["retrospective"])
    if hidden:
        rounds = [r for r in rounds if not r["retrospective"]]
        if not rounds:
            return {"rounds": [], "history": {}, "comparison_sets": {}, "consistency": {},
                    "retrospective_hidden": hidden}
    roster = _roster(con, rounds)
    tracks = sorted({r["track"] for r in rounds})
    history = {}
    for t in tracks:
        per: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rounds:
            if r["track"] == t and r["status"] == "resolved":
                for agent, item in _scored(r).items():
                    per[agent].append(item)
        history[t] = _sort([_aggregate(a, items) for a, items in per.items()])
    return {
        "rounds": rounds,
        "history": history,
        "comparison_sets": {t: comparison_set(rounds, t, roster) for t in tracks},
        "consistency": {t: _consistency(rounds, t) for t in tracks},
        "retrospective_hidden": hidden,
    }


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.2f}%"


def _s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def to_text(sec: Mapping[str, Any]) -> str:
    """Return the CapitalBench section of the text report."""
    lines = ["", "CapitalBench rounds (seed 004; official runs only; invalid runs never scored)"]
    if sec.get("retrospective_hidden"):
        lines.append(f"  {sec['retrospective_hidden']} retrospective round(s) built from history"
                     " not shown ([capitalbench] show_retrospective = true shows them)")
    for r in sec["rounds"]:
        head = (f"  {r['round_id']} [{r['status']}] {r['start_day']} -> {r['end_day']}")
        if r.get("retrospective"):
            head += "  (retrospective: built from history)"
        if r["status"] == "resolved":
            sp = r.get("sp500_return")
            bench = _p(sp) if sp is not None else f"n/a (no {r['benchmark']} closes stored)"
            head += (f"  S&P 500 ({r['benchmark']}) {bench}"
                     f"  max possible {_p(r.get('max_possible_return'))}"
                     f" ({r.get('best_option') or 'n/a'})")
        lines.append(head)
        for i in r["results"]:
            hold = " ".join(f"{k}:{v}" for k, v in sorted(i["holdings"].items()))
            if i.get("scored"):
                per = i["vs_sp500_per_dollar"]
                lines.append(
                    f"    {i['agent']:<16} return {_p(i['portfolio_return'])}"
                    f"  vs S&P {_p(i['vs_sp500'])}  score {_s(i['score'])}"
                    f"  regret {_p(i['regret'])}  vs S&P per $ "
                    f"{'n/a' if per is None else f'{per:+.2f}'}  [{hold}]")
            elif "scored" in i:
                lines.append(f"    {i['agent']:<16} not scored: {i['reason']}  [{hold}]")
            else:
                lines.append(f"    {i['agent']:<16} pending  [{hold}]")
        for i in r["not_scored"]:
            lines.append(f"    {i['agent']:<16} {i['outcome']} (not scored): {i['reason']}")
    for t, cs in sec["comparison_sets"].items():
        state = ("current benchmark" if cs["qualified"]
                 else f"not qualified: {cs['shared_rounds']} of {cs['required']} shared rounds")
        lines.append(f"  comparison set, {t}: roster {', '.join(cs['roster']) or '(none)'};"
                     f" {cs['shared_rounds']} shared resolved round(s); {state}")
        for row in cs["rows"]:
            lines.append(f"    {row['rank']:>2}. {row['agent']:<16} score "
                         f"{_s(row['overall_score'])}  mean return {_p(row['mean_return'])}"
                         f"  mean vs S&P {_p(row['mean_vs_sp500'])}")
        lines.append(f"  all-available history, {t} (unequal histories; context only):")
        for row in sec["history"].get(t, []):
            lines.append(f"        {row['agent']:<16} {row['rounds']} round(s), score "
                         f"{_s(row['overall_score'])}  mean return {_p(row['mean_return'])}"
                         f"  mean regret {_p(row['mean_regret'])}")
        for row in sec["consistency"].get(t, []):
            c = row["consistency"]
            lines.append(f"  consistency, {t}: {row['agent']} {row['valid_calls']} valid "
                         f"repeated call(s), mean score {_s(row['mean_score'])}, overlap "
                         f"{'n/a' if c is None else f'{c:.2f}'} (apart from the official score)")
    return "\n".join(lines) + "\n"
