"""What a bundle's replay reads from the stored rows, and how it compares its own (issue 32).

:mod:`daemon.app.bundle_replay.run` replays a season from these: the market events in arrival
order, each round's live times and outcomes, the model calls of every LLM decision and the
decisions of the agents whose answer is their decision (HTTP and plugin agents); then
:func:`first_decision_difference` names the first replayed decision or fill that is not the
stored one.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from agents.prompt_replay import StoredCall, StoredDecision
from daemon.core.events import Event, PriceEvent, decode_event
from daemon.core.price_bursts import (
    BURST_KIND,
    PRICE_COLUMNS,
    burst_key,
    expand_price_rows,
    read_asset_sets,
)
from daemon.core.sparse_rows import DECISIONS, fill_map
from daemon.store.dbfile import connect_readonly

__all__ = ["StoredRound", "failed_bars", "first_decision_difference", "first_row_difference",
           "stored_calls", "stored_decisions", "stored_events", "stored_rounds"]


@dataclass(frozen=True, slots=True)
class StoredRound:
    """One stored decision round of a market, as the live run held it."""

    decided: float
    """When the live round read the clock (its decisions' ``decided_ts``)."""
    end: float
    """When its last agent answered (``decided`` plus the round's stored duration): an event
    received by then reached the books before the round's fills."""
    outcomes: frozenset[str]
    rows: tuple[tuple[str, str, float, str, str], ...]
    """(agent, market, scheduled time, outcome, reason) of each decision."""
    run: int | None
    """The run that decided it (``decisions.run_id``)."""


def stored_events(con: sqlite3.Connection, live: bool, start: float,
                  ids: tuple[int, int | None] = (0, None)
                  ) -> Iterator[tuple[float | None, Event | list[Event]]]:
    """Yield (the time to apply it at, None: its own; the event, or a live burst's prices as
    one list) of every stored market event, in stored order (``start``: the live run's; no
    event it stored is applied before; ``ids``: the rows ``ids[0] < id <= ids[1]`` only)."""
    keys = sorted({burst_key(p) for (p,) in con.execute(
        f"SELECT payload FROM market_events WHERE kind='{BURST_KIND}'")})
    sets = read_asset_sets(con, keys)
    last = start
    high = ids[1] if ids[1] is not None else math.inf
    for row in con.execute(f"SELECT {PRICE_COLUMNS}, id FROM market_events WHERE id > ?"
                           " ORDER BY id", (ids[0],)):
        if row[-1] > high:
            break
        row = row[:-1]
        kind, recv_ts, payload = row[0], row[4], row[8]
        if kind in ("price", BURST_KIND):
            prices: list[Event] = [
                PriceEvent(ts=ts, recv_ts=recv, market=market, asset=asset, price=price,
                           bid=bid, ask=ask)
                for market, asset, ts, recv, price, bid, ask in expand_price_rows([row], sets)]
            got: Event | list[Event] = prices if kind == BURST_KIND else prices[0]
        else:
            got = decode_event(payload)
        if live:
            last = max(last, recv_ts)  # a burst's row: its latest receive time
            yield last, got
        else:
            yield None, got


def stored_calls(con: sqlite3.Connection) -> dict[tuple[str, str, float], list[StoredCall]]:
    """Return every stored model call by (agent, market, the live round's time)."""
    out: dict[tuple[str, str, float], list[StoredCall]] = {}
    for (agent, market, decided, attempt, step, sha, raw, error, finish, outcome, ts, model,
         tin, tout, latency, cost) in con.execute(
            "SELECT d.agent, d.market, d.decided_ts, c.attempt, c.step, c.input_sha256,"
            " c.raw_response, c.error, c.finish_reason, c.outcome, c.ts, c.model, c.tokens_in,"
            " c.tokens_out, c.latency_s, c.cost_usd FROM llm_calls c JOIN decisions d"
            " ON d.agent = c.agent AND d.market = c.market AND d.scheduled_ts = c.scheduled_ts"
            " ORDER BY c.id"):
        usage = {"ts": ts, "model": model, "tokens_in": tin, "tokens_out": tout,
                 "latency_s": latency, "cost_usd": cost}
        out.setdefault((agent, market, decided), []).append(
            StoredCall(attempt, step, sha, raw, error, finish, outcome, usage))
    return out


def failed_bars(con: sqlite3.Connection) -> dict[tuple[str, str, float], str]:
    """Return the stored ``raw_output`` of every decision whose strategy bar failed as a whole
    (AlphaForgeBench), by (agent, market, the live round's time)."""
    return {(a, m, d): raw for a, m, d, raw in con.execute(
        "SELECT agent, market, decided_ts, raw_output FROM decisions"
        " WHERE raw_output LIKE '%\"bar_failed\"%'")}


def stored_decisions(con: sqlite3.Connection, agents: Sequence[str],
                     calls: Mapping[tuple[str, str, float], Sequence[StoredCall]]
                     ) -> dict[tuple[str, str, float], StoredDecision]:
    """Return the stored decisions of ``agents`` by (agent, market, the live round's time),
    each with its stored ``calls`` (:func:`stored_calls`)."""
    if not agents:
        return {}
    out: dict[tuple[str, str, float], StoredDecision] = {}
    marks = ", ".join("?" * len(agents))
    for (agent, market, decided, outcome, reason, raw, alloc, assets, attempts, version
         ) in con.execute(
            "SELECT d.agent, d.market, d.decided_ts, d.outcome, d.reason, d.raw_output,"
            " d.allocation_json, s.assets_json, d.attempts, d.template_version FROM"
            f" {DECISIONS} WHERE d.agent IN ({marks})", tuple(agents)):
        out[(agent, market, decided)] = StoredDecision(
            outcome, reason or "", raw or "",
            None if alloc is None else fill_map(alloc, assets), int(attempts or 0),
            version or "", tuple(
                {"attempt": c.attempt, "raw_response": c.raw_response, "error": c.error,
                 "finish_reason": c.finish_reason, **(c.usage or {})}
                for c in calls.get((agent, market, decided), ())))
    return out


def stored_rounds(con: sqlite3.Connection
                  ) -> tuple[dict[tuple[str, float], StoredRound], float]:
    """Return every stored round by (market, scheduled time), and the time of the last job
    (round or daily mark)."""
    rows: dict[tuple[str, float], list[tuple[str, str, float, str, str, float, float,
                                             int | None]]] = {}
    for r in con.execute("SELECT agent, market, scheduled_ts, outcome, reason, decided_ts,"
                         " duration_s, run_id FROM decisions ORDER BY agent"):
        rows.setdefault((r[1], r[2]), []).append(r)
    rounds = {key: StoredRound(
        decided=min(r[5] for r in got), end=min(r[5] for r in got) + max(r[6] for r in got),
        outcomes=frozenset(r[3] for r in got), rows=tuple(r[:5] for r in got),
        run=got[0][7]) for key, got in rows.items()}
    marks = con.execute("SELECT MAX(ts) FROM equity WHERE kind='daily'").fetchone()[0]
    last = max([*(s for _, s in rounds), *([marks] if marks is not None else [])],
               default=-math.inf)
    return rounds, last


#: What a replayed decision must repeat of the stored one, and a fill of the stored fill.
_DECISION = ("decided_ts", "outcome", "reason", "input_sha256", "raw_output", "allocation_json",
             "attempts")
_FILL = ("ts", "trades_json", "traded_value", "cost", "value_before", "value_after",
         "weights_json")


def _rows(con: sqlite3.Connection, table: str, columns: Sequence[str]
          ) -> Mapping[tuple[str, str, float], tuple[object, ...]]:
    return {(r[0], r[1], r[2]): tuple(r[3:]) for r in con.execute(
        f"SELECT agent, market, scheduled_ts, {', '.join(columns)} FROM {table}")}


def first_row_difference(want: Mapping[Any, Sequence[object]],
                         got: Mapping[Any, Sequence[object]], columns: Sequence[str],
                         order: Iterable[Any], what: Callable[[Any], str],
                         shown: Callable[[str, str], tuple[str, str]]) -> str | None:
    """Return, in one line, the first key of ``order`` whose stored row (``want``) the replay
    (``got``) did not make, made unstored, or made with another value of ``columns``; None when
    none. ``what(key)`` names the row; ``shown(x, y)`` cuts the differing values for the line."""
    for key in order:
        if key not in got:
            return f"the replay made no {what(key)}"
        if key not in want:
            return f"the replay made a {what(key)} that is not stored"
        for col, x, y in zip(columns, want[key], got[key], strict=True):
            if x != y:
                sx, sy = shown(str(x), str(y))
                return (f"the replay's {what(key)} differs in {col}: stored {sx!r}, "
                        f"replayed {sy!r}")
    return None


def _row_name(kind: str, key: tuple[str, str, float]) -> str:
    return f"{kind} of {key[0]} in {key[1]} at {key[2]!r}"


def _heads(x: str, y: str) -> tuple[str, str]:
    return x[:60], y[:60]


def first_decision_difference(src: str, out: str) -> str | None:
    """Return the first (by time) decision or fill of ``out`` that is not the stored one of
    ``src``, in one line (None: every one is)."""
    from pathlib import Path

    a, b = connect_readonly(Path(src)), connect_readonly(Path(out))
    try:
        for table, columns in (("decisions", _DECISION), ("fills", _FILL)):
            want, got = _rows(a, table, columns), _rows(b, table, columns)
            found = first_row_difference(
                want, got, columns,
                sorted(want.keys() | got.keys(), key=lambda k: (k[2], k[0], k[1])),
                partial(_row_name, table[:-1]), _heads)
            if found:
                return found
        return None
    finally:
        a.close()
        b.close()
