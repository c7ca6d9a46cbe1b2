"""The AlphaForgeBench protocol: the model writes a strategy function, the daemon runs it per bar.

A decision (one round of the equity market = one daily bar):

1. ``strategy`` (model call, only when due): with no strategy yet, or when the current version is
   older than ``strategy.regenerate_every`` (decision time), the model is asked for a new one.
   The answer ``{"strategy": {"code": "..."}}`` is validated
   (:func:`agents.alphaforgebench.sandbox.validate_code`)
   and retried like any invalid answer; the code is stored with the call (``parsed_json``: code
   and SHA-256, the version id) and loaded into a new sandboxed worker. A failed regeneration
   keeps the current version (the decision says so); without any version the agent holds.
2. execution (no call): the worker calls ``generate_signal(df)`` once per stock on the stock's
   last ``strategy.lookback`` daily bars (the daily closes plus the current price as today's
   bar; with the recorded OHLCV bars of a history recording, :func:`bars_of`). Signal 1 sets
   the stock's exposure to the returned position, -1 to 0, 0 keeps it; a stock whose call
   crashed, answered anything but numbers in range or was not answered keeps it too (recorded
   per stock). When the whole bar fails (timeout, worker death, an answer
   breaking the protocol) every stock keeps its exposure and is recorded as failed, the
   decision is ``invalid`` and the worker is started again at the next bar.

Multi-asset mapping: each of the N stocks of the universe has an equal sleeve of 1/N of the
account; a stock's target weight is exposure / N and the rest is CASH. A kept exposure is the
stock's current weight (no trade). Should kept weights that drifted up push the total above 1,
every stock weight is scaled down by the same factor.

The decision's ``raw_output`` is a JSON summary: the strategy version, whether it was generated
now, each stock's signal and position, the failures and the resulting exposures; the report
(:mod:`agents.alphaforgebench.report`) groups the live results by version from it.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from agents.alphaforgebench.factor_library import FACTORS
from agents.alphaforgebench.sandbox import (
    InvalidStrategy,
    SandboxError,
    SandboxLimits,
    StrategyWorker,
    check_result,
    code_sha256,
    validate_code,
)
from agents.base import CASH, AgentDecision, Observation
from agents.llm import DecisionRun, audit_trail, render_failed
from agents.llm_output import InvalidOutput, extract_json
from agents.stepwise import StepwiseAgent, flat, load_prompt_set

log = structlog.get_logger(__name__)

PROTOCOL = "alphaforgebench"
NY = ZoneInfo("America/New_York")
LOAD_FAILED = "the strategy does not load"

@dataclass(frozen=True, slots=True)
class StrategyCode:
    """A validated strategy answer: the code and its version id."""

    code: str
    sha256: str

    def to_json(self) -> dict[str, str]:
        """Return what the call record stores."""
        return {"code": self.code, "sha256": self.sha256}


def check_strategy(answer: str, finish_reason: str | None) -> StrategyCode:
    """Return the strategy of an answer or raise :class:`InvalidOutput` (one line)."""
    if finish_reason == "length":
        raise InvalidOutput("truncated output (finish_reason=length)")
    obj = extract_json(answer, "strategy")
    inner = obj["strategy"]
    code = inner.get("code") if isinstance(inner, dict) else None
    if not isinstance(code, str):
        raise InvalidOutput("'strategy' must be an object with the code as a string in 'code'")
    try:
        validate_code(code)
    except InvalidStrategy as exc:
        raise InvalidOutput(f"strategy code rejected: {exc}") from None
    return StrategyCode(code, code_sha256(code))


#: What the prompt says of the price columns: closes only, or recorded OHLCV bars.
PRICE_CLOSES = ("Only daily closes are recorded: open, high and low equal\n"
                "  the close and volume is NaN.")
PRICE_OHLCV = ("Each past day is its recorded daily bar (high, low and\n"
               "  volume as the exchange reported them; a day without a recorded bar has NaN\n"
               "  open, high, low and volume). The current bar is complete when the session has\n"
               "  closed; before the close its open, high and low are the price now and its\n"
               "  volume is NaN.")


def factors_text() -> str:
    """Return the factor list of the prompt (the library of
    :mod:`agents.alphaforgebench.factor_library`)."""
    return "\n".join(f"  - {name}: {what}" for name, what in FACTORS)


def bars_of(obs: Observation, lookback: int) -> dict[str, dict[str, list[Any]]]:
    """Return each priced stock's last ``lookback`` daily bars: closes plus the current price.

    A stock with recorded OHLCV bars (``obs.bars``) also gets ``open``/``high``/``low``/
    ``volume`` lists (``None``: unknown, NaN in the frame): a past day takes its bar (none
    recorded: unknown), the current row the bar of the price's day once complete, else the
    price now as open, high and low and an unknown volume. A stock without bars gets the
    closes only (the frame's open, high and low are then the close).
    """
    out: dict[str, dict[str, list[Any]]] = {}
    for a in obs.assets:
        pp = obs.prices.get(a)
        if pp is None:
            continue
        hist = [p for p in obs.history.get(a, ()) if p.ts < pp.ts][-(lookback - 1):]
        row: dict[str, list[Any]] = {"ts": [p.ts for p in hist] + [pp.ts],
                                     "close": [p.price for p in hist] + [pp.price]}
        recorded = obs.bars.get(a)
        if recorded:
            by_day = {b.day: b for b in recorded}
            rows = [by_day.get(_ny_day(p.ts)) for p in hist]
            now = by_day.get(_ny_day(pp.ts))
            done = now if now is not None and now.ts <= pp.ts else None
            rows.append(done)
            for k in ("open", "high", "low", "volume"):
                row[k] = [None if b is None else getattr(b, k) for b in rows]
            if done is None:
                row["open"][-1] = row["high"][-1] = row["low"][-1] = pp.price
        out[a] = row
    return out


def _ny_day(ts: float) -> str:
    """Return the New York date of ``ts`` (a bar's session day), ISO."""
    return datetime.fromtimestamp(ts, NY).date().isoformat()


def target_weights(obs: Observation, answers: dict[str, tuple[int, float]]
                   ) -> tuple[dict[str, float], dict[str, float]]:
    """Return (target weights with CASH, exposure per stock) for the valid ``answers``."""
    n = len(obs.assets)
    weights: dict[str, float] = {}
    for a in obs.assets:
        current = obs.weights.get(a, 0.0)
        got = answers.get(a)
        if got is None or got[0] == 0 or a not in obs.prices:
            weights[a] = current
        elif got[0] == 1:
            weights[a] = got[1] / n
        else:
            weights[a] = 0.0
    total = math.fsum(weights.values())
    if total > 1.0:
        weights = {a: w / total for a, w in weights.items()}
    exposure = {a: w * n for a, w in weights.items()}
    weights[CASH] = max(0.0, 1.0 - math.fsum(weights.values()))
    return weights, exposure


class AlphaForgeAgent(StepwiseAgent):
    """An LLM agent whose model writes the strategy the daemon runs (see the module doc)."""

    protocol = PROTOCOL

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Build the agent; the strategy (and its worker) come with the first decision."""
        super().__init__(*args, **kwargs)
        s = self.cfg.strategy
        self.limits = SandboxLimits(memory_mb=s.memory_mb, cpu_s=s.cpu_seconds,
                                    timeout_s=s.timeout)
        self.current: StrategyCode | None = None
        self.created_ts: float | None = None
        self.worker: StrategyWorker | None = None
        self.previous: tuple[StrategyCode, float] | None = None

    def prompt_version(self, obs: Observation) -> str:
        """Return the version of the AlphaForgeBench prompt set."""
        return load_prompt_set(PROTOCOL)[1]

    def render_strategy_prompt(self, ohlcv: bool = False) -> tuple[str, str]:
        """Return (prompt text, prompt set version) of the strategy step (``ohlcv``: the
        frames carry recorded OHLCV bars)."""
        templates, version = load_prompt_set(PROTOCOL)
        text = string.Template(templates["strategy"]).substitute(
            lookback=self.cfg.strategy.lookback, factors=factors_text(),
            query=self.cfg.strategy.query, price=PRICE_OHLCV if ohlcv else PRICE_CLOSES)
        return text, version

    def due(self, ts: float) -> bool:
        """Return whether a new strategy version is to be asked for at decision time ``ts``."""
        if self.current is None or self.created_ts is None:
            return True
        every = self.cfg.strategy.regenerate_every
        return every > 0 and ts - self.created_ts >= every

    async def install(self, strategy: StrategyCode, ts: float) -> None:
        """Make ``strategy`` the current version (a new worker; the old one is stopped)."""
        old = self.worker
        if self.current is not None and self.created_ts is not None:
            self.previous = (self.current, self.created_ts)
        self.current, self.created_ts = strategy, ts
        self.worker = StrategyWorker(strategy.code, self.limits)
        if old is not None:
            await old.close()
        log.info("alphaforge.strategy", agent=self.id, version=strategy.sha256[:12], ts=ts)

    async def restore_from_store(
            self, fetchall: Callable[[str, Sequence[Any]], Awaitable[list[tuple[Any, ...]]]]
    ) -> bool:
        """Take up the version the last stored decision ran (after a restart); True if found.

        The version id and its start come from that decision's summary, the code from the
        stored call that produced it (checked against the id).
        """
        rows = await fetchall(
            "SELECT raw_output FROM decisions WHERE agent=? AND market='equity'"
            " AND raw_output LIKE ? ORDER BY scheduled_ts DESC LIMIT 1",
            (self.id, '%"strategy_version"%'))
        if not rows:
            return False
        try:
            summary = json.loads(rows[0][0])
            version, since = str(summary["strategy_version"]), float(summary["strategy_since"])
        except (TypeError, ValueError, KeyError):
            return False
        calls = await fetchall(
            "SELECT parsed_json FROM llm_calls WHERE agent=? AND step='strategy'"
            " AND outcome='ok' AND parsed_json LIKE ?", (self.id, f"%{version}%"))
        for (parsed,) in calls:
            code = json.loads(parsed).get("code")
            if isinstance(code, str) and code_sha256(code) == version:
                self.current, self.created_ts = StrategyCode(code, version), since
                self.worker = StrategyWorker(code, self.limits)
                log.info("alphaforge.strategy_restored", agent=self.id, version=version[:12])
                return True
        return False

    async def revert(self) -> None:
        """Drop the current version for the previous one (none: the next bar asks anew)."""
        if self.worker is not None:
            await self.worker.close()
        if self.previous is None:
            self.current = self.created_ts = self.worker = None
            return
        (self.current, self.created_ts), self.previous = self.previous, None
        self.worker = StrategyWorker(self.current.code, self.limits)

    async def aclose(self) -> None:
        """Stop the strategy worker."""
        if self.worker is not None:
            await self.worker.close()

    async def decide(self, obs: Observation) -> AgentDecision:
        """Renew the strategy when due, then run it on the current bar of every stock."""
        try:
            text, version = self.render_strategy_prompt(ohlcv=bool(obs.bars))
        except Exception as exc:
            log.exception("alphaforge.render_failed", agent=self.id, market=obs.market)
            return render_failed(exc)
        summary: dict[str, Any] = {"protocol": PROTOCOL}
        run: DecisionRun | None = None
        if self.due(obs.decision_ts):
            started = self.start(obs, version)
            if isinstance(started, AgentDecision):
                if self.current is None:
                    return started
                summary["regeneration_failed"] = started.reason
            else:
                run = started
                step = await self.run_step(run, "strategy", text, check_strategy,
                                           dump=StrategyCode.to_json)
                if step.ok:
                    await self.install(step.parsed, obs.decision_ts)
                    summary["generated"] = True
                elif self.current is None:
                    return self._failed(run, step, version, summary)
                else:
                    summary["regeneration_failed"] = flat(step.error, 300)
        assert self.current is not None and self.worker is not None
        summary["strategy_version"] = self.current.sha256
        summary["strategy_since"] = self.created_ts
        bars = bars_of(obs, self.cfg.strategy.lookback)
        try:
            raw = await self.worker.run_bar(bars)
        except SandboxError as exc:
            reason = f"strategy {self.current.sha256[:12]}: {exc}; holding"
            summary["bar_failed"] = str(exc)
            summary["failed"] = {a: flat(str(exc), 200) for a in sorted(bars)}
            if str(exc).startswith(LOAD_FAILED):
                await self.revert()  # a version that cannot load is never kept
            return self._hold(run, version, summary, reason)
        answers: dict[str, tuple[int, float]] = {}
        failed: dict[str, str] = {}
        for a in sorted(bars):  # every stock asked: one not answered is a failure too
            try:
                answers[a] = check_result(raw.get(a))
            except ValueError as exc:
                failed[a] = flat(str(exc), 200)
        summary["signals"] = {a: list(v) for a, v in answers.items()}
        summary["failed"] = failed
        if failed and not answers:
            reason = (f"strategy {self.current.sha256[:12]}: failed on every stock"
                      f" ({next(iter(failed.values()))}); holding")
            return self._hold(run, version, summary, reason)
        weights, exposure = target_weights(obs, answers)
        summary["exposure"] = exposure
        reason = ("" if not failed else
                  f"strategy failed on {', '.join(sorted(failed))} (held): "
                  f"{next(iter(failed.values()))}")
        common = (self._common(run, version, summary) if run is not None
                  else _no_calls(version, summary))
        return AgentDecision(allocation=weights, outcome="ok", reason=flat(reason, 300),
                             **common)

    def _hold(self, run: DecisionRun | None, version: str, summary: dict[str, Any],
              reason: str) -> AgentDecision:
        if run is not None:
            return self._held(run, reason, version, summary)
        log.info("llm.decision", agent=self.id, outcome="invalid", reason=reason)
        return AgentDecision(allocation=None, outcome="invalid", reason=flat(reason, 300),
                             **_no_calls(version, summary))


def _no_calls(version: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Return the audit fields of a decision that made no model call."""
    common = audit_trail([], version)
    common["raw_output"] = json.dumps(summary, sort_keys=True)
    return common
