"""The leaderboard: per agent and market performance computed from the store.

Returns are daily: the equity series is the initial cash followed by the daily marks (NYSE close
for equities, 00:00 UTC for Polymarket), so Sharpe and volatility annualise with 252 / 365
periods (see docs/scoring.md). The risk-free rate is the equity market's configured one; 0 for
Polymarket. Output is deterministic: the same store gives byte-identical JSON.

Besides the per-agent performance summary, every row carries the benchmark measures of
``scoring.benchmarks`` (section "Leaderboard" of docs/scoring.md states every convention):

* rolling-k deltas (LiveTradeBench Eq. 6) on a panel rebuilt at the daily marks: units held at a
  mark are the cumulated ``trades_json`` unit deltas of every fill up to it (resolved Polymarket
  tokens drop to 0 units), cash is the stored mark's cash, prices are the last traded price of
  each asset at or before the mark (``market_events``; a resolved token is priced at its payout);
* the StockBench composite score and rank, the CapitalBench window score and regret, PortBench
  s_intra / s_inter / s_corr, 95% historical VaR, risk-profile checks and alignment;
* bootstrap intervals of the headline figures and a ``tied_with_next`` flag for rank differences
  that are not significant;
* the market regime of the window and a per-regime split of each agent's daily returns;
* the latest consistency-probe result of the agent when the store has a ``probes`` table;
* the valid-decision rate (``ok`` or ``hold`` among the rounds the agent was asked) and the
  standing: an agent under ``[leaderboard] min_valid_rate`` or with fewer than ``min_days`` scored
  days is ``provisional``: listed below the ranked agents of its market, never given a rank, and
  left out of the composite z-scores.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from scoring.benchmarks import (
    CASH,
    RISK_PROFILES,
    ROLLING_KS,
    RiskProfile,
    bootstrap_ci,
    capitalbench_score,
    class_correlations,
    composite_rank,
    diversification,
    historical_var,
    paired_bootstrap,
    profile_alignment,
    regime_label,
    relative_figures,
    rolling_k_delta,
    rolling_k_return,
)
from scoring.board_extras import board_extras, extras_text
from scoring.metrics import drawdown_series, periods_per_year, sharpe, simple_returns, summarise

__all__ = [
    "BOOTSTRAP_LEVEL",
    "BOOTSTRAP_N",
    "BOOTSTRAP_SEED",
    "FIELDS",
    "LEGEND",
    "LIVE_FIELDS",
    "MIN_DAYS",
    "MIN_VALID_RATE",
    "NOT_ASKED_OUTCOMES",
    "VALID_OUTCOMES",
    "AgentCurves",
    "Report",
    "leaderboard",
    "live_figures",
    "load_report",
    "to_json",
    "to_table",
]

FIELDS = ("cumulative_return", "annualised_return", "volatility", "sharpe", "sortino",
          "sortino_stockbench",
          "max_drawdown", "calmar", "win_rate", "mean_turnover", "target_turnover", "flip_rate")

BOOTSTRAP_N = 1000
BOOTSTRAP_LEVEL = 0.95
BOOTSTRAP_SEED = 0
VAR_LEVEL = 0.95
VAR_WINDOW = 60
VAR_MIN_PERIODS = 20
REGIME_WINDOW = 20
REGIME_MIN_RETURNS = 5
REGIME_UNKNOWN = "unknown"
POLYMARKET_SIDES = ("YES", "NO")
_DAY = 86400.0
_HELD_EPS = 1e-12
_NAN = float("nan")

#: Decision outcomes that are valid: applied (``ok``) or held on purpose (``hold``).
VALID_OUTCOMES: tuple[str, ...] = ("ok", "hold")
#: Outcomes left out of the valid-decision rate: the agent was not asked. ``skipped`` (no fresh
#: prices), ``missed`` (the daemon was late) and ``abandoned`` (it stopped) are the daemon's;
#: ``paused`` (daily budget) and ``halted`` (drawdown halt) are the operator's limits. Any other
#: outcome (``invalid``, ``rejected``, ``error``...) counts against the agent.
NOT_ASKED_OUTCOMES: tuple[str, ...] = ("skipped", "missed", "abandoned", "paused", "halted")
#: Agent kinds that are baselines: every agent is compared with each of them (paired bootstrap).
BASELINE_KINDS: tuple[str, ...] = ("buy_and_hold", "equal_weight", "cash", "momentum")
#: Fewer daily returns than this: annualised figures extrapolate noise (``annualised_flag``).
MIN_ANNUALISED_DAYS = 20
#: Fewer common daily returns than this: a comparison makes no claim (``provisional``).
MIN_PAIRED_DAYS = 20
#: Defaults of ``[leaderboard]`` (daemon/config.py), used when the store's run has none.
MIN_VALID_RATE = 0.8
MIN_DAYS = 5

#: Every column of the text table (and its HTML twin), explained once: the legend of the table,
#: the HTML report and docs/scoring.md. Drawdowns print negative, like the drawdown chart.
LEGEND: tuple[tuple[str, str], ...] = (
    ("#", "rank by cumulative return among the market's non-provisional agents; '~' after it: "
          "not significantly ahead of the next (paired bootstrap: the 95% interval of the "
          "difference contains 0, or fewer than 20 common days); '-': provisional, not ranked"),
    ("return", "cumulative return over the window, v_T / v_0 - 1"),
    ("sharpe", "annualised Sharpe ratio of the daily returns, (mean - rf) / std * sqrt(N)"),
    ("sortino", "annualised standard Sortino ratio: downside deviation over all days below rf"),
    ("max dd", "maximum drawdown from a peak, printed negative"),
    ("vol", "annualised volatility of the daily returns, std * sqrt(N)"),
    ("win", "share of daily returns above zero"),
    ("turnover", "executed turnover per day, in % of equity: traded value / mean equity / "
                 "days (first fill left out)"),
    ("days", "daily marks in the window"),
    ("valid", "valid-decision rate: ok or hold among the rounds the agent was asked"),
    ("decisions", "decision outcomes in the window"),
    ("return 95% CI", "95% percentile bootstrap interval of the cumulative return"),
    ("sharpe 95% CI", "95% percentile bootstrap interval of the Sharpe ratio"),
    ("comp", "StockBench composite score (z(CR) + z(-MDD) + z(Sortino StockBench)) / 3"),
    ("capb", "CapitalBench score: 100 * window return / best asset's window return"),
    ("s_corr", "PortBench correlation-aware diversification, 0.5 s_intra + 0.5 s_inter"),
    ("VaR95", "95% historical-simulation value at risk of one day (last 60 returns)"),
    ("align", "risk-profile alignment: share of the profile's drawdown and VaR checks passed"),
    ("d1", "LiveTradeBench rolling-k delta for k = 1: CR^(1) - CR^(0) (negative: timing "
           "matters)"),
    ("consist", "consistency probe: mean pairwise L1 distance of repeated answers (lower is "
                "more consistent)"),
    ("model $", "USD spent on model calls scheduled in the window (stored llm_calls)"),
    ("ret/$", "cumulative return per USD of model cost (return / model $)"),
)

#: Figures :func:`live_figures` returns per (agent, market), when finite.
LIVE_FIELDS: tuple[str, ...] = (
    "final_value", "days", "costs", "rank", "cumulative_return", "annualised_return",
    "volatility", "sharpe", "sortino", "sortino_stockbench", "max_drawdown", "current_drawdown",
    "calmar", "win_rate", "mean_turnover", "target_turnover", "flip_rate", "mean_daily_return",
    "sharpe_ci_low", "sharpe_ci_high",
    "mean_daily_return_ci_low", "mean_daily_return_ci_high", "composite_score",
    "capitalbench_score", "regret", "s_intra", "s_inter", "s_corr", "var_95",
    "profile_alignment", "rolling_k_cr0",
    *(f"rolling_k_delta_{k}" for k in ROLLING_KS),
    "consistency_mean_l1", "consistency_std_l1", "valid_decision_rate", "provisional",
    "llm_calls", "llm_tokens_in", "llm_tokens_out", "llm_cost_usd", "llm_latency_mean_s",
    "return_per_usd", "vs_next_p_value", "excess_return_ew", "beta_ew", "tracking_error_ew",
    "information_ratio_ew", "brier",
)  # fmt: skip

Key = tuple[str, str]


# ----------------------------------------------------------------------------- data classes


@dataclass(frozen=True)
class AgentCurves:
    """Hold one agent's time series in one market for the charts (window applied)."""

    agent: str
    market: str
    ts: tuple[float, ...]
    values: tuple[float, ...]
    cash: tuple[float, ...]
    allocations: tuple[tuple[float, dict[str, float]], ...]  # (fill ts, weights set)

    def drawdowns(self) -> list[float]:
        """Return the drawdown (positive fraction) at every point of ``values``."""
        return [float(x) for x in drawdown_series(self.values)]

    def cash_ratios(self) -> list[float]:
        """Return cash / value at every point (NaN where the value is not positive)."""
        return [c / v if v > 0 else _NAN for c, v in zip(self.cash, self.values, strict=True)]


@dataclass(frozen=True)
class Report:
    """Hold the leaderboard with the series the HTML report draws."""

    board: dict[str, Any]
    curves: dict[Key, AgentCurves]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class _Fill:
    ts: float
    trades: dict[str, float]
    weights: dict[str, float]
    cost: float
    traded_value: float = 0.0


@dataclass
class _Panel:
    """Last price of every asset at each daily mark of one market (whole store)."""

    marks: np.ndarray
    assets: list[str]
    prices: np.ndarray
    index: dict[float, int] = field(default_factory=dict)

    def rows(self, ts: Sequence[float]) -> np.ndarray:
        """Return the price rows of the marks ``ts`` (each must be a mark of the panel)."""
        return self.prices[[self.index[t] for t in ts]] if len(ts) else self.prices[:0]


@dataclass
class _Store:
    """Everything the leaderboard reads, loaded once."""

    markets_cfg: dict[str, Any]
    agents_cfg: dict[str, dict[str, Any]]
    series: dict[Key, list[tuple[float, float, float]]]
    fills: dict[Key, list[_Fill]]
    outcomes: dict[Key, dict[str, list[float]]]
    resolutions: dict[str, list[tuple[float, dict[str, float]]]]
    questions: dict[str, dict[str, list[str]]]
    question_text: dict[str, str]
    probes: dict[Key, dict[str, Any]]
    panels: dict[str, _Panel]
    board_cfg: dict[str, Any] = field(default_factory=dict)
    """The ``[leaderboard]`` section of the latest run's config."""
    bench: dict[str, dict[str, dict[float, float]]] = field(default_factory=dict)
    """Per market: benchmark name -> daily return keyed by the mark it ends at."""
    llm: dict[Key, list[tuple[float, Any, Any, Any, Any]]] = field(default_factory=dict)
    """Model calls per (agent, market): (scheduled_ts, tokens_in, tokens_out, latency_s,
    cost_usd)."""


# ----------------------------------------------------------------------------- helpers


def _clean(x: Any) -> Any:
    """Round floats to 12 significant digits and map non-finite values to None."""
    if isinstance(x, bool | None):
        return x
    if isinstance(x, float | np.floating):
        x = float(x)
        if not math.isfinite(x):
            return None
        return float(f"{x:.12g}")
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def _finite(x: float | None) -> bool:
    """Tell whether ``x`` is a finite number."""
    return x is not None and math.isfinite(x)


def _table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    """Return the column names of ``table`` (empty if it does not exist)."""
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


# ----------------------------------------------------------------------------- loading


def _load_store(con: sqlite3.Connection, hi: float) -> _Store:
    """Read configs, series, fills, resolutions, books, probes and price panels."""
    runs = [json.loads(r[0]) for r in con.execute("SELECT config_json FROM runs ORDER BY id")]
    markets_cfg = runs[0].get("markets", {}) if runs else {}
    agents_cfg: dict[str, dict[str, Any]] = {}
    for cfg in runs:  # later runs (reloads, restarts) override earlier ones
        for a in cfg.get("agents", []):
            agents_cfg[str(a.get("id"))] = a
    series: dict[Key, list[tuple[float, float, float]]] = defaultdict(list)
    for agent, market, ts, value, cash in con.execute(
        "SELECT agent, market, ts, value, cash FROM equity WHERE kind='daily'"
        " ORDER BY agent, market, ts"
    ):
        series[(agent, market)].append((ts, value, cash))
    fills: dict[Key, list[_Fill]] = defaultdict(list)
    for agent, market, ts, trades, w, cost, traded in con.execute(
        "SELECT agent, market, ts, trades_json, weights_json, cost, traded_value FROM fills"
        " ORDER BY agent, market, scheduled_ts"
    ):
        fills[(agent, market)].append(_Fill(ts, json.loads(trades), json.loads(w), cost,
                                            float(traded or 0.0)))
    resolutions: dict[str, list[tuple[float, dict[str, float]]]] = defaultdict(list)
    for market, ts, payouts in con.execute(
        "SELECT market, ts, payouts_json FROM resolutions ORDER BY ts, question_id"
    ):
        resolutions[market].append((ts, {k: float(v) for k, v in json.loads(payouts).items()}))
    questions: dict[str, dict[str, list[str]]] = {}
    for market, state in con.execute("SELECT market, state_json FROM books ORDER BY market"):
        questions[market] = {q: list(m) for q, m in json.loads(state).get("questions", {}).items()}
    question_text = {
        str(q.get("id")): str(q.get("question", ""))
        for q in markets_cfg.get("polymarket", {}).get("questions", [])
    }
    for (payload,) in con.execute(
        "SELECT payload FROM market_events WHERE kind='MarketListed' ORDER BY id"
    ):
        ev = json.loads(payload or "{}")
        if ev.get("question_id") and ev.get("question"):
            question_text.setdefault(str(ev["question_id"]), str(ev["question"]))
    marks: dict[str, set[float]] = defaultdict(set)
    for (_, market), pts in series.items():
        marks[market].update(t for t, _, _ in pts)
    panels = {m: _load_panel(con, m, sorted(ts), resolutions.get(m, []))
              for m, ts in sorted(marks.items())}
    board_cfg = dict(runs[-1].get("leaderboard") or {}) if runs else {}
    return _Store(markets_cfg, agents_cfg, series, fills, _load_outcomes(con), resolutions,
                  questions, question_text, _load_probes(con, hi), panels, board_cfg,
                  llm=_load_llm_calls(con))


def _load_llm_calls(con: sqlite3.Connection) -> dict[Key, list[tuple[float, Any, Any, Any, Any]]]:
    """Return the stored model calls per (agent, market) (empty without the table)."""
    need = {"agent", "market", "scheduled_ts", "tokens_in", "tokens_out", "latency_s",
            "cost_usd"}
    if not need <= set(_table_columns(con, "llm_calls")):
        return {}
    out: dict[Key, list[tuple[float, Any, Any, Any, Any]]] = defaultdict(list)
    for agent, market, ts, tin, tout, lat, cost in con.execute(
        "SELECT agent, market, scheduled_ts, tokens_in, tokens_out, latency_s, cost_usd"
        " FROM llm_calls ORDER BY agent, market, scheduled_ts, id"
    ):
        out[(agent, market)].append((ts, tin, tout, lat, cost))
    return dict(out)


def _model_cost(calls: Sequence[tuple[float, Any, Any, Any, Any]], lo: float, hi: float,
                cumulative: float | None) -> dict[str, Any]:
    """Return the cost of intelligence of the calls scheduled inside the window.

    Tokens and USD are sums over the calls (a call without a known cost adds nothing; the sum
    is ``None`` when no call has one), latency the mean over the calls that report one;
    ``return_per_usd`` is the cumulative return divided by the USD spent (``None`` when
    nothing was spent).
    """
    inside = [c for c in calls if lo <= c[0] <= hi]
    costs = [float(c[4]) for c in inside if c[4] is not None]
    lats = [float(c[3]) for c in inside if c[3] is not None]
    usd = float(sum(costs)) if costs else None
    return {
        "llm_calls": len(inside),
        "llm_tokens_in": int(sum(int(c[1] or 0) for c in inside)),
        "llm_tokens_out": int(sum(int(c[2] or 0) for c in inside)),
        "llm_cost_usd": usd,
        "llm_latency_mean_s": float(np.mean(lats)) if lats else None,
        "return_per_usd": (cumulative / usd if usd and cumulative is not None
                           and math.isfinite(cumulative) else None),
    }


def _load_outcomes(con: sqlite3.Connection) -> dict[Key, dict[str, list[float]]]:
    """Return the scheduled times of every decision per (agent, market) and outcome."""
    out: dict[Key, dict[str, list[float]]] = {}
    for agent, market, outcome, ts in con.execute(
        "SELECT agent, market, outcome, scheduled_ts FROM decisions"
        " ORDER BY agent, market, scheduled_ts"
    ):
        out.setdefault((agent, market), {}).setdefault(outcome, []).append(ts)
    return out


def _load_panel(con: sqlite3.Connection, market: str, marks: list[float],
                resolutions: list[tuple[float, dict[str, float]]]) -> _Panel:
    """Return the last price of every asset at each mark (one grouped scan of market_events)."""
    if not marks:
        return _Panel(np.empty(0), [], np.empty((0, 0)))
    # The last price of each asset before or at each mark: rows are bucketed by the first mark
    # at or after them, so a print after a mark (a closing auction, an after-hours trade) never
    # hides the price the mark used.
    con.execute("CREATE TEMP TABLE IF NOT EXISTS panel_marks(m REAL PRIMARY KEY)")
    try:
        con.executemany("INSERT OR IGNORE INTO panel_marks(m) VALUES(?)", [(m,) for m in marks])
        rows = con.execute(
            "SELECT asset, (SELECT MIN(m) FROM panel_marks WHERE m >= ts) AS upto, MAX(ts), price"
            " FROM market_events WHERE kind='price' AND market=? AND ts <= ? GROUP BY asset, upto",
            (market, marks[-1]),
        ).fetchall()
    finally:
        con.execute("DROP TABLE panel_marks")
        con.commit()
    rows.sort(key=lambda r: (r[2], r[0]))
    assets = sorted({r[0] for r in rows} | {a for _, p in resolutions for a in p})
    col = {a: j for j, a in enumerate(assets)}
    prices = np.full((len(marks), len(assets)), np.nan)
    last = np.full(len(assets), np.nan)
    payout: dict[int, float] = {}  # a resolved token stays at its payout; later ticks ignored
    i = r = 0
    for t, m in enumerate(marks):
        while i < len(rows) and rows[i][2] <= m:
            if rows[i][3] is not None:
                last[col[rows[i][0]]] = rows[i][3]
            i += 1
        while r < len(resolutions) and resolutions[r][0] <= m:
            payout.update({col[a]: x for a, x in resolutions[r][1].items()})
            r += 1
        for j, x in payout.items():
            last[j] = x
        prices[t] = last
    return _Panel(np.asarray(marks, dtype=float), assets, prices,
                  {m: t for t, m in enumerate(marks)})


def _load_probes(con: sqlite3.Connection, hi: float) -> dict[Key, dict[str, Any]]:
    """Return the latest probe result (ts <= ``hi``) per (agent, market or '')."""
    cols = _table_columns(con, "probes")
    need = {"agent", "ts", "repeats", "mean_l1", "std_l1"}
    if not need <= set(cols):
        return {}
    market = "market" if "market" in cols else "''"
    out: dict[Key, dict[str, Any]] = {}
    for agent, mkt, ts, repeats, mean_l1, std_l1 in con.execute(
        f"SELECT agent, {market}, ts, repeats, mean_l1, std_l1 FROM probes WHERE ts <= ?"
        " ORDER BY agent, ts",
        (min(hi, 1e18),),
    ):
        out[(agent, mkt or "")] = {"ts": ts, "repeats": repeats, "mean_l1": mean_l1,
                                   "std_l1": std_l1}
    return out


# ----------------------------------------------------------------------------- per agent


def _holdings(store: _Store, key: Key, ts: Sequence[float], assets: Sequence[str]
              ) -> np.ndarray:
    """Return units held at each mark in ``ts`` (fills with ts <= mark, resolutions applied)."""
    col = {a: j for j, a in enumerate(assets)}
    events: list[tuple[float, int, int]] = [(f.ts, 0, n) for n, f in
                                            enumerate(store.fills.get(key, []))]
    events += [(t, 1, n) for n, (t, _) in enumerate(store.resolutions.get(key[1], []))]
    events.sort()
    q = np.zeros(len(assets))
    out = np.zeros((len(ts), len(assets)))
    e = 0
    for row, m in enumerate(ts):
        while e < len(events) and events[e][0] <= m:
            _, kind, n = events[e]
            if kind == 0:
                for a, d in store.fills[key][n].trades.items():
                    if a in col:
                        q[col[a]] += float(d)
            else:
                for a in store.resolutions[key[1]][n][1]:
                    if a in col:
                        q[col[a]] = 0.0
            e += 1
        out[row] = q
    return out


def _rolling_k(h: np.ndarray, p: np.ndarray) -> dict[str, Any]:
    """Return CR^(0), CR^(k) and both Delta_k variants for every k of ROLLING_KS."""
    if h.shape[0] < 2:
        nan_k = {str(k): _NAN for k in ROLLING_KS}
        return {"cr0": _NAN, "cr": nan_k, "delta": dict(nan_k),
                "delta_same_window": dict(nan_k)}
    return {
        "cr0": rolling_k_return(h, p, 0),
        "cr": {str(k): rolling_k_return(h, p, k) for k in ROLLING_KS},
        "delta": {str(k): rolling_k_delta(h, p, k) for k in ROLLING_KS},
        "delta_same_window": {str(k): rolling_k_delta(h, p, k, same_window=True)
                              for k in ROLLING_KS},
    }


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


def _capitalbench(values: Sequence[float], assets: Sequence[str], prices: np.ndarray
                  ) -> tuple[float, float]:
    """Score the realised window return the way capitalbench_score scores ``sum(w r)``.

    The window runs from the first mark with a price in the market to the last mark; the
    portfolio return is the agent's value ratio over it, the universe every asset priced at both
    ends plus CASH (return 0).
    """
    i = _first_priced(prices)
    if i < 0 or len(values) - i < 2 or values[i] <= 0:
        return _NAN, _NAN
    pr = values[-1] / values[i] - 1.0
    rets = _window_asset_returns(assets, prices[i], prices[-1])
    _, best = capitalbench_score({}, rets)  # empty weights: regret = best - 0 = best
    return (100.0 * pr / best if best > 0 else _NAN), best - pr


def _diversification(h: np.ndarray, pz: np.ndarray, classes: Mapping[str, str],
                     assets: list[str], returns: np.ndarray) -> dict[str, float]:
    """Return the mean over marks of s_intra / s_inter / s_corr of the portfolio held.

    ``h`` and ``pz`` are the units and prices panels (CASH last); correlations come from the
    window's mark-to-mark asset returns ``returns``.
    """
    panel = np.column_stack([returns, np.zeros(returns.shape[0])])
    names = [*assets, CASH]
    cls = {**{a: classes.get(a, a) for a in assets}, CASH: "cash"}
    acc: dict[str, list[float]] = {"s_intra": [], "s_inter": [], "s_corr": []}
    if panel.shape[0] < 2:
        return {k: _NAN for k in acc}
    corr = class_correlations(panel, names, cls)  # the whole class's, once for the window
    held = h * pz
    for row in held:
        v = float(row.sum())
        if not v > 0:
            continue
        w = {names[j]: float(x / v) for j, x in enumerate(row) if x / v > _HELD_EPS}
        for k, x in diversification(w, corr).items():
            if math.isfinite(x):
                acc[k].append(x)
    return {k: float(np.mean(v)) if v else _NAN for k, v in acc.items()}


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


def _ci(r: np.ndarray, stat: Callable[[np.ndarray], float]) -> list[float]:
    """Return the seeded bootstrap interval of ``stat`` over the daily returns."""
    lo, hi = bootstrap_ci(r, stat, n_boot=BOOTSTRAP_N, level=BOOTSTRAP_LEVEL, seed=BOOTSTRAP_SEED)
    return [lo, hi]


def _by_regime(r: np.ndarray, labels: Sequence[str]) -> dict[str, dict[str, float | int]]:
    """Group daily returns by regime label: days and mean per label."""
    groups: dict[str, list[float]] = defaultdict(list)
    for x, lab in zip(r.tolist(), labels, strict=True):
        if math.isfinite(x):
            groups[lab].append(x)
    return {lab: {"days": len(xs), "mean_daily_return": float(np.mean(xs))}
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


def _label_at(marks: np.ndarray, labels: Sequence[str], ts: float) -> str:
    """Return the label of the latest equity mark at or before ``ts``."""
    i = int(np.searchsorted(marks, ts, side="right")) - 1
    return labels[i] if i >= 0 else REGIME_UNKNOWN


# ----------------------------------------------------------------------------- the board


def load_report(db_path: str | Path, *, window: tuple[float | None, float | None] = (None, None),
                min_valid_rate: float | None = None, min_days: int | None = None) -> Report:
    """Compute the leaderboard and the chart series of the database at ``db_path`` (read-only).

    ``min_valid_rate`` / ``min_days`` override the ``[leaderboard]`` settings of the store's
    latest run (defaults :data:`MIN_VALID_RATE`, :data:`MIN_DAYS`).
    """
    from daemon.store_read import open_for_reading  # a file read-only, or a shared store's snapshot

    con = open_for_reading(db_path)
    try:
        return _report(con, window, min_valid_rate, min_days)
    finally:
        con.close()


def leaderboard(db_path: str | Path, *, window: tuple[float | None, float | None] = (None, None),
                min_valid_rate: float | None = None, min_days: int | None = None
                ) -> dict[str, Any]:
    """Compute the leaderboard of the database at ``db_path`` (read-only)."""
    return load_report(db_path, window=window, min_valid_rate=min_valid_rate,
                       min_days=min_days).board


def _report(con: sqlite3.Connection, window: tuple[float | None, float | None],
            min_valid_rate: float | None = None, min_days: int | None = None) -> Report:
    """Build the board and the chart series for ``window``."""
    lo = -math.inf if window[0] is None else window[0]
    hi = math.inf if window[1] is None else window[1]
    store = _load_store(con, hi)
    if min_valid_rate is None:
        min_valid_rate = float(store.board_cfg.get("min_valid_rate", MIN_VALID_RATE))
    if min_days is None:
        min_days = int(store.board_cfg.get("min_days", MIN_DAYS))
    cfg = store.markets_cfg
    rf = {"equity": float(cfg.get("equity", {}).get("risk_free_rate", 0.0)), "polymarket": 0.0}
    initial = {m: float(cfg.get(m, {}).get("initial_cash", 0.0)) for m in rf}
    classes = _asset_classes(store)
    store.bench = {m: _benchmarks(store, m) for m in store.panels}
    eq_marks, eq_labels, eq_index = _regime_by_mark(store)
    rows: list[dict[str, Any]] = []
    curves: dict[Key, AgentCurves] = {}
    for key in sorted(set(store.series) | set(store.outcomes)):
        if not (any(lo <= p[0] <= hi for p in store.series.get(key, []))
                or any(lo <= t <= hi for ts in store.outcomes.get(key, {}).values() for t in ts)):
            continue
        row, curve = _row(store, key, lo, hi, window[0] is None, rf, initial, classes,
                          (eq_marks, eq_labels))
        _standing(row, min_valid_rate, min_days)
        rows.append(row)
        if curve is not None:
            curves[key] = curve
    markets = {m: _market_summary(store, m, lo, hi) for m in sorted({r["market"] for r in rows})}
    _rank(rows)
    _compare(rows, curves, store.agents_cfg)
    regime = _window_regime(eq_marks, eq_index, eq_labels, lo, hi)
    board = _clean({
        "conventions": _conventions(rf, min_valid_rate, min_days,
                                    {m: _periods(cfg, m) for m in markets},
                                    {m: store.bench.get(m, {}) for m in markets}),
        "window": {"start": window[0], "end": window[1]},
        "window_dates": _window_dates(store, lo, hi),
        "regime": regime,
        "markets": markets,
        "rows": rows,
        "series": _series(curves),
        **board_extras(con, rows, store.agents_cfg),  # issue 13: run groups, PortBench
    })
    from scoring.capitalbench_scores import capitalbench_section  # hook: CapitalBench rounds

    capital = capitalbench_section(con)
    if capital is not None:
        board["capitalbench"] = _clean(capital)
    return Report(board, curves, _labels(store))


def _asset_classes(store: _Store) -> dict[str, dict[str, str]]:
    """Return asset -> class per market (config sectors; one class per question)."""
    eq = store.markets_cfg.get("equity", {}).get("asset_classes")
    if eq is None:
        from daemon.config import DEFAULT_ASSET_CLASSES

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
    pts = [p for p in store.series.get(key, []) if lo <= p[0] <= hi]
    fills = [f for f in store.fills.get(key, []) if lo <= f.ts <= hi]
    weights = [f.weights for f in fills]
    n = _periods(store.markets_cfg, market)
    start_value = initial.get(market) or (pts[0][1] if pts else 0.0)
    values = [start_value] + [v for _, v, _ in pts] if from_start else [v for _, v, _ in pts]
    first_fill = store.fills[key][0] if store.fills.get(key) else None
    traded = [f.traded_value for f in fills if f is not first_fill]  # building it: not counted
    summary = summarise(values, n, rf.get(market, 0.0), weights, traded).to_dict()
    r = simple_returns(values)
    agent_cfg = store.agents_cfg.get(agent, {})
    mark_ts = [t for t, _, _ in pts]
    panel = store.panels.get(market)
    figures: dict[str, Any] = {}
    if panel is not None and mark_ts:
        prices = panel.rows(mark_ts)
        q = _holdings(store, key, mark_ts, panel.assets)
        cash = np.array([c for _, _, c in pts])[:, None]
        h = np.hstack([q, cash])
        pz = np.hstack([np.nan_to_num(prices, nan=0.0), np.ones((len(mark_ts), 1))])
        figures["rolling_k"] = _rolling_k(h, pz)
        score, regret = _capitalbench([v for _, v, _ in pts], panel.assets, prices)
        figures |= {"capitalbench_score": score, "regret": regret}
        figures |= _diversification(h, pz, classes.get(market, {}), panel.assets,
                                    _asset_returns(prices))
        if market == "polymarket":
            figures |= _brier(store, market, mark_ts, h * pz, [*panel.assets, CASH], hi)
    else:
        figures["rolling_k"] = _rolling_k(np.empty((0, 1)), np.empty((0, 1)))
        figures |= {"capitalbench_score": _NAN, "regret": _NAN, "s_intra": _NAN,
                    "s_inter": _NAN, "s_corr": _NAN}
    var95 = historical_var(r, VAR_LEVEL, VAR_WINDOW, min_periods=VAR_MIN_PERIODS)
    mdd = summary["max_drawdown"]
    dd = drawdown_series(values)
    ends = mark_ts[-len(r):] if len(r) else []
    labels = [_label_at(regime[0], regime[1], t) for t in ends]
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
        "mean_daily_return": float(np.mean(r)) if r.size else None,
        "cumulative_return_ci": _ci(r, lambda x: float(np.prod(1.0 + x) - 1.0)),
        "mean_daily_return_ci": _ci(r, lambda x: float(np.mean(x))),
        "sharpe_ci": _ci(r, lambda x: sharpe(x, n, rf.get(market, 0.0))),
        **figures,
        "var_95": var95,
        **_profile(agent_cfg, mdd if mdd is not None else _NAN, var95),
        "by_regime": _by_regime(r, labels),
        "consistency": consistency,
        "brier": figures.pop("brier", None),
        "brier_questions": figures.pop("brier_questions", 0 if market == "polymarket" else None),
        **_model_cost(store.llm.get(key, []), lo, hi, summary["cumulative_return"]),
        "relative": _relative(r, ends, store.bench.get(market, {}), n),
    }
    curve = None
    if pts:
        first = min([pts[0][0]] + [f.ts for f in fills[:1]])
        ts = ([first] if from_start else []) + mark_ts
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


def _share(x: float) -> str:
    """Format a share as a percentage without a misleading round-up (79.5%, not 80%)."""
    return f"{100 * x:.1f}".rstrip("0").rstrip(".") + "%"


def _standing(row: dict[str, Any], min_rate: float, min_days: int) -> None:
    """Set ``provisional`` and ``provisional_reason`` of a row from its rate and days."""
    reasons = []
    rate = row["valid_decision_rate"]
    if rate is None:
        reasons.append("no decision was asked of the agent in the window")
    elif rate < min_rate - 1e-12:
        reasons.append(f"valid-decision rate {_share(rate)} ({row['valid_decisions']}/"
                       f"{row['counted_decisions']}) below {_share(min_rate)}")
    if row["days"] < min_days:
        days = row["days"]
        reasons.append(f"{days} scored day{'' if days == 1 else 's'}, fewer than {min_days}")
    row["provisional"] = bool(reasons)
    row["provisional_reason"] = "; ".join(reasons) if reasons else None


def _rank(rows: list[dict[str, Any]]) -> None:
    """Rank the non-provisional rows by cumulative return, flag insignificant gaps, add the
    composite score and rank; provisional rows get neither and sort last in their market."""
    for market in sorted({r["market"] for r in rows}):
        mine = [r for r in rows if r["market"] == market and not r["provisional"]]
        for r in rows:
            if r["market"] == market and r["provisional"]:
                r |= {"rank": None, "tied_with_next": False, "composite_score": None,
                      "composite_rank": None}
        if not mine:
            continue
        ranked = sorted(mine, key=lambda r: (
            -(r["cumulative_return"] if _finite(r["cumulative_return"]) else -math.inf),
            r["agent"]))
        for i, r in enumerate(ranked):
            r["rank"] = i + 1
            r["tied_with_next"] = False  # set by _compare (paired bootstrap with the next)

        def num(x: float | None) -> float:
            return x if x is not None else _NAN

        comp = composite_rank({r["agent"]: num(r["cumulative_return"]) for r in mine},
                              {r["agent"]: num(r["max_drawdown"]) for r in mine},
                              {r["agent"]: num(r["sortino_stockbench"]) for r in mine})
        order = sorted(mine, key=lambda r: (
            -comp[r["agent"]] if math.isfinite(comp[r["agent"]]) else math.inf, r["agent"]))
        for i, r in enumerate(order):
            r["composite_score"] = comp[r["agent"]]
            r["composite_rank"] = i + 1 if math.isfinite(comp[r["agent"]]) else None
    rows.sort(key=lambda r: (r["market"], r["provisional"], r["rank"] or 0, r["agent"]))


def _daily_returns(curve: AgentCurves | None) -> dict[float, float]:
    """Return the curve's daily returns keyed by the mark each one ends at."""
    if curve is None:
        return {}
    r = simple_returns(curve.values)
    return dict(zip(curve.ts[1:], r.tolist(), strict=True))


def _paired(a: Mapping[float, float], b: Mapping[float, float], other: str) -> dict[str, Any]:
    """Return the paired-bootstrap comparison of two agents' cumulative returns."""
    days = sorted(set(a) & set(b))
    lo, hi, p = paired_bootstrap([a[d] for d in days], [b[d] for d in days],
                                 lambda x: np.prod(1.0 + x, axis=1) - 1.0, BOOTSTRAP_N,
                                 BOOTSTRAP_LEVEL, BOOTSTRAP_SEED, vectorised=True)
    return {"agent": other, "days": len(days), "difference_ci": [lo, hi], "p_value": p,
            "provisional": len(days) < MIN_PAIRED_DAYS}


def _significant(vs: Mapping[str, Any]) -> bool:
    """Tell whether a comparison claims a difference: long enough, interval excluding 0."""
    lo, hi = vs["difference_ci"]
    return (not vs["provisional"] and math.isfinite(lo) and math.isfinite(hi)
            and (lo > 0.0 or hi < 0.0))


def _compare(rows: list[dict[str, Any]], curves: Mapping[Key, AgentCurves],
             agents_cfg: Mapping[str, Mapping[str, Any]]) -> None:
    """Set ``vs_next``, ``tied_with_next`` and ``vs_baselines`` from paired bootstraps."""
    rets = {(r["agent"], r["market"]): _daily_returns(curves.get((r["agent"], r["market"])))
            for r in rows}
    for market in sorted({r["market"] for r in rows}):
        mine = [r for r in rows if r["market"] == market]
        ranked = sorted((r for r in mine if r.get("rank") is not None), key=lambda r: r["rank"])
        for r in mine:
            r["vs_next"] = None
        for r, nxt in pairwise(ranked):
            r["vs_next"] = _paired(rets[(r["agent"], market)], rets[(nxt["agent"], market)],
                                   nxt["agent"])
            r["tied_with_next"] = not _significant(r["vs_next"])
        baselines = [r["agent"] for r in mine
                     if (agents_cfg.get(r["agent"]) or {}).get("kind") in BASELINE_KINDS]
        for r in mine:
            r["vs_baselines"] = {b: _paired(rets[(r["agent"], market)], rets[(b, market)], b)
                                 for b in baselines if b != r["agent"]}


def _brier(store: _Store, market: str, mark_ts: Sequence[float], held: np.ndarray,
           assets: Sequence[str], hi: float) -> dict[str, Any]:
    """Return the Brier score of the agent's implied probabilities over resolved questions.

    For every question resolved at or before ``hi`` with an agent mark before its resolution,
    the forecast is the position at the last such mark: ``p(YES) = (1 + w_YES - w_NO) / 2``
    with ``w`` the token's share of the portfolio value (no position: 0.5, no view). The
    outcome is the YES token's payout. Brier = mean of ``(p - outcome)^2``.
    """
    col = {a: j for j, a in enumerate(assets)}
    errors: list[float] = []
    members = store.questions.get(market, {})
    for ts, payouts in store.resolutions.get(market, []):
        if ts > hi:
            continue
        i = int(np.searchsorted(np.asarray(mark_ts), ts, side="left")) - 1
        if i < 0:
            continue
        row = held[i]
        value = float(row.sum())
        if not value > 0:
            continue
        for tokens in members.values():
            if len(tokens) < 2 or tokens[0] not in payouts:
                continue
            yes, no = tokens[0], tokens[1]
            w_yes = float(row[col[yes]]) / value if yes in col else 0.0
            w_no = float(row[col[no]]) / value if no in col else 0.0
            p = min(1.0, max(0.0, (1.0 + w_yes - w_no) / 2.0))
            errors.append((p - float(payouts[yes])) ** 2)
    return {"brier": float(np.mean(errors)) if errors else None,
            "brier_questions": len(errors)}


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
              n: int) -> dict[str, dict[str, Any]]:
    """Return the agent's figures relative to each benchmark over the days both have."""
    out: dict[str, dict[str, Any]] = {}
    for name, series in bench.items():
        days = [(x, series[t]) for x, t in zip(r.tolist(), ends, strict=True) if t in series]
        fig: dict[str, Any] = relative_figures([a for a, _ in days], [b for _, b in days], n)
        fig["days"] = len(days)
        out[name] = fig
    return out


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


def _conventions(rf: Mapping[str, float], min_rate: float, min_days: int,
                 periods: Mapping[str, int],
                 bench: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Return the conventions block of the JSON output."""
    return {
        "valid_decisions": {
            "valid": list(VALID_OUTCOMES), "not_counted": list(NOT_ASKED_OUTCOMES),
            "rate": "valid / (decisions in the window minus the not_counted ones); null when "
                    "no decision was asked"},
        "provisional": {
            "min_valid_rate": min_rate, "min_days": min_days,
            "rule": "an agent under min_valid_rate (or with no asked decision) or with fewer "
                    "than min_days scored days is listed below the ranked agents of its market "
                    "without rank, tied_with_next or composite score"},
        "returns": "daily simple returns from daily marks",
        "min_days_annualised": MIN_ANNUALISED_DAYS,
        "annualised_flag": "true when a row has fewer than min_days_annualised daily returns: "
                           "its annualised figures (annualised return, volatility, Sharpe, "
                           "Sortino, Calmar) extrapolate a short sample; the table marks them *",
        "periods_per_year": dict(periods),
        "ddof": 1,
        "risk_free_rate": dict(rf),
        "bootstrap": {"n": BOOTSTRAP_N, "level": BOOTSTRAP_LEVEL, "seed": BOOTSTRAP_SEED,
                      "over": "daily returns, i.i.d. resampling"},
        "rank": "by cumulative_return among the non-provisional agents; tied_with_next unless "
                "the paired bootstrap of the difference with the next agent (vs_next) is "
                "significant",
        "relative": {
            "benchmarks": {m: sorted(store_bench, key=lambda b: b != "equal_weight")
                           for m, store_bench in sorted(bench.items())},
            "figures": "excess_return = prod(1 + r) - prod(1 + b) over the days both have; "
                       "beta = cov(r, b) / var(b); tracking_error = std(r - b) * sqrt(N); "
                       "information_ratio = mean(r - b) / std(r - b) * sqrt(N); ddof 1",
            "equal_weight": "mean mark-to-mark return of the market's assets priced at both "
                            "marks, rebalanced daily"},
        "brier": "Polymarket only: mean over the questions resolved in the window of "
                 "(p - outcome)^2, p(YES) = (1 + w_YES - w_NO) / 2 from the portfolio weights "
                 "held at the agent's last mark before the resolution (no position: 0.5), "
                 "outcome = the YES token's payout",
        "significance": {
            "method": "paired bootstrap of the difference of cumulative returns over the "
                      "days both agents have, with the shared seeded i.i.d. resamples of "
                      "bootstrap (n, level, seed); 95% percentile interval and two-sided "
                      "p-value min(1, 2 min(P(d<=0), P(d>=0)))",
            "min_days": MIN_PAIRED_DAYS,
            "rule": "a comparison with fewer than min_days common daily returns is provisional "
                    "and claims nothing; otherwise significant when its interval excludes 0",
            "baselines": list(BASELINE_KINDS)},
        "sortino": {
            "headline": "standard: (mean(r) - rf) / sqrt(mean over all days of min(r - rf, 0)^2)"
                        " * sqrt(N), rf = rf_annual / N (AlphaForgeBench, reference libraries)",
            "sortino_stockbench": "StockBench Eq. 3: downside over the negative days only, "
                                  "target 0; used by the composite"},
        "turnover": "mean_turnover: executed, sum of the traded value of the window's fills "
                    "(the agent's first fill, building the portfolio from cash, left out) / "
                    "mean equity of the series / daily returns; target_turnover: mean "
                    "sum |w_new - w_old| between the consecutive target allocations of the "
                    "window's fills",
        "composite": "StockBench Eq. 4 (z(CR) + z(-MDD) + z(sortino_stockbench)) / 3 across the "
                     "market's non-provisional agents, ddof=0; NaN (rank null) when an input is "
                     "undefined",
        "rolling_k": "LiveTradeBench Eq. 6 on mark-to-mark steps: units from cumulated fills, "
                     "cash from the mark, last price at or before the mark; fee-free",
        "capitalbench": "100 * window return / best window return among the market's assets "
                        "and CASH; regret = best - window return; over the window's marks",
        "diversification": "PortBench s_intra/s_inter/s_corr of the weights held at each mark "
                           "with the whole class's correlations of mark-to-mark asset returns "
                           "over the window; one held class: s_inter 0; all-cash marks not "
                           "scored; mean over marks; CASH is its own class; Polymarket: one "
                           "class per question",
        "var": {"level": VAR_LEVEL, "window": VAR_WINDOW, "min_periods": VAR_MIN_PERIODS},
        "regime": {"index": "equal-weight mean of the equity universe's mark-to-mark returns",
                   "window": REGIME_WINDOW, "min_returns": REGIME_MIN_RETURNS},
    }


# ----------------------------------------------------------------------------- output


def live_figures(db_path: str | Path) -> dict[Key, dict[str, float]]:
    """Return the finite numeric figures of every (agent, market) over the whole store.

    Keys of each inner dict are a subset of :data:`LIVE_FIELDS`; undefined figures are left out.
    Interval ends are flattened to ``<name>_ci_low`` / ``<name>_ci_high``, rolling-k deltas to
    ``rolling_k_delta_<k>`` and the probe result to ``consistency_mean_l1`` / ``_std_l1``.
    """
    board = leaderboard(db_path)
    out: dict[Key, dict[str, float]] = {}
    for r in board["rows"]:
        flat: dict[str, Any] = {k: r.get(k) for k in LIVE_FIELDS}
        for name in ("sharpe", "mean_daily_return"):
            ci = r.get(f"{name}_ci") or [None, None]
            flat[f"{name}_ci_low"], flat[f"{name}_ci_high"] = ci
        rk = r.get("rolling_k") or {}
        flat["rolling_k_cr0"] = rk.get("cr0")
        for k in ROLLING_KS:
            flat[f"rolling_k_delta_{k}"] = (rk.get("delta") or {}).get(str(k))
        probe = r.get("consistency") or {}
        flat["consistency_mean_l1"] = probe.get("mean_l1")
        flat["consistency_std_l1"] = probe.get("std_l1")
        flat["provisional"] = 1.0 if r.get("provisional") else 0.0
        flat["vs_next_p_value"] = (r.get("vs_next") or {}).get("p_value")
        ew = (r.get("relative") or {}).get("equal_weight") or {}
        for name in ("excess_return", "beta", "tracking_error", "information_ratio"):
            flat[f"{name}_ew"] = ew.get(name)
        out[(r["agent"], r["market"])] = {
            k: float(v) for k, v in flat.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
    return out


def to_json(board: dict[str, Any]) -> str:
    """Serialise the leaderboard deterministically."""
    return json.dumps(board, sort_keys=True, indent=2, allow_nan=False) + "\n"


def _neg(x: float | None) -> float | None:
    """Return a drawdown magnitude as the negative figure the reports print (0 stays 0)."""
    return None if x is None else (-x if x else 0.0)


def _header(conv: Mapping[str, Any]) -> str:
    """Return the table's first line: the annualisation and risk-free rate of each market."""
    periods = conv.get("periods_per_year") or {}
    rf = conv.get("risk_free_rate") or {}
    ann = ", ".join(f"{m} {n}" for m, n in sorted(periods.items())) or "-"
    rates = ", ".join(f"{m} {100 * rf.get(m, 0.0):.2f}%" for m in sorted(periods)) or "-"
    return (f"annualisation (periods a year): {ann}; risk-free rate a year: {rates}; "
            "daily simple returns from the daily marks")


def to_table(board: dict[str, Any]) -> str:
    """Render the leaderboard as two fixed-width text tables (performance, benchmarks)."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:+.2f}%"

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    def ci(x: Sequence[float | None] | None, fmt: Callable[[float | None], str]) -> str:
        return "-" if not x or None in x else f"[{fmt(x[0])},{fmt(x[1])}]"

    def rank(r: Mapping[str, Any]) -> str:
        if r.get("rank") is None:
            return "-"
        return f"{r['rank']}{'~' if r.get('tied_with_next') else ''}"

    def share(x: float | None) -> str:
        return "-" if x is None else _share(x)

    def flag(text: str, r: Mapping[str, Any]) -> str:
        return f"{text}*" if r.get("annualised_flag") and text != "-" else text

    def usd(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    head = (f"{'market':<11}{'#':>4}  {'agent':<20}{'return':>10}{'sharpe':>8}{'sortino':>9}"
            f"{'max dd':>9}{'vol':>9}{'win':>8}{'turnover':>9}{'days':>6}{'valid':>7}"
            "  decisions")
    conv = board.get("conventions") or {}
    dates = board.get("window_dates") or {}
    span = (f"window: {dates['first_date']} to {dates['last_date']} (first and last daily "
            "mark, UTC)" if dates.get("first_date") else "window: no daily mark")
    lines = [_header(conv), span, "", head, "-" * len(head)]
    for r in board["rows"]:
        dec = ",".join(f"{k}={v}" for k, v in sorted(r["decisions"].items()))
        lines.append(
            f"{r['market']:<11}{rank(r):>4}  {r['agent'][:19]:<20}"
            f"{pct(r['cumulative_return']):>10}"
            f"{flag(num(r['sharpe']), r):>8}{flag(num(r['sortino']), r):>9}"
            f"{pct(_neg(r['max_drawdown'])):>9}{flag(pct(r['volatility']), r):>9}"
            f"{pct(r['win_rate']):>8}{share(r['mean_turnover']):>9}"
            f"{r['days']:>6}{share(r.get('valid_decision_rate')):>7}  {dec}"
        )
    head2 = (f"{'market':<11}{'#':>4}  {'agent':<20}{'return 95% CI':>20}{'sharpe 95% CI':>18}"
             f"{'comp':>7}{'capb':>8}{'s_corr':>8}{'VaR95':>9}{'align':>7}{'d1':>9}"
             f"{'consist':>9}{'model $':>10}{'ret/$':>9}")
    lines += ["", head2, "-" * len(head2)]
    for r in board["rows"]:
        probe = r.get("consistency") or {}
        d1 = ((r.get("rolling_k") or {}).get("delta") or {}).get("1")
        lines.append(
            f"{r['market']:<11}{rank(r):>4}  {r['agent'][:19]:<20}"
            f"{ci(r.get('cumulative_return_ci'), pct):>20}{ci(r.get('sharpe_ci'), num):>18}"
            f"{num(r.get('composite_score')):>7}{num(r.get('capitalbench_score')):>8}"
            f"{num(r.get('s_corr')):>8}{pct(r.get('var_95')):>9}"
            f"{num(r.get('profile_alignment')):>7}{pct(d1):>9}"
            f"{num(probe.get('mean_l1')):>9}{usd(r.get('llm_cost_usd')):>10}"
            f"{num(r.get('return_per_usd')):>9}"
        )
    provisional = [r for r in board["rows"] if r.get("provisional")]
    if provisional:
        lines += ["", "provisional (not ranked):"]
        lines += [f"  {r['agent']} ({r['market']}): {r.get('provisional_reason')}"
                  for r in provisional]
    reg = board.get("regime") or {}
    lines += ["", f"* annualised figures over fewer than {MIN_ANNUALISED_DAYS} daily returns "
                  "(a short sample extrapolated to a year)"]
    width = max(len(k) for k, _ in LEGEND)
    lines += ["", "columns:"] + [f"  {k:<{width}}  {v}" for k, v in LEGEND]
    lines += ["", f"regime: {reg.get('label', REGIME_UNKNOWN)} (equal-weight index "
                  f"{pct(reg.get('index_return'))} over {reg.get('index_days', 0)} days); "
                  "'~' after a rank: not significantly ahead of the next (paired bootstrap); "
                  "valid: share of valid decisions (ok or hold) among the rounds asked"]
    if board.get("capitalbench"):  # hook: CapitalBench rounds (scoring/capitalbench_scores.py)
        from scoring.capitalbench_scores import to_text

        lines.append(to_text(board["capitalbench"]).rstrip("\n"))
    return "\n".join(lines) + "\n" + extras_text(board)
