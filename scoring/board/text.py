"""Render the leaderboard: the deterministic JSON, its conventions block and the text table."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from scoring.board.extras import extras_text
from scoring.board.figures import (
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
from scoring.board.json_text import dumps_indented
from scoring.board.rank import _share
from scoring.board.significance import (
    BASELINE_KINDS,
    BOOTSTRAP_LEVEL,
    BOOTSTRAP_N,
    BOOTSTRAP_SEED,
    MCS_SIZE,
    MIN_PAIRED_DAYS,
    MIN_TRL_LEVEL,
    SIGNIFICANCE,
    TOP_K,
)
from scoring.board.significance_html import holm_floor_note

#: Every column of the text table (and its HTML twin), explained once: the legend of the table,
#: the HTML report and docs/scoring.md. Signs only where a figure can be either (returns):
#: drawdowns (a loss), volatility and win rate print unsigned, as on the page and in status.
LEGEND: tuple[tuple[str, str], ...] = (
    ("#", "rank by cumulative excess return (over the risk-free rate) among the market's "
          "non-provisional agents; '~' after it: not significantly ahead of the next (paired "
          "stationary block bootstrap, Holm-adjusted p >= 0.05 over the market's comparisons, "
          "or fewer than 20 common days); '-': provisional, not ranked"),
    ("return", "cumulative return over the window, v_T / v_0 - 1"),
    ("sharpe", "annualised Sharpe ratio of the daily returns, (mean - rf) / std * sqrt(N)"),
    ("sortino", "annualised standard Sortino ratio: downside deviation over all days below rf"),
    ("max dd", "maximum drawdown from a peak (a loss, unsigned)"),
    ("vol", "annualised volatility of the daily returns, std * sqrt(N)"),
    ("win", "share of daily returns above zero"),
    ("turnover", "executed turnover per day, in % of equity: traded value / mean equity / "
                 "days (first fill left out)"),
    ("days", "daily marks in the window"),
    ("valid", "valid-decision rate: ok or hold among the rounds the agent was asked"),
    ("decisions", "decision outcomes in the window"),
    ("return 95% CI", "95% percentile interval of the cumulative return (stationary block "
                      "bootstrap, 10,000 draws)"),
    ("sharpe 95% CI", "95% percentile interval of the Sharpe ratio (same draws)"),
    ("PSR", "Probabilistic Sharpe Ratio: P(true Sharpe > 0) given skewness and kurtosis"),
    ("DSR", "Deflated Sharpe Ratio: PSR against the best Sharpe expected from as many "
            "unskilled agents as the market has"),
    ("minTRL", "minimum track record length in days for Sharpe > 0 at 95%; '!' after it: "
               "the agent has fewer days (not yet distinguishable)"),
    ("#1", "share of resamples in which the agent is ranked first (rank stability)"),
    ("top3", "share of resamples in which the agent is among the first three"),
    ("MCS", "'in': inside the market's 90% Model Confidence Set (not distinguishable from "
            "the best)"),
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
    ("cost %", "model cost as a share of the initial capital"),
    ("net", "cumulative return net of the model cost (return - cost %)"),
)


def _clean(x: Any) -> Any:
    """Round floats to 12 significant digits and map non-finite values to None."""
    t = type(x)
    if t is float:
        return float(f"{x:.12g}") if _finite(x) else None
    if t is dict:  # the common types inline, one call per container (issue 27, point 1)
        out = {}
        for k, v in x.items():
            tv = type(v)
            if tv is float:
                out[k] = float(f"{v:.12g}") if _finite(v) else None
            elif tv is str or tv is int or tv is bool or v is None:
                out[k] = v
            else:
                out[k] = _clean(v)
        return out
    if t is list or t is tuple:
        return [(float(f"{v:.12g}") if _finite(v) else None) if type(v) is float else
                v if type(v) in _PLAIN else _clean(v) for v in x]
    return _clean_any(x)


_MISSING = object()


def _clean_points(points: Mapping[Any, Any]) -> dict[Any, Any]:
    """Return :func:`_clean` of a market's chart series (``{agent: [[ts, value], ...]}``).

    The same values, faster: a point of two floats is cleaned in place of the recursion, each
    distinct time once (the agents share their marks; ``0.0`` and ``-0.0`` not remembered, as
    they compare equal but clean to different values); anything else by :func:`_clean`.
    """
    seen: dict[float, float | None] = {}
    out = {}
    for agent, pts in points.items():
        if type(pts) is not list:
            out[agent] = _clean(pts)
            continue
        rows: list[Any] = []
        for pt in pts:
            if type(pt) is list and len(pt) == 2:
                t, v = pt
                if type(t) is float and type(v) is float:
                    ct = seen.get(t, _MISSING)
                    if ct is _MISSING:
                        ct = float(f"{t:.12g}") if _finite(t) else None
                        if t != 0.0:
                            seen[t] = ct
                    rows.append([ct, float(f"{v:.12g}") if _finite(v) else None])
                    continue
            rows.append(_clean(pt))
        out[agent] = rows
    return out


def _clean_any(x: Any) -> Any:
    """Return :func:`_clean` of any value (subclasses and numpy scalars included)."""
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


_finite = math.isfinite
_PLAIN = frozenset((str, int, bool, type(None)))


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
        "risk_free": "CASH accrues risk_free_rate / periods_per_year at every daily mark; "
                     "Sharpe, Sortino, ranks and every test use the excess returns "
                     "r - risk_free_rate / periods_per_year",
        "bootstrap": {"n": BOOTSTRAP_N, "level": BOOTSTRAP_LEVEL, "seed": BOOTSTRAP_SEED,
                      "over": "daily excess returns, stationary block bootstrap (Politis-"
                              "Romano; arch.bootstrap.StationaryBootstrap), expected block "
                              "length the median Politis-White estimate of the series "
                              "resampled (arch.bootstrap.optimal_block_length); one seeded draw "
                              "per market and set of days, shared by every agent",
                      "p_value": "from the resampled null (draws centred on the estimate), "
                                 "never below 1 / (n + 1)"},
        "rank": "by cumulative_excess_return among the non-provisional agents; tied_with_next "
                "unless the Holm-adjusted comparison with the next agent (vs_next) is "
                "significant",
        "relative": {
            "benchmarks": {m: sorted(store_bench, key=lambda b: b != "equal_weight")
                           for m, store_bench in sorted(bench.items())},
            "figures": "excess_return = prod(1 + r) - prod(1 + b) over the days both have; "
                       "beta = cov(r, b) / var(b); tracking_error = std(r - b) * sqrt(N); "
                       "information_ratio = mean(r - b) / std(r - b) * sqrt(N); ddof 1",
            "equal_weight": "mean mark-to-mark return of the market's assets priced at both "
                            "marks, rebalanced daily"},
        "brier": "Polymarket only: questions annulled (a payout other than 0 or 1) left out "
                 "and counted in brier_annulled; mean over the questions resolved in the window of "
                 "(p - outcome)^2, p(YES) = (1 + w_YES - w_NO) / 2 from the portfolio weights "
                 "held at the agent's last mark before the resolution (no position: 0.5), "
                 "outcome = the YES token's payout",
        "significance": {
            "method": "paired stationary block bootstrap over the days both agents have "
                      "(bootstrap): the difference of cumulative excess returns (p_value) and "
                      "of Sharpe ratios (sharpe_p_value; sharpe_hac_p_value: Ledoit-Wolf 2008 "
                      "HAC test, Bartlett kernel); 95% percentile intervals, two-sided p-values "
                      "from the resampled null",
            "multiplicity": "Holm over one family per market and test: the distinct pairs "
                            "compared (vs_next, vs_baselines), provisional ones left out; "
                            "p_value_holm / sharpe_p_value_holm; the raw p-values are kept",
            "level": SIGNIFICANCE,
            "min_days": MIN_PAIRED_DAYS,
            "rule": "a comparison with fewer than min_days common daily returns is provisional "
                    "and claims nothing; otherwise significant when its Holm-adjusted p-value "
                    "is below level",
            "baselines": list(BASELINE_KINDS)},
        "sharpe_tests": {
            "psr": "Probabilistic Sharpe Ratio against 0 (Bailey and Lopez de Prado 2012) of "
                   "the daily excess returns",
            "dsr": "Deflated Sharpe Ratio (Bailey and Lopez de Prado 2014), trials = the "
                   "market's agents, variance of their daily Sharpe ratios (ddof 1)",
            "min_trl": f"minimum track record length (daily returns) for Sharpe > 0 at "
                       f"{MIN_TRL_LEVEL:.0%}; distinguishable once the returns reach it "
                       "(min_days stays the floor of the ranking)"},
        "rank_stability": f"share of resamples (the draws over the days every ranked agent has) "
                          f"in which the agent has the highest cumulative excess return (top1) "
                          f"and is among the first {TOP_K} (top{TOP_K}); p_to_best: one-sided "
                          "bootstrap p-value of the best agent's lead (p_to_best_holm: Holm "
                          "over the market)",
        "mcs": {"level": 1.0 - MCS_SIZE,
                "method": "Model Confidence Set (Hansen, Lunde and Nason 2011), T_max "
                          "statistic as arch.bootstrap.MCS(method='max'), losses = minus the "
                          "daily excess returns of the ranked agents over the days all have, "
                          "the same draws; the set: markets[m].mcs.agents"},
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
                           "signed exposure w_YES - w_NO per question (the matched part counts "
                           "as cash), each question its own class",
        "model_cost": "llm_cost_share = llm_cost_usd / initial capital; net_return = "
                      "cumulative_return - llm_cost_share",
        "var": {"level": VAR_LEVEL, "window": VAR_WINDOW, "min_periods": VAR_MIN_PERIODS},
        "regime": {"index": "equal-weight mean of the equity universe's mark-to-mark returns",
                   "window": REGIME_WINDOW, "min_returns": REGIME_MIN_RETURNS},
    }


def to_json(board: dict[str, Any]) -> str:
    """Serialise the leaderboard deterministically."""
    return dumps_indented(board) + "\n"  # json.dumps(sort_keys, indent=2), faster


def _header(conv: Mapping[str, Any]) -> str:
    """Return the table's first line: the annualisation and risk-free rate of each market."""
    periods = conv.get("periods_per_year") or {}
    rf = conv.get("risk_free_rate") or {}
    ann = ", ".join(f"{m} {n}" for m, n in sorted(periods.items())) or "-"
    rates = ", ".join(f"{m} {100 * rf.get(m, 0.0):.2f}%" for m in sorted(periods)) or "-"
    return (f"annualisation (periods a year): {ann}; risk-free rate a year (cash accrues it; "
            f"Sharpe, Sortino, ranks and tests use excess returns): {rates}; "
            "daily simple returns from the daily marks")


def to_table(board: dict[str, Any]) -> str:
    """Render the leaderboard as two fixed-width text tables (performance, benchmarks)."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:+.2f}%"

    def unsigned(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.2f}%"

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
            f"{unsigned(r['max_drawdown']):>9}{flag(unsigned(r['volatility']), r):>9}"
            f"{unsigned(r['win_rate']):>8}{share(r['mean_turnover']):>9}"
            f"{r['days']:>6}{share(r.get('valid_decision_rate')):>7}  {dec}"
        )
    head2 = (f"{'market':<11}{'#':>4}  {'agent':<20}{'return 95% CI':>20}{'sharpe 95% CI':>18}"
             f"{'comp':>7}{'capb':>8}{'s_corr':>8}{'VaR95':>9}{'align':>7}{'d1':>9}"
             f"{'consist':>9}{'model $':>10}{'cost %':>9}{'net':>10}")
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
            f"{unsigned(r.get('llm_cost_share')):>9}{pct(r.get('net_return')):>10}"
        )
    lines += ["", *significance_table(board)]
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
                  "'~' after a rank: not significantly ahead of the next (block bootstrap, "
                  "Holm-adjusted); "
                  "valid: share of valid decisions (ok or hold) among the rounds asked"]
    if board.get("capitalbench"):  # hook: CapitalBench rounds (agents/capitalbench/scores.py)
        from agents.capitalbench.scores import to_text

        lines.append(to_text(board["capitalbench"]).rstrip("\n"))
    return "\n".join(lines) + "\n" + extras_text(board)


def _trl(r: Mapping[str, Any]) -> str:
    """Return the MinTRL cell: days, '!' when the agent has fewer, '-' when undefined."""
    days = r.get("min_trl_days")
    if days is None:
        return "never" if r.get("psr") is not None else "-"
    return f"{days}{'' if r.get('distinguishable') else '!'}"


def significance_table(board: Mapping[str, Any]) -> list[str]:
    """Return the third table (Sharpe tests, rank stability, MCS) and each market's MCS band."""

    def p3(x: float | None) -> str:
        if x is None:
            return "-"
        return "<.0001" if x < 1e-4 else f"{x:.3f}"  # never 0: at least 1 / (B + 1)

    def share(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    head = (f"{'market':<11}{'#':>4}  {'agent':<20}{'PSR':>7}{'DSR':>7}{'minTRL':>8}"
            f"{'#1':>8}{'top3':>8}{'p best':>8}{'MCS':>5}{'p next':>9}{'holm':>8}"
            f"{'sharpe p':>10}{'holm':>8}")
    lines = [head, "-" * len(head)]
    for r in board["rows"]:
        stab = r.get("rank_stability") or {}
        vs = r.get("vs_next") or {}
        tied = "~" if r.get("tied_with_next") else ""
        rank = "-" if r.get("rank") is None else f"{r['rank']}{tied}"
        mcs = "" if r.get("in_mcs") is None else ("in" if r["in_mcs"] else "out")
        lines.append(
            f"{r['market']:<11}{rank:>4}  {r['agent'][:19]:<20}{p3(r.get('psr')):>7}"
            f"{p3(r.get('dsr')):>7}{_trl(r):>8}{share(stab.get('top1')):>8}"
            f"{share(stab.get('top3')):>8}{p3(stab.get('p_to_best')):>8}{mcs:>5}"
            f"{p3(vs.get('p_value')):>9}{p3(vs.get('p_value_holm')):>8}"
            f"{p3(vs.get('sharpe_p_value')):>10}{p3(vs.get('sharpe_p_value_holm')):>8}")
    lines.append("")
    lines += mcs_lines(board)
    return lines


def mcs_lines(board: Mapping[str, Any]) -> list[str]:
    """Return one line per market naming its Model Confidence Set (the band of the best)."""
    out = []
    for m, sec in sorted((board.get("markets") or {}).items()):
        mcs = sec.get("mcs") or {}
        if not mcs.get("agents"):
            continue
        out.append(f"{m}: {100 * mcs.get('level', 0.9):.0f}% Model Confidence Set "
                   f"({mcs.get('days', 0)} days, block length "
                   f"{(mcs.get('block_length') or 1.0):.1f}): {', '.join(mcs['agents'])}; "
                   f"{sec.get('comparisons', 0)} comparisons, Holm-adjusted"
                   f"{holm_floor_note(sec)}")
    return out

