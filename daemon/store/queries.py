"""The store's read queries: decisions taken, books, the checkpoint, recent allocations and
the last prices after the checkpoint (what a round and a restart read back)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from daemon.core.price_bursts import read_prices_async
from daemon.core.sparse_rows import dense_fill_weights

__all__ = ["StoreQueries"]


class StoreQueries:
    """Read queries over the store's connection :attr:`db` (aiosqlite or PostgreSQL)."""

    db: Any

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read query and return every row."""
        async with self.db.execute(sql, params) as cur:
            return [tuple(row) for row in await cur.fetchall()]

    async def decided(self, market: str, scheduled_ts: float) -> set[str]:
        """Return the agents that already have a decision for this market and time."""
        rows = await self.fetchall(
            "SELECT agent FROM decisions WHERE market=? AND scheduled_ts=?", (market, scheduled_ts)
        )
        return {r[0] for r in rows}

    async def last_decision_ts(self, market: str) -> float | None:
        """Return the latest scheduled time with a decision in ``market``."""
        rows = await self.fetchall(
            "SELECT MAX(scheduled_ts) FROM decisions WHERE market=?", (market,)
        )
        return rows[0][0] if rows and rows[0][0] is not None else None

    async def load_books(self) -> dict[str, dict[str, Any]]:
        """Return the last committed state of every book."""
        rows = await self.fetchall("SELECT market, state_json FROM books")
        return {m: json.loads(s) for m, s in rows}

    async def load_checkpoint(self) -> tuple[int, float, dict[str, Any]] | None:
        """Return the last (offset, clock, state) checkpoint, if any."""
        rows = await self.fetchall("SELECT offset, clock, state_json FROM checkpoint WHERE id=1")
        if not rows:
            return None
        offset, clock, state = rows[0]
        return int(offset), float(clock), json.loads(state)

    async def recent_allocations(self, agent: str, market: str, limit: int
                                 ) -> list[tuple[float, dict[str, float], float]]:
        """Return the agent's last ``limit`` fills as (ts, weights, value_after), oldest first."""
        rows = await self.fetchall(
            "SELECT f.ts, f.weights_json, f.value_after, s.assets_json FROM fills f"
            " LEFT JOIN asset_sets s ON s.sha256 = f.assets_sha256"
            " WHERE f.agent=? AND f.market=? ORDER BY f.scheduled_ts DESC LIMIT ?",
            (agent, market, limit),
        )
        return [(ts, dense_fill_weights(w, a), v) for ts, w, v, a in reversed(rows)]

    async def recent_allocations_of(self, market: str, agents: list[str], limit: int
                                    ) -> dict[str, list[tuple[float, dict[str, float], float]]]:
        """Return :meth:`recent_allocations` of many agents in one query (every agent a key)."""
        out: dict[str, list[tuple[float, dict[str, float], float]]] = {a: [] for a in agents}
        for k in range(0, len(agents), 500):
            chunk = agents[k:k + 500]
            rows = await self.fetchall(
                "SELECT t.agent, t.ts, t.weights_json, t.value_after, s.assets_json FROM"
                " (SELECT agent, ts, weights_json, value_after, assets_sha256, scheduled_ts,"
                " ROW_NUMBER() OVER (PARTITION BY agent ORDER BY scheduled_ts DESC) AS n"
                " FROM fills WHERE market=? AND agent IN"
                f" ({','.join('?' * len(chunk))})) AS t"
                " LEFT JOIN asset_sets s ON s.sha256 = t.assets_sha256"
                " WHERE t.n <= ? ORDER BY t.agent, t.scheduled_ts",
                (market, *chunk, limit),
            )
            for agent, ts, w, v, a in rows:
                out[agent].append((ts, dense_fill_weights(w, a), v))
        return out

    async def latest_prices_after_checkpoint(self) -> list[tuple[str, str, float, float]]:
        """Return the last (market, asset, ts, price) per asset stored after the checkpoint,
        by market and asset: the last one received, the price the live book held."""
        rows = await self.fetchall("SELECT events_id FROM checkpoint WHERE id=1")
        after = int(rows[0][0]) if rows else 0
        last: dict[tuple[str, str], tuple[float, float]] = {}
        for market, asset, ts, _, price, _, _ in await read_prices_async(
                self.fetchall, "id > ?", (after,)):
            last[(market, asset)] = (ts, price)  # stored order: a later one replaces it
        return [(m, a, t, p) for (m, a), (t, p) in sorted(last.items())]
