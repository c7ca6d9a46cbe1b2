"""One agent's decisions with their audit trail, for the live page.

``GET /api/agents/{id}/decisions?offset=&limit=&market=``: one page of an agent's decisions,
newest first, with the full audit trail: reason, the model's ``reasoning`` per step (the
decision's stored ``reasoning`` column, :mod:`agents.reasoning`; derived the same way from the
stored calls for rows written before schema v12), raw answer, input hash, the
headlines the agent saw, every model call with tokens, cost and latency, ``assets`` (Polymarket
tokens by question title and side), and the total count.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agents.reasoning import reasoning_steps
from agents.stored_input import INPUT_COLUMNS
from daemon.core.sparse_rows import fill_map
from daemon.web.labels import assets_in

if TYPE_CHECKING:
    from daemon.web.host import Host

#: Largest page of decisions the route returns.
MAX_PAGE = 100


class DecisionsApi:
    """The ``/api/agents/{id}/decisions`` route."""

    def __init__(self, server: Host) -> None:
        """Answer from ``server``'s store."""
        self.server = server

    async def handle_decisions(self, request: web.Request) -> web.Response:
        """Return one page of an agent's decisions with the full audit trail."""
        from daemon.web.json import BadRequest
        from daemon.web.json import json_response as _json

        srv = self.server
        agent = request.match_info["id"]
        t = await srv._tables_of(agent)  # on a shared store: the owner's scope
        if t is None:
            return _json({"error": f"unknown agent {agent!r}"}, 404)
        unknown = sorted(set(request.query) - {"offset", "limit", "market"})
        if unknown:
            raise BadRequest(f"unknown query parameter {unknown[0][:40]!r} "
                             "(use offset, limit, market)")
        offset = _int_param(request, "offset", 0, BadRequest)
        limit = max(1, min(MAX_PAGE, _int_param(request, "limit", 20, BadRequest)))
        market = request.query.get("market")
        where, params = ("agent=?", [agent]) if market is None else (
            "agent=? AND market=?", [agent, market])
        store = srv.engine.store
        async with srv._queries:
            try:  # a store served read-only may predate schema v12: derive its reasoning
                await store.fetchall(f"SELECT reasoning FROM {t('decisions')} LIMIT 0")
                stored_col = "d.reasoning"
            except Exception:  # no such column (a SQLite or PostgreSQL error)
                stored_col = "NULL"
            total = (await store.fetchall(
                f"SELECT COUNT(*) FROM {t('decisions')} WHERE {where}", tuple(params)))[0][0]
            rows = await store.fetchall(
                "SELECT d.market, d.scheduled_ts, d.decided_ts, d.outcome, d.reason,"
                f" {INPUT_COLUMNS}, d.input_sha256, d.raw_output, d.allocation_json,"
                f" d.template_version, d.attempts, d.duration_s, s.assets_json, {stored_col}"
                f" FROM {t('decisions')} d"
                f" LEFT JOIN {t('observations')} o ON o.sha256 = d.observation_sha256"
                f" LEFT JOIN {t('asset_sets')} s ON s.sha256 = o.assets_sha256"
                f" WHERE d.{where.replace(' AND ', ' AND d.')}"
                " ORDER BY d.scheduled_ts DESC, d.market LIMIT ? OFFSET ?",
                (*params, limit, offset))
            calls: dict[tuple[str, float], list[dict[str, Any]]] = {}
            if rows:
                lo = min(r[1] for r in rows)
                hi = max(r[1] for r in rows)
                for (m, st, attempt, ts, model, raw, err, finish, ti, to, lat,
                     cost, step, sha, outcome, parsed) in await store.fetchall(
                        "SELECT market, scheduled_ts, attempt, ts, model, raw_response, error,"
                        " finish_reason, tokens_in, tokens_out, latency_s, cost_usd, step,"
                        " input_sha256, outcome, parsed_json FROM"
                        f" {t('llm_calls')} WHERE agent=? AND scheduled_ts BETWEEN ? AND ?"
                        " ORDER BY id", (agent, lo, hi)):
                    calls.setdefault((m, st), []).append({
                        "attempt": attempt, "ts": ts, "model": model, "raw_response": raw,
                        "error": err, "finish_reason": finish, "tokens_in": ti,
                        "tokens_out": to, "latency_s": lat, "cost_usd": cost,
                        "step": step, "input_sha256": sha, "outcome": outcome,
                        "parsed": _loads(parsed)})
        decisions = []
        for (m, st, dt, outcome, reason, input_json, market_json, sha, raw, alloc, template,
             attempts, duration, assets, stored_reasoning) in rows:
            decisions.append({
                "market": m, "scheduled_ts": st, "decided_ts": dt, "outcome": outcome,
                "reason": reason, "input_sha256": sha, "raw_output": raw,
                "allocation": _allocation(alloc, assets), "template_version": template,
                "attempts": attempts, "duration_s": duration,
                "headlines": _headlines(market_json or input_json),
                "reasoning": _reasoning(stored_reasoning, raw, calls.get((m, st), [])),
                "calls": calls.get((m, st), [])})
        labels = await srv.asset_labels.labels(store.fetchall, assets_in(decisions))
        return _json({"agent": agent, "total": total, "offset": offset, "limit": limit,
                      "decisions": decisions, "assets": labels})



def _int_param(request: web.Request, name: str, default: int, error: type[Exception]) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
        raise error(f"{name} must be a non-negative integer, got {raw[:40]!r}")
    return int(raw)


def _loads(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _allocation(text: str | None, assets_json: str | None) -> Any:
    """Return a stored allocation keyed by asset id (v11 rows index the round's assets)."""
    if text is not None and text.startswith("["):
        try:
            return fill_map(text, assets_json)
        except (ValueError, TypeError):
            return None
    return _loads(text)


def _reasoning(stored: str | None, raw: str | None, calls: list[dict[str, Any]]
               ) -> list[dict[str, Any]]:
    """Return the model's reasoning per step: ``[{"step", "text"}]`` as stored with the decision
    (schema v12), else derived from the stored calls and answer as it would have been stored."""
    kept = _loads(stored)
    if isinstance(kept, list):
        return [r for r in kept if isinstance(r, dict) and isinstance(r.get("text"), str)]
    return reasoning_steps(calls, raw)


def _headlines(input_json: str | None) -> list[dict[str, Any]]:
    """Return the news items of a stored observation: key, time, headline, source."""
    obs = _loads(input_json)
    if not isinstance(obs, dict) or not isinstance(obs.get("news"), dict):
        return []
    out = []
    for key, items in obs["news"].items():
        for item in items if isinstance(items, list) else []:
            if isinstance(item, list) and len(item) >= 3:
                out.append({"key": key, "ts": item[0], "headline": item[1], "source": item[2]})
    return out[:50]
