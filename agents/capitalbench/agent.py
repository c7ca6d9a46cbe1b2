"""The CapitalBench protocol: one submission per model for a frozen round (seed 004).

A CapitalBench agent is not asked in the daemon's decision rounds. Its only call is
:meth:`CapitalBenchAgent.submit`: the exact prompt text of a frozen round package
(:mod:`agents.capitalbench.rounds`) is sent once, at temperature 0 (LiteLLM drops the parameter
where a provider does not support it) and without tools, through the shared LiteLLM path
(:meth:`agents.llm.LlmAgent.run_step`). Retries happen only on format or infrastructure failure (the
shared retry policy: malformed or schema-invalid JSON, truncated output, transport and provider
errors); a valid answer is never retried, whatever it chose. Every call, invalid ones included, is
kept with its raw text.

Submission formats (the round's manifest says which):

- ``portfolio``: ``{"portfolio": [{"option_id": id, "weight_pct": n}, ...],
  "portfolio_rationale": text}``: 1 to ``max_holdings`` distinct options, each weight a positive
  multiple of ``increment_pct``, summing to exactly 100.
- ``single_allocation``: ``{"selected_option_id": id, "rationale": text}``; the legacy
  multi-select fields (``selected_option_ids``, ``portfolio``) make it invalid.

``confidence`` (0..1) and ``key_risks`` (a list of strings) are optional in both; when present
they must have that shape. Unknown keys are ignored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from agents.base import AgentDecision, Observation
from agents.config import AgentConfig
from agents.llm import audit_trail
from agents.llm_output import InvalidOutput, extract_json
from agents.stepwise import StepwiseAgent, flat
from daemon.core.logs import redact_text

log = structlog.get_logger(__name__)

PROTOCOL = "capitalbench"
STEP = "submission"
#: Legacy multi-select fields that make a single-allocation answer invalid.
LEGACY_FIELDS = ("selected_option_ids", "selected_options", "portfolio")


@dataclass(frozen=True, slots=True)
class Rules:
    """What a valid submission of one round looks like (from its manifest)."""

    option_ids: tuple[str, ...]
    submission_format: str = "portfolio"
    max_holdings: int = 5
    increment_pct: int = 5


@dataclass(frozen=True, slots=True)
class Submission:
    """A valid submission: option id -> weight in percent (integers summing to 100)."""

    holdings: Mapping[str, int]
    rationale: str
    confidence: float | None = None
    key_risks: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the parsed submission as stored (sorted holdings)."""
        out: dict[str, Any] = {"holdings": dict(sorted(self.holdings.items())),
                               "rationale": self.rationale}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.key_risks:
            out["key_risks"] = list(self.key_risks)
        return out


@dataclass(frozen=True, slots=True)
class SubmissionResult:
    """One model's answer to one round: valid (``submission``) or not (``reason``), every call
    kept."""

    outcome: str
    """``ok``, ``invalid`` (answered badly), ``error`` (no usable answer) or ``paused``."""
    reason: str = ""
    submission: Submission | None = None
    calls: tuple[dict[str, Any], ...] = ()
    raw_responses: tuple[str, ...] = ()
    usage: Mapping[str, float] = field(default_factory=dict)
    template_version: str = ""


def _pct(value: Any, where: str, increment: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOutput(f"weight_pct of {where} is not a number: {value!r}")
    x = float(value)
    if not math.isfinite(x) or x != round(x):
        raise InvalidOutput(f"weight_pct of {where} must be a whole percent, got {value!r}")
    n = round(x)
    if n <= 0:
        raise InvalidOutput(f"weight_pct of {where} must be > 0, got {value!r}")
    if n > 100:
        raise InvalidOutput(f"weight_pct of {where} must be at most 100, got {value!r}")
    if n % increment:
        raise InvalidOutput(f"weight_pct of {where} must be a multiple of {increment}, got {n}")
    return n


def _extras(obj: Mapping[str, Any]) -> tuple[float | None, tuple[str, ...]]:
    conf = obj.get("confidence")
    if conf is not None:
        if isinstance(conf, bool) or not isinstance(conf, int | float) or not 0 <= conf <= 1:
            raise InvalidOutput(f"confidence must be a number from 0 to 1, got {conf!r}")
        conf = float(conf)
    risks = obj.get("key_risks", [])
    if not isinstance(risks, list) or not all(isinstance(r, str) for r in risks):
        raise InvalidOutput("key_risks must be a list of strings")
    return conf, tuple(risks)


def _text(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidOutput(f"'{key}' must be a non-empty string")
    return value


def check_submission(answer: str, finish_reason: str | None, rules: Rules) -> Submission:
    """Return the valid submission in ``answer`` or raise :class:`InvalidOutput` (one line)."""
    if finish_reason == "length":
        raise InvalidOutput("truncated output (finish_reason=length)")
    known = set(rules.option_ids)
    if rules.submission_format == "single_allocation":
        obj = extract_json(answer, "selected_option_id")
        legacy = [k for k in LEGACY_FIELDS if k in obj]
        if legacy:
            raise InvalidOutput(f"legacy multi-select field(s) not allowed: {', '.join(legacy)}")
        pick = obj["selected_option_id"]
        if not isinstance(pick, str) or pick not in known:
            raise InvalidOutput(f"unknown option {pick!r}")
        conf, risks = _extras(obj)
        return Submission({pick: 100}, _text(obj, "rationale"), conf, risks)
    obj = extract_json(answer, "portfolio")
    raw = obj["portfolio"]
    if not isinstance(raw, list):
        raise InvalidOutput(f"'portfolio' must be a list, got {type(raw).__name__}")
    if not 1 <= len(raw) <= rules.max_holdings:
        raise InvalidOutput(
            f"portfolio must hold 1 to {rules.max_holdings} options, got {len(raw)}")
    holdings: dict[str, int] = {}
    for item in raw:
        if not isinstance(item, Mapping):
            raise InvalidOutput(f"portfolio entry must be an object, got {item!r}")
        oid = item.get("option_id")
        if not isinstance(oid, str) or oid not in known:
            raise InvalidOutput(f"unknown option {oid!r}")
        if oid in holdings:
            raise InvalidOutput(f"option {oid} listed twice")
        holdings[oid] = _pct(item.get("weight_pct"), oid, rules.increment_pct)
    total = sum(holdings.values())
    if total != 100:
        raise InvalidOutput(f"weights must sum to exactly 100%, got {total}%")
    conf, risks = _extras(obj)
    return Submission(holdings, _text(obj, "portfolio_rationale"), conf, risks)


class CapitalBenchAgent(StepwiseAgent):
    """An LLM agent answering CapitalBench rounds (see the module doc)."""

    protocol = PROTOCOL

    def __init__(self, cfg: AgentConfig, **kw: Any) -> None:
        """Build the agent; its calls run at temperature 0 whatever ``cfg`` says."""
        super().__init__(cfg.model_copy(update={"temperature": 0.0}), **kw)

    async def decide(self, obs: Observation) -> AgentDecision:
        """Refuse: a CapitalBench agent answers frozen rounds only (never built into rounds)."""
        return AgentDecision(None, outcome="error",
                             reason="capitalbench agents answer CapitalBench rounds only")

    async def submit(self, prompt: str, rules: Rules, ts: float, version: str
                     ) -> SubmissionResult:
        """Send the frozen ``prompt`` (retries on format/infrastructure failure only)."""
        obs = Observation(agent=self.id, market="capitalbench", decision_ts=ts, assets=(),
                          prices={}, history={}, holdings={}, cash=0.0, value=0.0,
                          initial_value=0.0, weights={})
        run = self.prepare(obs, version)
        if isinstance(run, AgentDecision):
            return SubmissionResult(run.outcome, run.reason, template_version=version)
        run.deadline = time.monotonic() + self.decision_deadline
        step = await self.run_step(run, STEP, prompt,
                                   lambda a, f: check_submission(a, f, rules),
                                   dump=Submission.to_json)
        common = audit_trail(run.attempts, version)
        calls, raws, usage = common["calls"], common["raw_responses"], common["usage"]
        if step.ok:
            return SubmissionResult("ok", "", step.parsed, calls, raws, usage, version)
        last = step.attempts[-1] if step.attempts else None
        if step.stop_reason:
            outcome = "paused"
        else:
            outcome = "invalid" if last is not None and last.kind == "invalid" else "error"
        reason = f"{step.error} (attempt {len(step.attempts)} of {self.cfg.max_attempts})"
        log.info("capitalbench.submission", agent=self.id, outcome=outcome, reason=reason)
        return SubmissionResult(outcome, flat(redact_text(reason), 300), None, calls, raws,
                                usage, version)
