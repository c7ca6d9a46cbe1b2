"""Delayed scoring of PortBench decisions: store S1..S5 and CEPS once the horizon has passed.

After each equity daily mark (:meth:`daemon.engine.engine.Engine.mark`) and at the end of a replay,
:func:`score_due` scores every ``portbench`` decision of the agents this process may write that
has no stored scores yet and whose horizon (:data:`~agents.portbench.scores.HORIZON` daily
closes) has passed, and writes its six rows (S1..S5, CEPS) into ``stage_scores`` in one
transaction of its own, ``ON CONFLICT DO NOTHING`` (a restart never writes a row twice).

Determinism: a daily close is the last price of its UTC day, so a mark uses only the days that
ended before it (a mark at the NYSE close does not count its own day, whose close may still
move, e.g. crypto); the end of a replay counts every day (the recording holds nothing later).
The computation is :func:`agents.portbench.scores.score_rows`, the report's own, on the same
rows, so a stored score equals the one the report would compute from the store. It runs in a
worker thread (the maximum-Sharpe solver may take a while); ``scored_ts`` is the clock's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import structlog

from agents.host import StoreAccess
from agents.portbench.scores import (
    CLOSES_WHERE,
    DAY,
    DECISIONS_SQL,
    HORIZON,
    STAGES,
    closes_from_rows,
    parse_decisions,
    portbench_agents,
    price_points,
    score_rows,
)
from daemon.core.price_bursts import read_prices_async
from daemon.core.run_configs import fetch_run_configs


class ScoringHost(Protocol):
    """What :func:`score_engine` needs of its engine (:class:`daemon.engine.engine.Engine`)."""

    @property
    def store(self) -> StoreAccess:
        """Return the engine's store."""
        ...

    @property
    def slots(self) -> Mapping[str, Mapping[str, Any]]:
        """Return market -> agent -> slot of the agents this engine runs."""
        ...

log = structlog.get_logger(__name__)

INSERT_SQL = ("INSERT INTO stage_scores(agent, market, scheduled_ts, stage, horizon, score,"
              " scored_ts) VALUES(?,?,?,?,?,?,?)"
              " ON CONFLICT(agent, market, scheduled_ts, stage) DO NOTHING")
UNSCORED_SQL = (DECISIONS_SQL + " AND scheduled_ts < ? AND NOT EXISTS (SELECT 1 FROM"
                " stage_scores s WHERE s.agent=decisions.agent AND s.market=decisions.market"
                " AND s.scheduled_ts=decisions.scheduled_ts AND s.stage='CEPS')")


async def score_due(store: StoreAccess, agents: Iterable[str] | None, ts: float, *,
                    final: bool = False) -> int:
    """Store the stage scores of the decisions whose horizon has passed at ``ts``; return the
    rows written.

    ``agents``: the agents this process may write (None: every portbench agent of the store, a
    SQLite file being written by its one lock holder). ``final``: every day's close is final
    (the end of a replay), else only the days that ended before ``ts``.
    """
    protocol, own = await _configured(store)
    if agents is not None:
        protocol &= set(agents)
    if not protocol:
        return 0
    # A decision needs HORIZON closes of complete days from its own day on: none is due earlier.
    due = ts if final else ts - (HORIZON - 1) * DAY
    rows = await store.fetchall(UNSCORED_SQL.format(marks=",".join("?" * len(protocol))),
                                (*sorted(protocol), due))
    decisions = parse_decisions(rows)  # type: ignore[arg-type]
    if not decisions:
        return 0
    prices = await read_prices_async(store.fetchall, CLOSES_WHERE, ("equity",))

    def compute() -> list[tuple[Any, ...]]:
        closes = closes_from_rows(price_points(prices), None if final else ts)
        out: list[tuple[Any, ...]] = []
        for agent, scores in sorted(score_rows(decisions, closes, own).items()):
            for s in scores:
                if s.failed or s.ceps is None:
                    continue  # failed: never scored; pending: its horizon has not passed
                values = {**s.scores, "CEPS": s.ceps}
                out.extend((agent, "equity", s.ts, stage, HORIZON, _number(values[stage]), ts)
                           for stage in (*STAGES, "CEPS"))
        return out

    out = await asyncio.to_thread(compute)
    if out:
        await store.execute_atomic([(INSERT_SQL, row) for row in out])
        log.info("stage scores stored", decisions=len(out) // 6, ts=ts, final=final)
    return len(out)


_CONFIGS: weakref.WeakKeyDictionary[Any, tuple[Any, tuple[set[str], dict[str, Any]]]] = (
    weakref.WeakKeyDictionary())


async def _configured(store: StoreAccess) -> tuple[set[str], dict[str, Any]]:
    """Return :func:`portbench_agents` of the configs the store ran with (its runs' and
    reloads'), parsed again only when one was added (a large config is not parsed at every
    mark)."""
    key: tuple[Any, ...] = tuple((await store.fetchall("SELECT COUNT(*), MAX(id) FROM runs"))[0])
    with contextlib.suppress(Exception):  # a store older than schema v17 has no reloads
        key += tuple((await store.fetchall("SELECT COUNT(*), MAX(id) FROM config_reloads"))[0])
    cached = _CONFIGS.get(store)
    if cached is None or cached[0] != key:
        cached = (key, portbench_agents([(text,) for text in await fetch_run_configs(
            store.fetchall)]))
        _CONFIGS[store] = cached
    protocol, own = cached[1]
    return set(protocol), own


def _number(x: float | None) -> float | None:
    """Return ``x``, or None (SQL NULL) for not-a-number: SQLite cannot store NaN."""
    return None if x is None or x != x else float(x)


async def score_engine(engine: ScoringHost, ts: float, *, final: bool = False) -> None:
    """Run :func:`score_due` for ``engine``'s agents after a mark (a failure is logged: the
    scores stay pending and the next mark retries them)."""
    store = engine.store
    shared = getattr(store.db, "claim_agents", None) is not None  # PostgreSQL: owners only
    agents = ({a for slots in engine.slots.values() for a in slots} if shared else None)
    try:
        await score_due(store, agents, ts, final=final)
    except Exception as exc:
        log.warning("stage scores not stored; retried at the next mark", ts=ts,
                    error=f"{type(exc).__name__}: {exc}")
