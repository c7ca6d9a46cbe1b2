"""Render the leaderboard: the deterministic JSON, its conventions block and the text table."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from scoring.board.extras import extras_text
from scoring.board.figures import (
    BOOTSTRAP_LEVEL,
    BOOTSTRAP_N,
    BOOTSTRAP_SEED,
    MIN_ANNUALISED_DAYS,
    NOT_ASKED_OUTCOMES,
    REGIME_MIN_RETURNS,
    REGIME_UNKNOWN,
    REGIME_WINDOW,
    VALID_OUTCOMES,
    VAR_LEVEL,
    VAR_MIN_PERIODS,
    VAR_WINDOW,
)
from scoring.board.rank import BASELINE_KINDS, MIN_PAIRED_DAYS, _share

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
    if board.get("capitalbench"):  # hook: CapitalBench rounds (agents/capitalbench/scores.py)
        from agents.capitalbench.scores import to_text

        lines.append(to_text(board["capitalbench"]).rstrip("\n"))
    return "\n".join(lines) + "\n" + extras_text(board)
