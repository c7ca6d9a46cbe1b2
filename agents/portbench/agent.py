"""The PortBench protocol: views -> signals -> target weights -> execution -> risk monitor.

Stages of one decision (each model call is stored with its stage name, see
:mod:`agents.protocols`; the whole workflow is summarised in the decision's ``raw_output``):

1. ``views`` (S1): the model reads every asset (class, price, return and volatility over the
   daily closes available), the correlations within and between asset classes, the account, the
   investor profile and the news, and answers a view in [-1, 1] per asset and the market regime.
2. ``signals`` (S2): a buy / sell / hold signal per asset.
3. ``weights`` (S3): target weights over the buy-signal assets (the rest in CASH). The investor
   profile's limits (:data:`daemon.config.settings.PROFILE_LIMITS`) are stated in the prompt and
   scored after the fact, as in the paper: the workflow's ``alignment`` records whether the
   accepted target keeps the equity cap (equity-and-crypto weight) and the bond floor
   (bond-and-cash weight, CASH included). With ``enforce_profile = true`` a target breaking
   either is instead rejected with the limit named and retried.
4. ``execution`` (S4, no model call): the turnover of moving to the target, its estimated cost
   at :data:`COST_BPS` (10 bps slippage + 5 bps commission, the paper's model; the ledger applies
   the market's configured cost model) and the largest single-asset drift.
5. ``risk`` (S5): the target's one-day 95 % VaR and maximum drawdown over the window are
   computed by historical simulation, with its largest single-asset drift from the current
   weights (:func:`risk_truth`); with ``rebalance_rule = "drift"`` (the default, the paper's
   deterministic monitor) the target is applied only when that drift exceeds
   :data:`DRIFT_THRESHOLD`, otherwise the current portfolio is kept (outcome ``hold``). The
   model is asked for the same estimates and a rebalance flag, scored against the computed
   ones (:mod:`agents.portbench.scores`); ``rebalance_rule = "model"`` lets its flag decide.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import structlog

from agents.base import CASH, AgentDecision, Observation
from agents.config import PROFILE_LIMITS, AgentConfig, AllocationLimits, class_role
from agents.llm import render_failed
from agents.llm_output import InvalidOutput, extract_json
from agents.portfolio_baselines import returns_panel
from agents.prompting import _Ctx
from agents.stepwise import StepwiseAgent, flat, load_prompt_set
from agents.validation import SUM_EPSILON, SUM_TOLERANCE
from daemon.core.logs import redact_text
from scoring.stats.benchmarks import RISK_PROFILES, historical_var
from scoring.stats.diversification import corr_matrix

log = structlog.get_logger(__name__)

PROTOCOL = "portbench"
REGIMES = ("bull", "bear", "sideways", "crisis")
SIGNALS = ("buy", "sell", "hold")
#: Views above this are buys, below its negative sells (the paper's S2 thresholds).
SIGNAL_THRESHOLD = 0.2
#: Execution cost of the paper's S4: 10 bps slippage + 5 bps commission per traded value.
COST_BPS = 15.0
#: Largest single-asset drift that needs no rebalancing (the paper's S5 trigger).
DRIFT_THRESHOLD = 0.05
#: Slack on the profile limits (float rounding only).
TOLERANCE = 1e-6
#: Trading days per year, for annualised volatility.
YEAR_DAYS = 252


def signal_of(view: float) -> str:
    """Return the signal the paper's thresholds give ``view``."""
    if view > SIGNAL_THRESHOLD:
        return "buy"
    if view < -SIGNAL_THRESHOLD:
        return "sell"
    return "hold"


@dataclass(frozen=True, slots=True)
class Profile:
    """The investor profile an agent runs under: allocation limits, drawdown and VaR limits."""

    name: str
    limits: AllocationLimits
    max_drawdown: float
    var_limit: float
    classes: Mapping[str, str]
    roles: Mapping[str, str]

    @classmethod
    def of(cls, cfg: AgentConfig) -> Profile:
        """Return the profile of ``cfg`` (an explicit ``max_drawdown`` overrides the profile's)."""
        risk = RISK_PROFILES[cfg.risk_profile]
        dd = cfg.max_drawdown if cfg.max_drawdown is not None else risk.max_drawdown
        return cls(cfg.risk_profile, PROFILE_LIMITS[cfg.risk_profile], dd, risk.var_limit,
                   cfg.asset_classes, cfg.class_roles)

    def describe(self) -> str:
        """Return the profile as the prompt states it."""
        return (
            f"{self.name}: at most {self.limits.equity_cap:.0%} of the account in equities and"
            f" crypto together; at least {self.limits.bond_floor:.0%} in bonds and cash (CASH"
            f" included); maximum drawdown {self.max_drawdown:.0%}; one-day 95% VaR no worse"
            f" than {self.var_limit:.1%}."
        )

    def exposures(self, weights: Mapping[str, float]) -> tuple[float, float]:
        """Return (equity-and-crypto weight, bond-and-cash weight with CASH) of ``weights``."""
        eq = bc = 0.0
        for a, w in weights.items():
            if a == CASH:
                bc += w
                continue
            role = class_role(a, self.classes, self.roles)
            if role in ("equity", "crypto"):
                eq += w
            elif role in ("bond", "cash"):
                bc += w
        return eq, bc

    def violation(self, weights: Mapping[str, float]) -> str:
        """Return the limit ``weights`` break, named (``""`` when they keep both)."""
        eq, bc = self.exposures(weights)
        if eq > self.limits.equity_cap + TOLERANCE:
            return (
                f"equity cap of the {self.name} profile broken: equities and crypto"
                f" {eq:.1%} > {self.limits.equity_cap:.0%}"
            )
        if bc < self.limits.bond_floor - TOLERANCE:
            return (
                f"bond floor of the {self.name} profile broken: bonds and cash (CASH included)"
                f" {bc:.1%} < {self.limits.bond_floor:.0%}"
            )
        return ""


@dataclass(frozen=True, slots=True)
class Views:
    """S1's answer."""

    views: Mapping[str, float]
    regime: str


@dataclass(frozen=True, slots=True)
class Risk:
    """S5's answer."""

    rebalance: bool
    var_95: float
    max_drawdown: float
    reasoning: str


def _answer(answer: str, finish_reason: str | None, key: str) -> dict[str, Any]:
    if finish_reason == "length":
        raise InvalidOutput("truncated output (finish_reason=length)")
    return extract_json(answer, key)


def _number(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise InvalidOutput(f"{what} is not a number: {x!r}")
    try:
        v = float(x)
    except OverflowError:
        raise InvalidOutput(f"{what} is out of range") from None
    if not math.isfinite(v):
        raise InvalidOutput(f"{what} must be finite, got {x!r}")
    return v


def _per_asset(obj: Mapping[str, Any], key: str, assets: Sequence[str]) -> Mapping[str, Any]:
    raw = obj[key]
    if not isinstance(raw, Mapping):
        raise InvalidOutput(f"'{key}' must be an object, got {type(raw).__name__}")
    for t in raw:
        if t not in assets:
            raise InvalidOutput(f"unknown ticker {t!r}")
    missing = [a for a in assets if a not in raw]
    if missing:
        raise InvalidOutput(f"'{key}' lacks {', '.join(missing)}")
    return raw


def check_views(answer: str, finish_reason: str | None, assets: Sequence[str]) -> Views:
    """Return S1's views and regime or raise :class:`InvalidOutput` (one line)."""
    obj = _answer(answer, finish_reason, "views")
    raw = _per_asset(obj, "views", assets)
    views = {}
    for a in assets:
        v = _number(raw[a], f"view of {a}")
        if not -1.0 <= v <= 1.0:
            raise InvalidOutput(f"view of {a} must be in [-1, 1], got {v:g}")
        views[a] = v
    regime = obj.get("regime")
    if regime not in REGIMES:
        raise InvalidOutput(f"regime must be bull, bear, sideways or crisis, got {regime!r}")
    return Views(views, regime)


def check_signals(
    answer: str, finish_reason: str | None, assets: Sequence[str]
) -> dict[str, str]:
    """Return S2's signal per asset or raise :class:`InvalidOutput` (one line)."""
    obj = _answer(answer, finish_reason, "signals")
    raw = _per_asset(obj, "signals", assets)
    out = {}
    for a in assets:
        s = raw[a]
        if s not in SIGNALS:
            raise InvalidOutput(f"signal of {a} must be buy, sell or hold, got {s!r}")
        out[a] = s
    return out


def check_weights(
    answer: str,
    finish_reason: str | None,
    obs: Observation,
    signals: Mapping[str, str],
    profile: Profile,
    enforce: bool = True,
) -> dict[str, float]:
    """Return S3's full target (every asset plus CASH) or raise :class:`InvalidOutput`.

    Rules: known tickers only, each with a buy signal and a price; weights finite and >= 0,
    summing to at most 1 (the rest is CASH); a sum above 1 by at most
    :data:`~agents.validation.SUM_TOLERANCE` (rounding, e.g. six weights of 0.1667) is
    renormalised to 1, as the other protocols do; with ``enforce``, the investor profile's
    limits kept (after renormalising).
    """
    obj = _answer(answer, finish_reason, "weights")
    raw = obj["weights"]
    if not isinstance(raw, Mapping):
        raise InvalidOutput(f"'weights' must be an object, got {type(raw).__name__}")
    out = {a: 0.0 for a in obs.assets}
    for t, x in raw.items():
        if t == CASH:
            continue  # CASH is what the others leave
        if t not in out:
            raise InvalidOutput(f"unknown ticker {t!r}")
        w = _number(x, f"weight of {t}")
        if w < 0:
            raise InvalidOutput(f"weight of {t} must be >= 0, got {w:g}")
        if w > 0 and signals.get(t) != "buy":
            raise InvalidOutput(
                f"{t} has signal {signals.get(t)!r} in S2: only buy-signal assets may get weight"
            )
        if w > 0 and t not in obs.prices:
            raise InvalidOutput(f"no price for {t}: cannot trade it now")
        out[t] = w
    total = math.fsum(out.values())
    if total > 1.0 + SUM_TOLERANCE + SUM_EPSILON:
        raise InvalidOutput(
            f"weights sum to {total:.4f}, more than 1 (tolerance {SUM_TOLERANCE:g})")
    if total > 1.0:
        out = {a: w / total for a, w in out.items()}
        total = math.fsum(out.values())
    out[CASH] = max(0.0, 1.0 - total)
    problem = profile.violation(out) if enforce else ""
    if problem:
        raise InvalidOutput(problem)
    return out


def target_breaches(target: Mapping[str, float], profile: Profile) -> dict[str, int]:
    """Return the profile alignment counts of one accepted target (the paper's after-the-fact
    check: 1 for each limit it breaks)."""
    eq, bc = profile.exposures(target)
    return {
        "answers": 1,
        "equity_cap": int(eq > profile.limits.equity_cap + TOLERANCE),
        "bond_floor": int(bc < profile.limits.bond_floor - TOLERANCE),
    }


def answer_breaches(errors: Sequence[str]) -> dict[str, int]:
    """Return how many of the weights stage's answers (``errors``: ``""`` for the valid one)
    broke the equity cap and the bond floor, for the profile alignment score."""
    return {
        "answers": len(errors),
        "equity_cap": sum(1 for e in errors if "equity cap of the" in e),
        "bond_floor": sum(1 for e in errors if "bond floor of the" in e),
    }


def check_risk(answer: str, finish_reason: str | None) -> Risk:
    """Return S5's rebalance decision and risk estimates or raise :class:`InvalidOutput`."""
    obj = _answer(answer, finish_reason, "rebalance")
    rebalance = obj["rebalance"]
    if not isinstance(rebalance, bool):
        raise InvalidOutput(f"'rebalance' must be true or false, got {rebalance!r}")
    var = _number(obj.get("var_95"), "var_95")
    dd = _number(obj.get("max_drawdown"), "max_drawdown")
    for name, v in (("var_95", var), ("max_drawdown", dd)):
        if not -1.0 <= v <= 0.0:
            raise InvalidOutput(f"{name} must be a negative fraction in [-1, 0], got {v:g}")
    r = obj.get("reasoning", "")
    return Risk(rebalance, var, dd, r if isinstance(r, str) else json.dumps(r, default=str))


def execution(obs: Observation, target: Mapping[str, float]) -> dict[str, float]:
    """Return S4: turnover (sum of |weight changes| over the assets), its cost and the drift."""
    changes = [abs(target.get(a, 0.0) - obs.weights.get(a, 0.0)) for a in obs.assets]
    turnover = math.fsum(changes)
    return {
        "turnover": turnover,
        "cost_usd": turnover * obs.value * COST_BPS / 1e4,
        "cost_bps": COST_BPS,
        "drift": max(changes, default=0.0),
    }


def risk_truth(rets: np.ndarray, weights: Sequence[float], drift: float) -> dict[str, Any]:
    """Return S5's figures by historical simulation over ``rets`` (``T x A``; CASH earns 0)."""
    if rets.shape[0] == 0:
        return {"var_95": None, "max_drawdown": None, "rebalance": drift > DRIFT_THRESHOLD}
    port = rets @ np.asarray(weights, dtype=float)
    nav = np.concatenate(([1.0], np.cumprod(1.0 + port)))
    dd = float(np.min(nav / np.maximum.accumulate(nav) - 1.0))
    var = historical_var(port, window=port.size, min_periods=1)
    return {"var_95": var, "max_drawdown": dd, "rebalance": drift > DRIFT_THRESHOLD}


class PortBenchAgent(StepwiseAgent):
    """An LLM agent following the PortBench five-stage workflow (see the module doc)."""

    protocol = PROTOCOL

    async def decide(self, obs: Observation) -> AgentDecision:
        """Run S1..S5 for ``obs``; any failed stage holds with the stage in the reason."""
        profile = Profile.of(self.cfg)
        assets = list(obs.assets)
        try:
            templates, version = load_prompt_set(PROTOCOL)
            rets = returns_panel(obs, assets, self.cfg.cov_window)
            views_text = string.Template(templates["views"]).substitute(
                self.context(obs, profile, rets)
            )
        except Exception as exc:
            log.exception("portbench.render_failed", agent=self.id, market=obs.market)
            return render_failed(exc)
        run = self.start(obs, version)
        if isinstance(run, AgentDecision):
            return run
        summary: dict[str, Any] = {
            "protocol": PROTOCOL, "profile": profile.name, "lookback": self.cfg.cov_window,
            "current": {a: obs.weights.get(a, 0.0) for a in [*assets, CASH]},
        }

        s1 = await self.run_step(
            run, "views", views_text, lambda a, f: check_views(a, f, assets),
            dump=lambda v: {"regime": v.regime, "views": dict(v.views)},
        )
        if not s1.ok:
            return self._failed(run, s1, version, summary)
        views: Views = s1.parsed
        summary["regime"], summary["views"] = views.regime, dict(views.views)

        signals_text = string.Template(templates["signals"]).substitute(
            views_prompt=views_text, regime=views.regime,
            views=json.dumps(views.views), tickers=", ".join(assets),
        )
        s2 = await self.run_step(run, "signals", signals_text,
                                 lambda a, f: check_signals(a, f, assets))
        if not s2.ok:
            return self._failed(run, s2, version, summary)
        signals: dict[str, str] = s2.parsed
        summary["signals"] = signals

        buys = [a for a in assets if signals[a] == "buy"]
        weights_text = string.Template(templates["weights"]).substitute(
            signals_prompt=signals_text, signals=json.dumps(signals),
            buys=", ".join(buys) or "none: answer empty weights, all in CASH",
            limits=profile.describe(),
        )
        enforce = self.cfg.enforce_profile
        s3 = await self.run_step(
            run, "weights", weights_text,
            lambda a, f: check_weights(a, f, obs, signals, profile, enforce),
        )
        if enforce:
            summary["alignment"] = answer_breaches([a.error for a in s3.attempts
                                                    if a.kind in ("ok", "invalid")])
        if not s3.ok:
            return self._failed(run, s3, version, summary)
        target: dict[str, float] = s3.parsed
        summary["weights"] = target
        if not enforce:
            summary["alignment"] = target_breaches(target, profile)

        s4 = execution(obs, target)
        summary["execution"] = s4
        risk_text = string.Template(templates["risk"]).substitute(
            weights_prompt=weights_text,
            weights=json.dumps({a: w for a, w in target.items() if w > 0}),
            turnover=f"{s4['turnover']:.1%}", cost_usd=f"{s4['cost_usd']:.2f}",
            cost_bps=f"{COST_BPS:g}", drift=f"{s4['drift']:.1%}",
        )
        s5 = await self.run_step(
            run, "risk", risk_text, check_risk,
            dump=lambda r: {"rebalance": r.rebalance, "var_95": r.var_95,
                            "max_drawdown": r.max_drawdown},
        )
        if not s5.ok:
            return self._failed(run, s5, version, summary)
        risk: Risk = s5.parsed
        summary["risk"] = {"rebalance": risk.rebalance, "var_95": risk.var_95,
                           "max_drawdown": risk.max_drawdown}
        truth = risk_truth(rets, [target[a] for a in assets], s4["drift"])
        summary["risk_truth"] = truth
        summary["rebalance_rule"] = self.cfg.rebalance_rule
        apply = truth["rebalance"] if self.cfg.rebalance_rule == "drift" else risk.rebalance
        summary["applied"] = apply
        common = self._common(run, version, summary)
        reasoning = redact_text(flat(risk.reasoning, 2000))
        if not apply:
            return AgentDecision(allocation=None, outcome="hold",
                                 reason="risk monitor: no rebalance", reasoning=reasoning,
                                 **common)
        return AgentDecision(allocation=target, outcome="ok", reasoning=reasoning, **common)

    def prompt_version(self, obs: Observation) -> str:
        """Return the version of the PortBench prompt set."""
        return load_prompt_set(PROTOCOL)[1]

    # -- rendering ------------------------------------------------------------------------------
    def context(self, obs: Observation, profile: Profile, rets: np.ndarray) -> dict[str, str]:
        """Return the placeholders of the S1 prompt."""
        cfg = self.cfg
        ctx = _Ctx(obs, UTC, {}, cfg.news_window, cfg.news_per_asset, 0)
        cr = obs.value / obs.initial_value - 1.0 if obs.initial_value else 0.0
        held = ", ".join(f"{a} {w:.1%}" for a, w in sorted(obs.weights.items()) if w > 0)
        account = (
            f"Value {obs.value:.2f} USD (started with {obs.initial_value:.2f} USD, return"
            f" {cr:+.2%}); current weights: {held or 'all cash'}."
        )
        classes = [profile.classes.get(a, a) for a in obs.assets]
        lines = []
        for j, a in enumerate(obs.assets):
            pp = obs.prices.get(a)
            price = f"{pp.price:.2f}" if pp is not None else "no price (cannot trade)"
            if rets.shape[0]:
                col = rets[:, j]
                ret = f"{float(np.prod(1.0 + col) - 1.0):+.2%}"
                vol = (f"{float(np.std(col, ddof=1)) * math.sqrt(YEAR_DAYS):.1%}"
                       if col.size > 1 else "n/a")
            else:
                ret = vol = "n/a"
            lines.append(f"{a} ({classes[j]}): {price}; return {ret}; volatility {vol};"
                         f" weight {obs.weights.get(a, 0.0):.1%}")
        intra, inter = class_correlations(rets, classes)
        return {
            "now": datetime.fromtimestamp(obs.decision_ts, tz=UTC).strftime("%Y-%m-%d %H:%M"),
            "profile": profile.describe(),
            "account": account,
            "window": str(rets.shape[0]),
            "assets": "\n".join(lines) or "(no assets)",
            "intra": intra,
            "inter": inter,
            "news": ctx.news_by_asset(),
            "tickers": ", ".join(obs.assets),
        }


def class_correlations(rets: np.ndarray, classes: Sequence[str]) -> tuple[str, str]:
    """Return the within-class and between-class mean correlation lines of ``rets``."""
    if rets.shape[0] < 2:
        return "  (not enough daily returns)", "  (not enough daily returns)"
    corr = corr_matrix(rets)
    names = sorted(set(classes))
    idx = {c: [j for j, k in enumerate(classes) if k == c] for c in names}
    intra = []
    for c in names:
        m = idx[c]
        pairs = [corr[i, j] for i in m for j in m if i < j]
        intra.append(f"  {c}: {np.mean(pairs):+.2f}" if pairs else f"  {c}: (single asset)")
    inter = []
    for x, c in enumerate(names):
        for d in names[x + 1:]:
            vals = [corr[i, j] for i in idx[c] for j in idx[d]]
            inter.append(f"  {c} / {d}: {np.mean(vals):+.2f}")
    return "\n".join(intra), "\n".join(inter) or "  (a single class)"
