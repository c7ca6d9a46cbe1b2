"""Replay a bundle's season from its stored answers (issue 32, point 3): no model, no key.

The bundle's store holds every market event the season saw, every model answer and the lineup
(the run's config). :func:`replay_store` runs the season again through the replay's own engine
code (:func:`~daemon.app.replay.replay_session`, :class:`~daemon.app.replay.ReplayDriver`,
one simulated clock) into a fresh store:

- the market events are read back from ``market_events`` in stored (arrival) order, each
  keeping its source time; a live event is applied when the live run received it (``recv_ts``,
  never earlier than the one before), a live burst of prices as one batch (as the source
  published it: the books' incremental marks round as they did live), a replayed event at its
  own time;
- each round runs with the clock at the time the live round read it (the decision's stored
  ``decided_ts``: a live round starts a little after its scheduled time), the daily marks at
  their scheduled times, up to the last stored round or mark;
- each LLM agent is its protocol's own agent whose model calls are answered, in order, by the
  calls stored for that agent and decision (:func:`agents.prompt_replay.answer_from_store`):
  every answer is parsed again by the protocol's code, as a live answer is; usage and latency
  are the stored ones. Baselines run as they did.

:func:`rebuilt_report` then computes ``report --json`` of the replayed store (with the bundle's
season record, which the replay does not recompute); the bundle check compares it byte for byte
with ``report.json``, and every replayed decision (its time, outcome, reason, input hash, raw
answer, allocation) and fill with the stored one (:func:`first_decision_difference`).

What cannot be replayed is refused in one line (:class:`BundleReplayRefused`): a protocol other
than LiveTradeBench's (StockBench, PortBench, CapitalBench and AlphaForgeBench keep state or run
code the stored answers do not capture yet), an HTTP or plugin agent, a store written by more
than one run (a restart or a reload). An event received between a
round's scheduled time and the moment the live round read the clock is replayed after the
round (the stored rows do not say which came first).
"""

from __future__ import annotations

import json
import math
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from agents.base import Observation
from agents.llm import LlmAgent
from agents.prompt_replay import StoredCall, answer_from_store
from daemon.app.replay import JobCallback, ReplayDriver, ReplayError, replay_session
from daemon.config.settings import Config, ConfigError, parse_config
from daemon.core.events import Event, PriceEvent, decode_event
from daemon.core.price_bursts import (
    BURST_KIND,
    PRICE_COLUMNS,
    burst_key,
    expand_price_rows,
    read_asset_sets,
)
from daemon.store.dbfile import connect_readonly
from daemon.timing.clock import SimClock

__all__ = [
    "BundleReplayError",
    "BundleReplayRefused",
    "first_decision_difference",
    "rebuilt_report",
    "refusal",
    "replay_store",
]

#: The agent kinds a replay runs as they are (they call no model).
BASELINES = frozenset({"cash", "equal_weight", "buy_and_hold", "momentum", "random_guess",
                       "sixty_forty", "risk_parity", "equal_risk_contribution", "min_variance"})


class BundleReplayError(Exception):
    """The season cannot be replayed (one line)."""


class BundleReplayRefused(BundleReplayError):
    """The season holds what a replay from stored answers does not support yet (one line)."""


class StoredTimesClock(SimClock):
    """A simulated clock that reads :attr:`at` while a live round's time is being replayed."""

    def __init__(self, start: float) -> None:
        """Create the clock at ``start``."""
        super().__init__(start)
        self.at: float | None = None

    def now(self) -> float:
        """Return the replayed round's live time inside a round, else the simulated time."""
        return super().now() if self.at is None else self.at


def refusal(config: Config) -> str | None:
    """Return why ``config``'s season cannot be replayed from stored answers (None: it can)."""
    if config.capitalbench is not None:
        return "[capitalbench] rounds cannot be replayed from stored answers yet"
    for a in config.agents:
        if a.kind == "llm" and a.protocol != "livetradebench":
            return (f"agent {a.id}: protocol {a.protocol} cannot be replayed from stored "
                    "answers yet (only livetradebench LLM agents and baselines)")
        if a.kind != "llm" and a.kind not in BASELINES:
            return (f"agent {a.id}: kind {a.kind} cannot be replayed from stored answers (only"
                    " livetradebench LLM agents and baselines)")
    return None


def _season_run(con: sqlite3.Connection) -> tuple[Config, str, float]:
    """Return the config, mode and start of the one run that wrote the store."""
    runs = con.execute("SELECT started_ts, mode, config_json FROM runs ORDER BY id").fetchall()
    if not runs:
        raise BundleReplayError("the store holds no run to replay")
    if len(runs) > 1:
        raise BundleReplayRefused(f"the store was written by {len(runs)} runs (a restart or a "
                                  "reload): only a season of one run is replayed yet")
    started, mode, config_json = runs[0]
    try:
        config = parse_config(json.loads(config_json), "the stored run's config")
    except (ConfigError, ValueError) as exc:
        raise BundleReplayError(f"the stored run's config cannot be read: "
                                f"{' '.join(str(exc).split())[:200]}") from None
    why = refusal(config)
    if why:
        raise BundleReplayRefused(why)
    return config, str(mode), float(started)


def stored_events(con: sqlite3.Connection, live: bool, start: float
                  ) -> Iterator[tuple[float | None, Event | list[Event]]]:
    """Yield (the time to apply it at, None: its own; the event, or a live burst's prices as
    one list) of every stored market event, in stored order (``start``: the live run's; no
    event it stored is applied before)."""
    keys = sorted({burst_key(p) for (p,) in con.execute(
        f"SELECT payload FROM market_events WHERE kind='{BURST_KIND}'")})
    sets = read_asset_sets(con, keys)
    last = start
    for row in con.execute(f"SELECT {PRICE_COLUMNS} FROM market_events ORDER BY id"):
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


def _stored_calls(con: sqlite3.Connection) -> dict[tuple[str, str, float], list[StoredCall]]:
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


def _round_times(con: sqlite3.Connection) -> tuple[dict[tuple[str, float], float], float]:
    """Return the live time of each round by (market, scheduled time), and the last job's."""
    times = {(m, s): d for m, s, d in con.execute(
        "SELECT market, scheduled_ts, MIN(decided_ts) FROM decisions GROUP BY market,"
        " scheduled_ts")}
    marks = con.execute("SELECT MAX(ts) FROM equity WHERE kind='daily'").fetchone()[0]
    last = max([*(s for _, s in times), *([marks] if marks is not None else [])],
               default=-math.inf)
    return times, last


def _answering(agent: LlmAgent, calls: dict[tuple[str, str, float], list[StoredCall]]) -> None:
    def calls_for(obs: Observation) -> Sequence[StoredCall] | None:
        return calls.get((agent.id, obs.market, obs.decision_ts))

    answer_from_store(agent, calls_for)


async def replay_store(src: str, out: str) -> None:
    """Replay the season of the SQLite store ``src`` from its stored answers into ``out``.

    Raise :class:`BundleReplayRefused` for what is not supported and
    :class:`BundleReplayError` when the replay cannot run (one line each).
    """
    con = connect_readonly(Path(src))
    try:
        config, mode, start = _season_run(con)
        calls = _stored_calls(con)
        times, last = _round_times(con)
        clock = StoredTimesClock(start)
        try:
            async with replay_session(config, out, recording_name=f"bundle:{Path(src).name}",
                                      start=start, clock=clock,
                                      wrap_job=lambda cb: _at_live_times(cb, clock, times)
                                      ) as ctx:
                agents = {id(s.agent): s.agent for slots in ctx.engine.slots.values()
                          for s in slots.values()}  # an agent trading two markets is one
                for agent in agents.values():
                    if isinstance(agent, LlmAgent):
                        _answering(agent, calls)
                driver = ReplayDriver(ctx, start=start, end=last)
                for i, (at, ev) in enumerate(stored_events(con, mode == "live", start)):
                    if not await driver.step(i, ev, at):
                        break
                await driver.finish(last)
        except ReplayError as exc:
            raise BundleReplayError(str(exc)) from None
    finally:
        con.close()


def _at_live_times(on_job: JobCallback, clock: StoredTimesClock,
                   times: dict[tuple[str, float], float]) -> JobCallback:
    """Return ``on_job`` running each decision round with the clock at its live time."""

    async def job(job_id: str, fire_ts: float, missed: bool) -> None:
        kind, market = job_id.split(":", 1)
        clock.at = times.get((market, fire_ts)) if kind == "decide" else None
        try:
            await on_job(job_id, fire_ts, missed)
        finally:
            clock.at = None

    return job


#: What a replayed decision must repeat of the stored one, and a fill of the stored fill.
_DECISION = ("decided_ts", "outcome", "reason", "input_sha256", "raw_output", "allocation_json",
             "attempts")
_FILL = ("ts", "trades_json", "traded_value", "cost", "value_before", "value_after",
         "weights_json")


def _rows(con: sqlite3.Connection, table: str, columns: Sequence[str]
          ) -> dict[tuple[str, str, float], tuple[object, ...]]:
    return {(r[0], r[1], r[2]): tuple(r[3:]) for r in con.execute(
        f"SELECT agent, market, scheduled_ts, {', '.join(columns)} FROM {table}")}


def first_decision_difference(src: str, out: str) -> str | None:
    """Return the first (by time) decision or fill of ``out`` that is not the stored one of
    ``src``, in one line (None: every one is)."""
    a, b = connect_readonly(Path(src)), connect_readonly(Path(out))
    try:
        for table, columns in (("decisions", _DECISION), ("fills", _FILL)):
            want, got = _rows(a, table, columns), _rows(b, table, columns)
            for key in sorted(want.keys() | got.keys(), key=lambda k: (k[2], k[0], k[1])):
                what = f"{table[:-1]} of {key[0]} in {key[1]} at {key[2]!r}"
                if key not in got:
                    return f"the replay made no {what}"
                if key not in want:
                    return f"the replay made a {what} that is not stored"
                for col, x, y in zip(columns, want[key], got[key], strict=True):
                    if x != y:
                        return (f"the replay's {what} differs in {col}: stored "
                                f"{str(x)[:60]!r}, replayed {str(y)[:60]!r}")
        return None
    finally:
        a.close()
        b.close()


def rebuilt_report(src: str, report_json: Callable[[str, str], str]) -> tuple[str, str | None]:
    """Return ``report --json`` of the season of ``src`` replayed from its stored answers, and
    the first replayed decision or fill that is not the stored one (None: none).

    ``report_json(db, season_db)``: the report of the store ``db`` with the season record of
    ``season_db``.
    """
    import asyncio

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "replayed.db")
        asyncio.run(replay_store(src, out))
        return report_json(out, src), first_decision_difference(src, out)
