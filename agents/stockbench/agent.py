"""The StockBench protocol: overview -> selection -> fundamentals -> dollar orders -> execution.

Steps of one decision (each model call is stored with its step name, see :mod:`agents.protocols`):

1. ``overview``: the model reads every stock (opening price, its position, past actions, news)
   and answers ``{"selected": [tickers]}``: the stocks it wants fundamentals for.
2. ``decision``: the same overview plus the fundamentals of the selected stocks; the model answers
   ``{"decisions": {ticker: {"action": "increase" | "decrease" | "hold", "target_usd": x}}}``,
   ``target_usd`` being the dollar value the position should have after trading. Stocks left out
   are held.
3. execution (no model call): dollars become shares at the current (opening) price. When the
   targets of all stocks exceed the account's value, the model is told by how much and asked to
   revise (steps ``revision_1``, ``revision_2``, ...): with ``revision_rounds = "until_fit"``
   (the default, the paper's) until the orders fit, a revision call being refused only by the
   decision's deadline or the daily budget (the step then fails and the agent holds); with a
   number N, after the N-th revision that still does not fit the agent holds (outcome
   ``invalid``, the reason names ``execution``).

The orders become the target weights the ledger applies (``target / account value``, held
stocks at their current weight, the rest in CASH); the configured cost model applies.

Fundamentals come from the observation (the latest snapshot of :mod:`feeds.fundamentals` received
before the decision); a figure it lacks is named unavailable in the prompt. Without a 52-week
range from the source, the range is computed from the daily closes the observation holds and says
how many sessions it covers.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from agents.base import CASH, AgentDecision, Observation
from agents.llm import DecisionRun, render_failed
from agents.llm_output import InvalidOutput, extract_json
from agents.prompting import _Ctx
from agents.stepwise import StepwiseAgent, flat, load_prompt_set
from daemon.core.logs import redact_text

log = structlog.get_logger(__name__)

PROTOCOL = "stockbench"
ACTIONS = ("increase", "decrease", "hold")
#: Relative slack on "targets may not exceed the account value" (float rounding only).
FIT_TOLERANCE = 1e-9
#: Span of the "52-week" range in seconds (365 days).
YEAR_S = 365 * 86_400.0
_EASTERN = ZoneInfo("America/New_York")


def _fmt_cap(x: float) -> str:
    return f"{x / 1e9:,.1f} billion USD" if x >= 1e9 else f"{x / 1e6:,.1f} million USD"


#: The fundamentals shown per selected stock: (normalised name, label, format).
FIGURES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("market_cap_usd", "market capitalisation", _fmt_cap),
    ("pe_ratio", "P/E ratio (trailing)", lambda x: f"{x:.2f}"),
    ("dividend_yield_pct", "dividend yield", lambda x: f"{x:.2f}%"),
    ("dividend_per_share_annual", "dividends per share, last 12 months",
     lambda x: f"{x:.2f} USD"),
)


@dataclass(frozen=True, slots=True)
class Selection:
    """The overview step's answer: the tickers to analyse in depth."""

    tickers: tuple[str, ...]
    reasoning: str


@dataclass(frozen=True, slots=True)
class Orders:
    """The decision step's answer: per-stock action and dollar target (holds have none)."""

    actions: Mapping[str, str]
    targets: Mapping[str, float]
    reasoning: str

    def to_json(self) -> dict[str, Any]:
        """Return the orders as stored (sorted, JSON-ready)."""
        return {
            "decisions": {
                t: {"action": a, **({"target_usd": self.targets[t]} if t in self.targets else {})}
                for t, a in sorted(self.actions.items())
            }
        }


def _reasoning(obj: Mapping[str, Any]) -> str:
    r = obj.get("reasoning", "")
    return r if isinstance(r, str) else json.dumps(r, ensure_ascii=False, default=str)


def _answer(answer: str, finish_reason: str | None, key: str) -> dict[str, Any]:
    if finish_reason == "length":
        raise InvalidOutput("truncated output (finish_reason=length)")
    return extract_json(answer, key)


def check_selection(answer: str, finish_reason: str | None, obs: Observation) -> Selection:
    """Return the overview step's selection or raise :class:`InvalidOutput` (one line)."""
    obj = _answer(answer, finish_reason, "selected")
    raw = obj["selected"]
    if not isinstance(raw, list):
        raise InvalidOutput(f"'selected' must be a list of tickers, got {type(raw).__name__}")
    known = set(obs.assets)
    seen: list[str] = []
    for t in raw:
        if not isinstance(t, str):
            raise InvalidOutput(f"ticker must be a string, got {t!r}")
        if t not in known:
            raise InvalidOutput(f"unknown ticker {t!r}")
        if t in seen:
            raise InvalidOutput(f"ticker {t} selected twice")
        seen.append(t)
    return Selection(tuple(seen), _reasoning(obj))


def current_values(obs: Observation) -> dict[str, float]:
    """Return the dollar value of every stock position at the current marks."""
    return {a: obs.weights.get(a, 0.0) * obs.value for a in obs.assets}


def check_orders(answer: str, finish_reason: str | None, obs: Observation) -> Orders:
    """Return the decision step's orders or raise :class:`InvalidOutput` (one line).

    Rules: ``decisions`` maps known tickers to objects with ``action`` (increase, decrease, hold)
    and, unless holding, ``target_usd``: a finite number >= 0, above the position's current value
    for an increase and below it for a decrease; a stock without a price cannot be traded. Other
    keys of an order are ignored.
    """
    obj = _answer(answer, finish_reason, "decisions")
    raw = obj["decisions"]
    if not isinstance(raw, Mapping):
        raise InvalidOutput(f"'decisions' must be an object, got {type(raw).__name__}")
    known = set(obs.assets)
    values = current_values(obs)
    actions: dict[str, str] = {}
    targets: dict[str, float] = {}
    for t, order in raw.items():
        if t not in known:
            raise InvalidOutput(f"unknown ticker {t!r}")
        if not isinstance(order, Mapping):
            raise InvalidOutput(f"order of {t} must be an object, got {type(order).__name__}")
        action = order.get("action")
        if action not in ACTIONS:
            raise InvalidOutput(f"action of {t} must be increase, decrease or hold, got {action!r}")
        actions[t] = action
        if action == "hold":
            continue
        target = order.get("target_usd")
        if isinstance(target, bool) or not isinstance(target, int | float):
            raise InvalidOutput(f"target_usd of {t} is not a number: {target!r}")
        try:
            x = float(target)
        except OverflowError:
            raise InvalidOutput(f"target_usd of {t} is out of range") from None
        if not math.isfinite(x) or x < 0:
            raise InvalidOutput(f"target_usd of {t} must be finite and >= 0, got {target!r}")
        if t not in obs.prices:
            raise InvalidOutput(f"no price for {t}: cannot trade it now")
        now = values[t]
        if action == "increase" and not x > now:
            raise InvalidOutput(
                f"increase of {t} needs target_usd above its current {now:.2f} USD, got {x:.2f}"
            )
        if action == "decrease" and not x < now:
            raise InvalidOutput(
                f"decrease of {t} needs target_usd below its current {now:.2f} USD, got {x:.2f}"
            )
        targets[t] = x
    return Orders(actions, targets, _reasoning(obj))


def execution_problem(orders: Orders, obs: Observation) -> str:
    """Return why ``orders`` cannot be executed (``""`` when they fit the account)."""
    values = current_values(obs)
    need = math.fsum(orders.targets.get(a, v) for a, v in values.items())
    if need > obs.value * (1.0 + FIT_TOLERANCE):
        buys = math.fsum(max(0.0, x - values[a]) for a, x in orders.targets.items())
        sells = math.fsum(max(0.0, values[a] - x) for a, x in orders.targets.items())
        return (
            f"the positions would total {need:.2f} USD but the account is worth {obs.value:.2f}"
            f" USD: buying {buys:.2f} USD needs cash {obs.cash:.2f} USD plus sales {sells:.2f}"
            f" USD, {need - obs.value:.2f} USD short"
        )
    return ""


def to_weights(orders: Orders, obs: Observation) -> dict[str, float]:
    """Return the target weights (every stock plus CASH) that carry out fitting ``orders``."""
    value = obs.value
    out = {
        a: (orders.targets[a] / value if a in orders.targets else obs.weights.get(a, 0.0))
        for a in obs.assets
    }
    out[CASH] = max(0.0, 1.0 - math.fsum(out.values()))
    return out


class StockBenchAgent(StepwiseAgent):
    """An LLM agent following the StockBench workflow (see the module doc)."""

    protocol = PROTOCOL

    async def decide(self, obs: Observation) -> AgentDecision:
        """Run the workflow for ``obs``; any failed step holds with the step in the reason."""
        try:
            templates, version = load_prompt_set(PROTOCOL)
            ctx = self.context(obs)
            overview = string.Template(templates["overview"]).substitute(ctx)
        except Exception as exc:
            log.exception("stockbench.render_failed", agent=self.id, market=obs.market)
            return render_failed(exc)
        run = self.start(obs, version)
        if isinstance(run, AgentDecision):
            return run
        summary: dict[str, Any] = {"protocol": PROTOCOL}

        picked = await self.run_step(
            run, "overview", overview,
            lambda a, f: check_selection(a, f, obs),
            dump=lambda s: {"selected": list(s.tickers)},
        )
        if not picked.ok:
            return self._failed(run, picked, version, summary)
        selection: Selection = picked.parsed
        summary["selected"] = list(selection.tickers)

        decision_text = string.Template(templates["decision"]).substitute(
            ctx,
            selected=", ".join(selection.tickers) or "(none)",
            selection_reasoning=flat(selection.reasoning, 600) or "(none given)",
            fundamentals=self.fundamentals(obs, selection.tickers),
        )

        def check(a: str, f: str | None) -> Orders:
            return check_orders(a, f, obs)

        step = await self.run_step(run, "decision", decision_text, check, dump=Orders.to_json)
        rounds = self.cfg.revision_rounds
        limit = None if rounds == "until_fit" else rounds
        k = 0
        while True:
            k += 1
            if not step.ok:
                return self._failed(run, step, version, summary)
            orders: Orders = step.parsed
            summary["orders"] = orders.to_json()["decisions"]
            problem = execution_problem(orders, obs)
            summary["revisions"] = k - 1
            if not problem:
                return self._executed(run, orders, version, summary)
            summary["execution"] = problem
            if limit is not None and k > limit:
                reason = (
                    f"step execution: {problem} (after {k - 1} revision(s)); holding"
                )
                return self._held(run, reason, version, summary)
            revision = string.Template(templates["revision"]).substitute(
                round=k,
                of="" if limit is None else f" of {limit}",
                after=("Orders that still do not fit are sent back again, until they fit."
                       if limit is None else
                       f"If the orders still cannot be executed after revision {limit}, the"
                       " portfolio is kept as it is today."),
                problem=problem,
                previous=json.dumps(orders.to_json()["decisions"], sort_keys=True),
            )
            step = await self.run_step(
                run, f"revision_{k}", decision_text + "\n" + revision, check, dump=Orders.to_json
            )

    def prompt_version(self, obs: Observation) -> str:
        """Return the version of the StockBench prompt set."""
        return load_prompt_set(PROTOCOL)[1]

    # -- rendering ------------------------------------------------------------------------------
    def context(self, obs: Observation) -> dict[str, str]:
        """Return the placeholders shared by the overview and decision prompts."""
        cfg = self.cfg
        ctx = _Ctx(obs, _EASTERN, {}, cfg.news_window, cfg.news_per_asset, 0)
        return {
            "now": _fmt_ts(obs.decision_ts),
            "timezone": "US Eastern time",
            "account": self.account(obs),
            "stocks": self.stocks(obs),
            "action_days": str(cfg.action_days),
            "actions": self.actions(obs),
            "news": ctx.news_by_asset(),
            "tickers": ", ".join(obs.assets),
            "value": f"{obs.value:.2f}",
        }

    @staticmethod
    def account(obs: Observation) -> str:
        """Return the ACCOUNT block: value, cash and return since the start."""
        cr = obs.value / obs.initial_value - 1.0 if obs.initial_value else 0.0
        return (
            f"Account value {obs.value:.2f} USD: cash {obs.cash:.2f} USD, stocks"
            f" {obs.value - obs.cash:.2f} USD. Started with {obs.initial_value:.2f} USD"
            f" (return so far {cr * 100:+.2f}%)."
        )

    @staticmethod
    def stocks(obs: Observation) -> str:
        """Return one line per stock: opening price, previous close and position."""
        values = current_values(obs)
        lines = []
        for a in obs.assets:
            pp = obs.prices.get(a)
            price = f"price {pp.price:.2f}" if pp is not None else "no price today (cannot trade)"
            hist = obs.history.get(a, ())
            prev = f", previous close {hist[-1].price:.2f}" if hist else ""
            shares = obs.holdings.get(a, 0.0)
            pos = (
                f"{shares:.4f} shares = {values[a]:.2f} USD"
                f" ({obs.weights.get(a, 0.0) * 100:.1f}% of the account)"
                if shares
                else "no position"
            )
            lines.append(f"{a}: {price}{prev}; position {pos}")
        return "\n".join(lines) if lines else "(no stocks)"

    def actions(self, obs: Observation) -> str:
        """Return the per-stock changes of the applied allocations of the last ``action_days``."""
        start = obs.decision_ts - self.cfg.action_days * 86_400.0
        past = list(obs.recent_allocations)
        lines = []
        for i, p in enumerate(past):
            if p.ts < start:
                continue
            before = past[i - 1].weights if i > 0 else {}
            changes = []
            for a in obs.assets:
                w0, w1 = before.get(a, 0.0), p.weights.get(a, 0.0)
                if abs(w1 - w0) > 1e-6:
                    verb = "increase" if w1 > w0 else "decrease"
                    changes.append(f"{a} {verb} {w0 * 100:.1f}% -> {w1 * 100:.1f}%")
            lines.append(f"  {_fmt_ts(p.ts)}: " + ("; ".join(changes) or "no change"))
        return "\n".join(lines) if lines else "  (none)"

    @staticmethod
    def fundamentals(obs: Observation, tickers: tuple[str, ...]) -> str:
        """Return the fundamentals block of ``tickers`` (what is unavailable is said so)."""
        if not tickers:
            return "(no stock selected)"
        lines = []
        for t in tickers:
            snap = obs.fundamentals.get(t)
            if snap is None:
                lines.append(f"{t}: (no fundamentals received)")
                missing = "unavailable (no fundamentals source data)"
                metrics: Mapping[str, float] = {}
            else:
                lines.append(f"{t}: (as of {_fmt_ts(snap.ts)}, source {snap.source or 'n/a'})")
                missing = "unavailable (not given by the source)"
                metrics = snap.metrics
            for key, label, fmt in FIGURES:
                x = metrics.get(key)
                lines.append(f"  {label}: {fmt(x) if x is not None else missing}")
            high, low = metrics.get("week52_high"), metrics.get("week52_low")
            if high is not None and low is not None:
                lines.append(f"  52-week range: {low:.2f} - {high:.2f}")
            else:
                lines.append(f"  {_range_line(obs, t)}")
        return "\n".join(lines)

    # -- outcomes -------------------------------------------------------------------------------
    def _executed(
        self, run: DecisionRun, orders: Orders, version: str, summary: dict[str, Any]
    ) -> AgentDecision:
        summary["execution"] = "ok"
        common = self._common(run, version, summary)
        if not orders.targets:
            return AgentDecision(
                allocation=None, outcome="hold", reason="every stock held",
                reasoning=redact_text(orders.reasoning), **common,
            )
        return AgentDecision(
            allocation=to_weights(orders, run.obs), outcome="ok",
            reasoning=redact_text(orders.reasoning), **common,
        )

def _range_line(obs: Observation, t: str) -> str:
    """Return the 52-week range of ``t`` from the closes the observation holds."""
    lo_ts = obs.decision_ts - YEAR_S
    closes = [p for p in obs.history.get(t, ()) if p.ts >= lo_ts]
    pp = obs.prices.get(t)
    prices = [p.price for p in closes] + ([pp.price] if pp is not None else [])
    if not prices:
        return "52-week range: unavailable (no prices)"
    span = f"{min(prices):.2f} - {max(prices):.2f}"
    if closes and closes[0].ts - lo_ts <= 7 * 86_400.0:
        return f"52-week range (daily closes): {span}"
    return (
        f"52-week range: unavailable; range over the {len(closes)} daily close(s) available:"
        f" {span}"
    )


def _fmt_ts(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).astimezone(_EASTERN).strftime("%Y-%m-%d %H:%M")
