"""PortBench's classical baselines: 60/40, risk parity, equal risk contribution, minimum variance.

Each decision estimates the covariance of daily simple returns over the last ``window`` daily
closes every candidate asset has in common (a rolling window; the closes are the observation's
history plus the latest price when that is a finished day's close, as on daily bars; never an
intraday price) and returns long-only weights summing to 1:

- ``sixty_forty``: 60 % split equally over the equity-like assets, 40 % over the bond assets
  (in CASH when the universe has none; asset classes and their roles are config, see
  :func:`daemon.config.settings.class_role`);
- ``risk_parity``: ``w_i ∝ 1 / sigma_i`` (per-asset volatility, correlations ignored);
- ``equal_risk_contribution``: every asset contributes the same share of portfolio variance,
  ``w_i (Σw)_i`` equal, solved by Spinu's cyclical coordinate descent on the full covariance;
- ``min_variance``: the long-only portfolio of least variance ``w'Σw`` (projected gradient on the
  simplex).

With fewer than :data:`MIN_RETURNS` common returns the covariance baselines fall back to equal
weight and say so in the reasoning. Pure numpy.

The covariance decision (:func:`covariance_decision`: the returns panel, the covariance and
the solve) is a pure function of the observation, run by :meth:`CovarianceBaseline.decide` in
a worker thread (``asyncio.to_thread``): the equal-risk-contribution solve takes seconds on a
universe of hundreds of assets, and the loop keeps serving prices meanwhile. The observation is
frozen and never changed after its round built it, so the thread reads it without a copy; the
decision is the same, bit for bit, as the function's called directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import numpy as np

from agents.base import CASH, AgentDecision, Observation
from agents.baselines import _investable, equal_weights
from agents.config import class_role

_NY = ZoneInfo("America/New_York")
#: Fewest daily returns in common for a covariance estimate; below it: equal weight.
MIN_RETURNS = 2
#: Convergence tolerance of the iterative solvers (largest weight change in one sweep).
TOLERANCE = 1e-12
#: Iteration cap of the iterative solvers.
MAX_ITERATIONS = 100_000


def _day(ts: float, market: str) -> date:
    """Return the calendar day of ``ts`` the market's daily closes are keyed by."""
    return datetime.fromtimestamp(ts, _NY if market == "equity" else UTC).date()


def daily_closes(obs: Observation, asset: str) -> dict[float, float]:
    """Return ``{ts: close}`` of ``asset``: its history, plus its latest price when that is
    stamped on a day before the decision's (a finished day's close: on daily bars no tick of
    the decision's day has moved it into the history yet)."""
    out = {p.ts: p.price for p in obs.history.get(asset, ())}
    last = obs.prices.get(asset)
    if (
        last is not None
        and (not out or last.ts > max(out))
        and _day(last.ts, obs.market) < _day(obs.decision_ts, obs.market)
    ):
        out[last.ts] = last.price
    return out


def returns_panel(obs: Observation, assets: Sequence[str], window: int) -> np.ndarray:
    """Return the ``T x A`` simple returns of ``assets`` over their last ``window + 1`` common
    daily closes (``T <= window``; 0 rows when fewer than two closes are in common)."""
    if not assets:
        return np.zeros((0, 0))
    series = [daily_closes(obs, a) for a in assets]
    common = set(series[0]).intersection(*series[1:])
    stamps = sorted(common)[-(window + 1):]
    if len(stamps) < 2:
        return np.zeros((0, len(assets)))
    closes = np.array([[s[t] for s in series] for t in stamps], dtype=float)
    return closes[1:] / closes[:-1] - 1.0


def covariance(returns: np.ndarray) -> np.ndarray:
    """Return the sample covariance (``ddof = 1``) of the columns of ``returns``."""
    return np.atleast_2d(np.cov(returns, rowvar=False, ddof=1))


def inverse_vol_weights(cov: np.ndarray) -> np.ndarray:
    """Return ``w_i ∝ 1 / sigma_i``; zero-volatility assets, if any, share everything equally."""
    sigma = np.sqrt(np.maximum(np.diag(cov), 0.0))
    if np.any(sigma == 0.0):
        w = (sigma == 0.0).astype(float)
        return w / w.sum()
    inv = 1.0 / sigma
    return inv / inv.sum()


def erc_weights(cov: np.ndarray) -> np.ndarray:
    """Return the equal-risk-contribution weights (Spinu's cyclical coordinate descent).

    Solves ``x_i (Σx)_i = 1/n`` for ``x > 0`` coordinate by coordinate (each update is the
    positive root of ``Σ_ii x_i² + (Σx)_{-i} x_i - 1/n = 0``), then normalises. Zero-variance
    assets, if any, share everything equally (their risk contribution is 0 at any weight).
    """
    n = cov.shape[0]
    diag = np.diag(cov)
    if np.any(diag <= 0.0):
        w = (diag <= 0.0).astype(float)
        return w / w.sum()
    b = 1.0 / n
    x = 1.0 / np.sqrt(diag)
    x = x / np.sqrt(x @ cov @ x)
    for _ in range(MAX_ITERATIONS):
        prev = x.copy()
        for i in range(n):
            rest = float(cov[i] @ x - cov[i, i] * x[i])
            x[i] = (-rest + np.sqrt(rest * rest + 4.0 * cov[i, i] * b)) / (2.0 * cov[i, i])
        if np.max(np.abs(x - prev)) <= TOLERANCE * max(1.0, float(np.max(x))):
            break
    return x / x.sum()


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Return the Euclidean projection of ``v`` on ``{w >= 0, sum w = 1}``."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.arange(1, v.size + 1)
    rho = int(np.nonzero(u - css / k > 0)[0][-1])
    theta = css[rho] / (rho + 1.0)
    return np.maximum(v - theta, 0.0)


def min_variance_weights(cov: np.ndarray) -> np.ndarray:
    """Return the long-only minimum-variance weights (projected gradient, step ``1 / λ_max``)."""
    n = cov.shape[0]
    lam = float(np.max(np.linalg.eigvalsh(cov))) if n else 0.0
    w = np.full(n, 1.0 / n)
    if lam <= 0.0:
        return w
    step = 1.0 / lam
    for _ in range(MAX_ITERATIONS):
        nxt = project_simplex(w - step * (cov @ w))
        if np.max(np.abs(nxt - w)) <= TOLERANCE:
            return nxt
        w = nxt
    return w


def sixty_forty(
    assets: Sequence[str], classes: Mapping[str, str], roles: Mapping[str, str]
) -> dict[str, float]:
    """Return 60 % over the equity-role assets and 40 % over the bond-role assets, equally
    (a missing side's share in CASH)."""
    equities = [a for a in assets if class_role(a, classes, roles) == "equity"]
    bonds = [a for a in assets if class_role(a, classes, roles) == "bond"]
    out: dict[str, float] = {a: 0.0 for a in assets}
    for group, share in ((equities, 0.6), (bonds, 0.4)):
        for a in group:
            out[a] = share / len(group)
    out[CASH] = max(0.0, 1.0 - sum(out.values()))
    return out


#: Covariance baseline kind -> (solver, label).
METHODS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "risk_parity": (inverse_vol_weights, "risk parity (1/sigma)"),
    "equal_risk_contribution": (erc_weights, "equal risk contribution"),
    "min_variance": (min_variance_weights, "minimum variance"),
}


class CovarianceBaseline:
    """A baseline whose weights come from the rolling covariance of daily closes."""

    def __init__(self, agent_id: str, method: str, *, window: int = 60) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown covariance baseline {method!r}")
        self.id = agent_id
        self.method = method
        self.window = window

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return the method's weights over the investable assets (solved in a worker thread)."""
        return await asyncio.to_thread(covariance_decision, obs, self.method, self.window)


def covariance_decision(obs: Observation, method: str, window: int) -> AgentDecision:
    """Return the decision of covariance baseline ``method`` for ``obs`` (pure, synchronous)."""
    assets = _investable(obs)
    solve, label = METHODS[method]
    rets = returns_panel(obs, assets, window)
    if not assets or rets.shape[0] < MIN_RETURNS:
        return AgentDecision(
            allocation=equal_weights(assets),
            reasoning=f"{label}: {rets.shape[0]} daily return(s) in common, fewer than"
            f" {MIN_RETURNS}: equal weight",
        )
    w = solve(covariance(rets))
    alloc = {a: float(x) for a, x in zip(assets, w, strict=True)} | {CASH: 0.0}
    return AgentDecision(allocation=alloc, reasoning=f"{label} over {rets.shape[0]} daily returns")


class SixtyForty:
    """60 % equities, 40 % bonds, each split equally, rebalanced at every decision."""

    def __init__(
        self, agent_id: str, classes: Mapping[str, str], roles: Mapping[str, str]
    ) -> None:
        self.id = agent_id
        self.classes = classes
        self.roles = roles

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return the 60/40 weights over the investable assets."""
        alloc = sixty_forty(_investable(obs), self.classes, self.roles)
        return AgentDecision(allocation=alloc, reasoning="60/40, rebalanced")
