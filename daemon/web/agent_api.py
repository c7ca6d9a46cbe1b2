"""The per-agent routes of the HTTP API: the running agents, one agent's record, resume.

:class:`AgentApi` is mixed into :class:`daemon.web.http.HttpServer`, which routes to it:

- ``GET /api/agents``: the running agents with their live figures;
- ``GET /api/agents/{id}?limit=&kind=``: equity curve, allocations (fills), recent decisions,
  alerts, model usage and ``assets`` (each Polymarket token's question title and side), read
  from the tables of the scope owning the agent (:meth:`_tables_of`, also used by the live page);
- ``POST /api/agents/{id}/resume``: resume an agent halted after a drawdown breach (JSON body
  ``{}`` or ``{"market": ..., "by": ...}``, read within ``[http] body_timeout``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aiohttp import web

from daemon.core.sparse_rows import fill_map
from daemon.web.json import BadRequest
from daemon.web.json import json_response as _json
from daemon.web.labels import AssetLabels, assets_in
from daemon.web.metrics import portfolio_rows

if TYPE_CHECKING:
    from daemon.alerts.rules import AlertMonitor
    from daemon.config.runtime import HttpConfig
    from daemon.engine.engine import Engine
    from daemon.web.metrics import PerformanceCache

#: The most rows of each kind ``GET /api/agents/{id}`` returns.
MAX_ROWS = 5000
#: The keys a resume body may carry.
RESUME_KEYS = frozenset({"market", "by"})


class AgentApi:
    """The ``/api/agents`` handlers of :class:`~daemon.web.http.HttpServer` (a mixin)."""

    engine: Engine
    settings: HttpConfig
    monitor: AlertMonitor | None
    performance: PerformanceCache | None
    _queries: asyncio.Semaphore
    _asset_labels: AssetLabels | None = None

    @property
    def asset_labels(self) -> AssetLabels:
        """Return the server's Polymarket token names (created on first use)."""
        if self._asset_labels is None:
            self._asset_labels = AssetLabels()
        return self._asset_labels

    async def handle_agents(self, request: web.Request) -> web.Response:
        """Return every running agent with its live figures."""
        rows = portfolio_rows(self.engine, self.monitor)
        agents: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            agents.setdefault(r.agent, []).append(asdict(r))
        return _json({"agents": agents})

    def _known(self, agent: str) -> bool:
        return any(agent in slots for slots in self.engine.slots.values()) or any(
            a.id == agent for a in self.engine.config.agents)

    async def _tables_of(self, agent: str) -> Callable[[str], str] | None:
        """Return how to name the tables holding ``agent``'s rows, None for an unknown agent:
        this process's own, or on a shared store those of the scope owning the agent (the
        leaderboard of any process lists every agent, and its page links to each)."""
        if self._known(agent):
            return _own_table
        owner = getattr(self.engine.store.db, "owner_schema", None)
        schema = None if owner is None else await owner(agent)
        if schema is None:
            return None
        return lambda table: f'"{schema}".{table}'

    async def handle_agent(self, request: web.Request) -> web.Response:
        """Return one agent's equity curve, allocations, recent decisions and alerts."""
        agent = request.match_info["id"]
        tables = await self._tables_of(agent)
        if tables is None:
            return _json({"error": f"unknown agent {agent!r}"}, 404)
        unknown = sorted(set(request.query) - {"limit", "kind"})
        if unknown:
            raise BadRequest(f"unknown query parameter {unknown[0]!r} (use limit, kind)")
        raw = request.query.get("limit", "500")
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
            raise BadRequest(f"limit must be a positive integer, got {raw[:40]!r}")
        limit = min(MAX_ROWS, max(1, int(raw)))
        kind = request.query.get("kind", "all")
        if kind not in ("all", "daily", "decision"):
            raise BadRequest("kind must be all, daily or decision")
        async with self._queries:
            return await self._agent(agent, limit, kind, tables)

    async def _agent(self, agent: str, limit: int, kind: str,
                     t: Callable[[str], str] | None = None) -> web.Response:
        t = t or _own_table
        store = self.engine.store
        kind_sql, params = ("", (agent, limit)) if kind == "all" else (
            " AND kind=?", (agent, kind, limit))
        equity = await store.fetchall(
            f"SELECT market, ts, kind, value, cash FROM {t('equity')} WHERE agent=?" + kind_sql +
            " ORDER BY ts DESC LIMIT ?", params)
        fills = await store.fetchall(
            "SELECT f.market, f.scheduled_ts, f.ts, f.weights_json, f.traded_value, f.cost,"
            f" f.value_after, s.assets_json FROM {t('fills')} f LEFT JOIN {t('asset_sets')} s"
            " ON s.sha256 = f.assets_sha256 WHERE f.agent=? ORDER BY f.scheduled_ts DESC"
            " LIMIT ?", (agent, limit))
        decisions = await store.fetchall(
            "SELECT d.market, d.scheduled_ts, d.decided_ts, d.outcome, d.reason,"
            f" d.allocation_json, d.attempts, d.duration_s, s.assets_json FROM {t('decisions')} d"
            f" LEFT JOIN {t('observations')} o ON o.sha256 = d.observation_sha256"
            f" LEFT JOIN {t('asset_sets')} s ON s.sha256 = o.assets_sha256 WHERE d.agent=?"
            " ORDER BY d.scheduled_ts DESC LIMIT ?", (agent, min(limit, 100)))
        alerts = await store.fetchall(
            f"SELECT ts, kind, severity, market, value, limit_value, message FROM {t('alerts')}"
            " WHERE agent=? ORDER BY id DESC LIMIT 50", (agent,))
        llm = await store.fetchall(
            "SELECT market, COUNT(*), COALESCE(SUM(tokens_in),0), COALESCE(SUM(tokens_out),0),"
            f" COALESCE(SUM(cost_usd),0) FROM {t('llm_calls')} WHERE agent=? GROUP BY market",
            (agent,))
        current = []
        for r in portfolio_rows(self.engine, self.monitor):
            if r.agent != agent:
                continue
            item = asdict(r)
            item["weights"] = self.engine.books[r.market].weights(agent)
            if self.performance is not None:
                item["performance"] = self.performance.summary(r.market, agent).to_dict()
            current.append(item)
        out: dict[str, Any] = {
            "agent": agent,
            "current": current,
            "equity": [{"market": m, "ts": ts, "kind": k, "value": v, "cash": c}
                       for m, ts, k, v, c in reversed(equity)],
            "allocations": [{"market": m, "scheduled_ts": st, "ts": ts,
                             "weights": fill_map(w, a), "traded_value": tv, "cost": cost,
                             "value_after": va}
                            for m, st, ts, w, tv, cost, va, a in reversed(fills)],
            "decisions": [{"market": m, "scheduled_ts": st, "decided_ts": dt, "outcome": o,
                           "reason": r, "allocation": fill_map(a, assets) if a else None,
                           "attempts": n, "duration_s": d}
                          for m, st, dt, o, r, a, n, d, assets in decisions],
            "alerts": [{"ts": ts, "kind": k, "severity": s, "market": m, "value": v,
                        "limit": lim, "message": msg}
                       for ts, k, s, m, v, lim, msg in alerts],
            "llm": [{"market": m, "calls": n, "tokens_in": ti, "tokens_out": to,
                     "cost_usd": c} for m, n, ti, to, c in llm],
        }
        # Polymarket tokens by question title and side (the ids stay the keys).
        out["assets"] = await self.asset_labels.labels(store.fetchall, assets_in(out))
        return _json(out)

    async def handle_resume(self, request: web.Request) -> web.Response:
        """Resume an agent halted after a drawdown breach (operator action)."""
        agent = request.match_info["id"]
        if request.content_type != "application/json":
            return _json({"error": "send Content-Type: application/json (body {} or "
                                   "{\"market\": \"equity\"})"}, 415)
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise BadRequest(f"the body must be a JSON object, got {_kind(body)}")
        unknown = sorted(set(body) - RESUME_KEYS)
        if unknown:
            raise BadRequest(f"unknown key {unknown[0][:40]!r} in the body (use market, by)")
        market = body.get("market")
        if market is not None and not isinstance(market, str):
            raise BadRequest(f"market must be a string, got {_kind(market)}")
        if market is not None and market not in self.engine.slots:
            raise BadRequest(f"unknown market {market[:40]!r} (use one of "
                             f"{', '.join(sorted(self.engine.slots))})")
        raw_by = body.get("by")
        if raw_by is not None and not isinstance(raw_by, str):
            raise BadRequest(f"by must be a string, got {_kind(raw_by)}")
        if not any(agent in slots for slots in self.engine.slots.values()):
            return _json({"error": f"unknown agent {agent!r}"}, 404)
        if self.monitor is None:
            return _json({"error": "the alert monitor is not running"}, 503)
        by = " ".join((raw_by or "operator").split())[:64] or "operator"
        resumed = await self.monitor.resume(agent, market, by=by)
        statuses = {m: s[agent].status for m, s in self.engine.slots.items() if agent in s}
        if not resumed:
            return _json({"error": f"agent {agent!r} is not halted", "status": statuses}, 409)
        return _json({"agent": agent, "resumed": resumed, "status": statuses})

    async def _json_body(self, request: web.Request) -> Any:
        """Read the JSON body within ``body_timeout`` (empty body = ``{}``); raise BadRequest."""
        if not request.can_read_body:
            return {}
        try:
            raw = await asyncio.wait_for(request.read(), self.settings.body_timeout)
        except TimeoutError:
            raise BadRequest(f"request body not received within "
                             f"{self.settings.body_timeout:g}s", 408) from None
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body larger than {self.settings.max_body} bytes",
                             413) from None
        if not raw.strip():
            return {}
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadRequest("the body is not UTF-8") from None
        except RecursionError:
            raise BadRequest("the body is nested too deeply") from None
        except ValueError as exc:
            raise BadRequest(f"invalid JSON body: {str(exc).splitlines()[0]}") from None


def _kind(value: Any) -> str:
    """Name a JSON value's type as a user sees it."""
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _own_table(table: str) -> str:
    """Name a table of this process's own store (its scope on a shared store)."""
    return table
