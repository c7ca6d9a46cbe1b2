"""Per-agent figures of the leaderboard: one row per (agent, market) from the loaded store.

Each row is assembled here (:func:`_row`) from one agent's curves: performance summary,
rolling-k, CapitalBench score, VaR and risk profile, Brier score, model cost and decisions, with
the figures read against the market's window (prices, CapitalBench window, diversification:
:mod:`scoring.board.market_window`) and against its benchmarks and regime
(:mod:`scoring.board.benchmark_figures`); also the report's market summaries, dates and token
labels. Conventions: docs/scoring.md, section "Leaderboard". Reading rows is :mod:`.load`,
standings :mod:`.rank`, rendering :mod:`.text`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from operator import add
from typing import Any

import numpy as np

from scoring.board.benchmark_figures import (
    REGIME_MIN_RETURNS,
    REGIME_UNKNOWN,
    REGIME_WINDOW,
    _benchmarks,
    _by_regime,
    _labels_at,
    _regime_by_mark,
    _relative,
    _window_regime,
)
from scoring.board.load import _NAN, AgentCurves, Key, _Store
from scoring.board.market_window import (
    _capitalbench,
    _diversification,
    _first_priced,
    _mean_scores,
    _window,
    _window_asset_returns,
)
from scoring.stats.benchmarks import (
    CASH,
    RISK_PROFILES,
    ROLLING_KS,
    RiskProfile,
    historical_var,
    profile_alignment,
    rolling_k_figures,
)
from scoring.stats.metrics import periods_per_year, starts_at_initial, summary_parts
from scoring.stats.small_sums import np_mean, np_prod, np_sum

#: The parts' names the entry (leaderboard), the renderer (text), batched_rows and tests import
#: from here: re-exported, so they stay importable here.
__all__ = [
    "REGIME_MIN_RETURNS",
    "REGIME_UNKNOWN",
    "REGIME_WINDOW",
    "_benchmarks",
    "_mean_scores",
    "_regime_by_mark",
    "_window_regime",
]

FIELDS = ("cumulative_return", "annualised_return", "volatility", "sharpe", "sortino",
          "sortino_stockbench",
          "max_drawdown", "calmar", "win_rate", "mean_turnover", "target_turnover", "flip_rate")

VAR_LEVEL = 0.95
VAR_WINDOW = 60
VAR_MIN_PERIODS = 20
POLYMARKET_SIDES = ("YES", "NO")
_DAY = 86400.0

#: Decision outcomes that are valid: applied (``ok``) or held on purpose (``hold``).
VALID_OUTCOMES: tuple[str, ...] = ("ok", "hold")
#: Outcomes left out of the valid-decision rate: the agent was not asked. ``skipped`` (no fresh
#: prices), ``missed`` (the daemon was late) and ``abandoned`` (it stopped) are the daemon's;
#: ``paused`` (daily budget) and ``halted`` (drawdown halt) are the operator's limits. Any other
#: outcome (``invalid``, ``rejected``, ``error``...) counts against the agent.
NOT_ASKED_OUTCOMES: tuple[str, ...] = ("skipped", "missed", "abandoned", "paused", "halted")
#: The scorer of a row's rolling-k figures waiting in ``_Store.div_jobs`` (``score_pending``).
ROLLING_K_JOB = "rolling_k"
#: Fewer daily returns than this: annualised figures extrapolate noise (``annualised_flag``).
MIN_ANNUALISED_DAYS = 20


# ----------------------------------------------------------------------------- per agent


def _model_cost(calls: Sequence[tuple[float, Any, Any, Any, Any]], lo: float, hi: float,
                cumulative: float | None, capital: float) -> dict[str, Any]:
    """Return the cost of intelligence of the calls scheduled inside the window.

    Tokens and USD are sums over the calls (a call without a known cost adds nothing; the sum
    is ``None`` when no call has one), latency the mean over the calls that report one;
    ``llm_cost_share`` is the USD spent as a share of the initial capital ``capital`` and
    ``net_return`` the cumulative return minus it (the return had the model been paid from
    the portfolio); both ``None`` when no call has a cost or the capital is unknown.
    """
    inside = [c for c in calls if lo <= c[0] <= hi]
    costs = [float(c[4]) for c in inside if c[4] is not None]
    lats = [float(c[3]) for c in inside if c[3] is not None]
    usd = float(sum(costs)) if costs else None
    share = usd / capital if usd is not None and capital > 0 else None
    return {
        "llm_calls": len(inside),
        "llm_tokens_in": int(sum(int(c[1] or 0) for c in inside)),
        "llm_tokens_out": int(sum(int(c[2] or 0) for c in inside)),
        "llm_cost_usd": usd,
        "llm_latency_mean_s": np_mean(lats) if lats else None,
        "llm_cost_share": share,
        "net_return": (cumulative - share if share is not None and cumulative is not None
                       and math.isfinite(cumulative) else None),
    }


def _holdings(store: _Store, key: Key, ts: Sequence[float], assets: Sequence[str]
              ) -> np.ndarray:
    """Return units held at each mark in ``ts`` (fills with ts <= mark, resolutions applied).

    A fill adds its trades to every asset at once (``q + 0.0`` where it has none: ``q`` itself,
    never ``-0.0`` from a start at ``0.0``), the same Python float sums as one asset at a time.
    """
    col = {a: j for j, a in enumerate(assets)}
    fills = store.fills.get(key, [])
    resolved = store.resolutions.get(key[1], [])
    events: list[tuple[float, int, int]] = [(f.ts, 0, n) for n, f in enumerate(fills)]
    events += [(t, 1, n) for n, (t, _) in enumerate(resolved)]
    events.sort()
    none = [0.0] * len(assets)
    q = none  # Python floats: the same sums as float64 items, faster
    rows: list[list[float]] = []
    e, last = 0, len(events)
    for m in ts:
        while e < last and events[e][0] <= m:
            _, kind, n = events[e]
            if kind == 0:
                q = list(map(add, q, map(fills[n].trades.get, assets, none)))
            else:
                q = q[:]  # (the rows before keep theirs)
                for a in resolved[n][1]:
                    j = col.get(a)
                    if j is not None:
                        q[j] = 0.0
            e += 1
        rows.append(q)
    return np.array(rows, dtype=float).reshape(len(ts), len(assets))


def _rolling_k(h: np.ndarray, p: np.ndarray) -> dict[str, Any]:
    """Return CR^(0), CR^(k) and both Delta_k variants for every k of ROLLING_KS."""
    if h.shape[0] < 2:
        nan_k = {str(k): _NAN for k in ROLLING_KS}
        return {"cr0": _NAN, "cr": nan_k, "delta": dict(nan_k),
                "delta_same_window": dict(nan_k)}
    return rolling_k_figures(h, p, ROLLING_KS)


def _profile(agent_cfg: Mapping[str, Any], mdd: float, var95: float) -> dict[str, Any]:
    """Return the configured risk profile, its alignment and the checks against every profile."""
    name = str(agent_cfg.get("risk_profile") or "balanced")
    base = RISK_PROFILES.get(name, RISK_PROFILES["balanced"])
    own_dd = agent_cfg.get("max_drawdown")
    own = RiskProfile(base.name, float(own_dd) if own_dd else base.max_drawdown, base.var_limit)
    checks = {}
    for pname, prof in sorted(RISK_PROFILES.items()):
        checks[pname] = {
            "max_drawdown_ok": (mdd <= prof.max_drawdown) if math.isfinite(mdd) else None,
            "var_ok": (var95 >= prof.var_limit) if math.isfinite(var95) else None,
            "alignment": profile_alignment(mdd, var95, prof),
        }
    return {"risk_profile": base.name, "max_drawdown_limit": own.max_drawdown,
            "profile_alignment": profile_alignment(mdd, var95, own), "profile_checks": checks}


# ----------------------------------------------------------------------------- rows


def _asset_classes(store: _Store) -> dict[str, dict[str, str]]:
    """Return asset -> class per market (config sectors; one class per question)."""
    eq = store.markets_cfg.get("equity", {}).get("asset_classes")
    if eq is None:
        from daemon.core.universe import DEFAULT_ASSET_CLASSES

        eq = DEFAULT_ASSET_CLASSES
    poly = {a: q for q, members in store.questions.get("polymarket", {}).items() for a in members}
    return {"equity": dict(eq), "polymarket": poly}


def _labels(store: _Store) -> dict[str, dict[str, str]]:
    """Return display names of Polymarket tokens ('<question> YES' / 'NO')."""
    out: dict[str, dict[str, str]] = {}
    for market, qs in store.questions.items():
        names: dict[str, str] = {}
        for q, members in qs.items():
            title = store.question_text.get(q) or q
            for side, a in zip(POLYMARKET_SIDES, members, strict=False):
                names[a] = f"{title} {side}"
        if names:
            out[market] = names
    return out


def _row(store: _Store, key: Key, lo: float, hi: float, from_start: bool,
         rf: Mapping[str, float], initial: Mapping[str, float],
         classes: Mapping[str, Mapping[str, str]],
         regime: tuple[np.ndarray, list[str]]) -> tuple[dict[str, Any], AgentCurves | None]:
    agent, market = key
    jobs_from = len(store.div_jobs or [])
    pts = [p for p in store.series.get(key, []) if lo <= p[0] <= hi]
    fills = [f for f in store.fills.get(key, []) if lo <= f.ts <= hi]
    weights = [f.weights for f in fills]
    n = _periods(store.markets_cfg, market)
    start_value = initial.get(market) or (pts[0][1] if pts else 0.0)
    # Issue 27, point 9: the initial cash starts the series only at a first fill strictly
    # before the first mark; otherwise the first mark does (no zero-length period).
    first_fill = store.fills[key][0] if store.fills.get(key) else None
    from_start = bool(from_start and pts and first_fill is not None
                      and starts_at_initial(pts[0][0], first_fill.ts))
    values = [start_value] + [v for _, v, _ in pts] if from_start else [v for _, v, _ in pts]
    traded = [f.traded_value for f in fills if f is not first_fill]  # building it: not counted
    perf, r, dd = summary_parts(values, n, rf.get(market, 0.0), weights, traded)
    summary = perf.to_dict()
    agent_cfg = store.agents_cfg.get(agent, {})
    mark_ts = [t for t, _, _ in pts]
    panel = store.panels.get(market)
    figures: dict[str, Any] = {}
    if panel is not None and mark_ts:
        win = _window(store, market, mark_ts)
        q = _holdings(store, key, mark_ts, panel.assets)
        cash = np.array([c for _, _, c in pts])[:, None]
        h = np.hstack([q, cash])
        pz = win.pz
        if store.div_jobs is not None and h.shape[0] >= 2:  # with the others, after the rows
            store.div_jobs.append([ROLLING_K_JOB, (h, pz), None])
            figures["rolling_k"] = None  # its place in the row; set by score_pending
        else:
            figures["rolling_k"] = _rolling_k(h, pz)
        score, regret = _capitalbench([v for _, v, _ in pts], panel.assets, win.prices,
                                      win.best)
        figures |= {"capitalbench_score": score, "regret": regret}
        held = h * pz
        figures |= _diversification(held, classes.get(market, {}), panel.assets, win.returns,
                                    store.questions.get(market, {}) if market == "polymarket"
                                    else None, win.corr, store.div_jobs)
        if market == "polymarket":
            figures |= _brier(store, market, mark_ts, held, [*panel.assets, CASH], hi)
    else:
        figures["rolling_k"] = _rolling_k(np.empty((0, 1)), np.empty((0, 1)))
        figures |= {"capitalbench_score": _NAN, "regret": _NAN, "s_intra": _NAN,
                    "s_inter": _NAN, "s_corr": _NAN}
    rl = r.tolist()
    excess = rf.get(market, 0.0) / n
    var95 = historical_var(r, VAR_LEVEL, VAR_WINDOW, min_periods=VAR_MIN_PERIODS)
    mdd = summary["max_drawdown"]
    ends = mark_ts[-len(r):] if len(r) else []
    labels_key = ("labels", id(regime[1]), tuple(ends))  # the rows of the same days: once
    labels = store.corr_cache.get(labels_key)
    if labels is None:
        labels = store.corr_cache[labels_key] = _labels_at(regime[0], regime[1], ends)
    consistency = store.probes.get((agent, market)) or store.probes.get((agent, ""))
    outcomes = {k: sum(lo <= t <= hi for t in ts)
                for k, ts in store.outcomes.get(key, {}).items()}
    valid = sum(n for k, n in outcomes.items() if k in VALID_OUTCOMES)
    counted = sum(n for k, n in outcomes.items() if k not in NOT_ASKED_OUTCOMES)
    row = {
        "agent": agent,
        "market": market,
        "kind": agent_cfg.get("kind"),
        "final_value": pts[-1][1] if pts else None,
        "days": len(pts),
        "costs": float(sum(f.cost for f in fills)),
        "decisions": {k: v for k, v in sorted(outcomes.items()) if v},
        "valid_decisions": valid,
        "counted_decisions": counted,
        "valid_decision_rate": valid / counted if counted else None,
        **summary,
        "annualised_flag": int(r.size) < MIN_ANNUALISED_DAYS,
        "current_drawdown": float(dd[-1]) if dd.size else None,
        "mean_daily_return": np_mean(rl) if rl else None,
        "cumulative_excess_return": (np_prod([1.0 + x - excess for x in rl]) - 1.0
                                     if rl else None),
        **figures,
        "var_95": var95,
        **_profile(agent_cfg, mdd if mdd is not None else _NAN, var95),
        "by_regime": _by_regime(r, labels),
        "consistency": consistency,
        "brier": figures.pop("brier", None),
        "brier_questions": figures.pop("brier_questions", 0 if market == "polymarket" else None),
        "brier_annulled": figures.pop("brier_annulled", 0 if market == "polymarket" else None),
        **_model_cost(store.llm.get(key, []), lo, hi, summary["cumulative_return"],
                      start_value),
        "relative": _relative(r, ends, store.bench.get(market, {}), n, store.corr_cache),
    }
    for job in (store.div_jobs or [])[jobs_from:]:  # this row's figures wait there
        job[2] = row
    curve = None
    if pts:
        ts = ([first_fill.ts] if from_start and first_fill is not None else []) + mark_ts
        cash_pts = ([start_value] if from_start else []) + [c for _, _, c in pts]
        before = [f for f in store.fills.get(key, []) if f.ts < lo]
        # The allocation in force when the window opens starts the allocation chart.
        held = [(ts[0], dict(before[-1].weights))] if before and (not fills or
                                                                  fills[0].ts > ts[0]) else []
        curve = AgentCurves(agent, market, tuple(ts), tuple(values), tuple(cash_pts),
                            tuple(held + [(f.ts, dict(f.weights)) for f in fills]))
    return row, curve


def _market_summary(store: _Store, market: str, lo: float, hi: float) -> dict[str, Any]:
    """Return the market's marks in the window and its best CapitalBench asset."""
    panel = store.panels.get(market)
    if panel is None:
        return {"marks": 0, "best_asset": None, "best_asset_return": None}
    ts = [float(t) for t in panel.marks if lo <= t <= hi]
    if len(ts) < 2:
        return {"marks": len(ts), "best_asset": None, "best_asset_return": None}
    p = panel.rows(ts)
    i = _first_priced(p)
    if i < 0 or len(ts) - i < 2:
        return {"marks": len(ts), "best_asset": None, "best_asset_return": None}
    rets = _window_asset_returns(panel.assets, p[i], p[-1])
    best = max(sorted(rets), key=lambda a: rets[a])
    return {"marks": len(ts), "best_asset": best, "best_asset_return": rets[best],
            "capitalbench_start": ts[i]}


def _brier(store: _Store, market: str, mark_ts: Sequence[float], held: np.ndarray,
           assets: Sequence[str], hi: float) -> dict[str, Any]:
    """Return the Brier score of the agent's implied probabilities over resolved questions.

    For every question resolved at or before ``hi`` with an agent mark before its resolution,
    the forecast is the position at the last such mark: ``p(YES) = (1 + w_YES - w_NO) / 2``
    with ``w`` the token's share of the portfolio value (no position: 0.5, no view). The
    outcome is the YES token's payout. Brier = mean of ``(p - outcome)^2``. A question
    annulled (a payout other than 0 or 1, e.g. 50/50) has no outcome to forecast: it is left
    out and counted in ``brier_annulled``.
    """
    col = {a: j for j, a in enumerate(assets)}
    errors: list[float] = []
    annulled = 0
    members = store.questions.get(market, {})
    marks = np.asarray(mark_ts)
    for ts, payouts in store.resolutions.get(market, []):
        if ts > hi:
            continue
        i = int(np.searchsorted(marks, ts, side="left")) - 1
        if i < 0:
            continue
        row = held[i].tolist()
        value = np_sum(row)  # float(held[i].sum()), in Python
        if not value > 0:
            continue
        for tokens in members.values():
            if len(tokens) < 2 or tokens[0] not in payouts:
                continue
            yes, no = tokens[0], tokens[1]
            if float(payouts[yes]) not in (0.0, 1.0):
                annulled += 1
                continue
            w_yes = row[col[yes]] / value if yes in col else 0.0
            w_no = row[col[no]] / value if no in col else 0.0
            p = min(1.0, max(0.0, (1.0 + w_yes - w_no) / 2.0))
            errors.append((p - float(payouts[yes])) ** 2)
    return {"brier": np_mean(errors) if errors else None,
            "brier_questions": len(errors), "brier_annulled": annulled}


def _series(curves: Mapping[Key, AgentCurves]) -> dict[str, dict[str, list[list[float]]]]:
    """Return each agent's equity series per market: [[ts, value], ...] (window applied)."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    for (agent, market), c in sorted(curves.items()):
        out.setdefault(market, {})[agent] = [[t, v] for t, v in zip(c.ts, c.values, strict=True)]
    return out


def _window_dates(store: _Store, lo: float, hi: float) -> dict[str, Any]:
    """Return the first and last daily mark inside the window, as timestamps and UTC dates."""
    ts = [p[0] for pts in store.series.values() for p in pts if lo <= p[0] <= hi]
    if not ts:
        return {"first_mark": None, "last_mark": None, "first_date": None, "last_date": None}
    first, last = min(ts), max(ts)
    return {"first_mark": first, "last_mark": last, "first_date": _utc_date(first),
            "last_date": _utc_date(last)}


def _utc_date(ts: float) -> str:
    """Return the UTC date of ``ts`` as YYYY-MM-DD."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _periods(markets_cfg: Mapping[str, Any], market: str) -> int:
    """Return the market's configured ``periods_per_year`` (the default for older stores)."""
    n = (markets_cfg.get(market) or {}).get("periods_per_year")
    return int(n) if n else periods_per_year(market)
