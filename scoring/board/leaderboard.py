"""The leaderboard: per agent and market performance computed from the store.

Returns are daily: the equity series is the initial cash followed by the daily marks (NYSE close
for equities, 00:00 UTC for Polymarket), so Sharpe and volatility annualise with 252 / 365
periods (see docs/scoring.md). The risk-free rate is the equity market's configured one; 0 for
Polymarket. Output is deterministic: the same store gives byte-identical JSON.

Besides the per-agent performance summary, every row carries the benchmark measures of
``scoring.stats.benchmarks``, ``scoring.stats.diversification`` and ``scoring.stats.inference``
(section "Leaderboard" of docs/scoring.md states every convention):

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

The work is split by purpose: ``scoring.board.load`` reads the store (and the price panels),
``scoring.board.figures`` computes each row's figures, benchmarks and regimes,
``scoring.board.rank`` sets standings, ranks and paired comparisons, and ``scoring.board.text``
renders the JSON and the text table. This module is the entry: :func:`report_of` and
:func:`live_figures`.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.portbench.stress_gate import wants_gate
from scoring.board.batched_rows import score_pending
from scoring.board.extras import board_extras
from scoring.board.figures import (
    _asset_classes,
    _benchmarks,
    _labels,
    _market_summary,
    _periods,
    _regime_by_mark,
    _row,
    _series,
    _window_dates,
    _window_regime,
)
from scoring.board.forked import map_forked
from scoring.board.json_text import EncodedDict, EncodedList, compact
from scoring.board.load import (
    AgentCurves,
    Key,
    Report,
    _load_store,
    _Store,
    one_snapshot,
    read_later,
)
from scoring.board.rank import _rank, _standing
from scoring.board.significance import infer
from scoring.board.text import _clean, _clean_points, _conventions
from scoring.stats.benchmarks import ROLLING_KS

__all__ = [
    "LIVE_FIELDS",
    "MIN_DAYS",
    "MIN_VALID_RATE",
    "live_figures",
    "report_of",
]

#: Defaults of ``[leaderboard]`` (daemon/config/runtime.py), used when the store's run has none.
MIN_VALID_RATE = 0.8
MIN_DAYS = 5

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
    "llm_cost_share", "net_return", "vs_next_p_value", "vs_next_p_value_holm",
    "cumulative_excess_return", "psr", "dsr", "min_trl", "rank_top1", "rank_top3",
    "rank_p_to_best", "in_mcs", "excess_return_ew", "beta_ew", "tracking_error_ew",
    "information_ratio_ew", "brier",
)  # fmt: skip


# ----------------------------------------------------------------------------- the board


def _risk_free(cfg: dict[str, Any]) -> dict[str, float]:
    """Return each market's risk-free rate a year: the rate its CASH accrued.

    Since issue 27 every stored config names ``risk_free_rate`` in both markets and the engine
    accrues it on cash. A store written before (its Polymarket section has no rate) never
    accrued one, whatever its equity section states: its rate is 0, the one convention for
    cash, Sharpe, Sortino, ranks and tests.
    """
    poly = cfg.get("polymarket")
    if isinstance(poly, dict) and poly and "risk_free_rate" not in poly:
        return {"equity": 0.0, "polymarket": 0.0}
    return {m: float((cfg.get(m) or {}).get("risk_free_rate", 0.0))
            for m in ("equity", "polymarket")}



def _market_rows(store: _Store, keys: Sequence[Key], lo: float, hi: float, whole: bool,
                 rf: dict[str, float], initial: dict[str, float],
                 classes: Mapping[str, Mapping[str, str]], regimes: tuple[np.ndarray, list[str]],
                 min_valid_rate: float,
                 min_days: int, market: str
                 ) -> tuple[list[dict[str, Any]], dict[Key, AgentCurves], dict[str, Any]]:
    """Return one market's ranked rows (with their inference), curves and market section."""
    rows: list[dict[str, Any]] = []
    curves: dict[Key, AgentCurves] = {}
    store.div_jobs = []  # the rows' diversification, scored together after the loop
    for key in keys:
        row, curve = _row(store, key, lo, hi, whole, rf, initial, classes, regimes)
        _standing(row, min_valid_rate, min_days)
        rows.append(row)
        if curve is not None:
            curves[key] = curve
    score_pending(store.div_jobs)
    store.div_jobs = None
    _rank(rows)
    inferred = infer(rows, curves, store.agents_cfg, rf,
                     {market: _periods(store.markets_cfg, market)})
    return rows, curves, inferred.get(market, {})


def _extras_read_rows(agents_cfg: Mapping[str, Mapping[str, Any]]) -> bool:
    """Tell whether :func:`board_extras` reads the rows' unrounded figures: run groups (an
    agent with a ``run_group``) or PortBench's stress gate."""
    return wants_gate(agents_cfg) or any((a or {}).get("run_group") for a in agents_cfg.values())


@dataclass(frozen=True)
class _Part:
    """Hold what a market's computation hands back for the report."""

    rows: list[dict[str, Any]]  # cleaned (:func:`_clean`)
    first: Key | None  # the market's first (agent, market) with a curve
    series: tuple[str, Any]  # (market, its cleaned chart series)
    extra: dict[str, Any]  # the market section's inference
    curves: dict[Key, AgentCurves]  # empty unless wanted
    raw_rows: list[dict[str, Any]] | None  # the rows unrounded, when the extras read them
    rows_text: str | None = None  # the cleaned rows' compact JSON, unbracketed, when wanted
    series_text: str | None = None  # the cleaned series' compact JSON, when wanted


def _market_part(store: _Store, keys: Sequence[Key], lo: float, hi: float, whole: bool,
                 rf: dict[str, float], initial: dict[str, float],
                 classes: Mapping[str, Mapping[str, str]],
                 regimes: tuple[np.ndarray, list[str]], min_valid_rate: float, min_days: int,
                 market: str, *, raw_rows: bool, with_curves: bool, with_json: bool) -> _Part:
    """Return one market's part of the report: :func:`_market_rows` cleaned, with its series
    (and, ``with_json``, both as compact JSON, encoded where they were computed)."""
    rows, curves, extra = _market_rows(store, keys, lo, hi, whole, rf, initial, classes,
                                       regimes, min_valid_rate, min_days, market)
    series = _clean_points(_series(curves).get(market, {}))  # _clean's values
    cleaned = _clean(rows)
    rows_text = series_text = None
    if with_json:
        # (what cannot be encoded is left to the whole board's encoding: its error)
        with contextlib.suppress(ValueError, TypeError, RecursionError):
            rows_text, series_text = compact(cleaned)[1:-1], compact(series)
    return _Part(cleaned, min(curves) if curves else None, (market, series), extra,
                 curves if with_curves else {}, rows if raw_rows else None, rows_text,
                 series_text)


def report_of(con: sqlite3.Connection, *,
              window: tuple[float | None, float | None] = (None, None),
              min_valid_rate: float | None = None, min_days: int | None = None,
              parallel: bool = False, curves_wanted: bool = True,
              json_wanted: bool = False) -> Report:
    """Compute the leaderboard and the chart series of the store read through ``con``.

    ``min_valid_rate`` / ``min_days`` override the ``[leaderboard]`` settings of the store's
    latest run (defaults :data:`MIN_VALID_RATE`, :data:`MIN_DAYS`). With ``parallel`` the
    markets' rows and inference are computed in forked processes when this process may fork
    (:func:`scoring.board.forked.map_forked`: a single-threaded caller such as the CLI; the
    same figures bit for bit). Without ``curves_wanted`` the report's ``curves`` (the HTML
    report's charts) are left empty and never sent back from a child. With ``json_wanted`` each
    market's rows and series are also encoded as JSON where they are computed
    (:class:`scoring.board.json_text.EncodedList`: the same text, less of it made after the
    markets; that text is what :func:`scoring.board.text.to_json` writes, so the board's
    ``rows`` and ``series`` must then be left as they are). Open a store by name with
    :func:`daemon.store.reports.load_report`.

    With ``parallel`` the store is read in one read transaction for the whole report, and the
    first market's agents' rows are read by this process after the fork, while the children
    compute theirs (:func:`scoring.board.load.read_later`; the same data).
    """
    with one_snapshot(con) if parallel else contextlib.nullcontext():
        return _report_of(con, window, min_valid_rate, min_days, parallel, curves_wanted,
                          json_wanted)


def _keys_in(store: _Store, lo: float, hi: float) -> list[Key]:
    """Return the (agent, market) pairs with a mark or a decision in ``[lo, hi]``, sorted."""
    return [key for key in sorted(set(store.series) | set(store.outcomes))
            if any(lo <= p[0] <= hi for p in store.series.get(key, []))
            or any(lo <= t <= hi for ts in store.outcomes.get(key, {}).values() for t in ts)]


def _by_market(keys: Sequence[Key]) -> dict[str, list[Key]]:
    """Return ``keys`` grouped by market, in their order."""
    out: dict[str, list[Key]] = {}
    for key in keys:
        out.setdefault(key[1], []).append(key)
    return out


def _report_of(con: sqlite3.Connection, window: tuple[float | None, float | None],
               min_valid_rate: float | None, min_days: int | None, parallel: bool,
               curves_wanted: bool, json_wanted: bool) -> Report:
    """Compute :func:`report_of`."""
    lo = -math.inf if window[0] is None else window[0]
    hi = math.inf if window[1] is None else window[1]
    store = _load_store(con, hi, first_later=parallel)
    if min_valid_rate is None:
        min_valid_rate = float(store.board_cfg.get("min_valid_rate", MIN_VALID_RATE))
    if min_days is None:
        min_days = int(store.board_cfg.get("min_days", MIN_DAYS))
    cfg = store.markets_cfg
    # One risk-free convention (issue 27, point 6): CASH accrued each market's configured rate.
    rf = _risk_free(cfg)
    initial = {m: float(cfg.get(m, {}).get("initial_cash", 0.0)) for m in rf}
    classes = _asset_classes(store)
    store.bench = {m: _benchmarks(store, m) for m in store.panels}
    eq_marks, eq_labels, eq_index = _regime_by_mark(store)
    by_market = _by_market(_keys_in(store, lo, hi))
    if store.later is not None:
        # The market left for later is computed first, by this process, which reads its rows
        # while the children compute; unless it has no daily marks (few rows, if any) or
        # another market with rows sorts before it: then its rows are read now.
        if store.later not in store.panels or (by_market and min(by_market) < store.later):
            read_later(con, store)
            by_market = _by_market(_keys_in(store, lo, hi))
        else:
            # its keys are known once its rows are read (none in the window: an empty part,
            # which adds nothing to the report)
            by_market[store.later] = []
    # Each market's rows, ranks and inference depend on that market's data only; so do its
    # cleaned rows and chart series, made where the market is computed (in a forked child, the
    # child cleans them and sends back only what this process needs).
    markets_of = sorted(by_market)
    raw_rows = _extras_read_rows(store.agents_cfg)
    early: dict[str, Any] = {}

    def meanwhile() -> None:
        """Read the store's other sections while a child computes its market."""
        if not raw_rows:  # then the extras never read the rows (issue 13: run groups)
            early["extras"] = board_extras(con, [], store.agents_cfg)
        from agents.capitalbench.scores import capitalbench_section  # hook: its rounds

        early["capital"] = capitalbench_section(con)

    def market_part(m: str) -> _Part:
        """Compute market ``m``'s part (its agents' rows read first when left for later)."""
        if m == store.later:
            read_later(con, store)
            by_market[m] = _by_market(_keys_in(store, lo, hi)).get(m, [])
        return _market_part(store, by_market[m], lo, hi, window[0] is None, rf, initial,
                            classes, (eq_marks, eq_labels), min_valid_rate, min_days, m,
                            raw_rows=raw_rows, with_curves=curves_wanted, with_json=json_wanted)

    parts = map_forked(market_part, markets_of, parallel=parallel, meanwhile=meanwhile)
    rows: list[dict[str, Any]] = [r for part in parts for r in part.rows]  # by market, as _rank
    texts = [part.rows_text for part in parts]
    if json_wanted and all(t is not None for t in texts):
        rows = EncodedList(rows, "[" + ",".join(t for t in texts if t) + "]")
    found = {k: c for part in parts for k, c in part.curves.items()}
    curves = {k: found[k] for k in sorted(found)}
    markets = {m: _market_summary(store, m, lo, hi) for m in sorted({r["market"] for r in rows})}
    for m, part in zip(markets_of, parts, strict=True):
        if m in markets:
            markets[m] |= part.extra
    regime = _window_regime(eq_marks, eq_index, eq_labels, lo, hi)
    head = _clean({
        "conventions": _conventions(rf, min_valid_rate, min_days,
                                    {m: _periods(cfg, m) for m in markets},
                                    {m: store.bench.get(m, {}) for m in markets}),
        "window": {"start": window[0], "end": window[1]},
        "window_dates": _window_dates(store, lo, hi),
        "regime": regime,
        "markets": markets,
    })
    extras = early["extras"] if not raw_rows else board_extras(
        con, [r for part in parts for r in part.raw_rows or ()], store.agents_cfg)
    # The series by market in the order _series gives them (the first (agent, market) first).
    firsts = sorted((part.first, part.series, part.series_text) for part in parts
                    if part.first is not None)
    board = {**head, "rows": rows,
             "series": {m: s if t is None else EncodedDict(s, t) for _, (m, s), t in firsts},
             **_clean(extras)}
    capital = early["capital"]
    if capital is not None:
        board["capitalbench"] = _clean(capital)
    return Report(board, curves if curves_wanted else {}, _labels(store))


# ----------------------------------------------------------------------------- output


def live_figures(board: dict[str, Any]) -> dict[Key, dict[str, float]]:
    """Return the finite numeric figures of every (agent, market) of ``board`` (a store's whole
    leaderboard, :func:`daemon.store.reports.live_figures`).

    Keys of each inner dict are a subset of :data:`LIVE_FIELDS`; undefined figures are left out.
    Interval ends are flattened to ``<name>_ci_low`` / ``<name>_ci_high``, rolling-k deltas to
    ``rolling_k_delta_<k>`` and the probe result to ``consistency_mean_l1`` / ``_std_l1``.
    """
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
        flat["vs_next_p_value_holm"] = (r.get("vs_next") or {}).get("p_value_holm")
        stab = r.get("rank_stability") or {}
        flat["rank_top1"], flat["rank_top3"] = stab.get("top1"), stab.get("top3")
        flat["rank_p_to_best"] = stab.get("p_to_best")
        flat["in_mcs"] = None if r.get("in_mcs") is None else float(bool(r["in_mcs"]))
        ew = (r.get("relative") or {}).get("equal_weight") or {}
        for name in ("excess_return", "beta", "tracking_error", "information_ratio"):
            flat[f"{name}_ew"] = ew.get(name)
        out[(r["agent"], r["market"])] = {
            k: float(v) for k, v in flat.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
    return out
