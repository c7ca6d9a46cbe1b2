"""The exact prompts of one stored decision, rebuilt on demand (issue 30, point 2).

``GET /api/agents/{id}/prompt?market=M&scheduled_ts=T``: every prompt the decision sent, one per
model call (each step and retry of a multi-step protocol), rebuilt from what the store keeps:
the decision's input (its own part and the round's, :mod:`agents.stored_input`), its stored
calls (answers, errors) and the agent's config of the run that made it (``runs.config_json``),
by :func:`agents.prompt_replay.rebuild_prompts`. A prompt is returned only when its SHA-256
equals the call's stored ``input_sha256``; otherwise the call carries a one-line ``error`` and
the answer is 409 with the first such line in ``error``. A decision without a model call
(a baseline, a remote agent) has no prompt: 404 with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import ValidationError

from agents.base import Observation
from agents.config import AgentConfig
from agents.prompt_replay import StoredCall, rebuild_prompts
from agents.stored_input import FillRow, fill_times, join_input
from daemon.core.sparse_rows import dense_fill_weights

if TYPE_CHECKING:
    from daemon.web.host import Host


class PromptError(Exception):
    """Why a decision's prompt cannot be shown: its HTTP status and one line."""

    def __init__(self, reason: str, status: int) -> None:
        """Keep the one-line ``reason`` and the HTTP ``status``."""
        super().__init__(reason)
        self.reason = reason
        self.status = status


class PromptsApi:
    """The ``/api/agents/{id}/prompt`` route."""

    def __init__(self, server: Host) -> None:
        """Answer from ``server``'s store."""
        self.server = server

    def add_routes(self, app: web.Application) -> None:
        """Add the route to ``app``."""
        app.router.add_get("/api/agents/{id}/prompt", self.handle_prompt)

    async def handle_prompt(self, request: web.Request) -> web.Response:
        """Return the rebuilt prompts of one decision, each checked against its stored hash."""
        from daemon.web.json import json_response as _json

        agent = request.match_info["id"]
        try:
            market, ts = _params(request)
            t = await self.server._tables_of(agent)
            if t is None:
                raise PromptError(f"unknown agent {agent!r}", 404)
            async with self.server._queries:
                obs, calls, cfg = await self._stored(agent, market, ts, t)
            prompts = await asyncio.to_thread(rebuild_prompts, cfg, obs, calls)
        except PromptError as exc:
            return _json({"error": exc.reason}, exc.status)
        except Exception as exc:  # the protocol could not run again: one line, no traceback
            line = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return _json({"error": f"the prompt could not be rebuilt: {line}"}, 409)
        bad = next((p.error for p in prompts if p.error), None)
        return _json({"agent": agent, "market": market, "scheduled_ts": ts,
                      "prompts": [p.to_dict() for p in prompts], "error": bad},
                     409 if bad else 200)

    async def _stored(self, agent: str, market: str, ts: float, t: Callable[[str], str]
                      ) -> tuple[Observation, list[StoredCall], AgentConfig]:
        """Return the decision's verified observation, its stored calls and the agent's config."""
        fetch = self.server.engine.store.fetchall
        rows = await fetch(
            "SELECT d.input_json, o.market_json, d.input_sha256, d.run_id"
            f" FROM {t('decisions')} d LEFT JOIN {t('observations')} o"
            " ON o.sha256 = d.observation_sha256"
            " WHERE d.agent=? AND d.market=? AND d.scheduled_ts=?", (agent, market, ts))
        if not rows:
            raise PromptError(f"no decision of {agent!r} in {market} at {ts}", 404)
        own, market_json, input_sha, run_id = rows[0]
        calls = [StoredCall(*r) for r in await fetch(
            "SELECT attempt, step, input_sha256, raw_response, error, finish_reason, outcome"
            f" FROM {t('llm_calls')} WHERE agent=? AND market=? AND scheduled_ts=? ORDER BY id",
            (agent, market, ts))]
        if not calls:
            raise PromptError("this decision made no model call, so it had no prompt (a "
                              "baseline or remote agent is given the observation itself)", 404)
        obs = await self._observation(agent, market, own, market_json, input_sha, fetch, t)
        return obs, calls, await self._config(agent, run_id, fetch, t)

    async def _observation(self, agent: str, market: str, own: Any, market_json: Any,
                           input_sha: str | None, fetch: Any, t: Callable[[str], str]
                           ) -> Observation:
        """Return the decision's observation rebuilt from its stored parts, hash checked."""
        times = fill_times(own) if market_json is not None else []
        fills: list[FillRow] = []
        for k in range(0, len(times), 500):
            chunk = times[k:k + 500]
            for f_ts, w, v, assets in await fetch(
                f"SELECT f.ts, f.weights_json, f.value_after, s.assets_json FROM {t('fills')} f"
                f" LEFT JOIN {t('asset_sets')} s ON s.sha256 = f.assets_sha256"
                f" WHERE f.agent=? AND f.market=? AND f.ts IN ({','.join('?' * len(chunk))})",
                (agent, market, *chunk)):
                fills.append((f_ts, w if assets is None else dense_fill_weights(w, assets), v))
        try:
            text = join_input(own, market_json, fills)
            if not text:
                raise PromptError("this decision stored no input to rebuild its prompt from",
                                  404)
            obs = Observation.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise PromptError(f"the stored input cannot be rebuilt: {exc}", 409) from None
        if input_sha and hashlib.sha256(obs.canonical_json()).hexdigest() != input_sha:
            raise PromptError("the rebuilt input does not match the decision's stored input "
                              f"SHA-256 {input_sha[:12]}...", 409)
        return obs

    async def _config(self, agent: str, run_id: int | None, fetch: Any,
                      t: Callable[[str], str]) -> AgentConfig:
        """Return the agent's config of the run that made the decision (else the latest)."""
        rows = await fetch(f"SELECT id, config_json FROM {t('runs')} ORDER BY id DESC")
        rows = sorted(rows, key=lambda r: r[0] != run_id)  # the decision's run first
        for _, text in rows:
            try:
                entries = (json.loads(text or "{}") or {}).get("agents") or []
            except (ValueError, AttributeError):
                continue
            entry = next((a for a in entries if isinstance(a, dict) and a.get("id") == agent),
                         None)
            if entry is None:
                continue
            if entry.get("kind") != "llm":
                raise PromptError(f"agent {agent!r} is a {entry.get('kind')} agent: no prompt",
                                  404)
            try:
                return AgentConfig.model_validate(entry)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise PromptError(f"the stored config of {agent!r} no longer loads: "
                                  f"{'.'.join(map(str, first['loc']))}: {first['msg']}",
                                  409) from None
        for cfg in getattr(self.server.engine.config, "agents", ()):
            if isinstance(cfg, AgentConfig) and cfg.id == agent:
                return cfg
        raise PromptError(f"no stored config names agent {agent!r}", 409)


def _params(request: web.Request) -> tuple[str, float]:
    """Return the decision's market and scheduled time from the query (one-line errors)."""
    unknown = sorted(set(request.query) - {"market", "scheduled_ts"})
    if unknown:
        raise PromptError(f"unknown query parameter {unknown[0][:40]!r} (use market, "
                          "scheduled_ts)", 400)
    market = request.query.get("market")
    raw = request.query.get("scheduled_ts")
    if not market or raw is None:
        raise PromptError("market and scheduled_ts are required", 400)
    try:
        ts = float(raw)
    except ValueError:
        ts = math.nan
    if not math.isfinite(ts) or len(raw) > 40:
        raise PromptError(f"scheduled_ts must be a number, got {raw[:40]!r}", 400)
    return market, ts
