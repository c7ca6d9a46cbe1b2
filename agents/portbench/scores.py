"""PortBench's per-stage scores S1..S5 and CEPS, with delayed scoring.

A ``portbench`` decision stores its whole workflow in ``decisions.raw_output`` (see
:mod:`agents.portbench.agent`). Its scores are computed from that summary and the daily closes of
the store (the last recorded price of each UTC day):

- S1 ``1 - mean|v - v*| / 2``, ``v* = clip(r / VIEW_SCALE, -1, 1)`` from each asset's return
  ``r`` over the horizon (the next ``horizon`` daily closes after the decision);
- S2 the share of signals equal to those the S1 thresholds give ``v*``;
- S3 ``0.5 * s_acc + 0.5 * s_corr``: ``s_acc = 1 - |w - w*|_1 / 2`` against the long-only
  maximum-Sharpe weights ``w*`` over the buy-signal assets (mean future returns, covariance of
  the lookback window, risk-free 4 % a year; all CASH when no portfolio beats it), and ``s_corr``
  the two-layer correlation score of ``w`` over the lookback window;
- S4 ``max(0, 1 - |tau - tau*| / max(tau, tau*, 1e-4))``: executed turnover (0 when the risk
  monitor kept the portfolio) against the turnover to ``w*``;
- S5 ``0.5 * d + 0.5 * clip(1 - (e_VaR + e_DD) / 2, 0, 1)``: the rebalance decision against the
  5 % drift rule applied to the oracle weights ``w*`` (their largest change from the current
  weights) and the relative errors of the VaR and drawdown estimates against historical
  simulation of ``w*`` over the lookback window (the paper's ground truth: pending like S1..S4);
- CEPS ``clip(mean - 0.1 * sum of drops, 0, 1)`` (:func:`ceps`).

The lookback window is the agent's ``cov_window`` (stored in the workflow as ``lookback``;
:data:`LOOKBACK` for workflows stored before it was).

S1..S5 and CEPS need the horizon's closes: until the horizon has passed they are ``None`` (pending).
Delayed scoring: the daemon stores them in ``stage_scores`` once the horizon has passed
(:mod:`agents.portbench.stage_scoring`, through :func:`score_rows`, the single computation); the
report reads those rows and shows a decision without them as pending. A store without the table is
scored from its inputs at each report, as is ``--recompute``.

``paperarena report`` appends the table per agent; ``paperarena stage-scores --db pb.db
--horizon N`` prints it alone (both open the store through :mod:`daemon.store.reports`).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daemon.core.price_bursts import read_prices
from daemon.core.run_configs import run_configs
from scoring.stats.benchmarks import historical_var
from scoring.stats.diversification import diversification_from_returns

CASH = "CASH"
#: A forward return of +-VIEW_SCALE maps to a ground-truth view of +-1.
VIEW_SCALE = 0.10
#: Views above this are buys, below its negative sells (the paper's S2 thresholds).
SIGNAL_THRESHOLD = 0.2
#: Daily closes after the decision that make up the scoring horizon (default).
HORIZON = 5
#: Daily returns before the decision that make up the lookback window, for workflows that do
#: not store theirs (``lookback``, the agent's ``cov_window``).
LOOKBACK = 60
#: Largest single-asset drift that needs no rebalancing (the paper's S5 trigger).
DRIFT_THRESHOLD = 0.05
#: Iteration cap of the maximum-Sharpe solver.
MAX_SHARPE_ITERATIONS = 100_000
#: Annual risk-free rate of the maximum-Sharpe reference.
RISK_FREE = 0.04
YEAR_DAYS = 252
STAGES = ("S1", "S2", "S3", "S4", "S5")
#: CEPS: the penalty per unit of score dropped from one stage to the next.
CEPS_DROP_PENALTY = 0.1

Closes = Mapping[str, Sequence[tuple[float, float]]]


def ceps(stage_scores: Sequence[float]) -> float:
    """Return CEPS ``clip(mean(s) - 0.1 * sum_t max(s_t - s_{t+1}, 0), 0, 1)``.

    The drop sum runs over consecutive stage pairs (t = 1..4 for the reference five stages).
    NaN for an empty sequence.
    """
    s = np.asarray(stage_scores, dtype=float).reshape(-1)
    if s.size == 0:
        return math.nan
    drops = float(np.sum(np.maximum(s[:-1] - s[1:], 0.0)))
    return float(np.clip(float(np.mean(s)) - CEPS_DROP_PENALTY * drops, 0.0, 1.0))


def _signal(v: float) -> str:
    return "buy" if v > SIGNAL_THRESHOLD else "sell" if v < -SIGNAL_THRESHOLD else "hold"


def s1_score(views: Mapping[str, float], truth: Mapping[str, float]) -> float:
    """Return ``1 - mean|v - v*| / 2`` over the assets of ``truth``."""
    errs = [abs(views.get(a, 0.0) - v) for a, v in truth.items()]
    return 1.0 - math.fsum(errs) / (2.0 * len(errs)) if errs else math.nan


def s2_score(signals: Mapping[str, str], truth: Mapping[str, float]) -> float:
    """Return the share of ``signals`` equal to the thresholds applied to the true views."""
    hits = [signals.get(a) == _signal(v) for a, v in truth.items()]
    return sum(hits) / len(hits) if hits else math.nan


def s4_score(turnover: float, oracle_turnover: float) -> float:
    """Return ``max(0, 1 - |tau - tau*| / max(tau, tau*, 1e-4))``."""
    return max(0.0, 1.0 - abs(turnover - oracle_turnover) / max(turnover, oracle_turnover, 1e-4))


def s5_score(answer: Mapping[str, Any], truth: Mapping[str, Any]) -> float:
    """Return ``0.5 d + 0.5 clip(1 - (e_VaR + e_DD) / 2, 0, 1)`` (NaN without true figures)."""
    if truth.get("var_95") is None or truth.get("max_drawdown") is None:
        return math.nan
    d = float(bool(answer["rebalance"]) == bool(truth["rebalance"]))
    errs = [
        abs(float(answer[k]) - float(truth[k])) / max(abs(float(truth[k])), 1e-6)
        for k in ("var_95", "max_drawdown")
    ]
    return 0.5 * d + 0.5 * min(1.0, max(0.0, 1.0 - sum(errs) / 2.0))


def oracle_risk(hist: np.ndarray, weights: Sequence[float], drift: float) -> dict[str, Any]:
    """Return S5's ground truth: the one-day 95 % VaR and maximum drawdown of ``weights`` by
    historical simulation over ``hist`` (``T x A`` daily returns, CASH earning 0) and the drift
    rule's rebalance flag (``drift`` above :data:`DRIFT_THRESHOLD`)."""
    if hist.shape[0] == 0:
        return {"var_95": None, "max_drawdown": None, "rebalance": drift > DRIFT_THRESHOLD}
    port = hist @ np.asarray(weights, dtype=float)
    nav = np.concatenate(([1.0], np.cumprod(1.0 + port)))
    dd = float(np.min(nav / np.maximum.accumulate(nav) - 1.0))
    var = historical_var(port, window=port.size, min_periods=1)
    return {"var_95": var, "max_drawdown": dd, "rebalance": drift > DRIFT_THRESHOLD}


def project_hyperplane_orthant(z: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Return the Euclidean projection of ``z`` on ``{y >= 0, e'y = 1}`` (some ``e_i > 0``).

    The projection is ``max(z + t e, 0)`` for the ``t`` where ``g(t) = e'max(z + t e, 0)``, a
    nondecreasing piecewise-linear function, equals 1: found exactly between its breakpoints.
    """
    nz = e != 0.0
    bps = np.unique(-z[nz] / e[nz])

    vals = np.maximum(z[None, :] + bps[:, None] * e[None, :], 0.0) @ e
    k = int(np.searchsorted(vals, 1.0))
    if k == len(bps):  # past the last breakpoint: slope from the assets with e_i > 0
        slope = float(np.sum(e[e > 0.0] ** 2))
        t = float(bps[-1]) + (1.0 - vals[-1]) / slope
    elif k == 0 or vals[k] == vals[k - 1]:
        t = float(bps[k])
    else:
        t0, t1 = float(bps[k - 1]), float(bps[k])
        t = t0 + (1.0 - vals[k - 1]) * (t1 - t0) / (vals[k] - vals[k - 1])
    return np.maximum(z + t * e, 0.0)


def max_sharpe(mu: np.ndarray, cov: np.ndarray, rf: float) -> np.ndarray | None:
    """Return the long-only weights of greatest ``(w'mu - rf) / sqrt(w'cov w)`` (None when no
    portfolio has a positive excess return: cash is better).

    Solved as ``min y'cov y`` subject to ``(mu - rf)'y = 1, y >= 0`` (then ``w = y / sum y``)
    over every asset (one with a negative excess return may still hedge), by accelerated
    projected gradient (FISTA with restarts) and the exact projection on that set.
    """
    ex = mu - rf
    if mu.size == 0 or float(np.max(ex)) <= 0.0:
        return None
    # solve in y = d * u, d = 1 / sigma (a diagonal preconditioner: same optimum, far fewer
    # iterations when volatilities differ by orders of magnitude, as cash against crypto)
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    d = np.where(sd > 0.0, 1.0 / np.where(sd > 0.0, sd, 1.0), 1.0)
    c, e = cov * np.outer(d, d), ex * d
    lam = float(np.max(np.linalg.eigvalsh(c))) or 1.0
    start = np.where(e > 0.0, 1.0, 0.0)
    y = start / float(e @ start)
    v, tk = y.copy(), 1.0
    for _ in range(MAX_SHARPE_ITERATIONS):
        nxt = project_hyperplane_orthant(v - (c @ v) / lam, e)
        if float(np.max(np.abs(nxt - y))) <= 1e-13 * max(1.0, float(np.max(y))):
            y = nxt
            break
        t1 = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * tk * tk))
        if float((v - nxt) @ (nxt - y)) > 0.0:  # momentum points uphill: restart
            t1, v = 1.0, nxt.copy()
        else:
            v = nxt + ((tk - 1.0) / t1) * (nxt - y)
        y, tk = nxt, t1
    w = y * d
    return w / w.sum()


@dataclass(frozen=True, slots=True)
class StageScores:
    """The scores of one decision (``None``: pending, the horizon has not passed)."""

    ts: float
    scores: dict[str, float | None] = field(default_factory=dict)
    ceps: float | None = None
    failed: bool = False
    """Whether the workflow stopped at a failed stage (its scores stay unset, not pending)."""

    @property
    def pending(self) -> bool:
        """Return whether any stage waits for its horizon."""
        return self.ceps is None and not self.failed


def _window(closes: Closes, assets: Sequence[str], ts: float, before: bool, n: int) -> np.ndarray:
    """Return the ``(n + 1) x A`` closes up to ``ts`` (``before``) or from the last close before
    ``ts`` onwards, on the days every asset has; fewer rows when fewer exist."""
    series = [dict(closes.get(a, ())) for a in assets]
    days = sorted(set(series[0]).intersection(*series[1:])) if series else []
    past = [d for d in days if d < ts]
    picked = past[-(n + 1):] if before else past[-1:] + [d for d in days if d >= ts][:n]
    return np.array([[s[d] for s in series] for d in picked], dtype=float).reshape(
        len(picked), len(assets)
    )


def score_decision(
    summary: Mapping[str, Any],
    ts: float,
    closes: Closes,
    classes: Mapping[str, str],
    *,
    horizon: int = HORIZON,
) -> StageScores:
    """Return the stage scores of one decision's ``summary`` made at ``ts``."""
    scores: dict[str, float | None] = dict.fromkeys(STAGES)
    if "failed_step" in summary or "risk" not in summary:
        return StageScores(ts, scores, None, failed=True)
    views: Mapping[str, float] = summary.get("views", {})
    assets = sorted(views)
    fut = _window(closes, assets, ts, before=False, n=horizon)
    if not assets or fut.shape[0] < horizon + 1:
        return StageScores(ts, scores, None)
    fwd = fut[-1] / fut[0] - 1.0
    truth = {a: float(np.clip(r / VIEW_SCALE, -1.0, 1.0)) for a, r in zip(assets, fwd, strict=True)}
    scores["S1"] = s1_score(views, truth)
    if "signals" in summary:
        scores["S2"] = s2_score(summary["signals"], truth)
    if "weights" in summary:
        lookback = int(summary.get("lookback", LOOKBACK))
        past = _window(closes, assets, ts, before=True, n=lookback)
        hist = past[1:] / past[:-1] - 1.0 if past.shape[0] > 2 else np.zeros((0, len(assets)))
        fret = fut[1:] / fut[:-1] - 1.0
        buys = [i for i, a in enumerate(assets) if summary["signals"].get(a) == "buy"]
        oracle = {a: 0.0 for a in assets} | {CASH: 1.0}
        if buys and hist.shape[0] > 1:
            cov = np.atleast_2d(np.cov(hist[:, buys], rowvar=False, ddof=1))
            w = max_sharpe(fret[:, buys].mean(axis=0), cov, RISK_FREE / YEAR_DAYS)
            if w is not None:
                oracle = {a: 0.0 for a in assets} | {CASH: 0.0}
                for i, x in zip(buys, w, strict=True):
                    oracle[assets[i]] = float(x)
        weights: Mapping[str, float] = summary["weights"]
        keys = [*assets, CASH]
        s_acc = 1.0 - math.fsum(abs(weights.get(k, 0.0) - oracle[k]) for k in keys) / 2.0
        risky = {a: float(weights.get(a, 0.0)) for a in assets}
        own = {a: classes.get(a, a) for a in assets}
        corr = (diversification_from_returns(risky, own, hist, assets)["s_corr"]
                if hist.shape[0] > 1 and any(risky.values()) else math.nan)
        scores["S3"] = 0.5 * s_acc + 0.5 * corr
        current: Mapping[str, float] = summary.get("current", {})
        tau = summary["execution"]["turnover"] if summary.get("applied") else 0.0
        tau_star = math.fsum(abs(oracle[a] - current.get(a, 0.0)) for a in assets)
        scores["S4"] = s4_score(tau, tau_star) if "risk" in summary else None
        drift = max((abs(oracle[a] - current.get(a, 0.0)) for a in assets), default=0.0)
        risk_gt = oracle_risk(hist, [oracle[a] for a in assets], drift)
        scores["S5"] = s5_score(summary["risk"], risk_gt)
    done = [scores[s] for s in STAGES]
    if any(v is None for v in done):
        return StageScores(ts, scores, None)
    return StageScores(ts, scores, ceps([float(v) for v in done if v is not None]))


#: The condition on ``market_events`` of the prices closes are made of (every process reads them
#: alike, :func:`daemon.core.price_bursts.read_prices`): a row per price and live bursts.
CLOSES_WHERE = "market=?"
#: The decisions :func:`score_rows` reads, after ``AND agent IN (...)``.
DECISIONS_SQL = ("SELECT agent, scheduled_ts, raw_output FROM decisions WHERE market='equity'"
                 " AND agent IN ({marks})")
#: The stored stage scores (``stage_scores``, schema v9) of one horizon.
STORED_SQL = ("SELECT agent, scheduled_ts, stage, score FROM stage_scores"
              " WHERE market='equity' AND horizon=?")
DAY = 86_400.0


def price_points(ticks: Iterable[Sequence[Any]]) -> list[tuple[str, float, float]]:
    """Return (asset, ts, price) of every price of ``ticks`` (what
    :func:`daemon.core.price_bursts.read_prices` returns), ordered by asset, time and then as
    stored."""
    points = [(a, t, p) for _, a, t, _, p, _, _ in ticks]
    points.sort(key=lambda r: (r[0], r[1]))  # stable: stored order among equal times
    return points


def closes_from_rows(
    rows: Sequence[tuple[str, float, float]], until: float | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Return ``{asset: [(end of UTC day, close)]}`` from ``(asset, ts, price)`` rows in
    :func:`price_points`' order: the last price of each UTC day, stamped with the day's last
    second (so all assets' closes of a day share one stamp). ``until``: only the days that
    ended before it (complete days)."""
    last: dict[tuple[str, int], tuple[float, float]] = {}
    for asset, ts, price in rows:
        day = int(ts / DAY)
        last[(asset, day)] = (day * DAY + 86_399.0, float(price))
    out: dict[str, list[tuple[float, float]]] = {}
    for (asset, _), point in sorted(last.items()):
        if until is None or point[0] < until:
            out.setdefault(asset, []).append(point)
    return out


def daily_closes(
    con: sqlite3.Connection, market: str = "equity"
) -> dict[str, list[tuple[float, float]]]:
    """Return the daily closes of ``market`` read through ``con`` (:func:`closes_from_rows`)."""
    return closes_from_rows(price_points(read_prices(con, CLOSES_WHERE, (market,))))


def portbench_agents(
    config_rows: Sequence[tuple[Any, ...]]
) -> tuple[set[str], dict[str, dict[str, str]]]:
    """Return the agents configured with ``protocol = "portbench"`` in the runs' stored configs
    (``(config_json,)`` rows, oldest first) and each agent's own asset classes (the last run's)."""
    own: dict[str, dict[str, str]] = {}
    protocol: set[str] = set()
    for (raw_cfg,) in config_rows:
        try:
            agents = json.loads(raw_cfg or "{}").get("agents", [])
        except (ValueError, AttributeError):
            continue
        for a in agents if isinstance(agents, list) else []:
            if isinstance(a, dict) and isinstance(a.get("asset_classes"), dict):
                own[str(a.get("id"))] = {str(k): str(v) for k, v in a["asset_classes"].items()}
            if isinstance(a, dict) and a.get("protocol") == "portbench":
                protocol.add(str(a.get("id")))
    return protocol, own


def parse_decisions(
    rows: Sequence[tuple[str, float, str | None]]
) -> list[tuple[str, float, dict[str, Any]]]:
    """Return ``(agent, ts, workflow)`` of the ``(agent, scheduled_ts, raw_output)`` rows that
    hold a portbench workflow, in agent and time order."""
    out = []
    for agent, ts, raw in sorted(rows, key=lambda r: (r[0], r[1])):
        try:
            summary = json.loads(raw or "")
        except ValueError:
            continue
        if isinstance(summary, dict) and summary.get("protocol") == "portbench":
            out.append((agent, float(ts), summary))
    return out


def score_rows(
    decisions: Sequence[tuple[str, float, Mapping[str, Any]]],
    closes: Closes,
    own: Mapping[str, Mapping[str, str]],
    classes: Mapping[str, str] | None = None,
    *,
    horizon: int = HORIZON,
) -> dict[str, list[StageScores]]:
    """Return the stage scores of :func:`parse_decisions`' output, by agent (the single
    computation of the report, the CLI and the daemon's delayed scoring)."""
    out: dict[str, list[StageScores]] = {}
    for agent, ts, summary in decisions:
        mine = classes if classes is not None else own.get(agent, {})
        out.setdefault(agent, []).append(
            score_decision(summary, ts, closes, mine, horizon=horizon))
    return out


def _has_table(con: sqlite3.Connection, name: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                       (name,)).fetchone() is not None


def score_connection(
    con: sqlite3.Connection, classes: Mapping[str, str] | None = None, *, horizon: int = HORIZON,
    stored: bool = True,
) -> dict[str, list[StageScores]]:
    """Return the stage scores of every ``portbench`` decision read through ``con``, by agent
    (open a store by name with :func:`daemon.store.reports.portbench_scores`).

    ``stored`` (and no ``classes``, and the horizon the daemon stores, :data:`HORIZON`): the
    scores the daemon stored in ``stage_scores`` once each decision's horizon had passed; a
    decision without them is pending. A store without the table (before schema v9), or
    ``stored=False``: every score computed from the store now.
    """
    protocol, own = portbench_agents(
        [(text,) for text in run_configs(con)])
    if not protocol:  # no portbench agent was ever configured: nothing to parse
        return {}
    decisions = parse_decisions(con.execute(
        DECISIONS_SQL.format(marks=",".join("?" * len(protocol))), sorted(protocol)).fetchall())
    if not (stored and classes is None and horizon == HORIZON
            and _has_table(con, "stage_scores")):
        return score_rows(decisions, daily_closes(con), own, classes, horizon=horizon)
    kept: dict[tuple[str, float], dict[str, float]] = {}
    for agent, ts, stage, score in con.execute(STORED_SQL, (horizon,)):
        kept.setdefault((agent, float(ts)), {})[stage] = (
            math.nan if score is None else float(score))
    out: dict[str, list[StageScores]] = {}
    for agent, ts, summary in decisions:
        row = kept.get((agent, ts))
        if row is not None and "CEPS" in row and all(s in row for s in STAGES):
            got = StageScores(ts, {s: row[s] for s in STAGES}, row["CEPS"])
        else:  # not scored yet: pending (every stage needs the oracle's future closes)
            got = score_decision(summary, ts, {}, own.get(agent, {}), horizon=horizon)
        out.setdefault(agent, []).append(got)
    return out


def summarise(rows: Sequence[StageScores]) -> dict[str, Any]:
    """Return the mean of each stage over its scored decisions, mean CEPS and pending counts."""
    out: dict[str, Any] = {"decisions": len(rows)}
    for s in STAGES:
        vals = [r.scores[s] for r in rows if r.scores.get(s) is not None]
        finite = [v for v in vals if v is not None and math.isfinite(v)]
        out[s] = sum(finite) / len(finite) if finite else None
        out[f"{s}_pending"] = sum(1 for r in rows if r.scores.get(s) is None and not r.failed)
    cs = [r.ceps for r in rows if r.ceps is not None and math.isfinite(r.ceps)]
    out["CEPS"] = sum(cs) / len(cs) if cs else None
    out["pending"] = sum(1 for r in rows if r.pending)
    out["failed"] = sum(1 for r in rows if r.failed)
    return out


def stage_cell(m: Mapping[str, Any], key: str) -> str:
    """Return the text of one mean of :func:`summarise` (``key`` a stage or ``CEPS``): the
    number, ``pending`` while decisions wait for their horizon, else ``-`` (none scored)."""
    x = m.get(key)
    if isinstance(x, float) and math.isfinite(x):
        return f"{x:.3f}"
    waiting = m.get("pending" if key == "CEPS" else f"{key}_pending", 0)
    return "pending" if waiting else "-"


def format_table(by_agent: Mapping[str, Sequence[StageScores]]) -> str:
    """Return one line per agent: S1..S5, CEPS, decisions, pending and failed counts."""

    lines = [f"{'agent':<20}" + "".join(f"{s:>9}" for s in (*STAGES, "CEPS"))
             + f"{'decisions':>11}{'pending':>9}{'failed':>8}"]
    for agent, rows in sorted(by_agent.items()):
        m = summarise(rows)
        lines.append(f"{agent:<20}" + "".join(f"{stage_cell(m, s):>9}" for s in (*STAGES, "CEPS"))
                     + f"{m['decisions']:>11}{m['pending']:>9}{m['failed']:>8}")
    return "\n".join(lines)
