"""An LLM agent called through LiteLLM, with strict validation, retries, audit trail and budget.

Retry policy (as CapitalBench): a decision is retried, up to ``max_attempts`` calls with a small
exponential backoff, only for infrastructure or format failures: transport errors, timeouts,
HTTP 408/409/429/5xx, truncated output (``finish_reason == "length"``), unparsable or
schema-invalid output. A valid answer is never retried, whatever it chose. Other provider errors
(authentication, bad request, unknown model...) stop at once. After the last failed attempt the
decision has no allocation and ``outcome`` is ``invalid`` (the model answered, badly) or ``error``
(no usable response); the decision round then holds the current portfolio.

Waits between attempts: a 429 answer's ``Retry-After`` (or ``retry-after-ms``) is honoured, up to
``retry_after_cap``; otherwise the jittered backoff. A retry after a rejected answer (format or
schema) adds the configured ``retry_feedback`` line, naming what was wrong, to the prompt.

Every attempt is recorded in :attr:`AgentDecision.calls` and its response text in
:attr:`AgentDecision.raw_responses` (``""`` when there was none), in attempt order. The text keeps
everything the model sent: the content (a separate reasoning in front, in ``<think>`` tags), each
tool call as ``<tool_call name="...">arguments</tool_call>`` and a refusal as
``<refusal>...</refusal>``. The answer is read from the content and the tool-call arguments; a
refusal is an invalid answer. Every configured secret (and whatever logs redact) is replaced by
``[redacted]`` in the texts of a decision before it leaves the agent.

Daily budget: spend (tokens in + out, and USD where LiteLLM knows the price) is summed per UTC day
of the observation's decision time. Once a limit is reached no model call is made and the
decision is ``paused``. :meth:`LlmAgent.restore_usage` restores a day's spend after a restart.

LiteLLM is imported lazily (it takes seconds) when the first :class:`LlmAgent` is built, with
``LITELLM_LOCAL_MODEL_COST_MAP=True`` so that no price list is fetched from the network. A
SIGHUP reload builds agents in a worker thread (and imports LiteLLM there for CapitalBench's
LLM agents, rebuilt later on the loop), so the import never holds the running loop.

Why one module over 500 lines: one class, the LLM agent, whose retries, budgets, usage accounting
and redaction wrap every model call together; answer parsing is :mod:`agents.llm_output`, prompts
:mod:`agents.prompting`, multi-step protocols :mod:`agents.stepwise`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import structlog

from agents.base import AgentDecision, Observation
from agents.config import AgentConfig
from agents.llm_output import InvalidOutput, check_response
from agents.prompting import RenderedPrompt, load_prompt_file, render_prompt
from agents.validation import SUM_TOLERANCE
from daemon.core.durations import retry_after_seconds
from daemon.core.fields import is_loopback_url
from daemon.core.logs import redact_text, register_secret

log = structlog.get_logger(__name__)

#: The key sent to a model server at a loopback ``api_base`` when no key is configured (not a
#: secret: LiteLLM's OpenAI-compatible providers only need some key to make the call).
LOOPBACK_PLACEHOLDER_KEY = "paperarena-loopback-no-key"

#: HTTP statuses worth retrying (timeout, conflict, rate limit); 5xx are retried too.
RETRY_STATUSES = frozenset({408, 409, 429})
#: Seconds added to the configured timeout before the call is cancelled from outside.
TIMEOUT_GRACE_S = 5.0
#: Longest error text kept in a call record.
ERROR_CHARS = 500

_litellm: ModuleType | None = None


def load_litellm() -> ModuleType:
    """Import LiteLLM once, offline (local price map, no debug banner)."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            import litellm
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError("LLM agents need LiteLLM: pip install 'paperarena[llm]'") from exc
        litellm.suppress_debug_info = True
        litellm.telemetry = False
        _litellm = litellm
    return _litellm


def utc_day(ts: float) -> str:
    """Return the UTC calendar day (``YYYY-MM-DD``) of the epoch time ``ts``."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d")


def usd_digits(budget: float) -> int:
    """Return the decimals that show ``budget`` USD with 3 significant digits (at least 4)."""
    if not budget > 0 or not math.isfinite(budget):
        return 4
    return max(4, 2 - math.floor(math.log10(budget)))


def _one_line(s: str, limit: int = ERROR_CHARS) -> str:
    flat = " ".join(str(s).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(slots=True)
class _Attempt:
    """The outcome of one model call."""

    record: dict[str, Any]
    content: str
    kind: str
    """``ok``, ``invalid`` (bad output, retry), ``error`` (infra, retry) or ``fatal`` (stop)."""
    error: str = ""
    parsed: Any = None
    retry_after: float | None = None
    """Seconds the provider asked to wait (a 429's ``Retry-After``), when it said."""


#: A step's validator: (answer text, finish reason) -> parsed value, or raise InvalidOutput.
Check = Callable[[str, str | None], Any]


@dataclass(slots=True)
class DecisionRun:
    """One decision in progress: its observation, budget day, key and every call so far."""

    obs: Observation
    day: str
    api_key: str | None
    attempts: list[_Attempt] = field(default_factory=list)
    stop_reason: str = ""
    """Why calls stopped early (the daily budget), ``""`` if they did not."""
    deadline: float | None = None
    """``time.monotonic()`` by which the decision must end; a call that could outlast it is not
    started and the step fails (``None``: no limit besides the round's own)."""
    out_of_time: bool = False
    """Whether a call was not started because of :attr:`deadline`."""


@dataclass(frozen=True, slots=True)
class StepResult:
    """The calls of one step and how it ended."""

    step: str
    attempts: list[_Attempt]
    stop_reason: str = ""
    out_of_time: bool = False

    @property
    def ok(self) -> bool:
        """Return whether the step got a valid answer."""
        return bool(self.attempts) and self.attempts[-1].kind == "ok"

    @property
    def parsed(self) -> Any:
        """Return the parsed value of the valid answer (``None`` when there is none)."""
        return self.attempts[-1].parsed if self.ok else None

    @property
    def error(self) -> str:
        """Return why the step failed (``""`` when it did not)."""
        if self.ok:
            return ""
        if self.stop_reason:
            last = f": {self.attempts[-1].error}" if self.attempts else ""
            return f"{self.stop_reason}{last}"
        if self.out_of_time:
            last = f" (after: {self.attempts[-1].error})" if self.attempts else ""
            return f"not enough time left before the decision deadline for another call{last}"
        return self.attempts[-1].error if self.attempts else "no call made"


class LlmAgent:
    """An agent that asks an LLM (through LiteLLM) for the target allocation."""

    def __init__(
        self,
        cfg: AgentConfig,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng_seed: int | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build the agent from its config; ``sleep``/``backoff_*`` set the retry waits.

        ``clock`` is the engine's clock (simulated in a replay): it stamps every call (``ts``)
        and measures its ``latency_s``, so a replay stores no wall time.
        """
        if not cfg.model:
            raise ValueError(f"agent {cfg.id}: an LLM agent needs a model")
        self.id = cfg.id
        self.cfg = cfg
        self.markets = cfg.markets
        self._litellm = load_litellm()
        self._sleep = sleep
        self._rng = random.Random(rng_seed)
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._clock = clock
        self._sem = asyncio.Semaphore(cfg.max_concurrency)
        self._spend: dict[str, tuple[int, float]] = {}
        self._cost_unknown_logged = False
        self._templates = own_templates(cfg)  # own prompt files: read, checked, hashed once
        if cfg.api_key_env and not os.environ.get(cfg.api_key_env):
            log.warning("llm.api_key_missing", agent=self.id, env=cfg.api_key_env)
        elif cfg.api_key_env:
            register_secret(os.environ.get(cfg.api_key_env))

    # -- budget ---------------------------------------------------------------------------------
    def restore_usage(self, day: str, tokens: int, cost_usd: float) -> None:
        """Set the spend of UTC ``day`` (``YYYY-MM-DD``), e.g. from the store after a restart."""
        datetime.strptime(day, "%Y-%m-%d")  # refuse anything but a UTC day
        self._spend[day] = (int(tokens), float(cost_usd))

    def spent(self, day: str) -> tuple[int, float]:
        """Return (tokens, USD) spent on UTC ``day``."""
        return self._spend.get(day, (0, 0.0))

    def _add_spend(self, day: str, tokens: int, cost: float) -> None:
        t, c = self.spent(day)
        self._spend[day] = (t + tokens, c + cost)
        for old in sorted(self._spend)[:-7]:  # keep a week
            del self._spend[old]

    def budget_exceeded(self, day: str) -> str | None:
        """Return why the budget of ``day`` is exhausted, or ``None`` if calls may go on."""
        tokens, cost = self.spent(day)
        cfg = self.cfg
        if cfg.daily_budget_tokens is not None and tokens >= cfg.daily_budget_tokens:
            return (
                f"daily budget exceeded: {tokens} tokens >= {cfg.daily_budget_tokens}"
                f" on {day} (UTC)"
            )
        if cfg.daily_budget_usd is not None and cost >= cfg.daily_budget_usd:
            digits = usd_digits(cfg.daily_budget_usd)
            return (
                f"daily budget exceeded: {cost:.{digits}f} USD >= {cfg.daily_budget_usd:.{digits}f}"
                f" on {day} (UTC)"
            )
        return None

    # -- deciding -------------------------------------------------------------------------------
    def render(self, obs: Observation) -> RenderedPrompt:
        """Return the prompt this agent sends for ``obs``."""
        cfg = self.cfg
        return render_prompt(
            obs,
            memory=cfg.memory,
            news_window=cfg.news_window,
            news_per_asset=cfg.news_per_asset,
            tolerance=SUM_TOLERANCE,
            templates=self._templates,
        )

    def prompt_version(self, obs: Observation) -> str:
        """Return the version of the prompt(s) this agent sends for ``obs``."""
        return self.render(obs).template_version

    def backoff(self, attempt: int) -> float:
        """Return the wait after failed attempt ``attempt`` (base * 2^(attempt-1), jittered)."""
        delay = self._backoff_base * (2.0 ** (attempt - 1)) * (1.0 + 0.5 * self._rng.random())
        return min(self._backoff_cap, delay)

    def wait_after(self, attempt: int, failed: _Attempt) -> float:
        """Return the wait after failed attempt ``attempt``: its Retry-After (capped) or backoff."""
        if failed.retry_after is not None:
            return min(failed.retry_after, self.cfg.retry_after_cap)
        return self.backoff(attempt)

    def feedback(self, error: str) -> str:
        """Return the retry line telling the model what was wrong (``""`` when configured off)."""
        template = self.cfg.retry_feedback
        if not template:
            return ""
        return _one_line(template.replace("{error}", error.removeprefix("invalid output: ")))

    def prepare(self, obs: Observation, template_version: str) -> AgentDecision | DecisionRun:
        """Return a decision made without calling (budget spent, key unset) or the run to make."""
        day = utc_day(obs.decision_ts)
        paused = self.budget_exceeded(day)
        if paused:
            log.info("llm.paused", agent=self.id, market=obs.market, reason=paused)
            return AgentDecision(
                allocation=None,
                outcome="paused",
                reason=paused,
                attempts=0,
                usage=_usage(()),
                template_version=template_version,
            )
        api_key = os.environ.get(self.cfg.api_key_env) if self.cfg.api_key_env else None
        if api_key:
            register_secret(api_key)  # never stored nor logged, even if a model echoes it
        elif self.cfg.api_base and is_loopback_url(self.cfg.api_base):
            # A local server needs no key, but LiteLLM's OpenAI-compatible providers refuse to
            # call without one ("Missing credentials"): a placeholder, for loopback hosts only.
            api_key = LOOPBACK_PLACEHOLDER_KEY
        elif self.cfg.api_key_env:
            return AgentDecision(
                allocation=None,
                outcome="error",
                reason=f"environment variable {self.cfg.api_key_env} (api_key_env) is not set",
                attempts=0,
                usage=_usage(()),
                template_version=template_version,
            )
        return DecisionRun(obs=obs, day=day, api_key=api_key)

    async def decide(self, obs: Observation) -> AgentDecision:
        """Ask the model for the allocation of ``obs``; see the module doc for the policy."""
        try:
            prompt = self.render(obs)
        except Exception as exc:
            log.exception("llm.render_failed", agent=self.id, market=obs.market)
            return render_failed(exc)
        run = self.prepare(obs, prompt.template_version)
        if isinstance(run, AgentDecision):
            return run

        def check(answer: str, finish_reason: str | None) -> Any:
            return check_response(answer, finish_reason, obs, key_map=prompt.key_map)

        await self.run_step(run, "allocation", prompt.text, check, dump=_dump_allocation)
        return self._decision(obs, prompt, run.attempts, run.stop_reason)

    async def run_step(
        self,
        run: DecisionRun,
        step: str,
        text: str,
        check: Check,
        *,
        dump: Callable[[Any], Any] = lambda parsed: parsed,
    ) -> StepResult:
        """Ask the model ``text`` until ``check`` accepts an answer (see the module doc).

        ``check(answer, finish_reason)`` returns the parsed value or raises
        :class:`~agents.llm_output.InvalidOutput`; ``dump`` makes that value JSON-ready for the
        call record. Every call is appended to ``run.attempts``; a budget exhausted before a call
        sets ``run.stop_reason`` and ends the step.
        """
        obs = run.obs
        attempts: list[_Attempt] = []
        feedback = ""
        for n in range(1, self.cfg.max_attempts + 1):
            if n > 1 or run.attempts:
                run.stop_reason = self.budget_exceeded(run.day) or ""
                if run.stop_reason:
                    break
            if run.deadline is not None and time.monotonic() + self.cfg.timeout > run.deadline:
                run.out_of_time = True
                break
            if n > 1:
                wait = self.wait_after(n - 1, attempts[-1])
                if attempts[-1].retry_after is not None:
                    log.info("llm.retry_after", agent=self.id, market=obs.market,
                             asked_s=attempts[-1].retry_after, wait_s=wait)
                await self._sleep(wait)
                if attempts[-1].kind == "invalid":
                    feedback = self.feedback(attempts[-1].error)
            sent = f"{text}\n\n{feedback}" if feedback else text
            messages = [{"role": "user", "content": sent}]
            att = await self._attempt(len(run.attempts) + 1, messages, run.api_key, obs, check)
            att.record["step"] = step
            att.record["input_sha256"] = hashlib.sha256(sent.encode("utf-8")).hexdigest()
            att.record["outcome"] = att.kind
            att.record["parsed"] = dump(att.parsed) if att.kind == "ok" else None
            attempts.append(att)
            run.attempts.append(att)
            self._add_spend(
                run.day,
                int(att.record["tokens_in"]) + int(att.record["tokens_out"]),
                float(att.record["cost_usd"]),
            )
            if att.kind in ("ok", "fatal"):
                break
        return StepResult(step, attempts, run.stop_reason, run.out_of_time)

    def _decision(
        self, obs: Observation, prompt: RenderedPrompt, attempts: list[_Attempt], paused: str
    ) -> AgentDecision:
        common = audit_trail(attempts, prompt.template_version)
        usage = common["usage"]
        last = attempts[-1]
        if last.kind == "ok":
            outcome, reason = "ok", ""
            decision = AgentDecision(
                allocation=last.parsed.allocation,
                reasoning=redact_text(last.parsed.reasoning),
                outcome="ok",
                **common,
            )
        else:
            if paused:
                outcome = "paused"
                reason = f"{paused} (after {len(attempts)} failed attempt(s): {last.error})"
            else:
                outcome = "invalid" if last.kind == "invalid" else "error"
                reason = f"{last.error} (attempt {len(attempts)} of {self.cfg.max_attempts})"
            decision = AgentDecision(
                allocation=None,
                outcome=outcome,
                reason=_one_line(redact_text(reason), 300),
                **common,
            )
        log.info(
            "llm.decision",
            agent=self.id,
            market=obs.market,
            outcome=outcome,
            reason=reason,
            attempts=len(attempts),
            tokens_in=usage["tokens_in"],
            tokens_out=usage["tokens_out"],
            cost_usd=usage["cost_usd"],
            latency_s=round(usage["latency_s"], 3),
        )
        return decision

    async def _attempt(
        self,
        n: int,
        messages: list[dict[str, str]],
        api_key: str | None,
        obs: Observation,
        check: Check,
    ) -> _Attempt:
        """Make call number ``n`` and classify its result (``check`` validates the answer)."""
        cfg = self.cfg
        litellm = self._litellm
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
            "timeout": cfg.timeout,
            "max_retries": 0,
            "drop_params": True,
        }
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if api_key:
            kwargs["api_key"] = api_key
        record: dict[str, Any] = {
            "attempt": n,
            "ts": 0.0,
            "model": cfg.model,
            "raw_response": "",
            "error": None,
            "finish_reason": None,
            "tokens_in": 0,
            "tokens_out": 0,
            "latency_s": 0.0,
            "cost_usd": 0.0,
        }
        async with self._sem:
            t0 = record["ts"] = self._clock()
            try:
                async with asyncio.timeout(cfg.timeout + TIMEOUT_GRACE_S):
                    response = await litellm.acompletion(**kwargs)
            except Exception as exc:
                record["latency_s"] = max(0.0, self._clock() - t0)
                kind, error = self._classify(exc)
                error = redact_text(error)
                record["error"] = error
                log.warning(
                    "llm.call_failed", agent=self.id, market=obs.market, attempt=n, error=error
                )
                return _Attempt(
                    record=record, content="", kind=kind, error=error, retry_after=_retry_after(exc)
                )
            record["latency_s"] = max(0.0, self._clock() - t0)
        reply = _reply(response)
        content, finish_reason = reply.text, reply.finish_reason
        tokens_in, tokens_out = _tokens(response)
        record.update(
            raw_response=content,
            finish_reason=finish_reason,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=self._cost(response),
        )
        try:
            if reply.refusal:
                raise InvalidOutput(f"model refused: {_one_line(reply.refusal, 200)}")
            parsed = check(reply.answer, finish_reason)
        except InvalidOutput as exc:
            error = redact_text(f"invalid output: {exc}")
            record["error"] = error
            log.warning(
                "llm.invalid_output", agent=self.id, market=obs.market, attempt=n, error=error
            )
            return _Attempt(record=record, content=content, kind="invalid", error=error)
        return _Attempt(record=record, content=content, kind="ok", parsed=parsed)

    def _classify(self, exc: BaseException) -> tuple[str, str]:
        """Return (``error`` or ``fatal``, one-line message) for a failed call."""
        if isinstance(exc, self._litellm.Timeout):
            return "error", _one_line(f"timeout after {self.cfg.timeout:g}s: {exc}")
        if isinstance(exc, TimeoutError):
            return "error", f"timeout after {self.cfg.timeout + TIMEOUT_GRACE_S:g}s"
        message = _one_line(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, self._litellm.APIConnectionError):
            return "error", message
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and status not in RETRY_STATUSES:
            return "fatal", message
        return "error", message

    def _cost(self, response: Any) -> float:
        """Return the USD cost of ``response`` as LiteLLM prices it (0.0 when unknown)."""
        try:
            cost = float(self._litellm.completion_cost(completion_response=response))
        except Exception as exc:
            if not self._cost_unknown_logged:
                self._cost_unknown_logged = True
                log.info(
                    "llm.cost_unknown",
                    agent=self.id,
                    model=self.cfg.model,
                    error=_one_line(str(exc), 200),
                )
            return 0.0
        return cost if math.isfinite(cost) and cost >= 0 else 0.0


@dataclass(frozen=True, slots=True)
class _Reply:
    """What one chat completion said."""

    text: str
    """Everything the model sent, as stored: content, tool calls and refusal."""
    answer: str
    """Where the answer is read from: the content and the tool-call arguments."""
    refusal: str
    finish_reason: str | None


def _reply(response: Any) -> _Reply:
    """Return everything a chat completion response holds, nothing dropped.

    LiteLLM moves a leading ``<think>...</think>`` block of the content (and a provider's
    separate reasoning) into ``reasoning_content``; it is put back in front, inside ``<think>``
    tags. Tool calls (and a legacy ``function_call``) follow as ``<tool_call name="...">`` blocks
    holding their arguments, and a refusal as a ``<refusal>`` block.
    """
    try:
        choice = response.choices[0]
    except (AttributeError, IndexError, TypeError):
        return _Reply("", "", "", None)
    message = getattr(choice, "message", None)
    content = _text(getattr(message, "content", None))
    reasoning = _text(getattr(message, "reasoning_content", None))
    if reasoning:
        content = f"<think>{reasoning}</think>{content}"
    parts = [content] if content else []
    answers = [content] if content else []
    functions = [getattr(c, "function", None) for c in getattr(message, "tool_calls", None) or ()]
    legacy = getattr(message, "function_call", None)
    for fn in [*functions, legacy] if legacy is not None else functions:
        name = _text(getattr(fn, "name", None))
        args = _text(getattr(fn, "arguments", None))
        parts.append(f'<tool_call name="{name}">{args}</tool_call>')
        answers.append(args)
    refusal = _text(getattr(message, "refusal", None))
    if refusal:
        parts.append(f"<refusal>{refusal}</refusal>")
    finish = getattr(choice, "finish_reason", None)
    return _Reply(
        text="\n".join(parts),
        answer="\n".join(answers),
        refusal=refusal,
        finish_reason=str(finish) if finish is not None else None,
    )


def own_templates(cfg: AgentConfig) -> dict[str, tuple[str, str]]:
    """Return template name -> (text, version) of ``cfg``'s own prompt files (may raise
    :class:`~agents.prompting.PromptFileError`, one line)."""
    if cfg.prompt_files is None:
        return {}
    return {name: load_prompt_file(path, name)
            for name, path in cfg.prompt_files.model_dump().items() if path is not None}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _retry_after(exc: BaseException) -> float | None:
    """Return the seconds a 429 error's ``retry-after-ms`` / ``Retry-After`` header asks for."""
    if getattr(exc, "status_code", None) != 429:
        return None
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        ms, value = headers.get("retry-after-ms"), headers.get("retry-after")
    except (TypeError, AttributeError):
        return None
    return retry_after_seconds(None if value is None else str(value),
                               ms=None if ms is None else str(ms))


def _redacted_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Return a call record with secrets replaced in every text field (nested ones too)."""
    return {k: _redacted(v) for k, v in record.items()}


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


def _tokens(response: Any) -> tuple[int, int]:
    """Return (prompt tokens, completion tokens) of a response (0 when unreported)."""
    usage = getattr(response, "usage", None)
    tin = getattr(usage, "prompt_tokens", 0) or 0
    tout = getattr(usage, "completion_tokens", 0) or 0
    return int(tin), int(tout)


def audit_trail(attempts: Sequence[_Attempt], template_version: str) -> dict[str, Any]:
    """Return the audit fields of a decision (calls, responses, usage), secrets redacted.

    ``raw_output`` is the last response text; a protocol may replace it.
    """
    for a in attempts:  # secrets echoed by a model or a provider error stay out of storage
        a.content = redact_text(a.content)
        a.record = _redacted_record(a.record)
    calls = tuple(a.record for a in attempts)
    return {
        "attempts": len(attempts),
        "usage": _usage(calls),
        "template_version": template_version,
        "raw_responses": tuple(a.content for a in attempts),
        "calls": calls,
        "raw_output": attempts[-1].content if attempts else "",
    }


def render_failed(exc: BaseException) -> AgentDecision:
    """Return the ``error`` decision of a prompt that could not be rendered."""
    return AgentDecision(
        allocation=None,
        outcome="error",
        reason=_one_line(f"prompt rendering failed: {exc}", 300),
        attempts=0,
        usage=_usage(()),
    )


def _dump_allocation(parsed: Any) -> Any:
    """Return the JSON-ready allocation of a LiveTradeBench answer."""
    return {"allocations": dict(parsed.allocation)}


def _usage(calls: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Return tokens_in, tokens_out, cost_usd and latency_s summed over ``calls``."""
    return {
        "tokens_in": sum(int(c["tokens_in"]) for c in calls),
        "tokens_out": sum(int(c["tokens_out"]) for c in calls),
        "cost_usd": math.fsum(float(c["cost_usd"]) for c in calls),
        "latency_s": math.fsum(float(c["latency_s"]) for c in calls),
    }
