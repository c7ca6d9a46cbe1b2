"""Per-agent figures of the leaderboard: one row per (agent, market) from the loaded store.

Performance summary, bootstrap intervals, rolling-k, CapitalBench score, diversification, VaR
and risk profile, Brier score, model cost, benchmark-relative figures, and the market regime
(equal-weight index of the equity universe) with each agent's per-regime split. Conventions:
docs/scoring.md, section "Leaderboard".

Why one module over 500 lines: the figures of one leaderboard row are computed together from one
agent's curves and share the row's intermediate series (returns, drawdowns, benchmark and regime
splits); reading rows is :mod:`.load`, standings :mod:`.rank`, rendering :mod:`.text`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import add
from typing import Any

import numpy as np

from scoring.board.load import _NAN, AgentCurves, Key, _Store
from scoring.stats.benchmarks import (
    CASH,
    RISK_PROFILES,
    ROLLING_KS,
    RiskProfile,
    capitalbench_score,
    historical_var,
    profile_alignment,
    regime_label,
    rolling_k_figures,
)
from scoring.stats.diversification import (
    class_correlations,
    diversification_rows,
    signed_question_rows,
)
from scoring.stats.metrics import (
    DDOF,
    STD_ZERO_RTOL,
    periods_per_year,
    starts_at_initial,
    summary_parts,
)
from scoring.stats.small_sums import np_mean, np_prod, np_std, np_sum, np_var

FIELDS = ("cumulative_return", "annualised_return", "volatility", "sharpe", "sortino",
          "sortino_stockbench",
          "max_drawdown", "calmar", "win_rate", "mean_turnover", "target_turnover", "flip_rate")

VAR_LEVEL = 0.95
VAR_WINDOW = 60
VAR_MIN_PERIODS = 20
REGIME_WINDOW = 20
REGIME_MIN_RETURNS = 5
REGIME_UNKNOWN = "unknown"
POLYMARKET_SIDES = ("YES", "NO")
_DAY = 86400.0
_HELD_EPS = 1e-12

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


def _asset_returns(prices: np.ndarray) -> np.ndarray:
    """Return mark-to-mark simple returns per asset (NaN where a price is missing or 0)."""
    if prices.shape[0] < 2:
        return np.empty((0, prices.shape[1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = prices[1:] / prices[:-1] - 1.0
    r[~np.isfinite(r)] = np.nan
    return r


def _window_asset_returns(assets: Sequence[str], p0: np.ndarray, p1: np.ndarray
                          ) -> dict[str, float]:
    """Return each asset's return between two price rows, CASH (0) included."""
    out = {CASH: 0.0}
    for j, a in enumerate(assets):
        if math.isfinite(p0[j]) and math.isfinite(p1[j]) and p0[j] > 0:
            out[a] = float(p1[j] / p0[j] - 1.0)
    return out


def _first_priced(prices: np.ndarray) -> int:
    """Return the first row with any finite price (the CapitalBench window start), else -1."""
    rows: Sequence[int] = (np.flatnonzero(np.isfinite(prices).any(axis=1)).tolist()
                           if prices.size else [])
    return int(rows[0]) if len(rows) else -1


def _capitalbench(values: Sequence[float], assets: Sequence[str], prices: np.ndarray,
                  window: tuple[int, float] | None = None) -> tuple[float, float]:
    """Score the realised window return the way capitalbench_score scores ``sum(w r)``.

    The window runs from the first mark with a price in the market to the last mark; the
    portfolio return is the agent's value ratio over it, the universe every asset priced at both
    ends plus CASH (return 0). ``window``: :func:`_capitalbench_window` of the prices, if known.
    """
    i, best = window if window is not None else _capitalbench_window(assets, prices)
    if i < 0 or len(values) - i < 2 or values[i] <= 0:
        return _NAN, _NAN
    pr = values[-1] / values[i] - 1.0
    return (100.0 * pr / best if best > 0 else _NAN), best - pr


def _capitalbench_window(assets: Sequence[str], prices: np.ndarray) -> tuple[int, float]:
    """Return the CapitalBench window's first row and its best return (NaN without two rows)."""
    i = _first_priced(prices)
    if i < 0 or prices.shape[0] - i < 2:
        return i, _NAN
    rets = _window_asset_returns(assets, prices[i], prices[-1])
    _, best = capitalbench_score({}, rets)  # empty weights: regret = best - 0 = best
    return i, best


@dataclass
class _Window:
    """What every row with the same marks of a market shares (:func:`_window`): never written
    to by a row."""

    prices: np.ndarray  # the panel's rows at the marks
    pz: np.ndarray  # the prices, 0 where missing, with CASH's 1 last
    returns: np.ndarray  # :func:`_asset_returns` of the prices
    best: tuple[int, float]  # :func:`_capitalbench_window` of the prices
    corr: dict[Any, Any] = field(default_factory=dict)  # :func:`_diversification`'s


def _window(store: _Store, market: str, mark_ts: list[float]) -> _Window:
    """Return the market's :class:`_Window` at the marks ``mark_ts``, made once per report (kept
    in ``store.corr_cache``)."""
    key = ("window", market, tuple(mark_ts))
    win: _Window | None = store.corr_cache.get(key)
    if win is None:
        panel = store.panels[market]
        prices = panel.rows(mark_ts)
        pz = np.hstack([np.nan_to_num(prices, nan=0.0), np.ones((len(mark_ts), 1))])
        win = _Window(prices, pz, _asset_returns(prices),
                      _capitalbench_window(panel.assets, prices))
        store.corr_cache[key] = win
    return win


def _diversification(held: np.ndarray, classes: Mapping[str, str], assets: list[str],
                     returns: np.ndarray, questions: Mapping[str, Sequence[str]] | None = None,
                     cache: dict[Any, Any] | None = None,
                     jobs: list[list[Any]] | None = None) -> dict[str, float]:
    """Return the mean over marks of s_intra / s_inter / s_corr of the portfolio held.

    ``held`` is the value held per asset and mark (units times prices, CASH last); correlations
    come from the window's mark-to-mark asset returns ``returns`` (kept in ``cache``, the
    window's). With ``questions`` (Polymarket: question -> its YES and NO tokens) each question
    is one signed exposure (:func:`scoring.stats.diversification.signed_question_exposures`).
    """
    if questions is not None:
        return _question_diversification(held, assets, returns, questions, cache, jobs)
    if returns.shape[0] < 2:
        return {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}
    names = [*assets, CASH]
    corr = cache.get("assets") if cache is not None else None
    if corr is None:
        panel = np.column_stack([returns, np.zeros(returns.shape[0])])
        cls = {**{a: classes.get(a, a) for a in assets}, CASH: "cash"}
        corr = class_correlations(panel, names, cls)  # the whole class's, once for the window
        if cache is not None:
            cache["assets"] = corr
    return _scores(diversification_rows, (_row_weights(held), names, corr, _HELD_EPS), jobs)


def _scores(score_rows: Any, args: tuple[Any, ...], jobs: list[list[Any]] | None
            ) -> dict[str, float]:
    """Return :func:`_mean_scores` of ``score_rows(*args)``; with ``jobs``, NaN for now and
    the call left in ``jobs`` (its row is set by :func:`_row`) to be scored with others."""
    if jobs is None:
        return _mean_scores(score_rows(*args))
    jobs.append([score_rows, args, None])
    return {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}


def _row_weights(held: np.ndarray) -> np.ndarray:
    """Return the weights (row / its sum) of the rows holding a positive value, in order."""
    v = held.sum(axis=1)
    ok = v > 0
    return held[ok] / v[ok, None]


def _mean_scores(scores: np.ndarray) -> dict[str, float]:
    """Return the mean over rows of each finite s_intra / s_inter / s_corr (NaN if none)."""
    out = {}
    for k, col in zip(("s_intra", "s_inter", "s_corr"), scores.T.tolist(), strict=True):
        finite = [x for x in col if math.isfinite(x)]
        out[k] = np_mean(finite) if finite else _NAN  # np.mean of the finite ones, in Python
    return out


def _question_diversification(held: np.ndarray, assets: list[str], returns: np.ndarray,
                              questions: Mapping[str, Sequence[str]],
                              cache: dict[Any, Any] | None = None,
                              jobs: list[list[Any]] | None = None) -> dict[str, float]:
    """Return the mean s_intra / s_inter / s_corr with questions as the unit of exposure.

    A question's series is its YES token's mark-to-mark return (its NO token's, negated, when
    the YES token has no price); every question is its own class, so one question held is
    concentrated (``rho_intra`` 1); the held exposure is ``w_YES - w_NO``, signed. The
    correlations are kept in ``cache`` (the window's; ``None`` there: no question held).
    """
    if "questions" in (cache or {}):
        corr = cache["questions"]  # type: ignore[index]
    else:
        corr = _question_correlations(assets, returns, questions)
        if cache is not None:
            cache["questions"] = corr
    if corr is None:
        return {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}
    return _scores(signed_question_rows, (_row_weights(held), assets, questions, corr), jobs)


def _question_correlations(assets: list[str], returns: np.ndarray,
                           questions: Mapping[str, Sequence[str]]) -> Any:
    """Return the class correlations of the questions' series (None: fewer than two returns or
    no question among ``assets``)."""
    col = {a: j for j, a in enumerate(assets)}
    names = sorted(q for q, toks in questions.items() if any(t in col for t in toks))
    if returns.shape[0] < 2 or not names:
        return None
    series = np.full((returns.shape[0], len(names)), np.nan)
    for i, q in enumerate(names):
        toks = list(questions[q])
        if toks and toks[0] in col and np.isfinite(returns[:, col[toks[0]]]).sum() >= 2:
            series[:, i] = returns[:, col[toks[0]]]
        elif len(toks) > 1 and toks[1] in col:
            series[:, i] = -returns[:, col[toks[1]]]
    panel = np.column_stack([series, np.zeros(series.shape[0])])
    return class_correlations(panel, [*names, CASH], {**{q: q for q in names}, CASH: "cash"})


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


def _by_regime(r: np.ndarray, labels: Sequence[str]) -> dict[str, dict[str, float | int]]:
    """Group daily returns by regime label: days and mean per label."""
    groups: dict[str, list[float]] = defaultdict(list)
    for x, lab in zip(r.tolist(), labels, strict=True):
        if math.isfinite(x):
            groups[lab].append(x)
    return {lab: {"days": len(xs), "mean_daily_return": np_mean(xs)}
            for lab, xs in sorted(groups.items())}


# ----------------------------------------------------------------------------- regime


def _regime_by_mark(store: _Store) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Return (equity marks, trailing regime label at each mark, equal-weight index returns)."""
    panel = store.panels.get("equity")
    if panel is None or panel.marks.size == 0:
        return np.empty(0), [], np.empty(0)
    universe = store.markets_cfg.get("equity", {}).get("assets") or panel.assets
    cols = [j for j, a in enumerate(panel.assets) if a in set(universe)]
    r = _asset_returns(panel.prices[:, cols])
    idx = np.full(panel.marks.size, np.nan)  # idx[t]: index return from mark t-1 to mark t
    for t in range(1, panel.marks.size):
        row = r[t - 1][np.isfinite(r[t - 1])]
        if row.size:
            idx[t] = float(np.mean(row))
    labels = [REGIME_UNKNOWN]
    for t in range(1, panel.marks.size):
        hist = idx[1 : t + 1]
        labels.append(regime_label(hist, window=min(REGIME_WINDOW, t))
                      if t >= REGIME_MIN_RETURNS else REGIME_UNKNOWN)
    return panel.marks, labels, idx


def _labels_at(marks: np.ndarray, labels: Sequence[str], ts: Sequence[float]) -> list[str]:
    """Return the label of the latest equity mark at or before each time of ``ts`` (unknown
    before the first), one ``searchsorted`` for all."""
    if not ts:
        return []
    at = (np.searchsorted(marks, np.asarray(ts, dtype=float), side="right") - 1).tolist()
    return [labels[i] if i >= 0 else REGIME_UNKNOWN for i in at]


def _window_regime(marks: np.ndarray, index: np.ndarray, labels: Sequence[str], lo: float,
                   hi: float) -> dict[str, Any]:
    """Label the window's regime from the index returns between its equity marks."""
    inside = [t for t in range(marks.size) if lo <= marks[t] <= hi]
    r = index[inside[1:]] if len(inside) >= 2 else np.empty(0)
    label = regime_label(r, window=max(r.size, 2)) if r.size >= 2 else REGIME_UNKNOWN
    days: dict[str, int] = defaultdict(int)
    for t in inside:
        days[labels[t]] += 1
    return {"label": label, "index_return": float(np.prod(1.0 + r) - 1.0) if r.size else None,
            "index_days": int(r.size), "days_by_label": dict(sorted(days.items()))}


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


def _benchmark_asset(markets_cfg: Mapping[str, Any], market: str) -> str:
    """Return the market's configured benchmark asset (SPY for equities by default)."""
    cfg = markets_cfg.get(market) or {}
    return str(cfg.get("benchmark", "SPY" if market == "equity" else "") or "")


def _benchmarks(store: _Store, market: str) -> dict[str, dict[float, float]]:
    """Return the market's benchmark daily returns keyed by the mark each ends at.

    ``equal_weight``: the mean of the mark-to-mark returns of the market's assets priced at
    both marks (the configured equity universe; every Polymarket token), rebalanced daily;
    the benchmark asset's own returns when it is in the universe.
    """
    panel = store.panels[market]
    universe = set(store.markets_cfg.get(market, {}).get("assets") or panel.assets)
    cols = [j for j, a in enumerate(panel.assets) if a in universe]
    r = _asset_returns(panel.prices[:, cols])
    ew: dict[float, float] = {}
    for t in range(1, panel.marks.size):
        row = r[t - 1][np.isfinite(r[t - 1])]
        if row.size:
            ew[float(panel.marks[t])] = float(np.mean(row))
    out = {"equal_weight": ew}
    asset = _benchmark_asset(store.markets_cfg, market)
    if asset and asset in universe and asset in panel.assets:
        j = panel.assets.index(asset)
        own = _asset_returns(panel.prices[:, [j]])[:, 0]
        out[asset] = {float(panel.marks[t]): float(own[t - 1])
                      for t in range(1, panel.marks.size) if math.isfinite(own[t - 1])}
    return out


def _relative(r: np.ndarray, ends: Sequence[float], bench: Mapping[str, Mapping[float, float]],
              n: int, cache: dict[Any, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Return the agent's figures relative to each benchmark over the days both have.

    Each benchmark's :func:`scoring.stats.inference.relative_figures` bit for bit
    (:func:`_relative_figures`), its side computed once per set of days with ``cache``.
    """
    out: dict[str, dict[str, Any]] = {}
    rl = r.tolist()
    for name, series in bench.items():
        days = [(x, t) for x, t in zip(rl, ends, strict=True) if t in series]
        fig = _relative_figures([a for a, _ in days], [series[t] for _, t in days], n,
                                (name, id(series), tuple(t for _, t in days)), cache)
        fig["days"] = len(days)
        out[name] = fig
    return out


def _relative_figures(r: list[float], b: list[float], periods: int, key: tuple[Any, ...],
                      cache: dict[Any, Any] | None) -> dict[str, Any]:
    """Return :func:`scoring.stats.inference.relative_figures` of ``r`` and ``b``, bit for bit.

    Its means, variances and products on Python floats in numpy's order
    (:mod:`scoring.stats.small_sums`) and its covariance by :func:`numpy.cov`'s own operations;
    the benchmark's product and variance from ``cache`` when its days (``key``) were seen.
    """
    keep = [math.isfinite(x) and math.isfinite(y) for x, y in zip(r, b, strict=True)]
    if not all(keep):
        r = [x for x, k in zip(r, keep, strict=True) if k]
        b = [y for y, k in zip(b, keep, strict=True) if k]
        key = (*key, tuple(keep))
    m = len(r)
    out = {"days": float(m), "excess_return": _NAN, "beta": _NAN,
           "tracking_error": _NAN, "information_ratio": _NAN}
    if m == 0:
        return out
    side = cache.get(("bench_side", key)) if cache is not None else None
    if side is None:
        side = (np_prod([1.0 + y for y in b]), np_var(b, DDOF) if m >= 2 else _NAN)
        if cache is not None:
            cache[("bench_side", key)] = side
    prod_b, var_b = side
    out["excess_return"] = np_prod([1.0 + x for x in r]) - prod_b
    if m < 2:
        return out
    if var_b > STD_ZERO_RTOL**2:
        out["beta"] = _cov(r, b) / var_b
    active = [x - y for x, y in zip(r, b, strict=True)]
    sd = np_std(active, DDOF)
    mean = np_mean(active)
    out["tracking_error"] = sd * math.sqrt(periods)
    if sd > STD_ZERO_RTOL * max(1.0, abs(mean)):
        out["information_ratio"] = mean / sd * math.sqrt(periods)
    return out


def _cov(r: list[float], b: list[float]) -> float:
    """Return ``float(np.cov(r, b, ddof=1)[0, 1])`` by :func:`numpy.cov`'s own operations: the
    rows centred on their means (numpy's, :func:`np_mean`), the same ``dot`` of the centred rows
    with their transpose, scaled by ``1 / (n - 1)``; without its checks."""
    mr, mb = np_mean(r), np_mean(b)
    x = np.array([[v - mr for v in r], [v - mb for v in b]], dtype=float)
    c = np.dot(x, x.T.conj())
    return float(c[0, 1]) * (1 / (len(r) - 1))


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
