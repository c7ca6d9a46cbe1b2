"""A remote agent: one JSON request per decision to an agent service, one JSON answer back.

The messages are documented in docs/agents-http.md, with a JSON Schema of each beside it
(``docs/agents-http.request.schema.json``, ``docs/agents-http.answer.schema.json``).

Policy: each request has the agent's ``http.timeout`` for the whole exchange. Only transport
failures (no HTTP answer: connection refused or reset, server gone) are retried, up to
``http.max_attempts`` requests with a small backoff, each carrying the same ``decision_id`` (also
sent as the ``Idempotency-Key`` header) so that the service can answer a repeat without deciding
twice. A late answer, an HTTP status other than 200, a body larger than ``http.max_body`` or one
that is not the documented JSON object ends the decision at once: ``error`` for the first two
(no answer), ``invalid`` for the others (a bad answer), and the portfolio is held. A valid answer
is validated as an LLM's (:func:`agents.llm_output.parse_output`) and every raw answer is kept
in :attr:`AgentDecision.raw_responses` and a call record (the ``llm_calls`` table).

The request body is encoded in a worker thread (:func:`encode_request` under
``asyncio.to_thread``): half a second for 500 assets with a year of closes (4.5 MB), a few
milliseconds for five, against under 0.1 ms for the thread hop, so it always is. The observation
is frozen and never changed after its round built it: the thread reads it without a copy.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from agents.base import CASH, AgentDecision, Observation
from agents.config import AgentConfig, HttpAgentSettings
from agents.llm_output import InvalidOutput, parse_output
from agents.validation import SUM_TOLERANCE
from daemon.core.logs import redact_text, register_secret

#: Version of the request and answer messages (``version`` in the request).
PROTOCOL_VERSION = 1
#: Keys an answer may have.
ANSWER_KEYS = frozenset({"decision_id", "allocations", "hold", "reasoning"})
#: Longest raw answer kept in the store (characters); a longer one is cut with a note.
STORED_CHARS = 100_000
#: Longest reason text.
REASON_CHARS = 300


class BadAnswer(ValueError):
    """The service's answer is not usable; one line."""


def _one_line(s: str, limit: int = REASON_CHARS) -> str:
    flat = " ".join(str(s).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def decision_id(obs: Observation) -> str:
    """Return the id of the decision ``obs`` is for: the same agent, market and time, same id."""
    key = f"{obs.agent}\n{obs.market}\n{obs.decision_ts!r}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def build_request(obs: Observation) -> dict[str, Any]:
    """Return the JSON request for ``obs`` (see docs/agents-http.md)."""
    return {
        "version": PROTOCOL_VERSION,
        "decision_id": decision_id(obs),
        "agent": obs.agent,
        "market": obs.market,
        "decision_ts": obs.decision_ts,
        "decision_time": datetime.fromtimestamp(obs.decision_ts, UTC).isoformat(),
        "observation": obs.to_dict(),
        "allowed_assets": [*obs.tradable, CASH],
        "constraints": {
            "long_only": True,
            "weights_sum": 1.0,
            "sum_tolerance": SUM_TOLERANCE,
            "one_side_per_question": [[q.yes, q.no] for q in obs.questions],
        },
    }


def encode_request(obs: Observation) -> bytes:
    """Return the JSON request body of ``obs``: ``json.dumps(build_request(obs),
    allow_nan=False)`` in UTF-8, byte for byte, encoded piece by piece (see :func:`_dumps`)."""
    return _dumps(build_request(obs), 3).encode()


def _dumps(value: Any, depth: int) -> str:
    """Return ``json.dumps(value, allow_nan=False)``, its objects and arrays ``depth`` levels
    down joined here from their items' encodings: the C encoder holds the GIL for a whole call
    (300 ms for 500 assets' year of closes, the event loop stalled as long), a call per
    item only for that item's."""
    if depth > 0 and isinstance(value, dict) and all(type(k) is str for k in value):
        return "{" + ", ".join(json.dumps(k) + ": " + _dumps(v, depth - 1)
                               for k, v in value.items()) + "}"
    if depth > 0 and isinstance(value, list | tuple):
        return "[" + ", ".join(_dumps(v, depth - 1) for v in value) + "]"
    return json.dumps(value, allow_nan=False)


@dataclass(slots=True)
class _Exchange:
    """One request and what came back."""

    record: dict[str, Any]
    text: str = ""
    kind: str = "ok"
    """``ok``, ``hold``, ``transport`` (retry), ``error`` (no answer) or ``invalid``."""
    error: str = ""
    parsed: Any = None
    reasoning: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class HttpAgent:
    """An agent whose decisions come from a remote service (``kind = "http"``)."""

    def __init__(
        self,
        cfg: AgentConfig,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        backoff_base: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build the agent from its config (``cfg.http`` must be set)."""
        if cfg.http is None:
            raise ValueError(f"agent {cfg.id}: an http agent needs [agents.http]")
        self.id = cfg.id
        self.settings: HttpAgentSettings = cfg.http
        self._sleep = sleep
        self._backoff_base = backoff_base
        self._clock = clock
        if self.settings.token_env:
            register_secret(os.environ.get(self.settings.token_env))

    async def decide(self, obs: Observation) -> AgentDecision:
        """Ask the service for the decision of ``obs``; see the module doc for the policy."""
        s = self.settings
        headers = {"Content-Type": "application/json", "Idempotency-Key": decision_id(obs)}
        if s.token_env:
            token = os.environ.get(s.token_env)
            if not token:
                return AgentDecision(None, outcome="error", attempts=0,
                                     reason=f"environment variable {s.token_env} (http.token_env)"
                                            " is not set")
            register_secret(token)
            headers["Authorization"] = f"Bearer {token}"
        body = await asyncio.to_thread(encode_request, obs)
        exchanges: list[_Exchange] = []
        for n in range(1, s.max_attempts + 1):
            if n > 1:
                await self._sleep(min(8.0, self._backoff_base * 2.0 ** (n - 2)))
            ex = await self._exchange(n, body, headers, obs)
            exchanges.append(ex)
            if ex.kind != "transport":
                break
        return self._decision(exchanges)

    async def _exchange(
        self, n: int, body: bytes, headers: dict[str, str], obs: Observation
    ) -> _Exchange:
        """Send request number ``n`` and classify what came back."""
        s = self.settings
        record: dict[str, Any] = {
            "attempt": n, "ts": self._clock(), "model": s.url, "raw_response": "",
            "error": None, "finish_reason": None, "tokens_in": 0, "tokens_out": 0,
            "latency_s": 0.0, "cost_usd": 0.0,
        }
        ex = _Exchange(record)
        t0 = record["ts"]
        try:
            async with asyncio.timeout(s.timeout), aiohttp.ClientSession() as session, \
                    session.post(s.url, data=body, headers=headers,
                                 allow_redirects=False) as resp:
                record["finish_reason"] = f"http {resp.status}"
                raw, too_big = await _read_bounded(resp, s.max_body)
                ex.text = raw.decode("utf-8", errors="replace")
                ctype = resp.content_type
                status = resp.status
        except TimeoutError:
            ex.kind, ex.error = "error", f"no answer within {s.timeout:g}s (http.timeout)"
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            ex.kind = "transport"
            ex.error = _one_line(f"transport failure: {type(exc).__name__}: {exc}")
        except aiohttp.ClientError as exc:
            ex.kind, ex.error = "error", _one_line(f"request failed: {type(exc).__name__}: {exc}")
        else:
            if status != 200:
                ex.kind = "error"
                ex.error = _one_line(f"HTTP {status} from the agent service: {ex.text}", 200)
            elif too_big:
                ex.kind = "invalid"
                ex.error = f"answer larger than {s.max_body} bytes (http.max_body)"
            else:
                try:
                    ex.parsed, ex.reasoning, hold = check_answer(ex.text, ctype, obs)
                    ex.kind = "hold" if hold else "ok"
                except BadAnswer as exc:
                    ex.kind, ex.error = "invalid", f"invalid answer: {exc}"
        record["latency_s"] = max(0.0, self._clock() - t0)  # engine clock: 0 in a replay
        ex.text = redact_text(ex.text)
        ex.error = redact_text(ex.error)
        stored = ex.text if len(ex.text) <= STORED_CHARS else (
            ex.text[:STORED_CHARS] + f"… [cut at {STORED_CHARS} characters]")
        ex.text = stored
        record["raw_response"] = stored
        record["error"] = ex.error or None
        return ex

    def _decision(self, exchanges: list[_Exchange]) -> AgentDecision:
        last = exchanges[-1]
        common: dict[str, Any] = {
            "attempts": len(exchanges),
            "raw_output": last.text,
            "raw_responses": tuple(e.text for e in exchanges),
            "calls": tuple(e.record for e in exchanges),
            "usage": {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0,
                      "latency_s": sum(e.record["latency_s"] for e in exchanges)},
            "template_version": f"http-v{PROTOCOL_VERSION}",
        }
        if last.kind == "ok":
            return AgentDecision(last.parsed, reasoning=redact_text(last.reasoning), **common)
        if last.kind == "hold":
            return AgentDecision(None, outcome="hold", reasoning=redact_text(last.reasoning),
                                 reason="the agent chose to hold", **common)
        outcome = "invalid" if last.kind == "invalid" else "error"
        reason = last.error
        if last.kind == "transport":
            reason = f"{last.error} (attempt {len(exchanges)} of {self.settings.max_attempts})"
        return AgentDecision(None, outcome=outcome, reason=_one_line(reason), **common)


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """Return (at most ``limit`` bytes of the body, whether it was longer)."""
    if resp.content_length is not None and resp.content_length > limit:
        return await resp.content.read(min(limit, 4096)), True
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await resp.content.readany()
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit], True


def check_answer(text: str, content_type: str, obs: Observation) -> tuple[Any, str, bool]:
    """Return (normalised allocation or None, reasoning, hold) of an answer or raise BadAnswer.

    The answer must be one JSON object (``application/json``) with the keys of
    docs/agents-http.answer.schema.json: ``hold: true`` or ``allocations``, optional
    ``reasoning`` and ``decision_id`` (which must then be this decision's). The allocation is
    validated as an LLM's answer is.
    """
    if content_type != "application/json":
        raise BadAnswer(f"content type is {content_type or 'missing'}, not application/json")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadAnswer(f"not JSON: {_one_line(str(exc), 120)}") from None
    if not isinstance(obj, dict):
        raise BadAnswer(f"the answer must be a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - ANSWER_KEYS)
    if unknown:
        raise BadAnswer(f"unknown key(s): {', '.join(map(repr, unknown))[:200]}")
    if "decision_id" in obj and obj["decision_id"] != decision_id(obs):
        raise BadAnswer("decision_id is not this decision's")
    reasoning = obj.get("reasoning", "")
    if not isinstance(reasoning, str):
        raise BadAnswer("reasoning must be a string")
    if ("hold" in obj) == ("allocations" in obj):
        raise BadAnswer("give exactly one of 'allocations' and 'hold': true")
    if "hold" in obj:
        if obj["hold"] is not True:
            raise BadAnswer("hold must be true (give 'allocations' to trade)")
        return None, reasoning, True
    try:
        parsed = parse_output(text, obs, tolerance=SUM_TOLERANCE)
    except InvalidOutput as exc:
        raise BadAnswer(str(exc)) from None
    return parsed.allocation, reasoning, False
