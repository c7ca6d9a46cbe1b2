"""The rows of a round's commit with their hash-chain links, built off the event loop.

A round of 5,000 agents builds 5,000 decision rows, their fill rows and their chain links
(issue 31 point 3): 20-30 ms of Python each, during which no price is handled if done on the
event loop. :meth:`daemon.store.store.Store._commit_round` builds them with
:func:`round_rows` in a worker thread, inside its transaction: the chain heads move in the same
order as before (every stream of its own, in insert order) and the rows are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon.core.sparse_rows import encode_allocation
from daemon.store.integrity.chain import Chains, with_chains
from daemon.store.records import RoundCommit, _dumps, _encode_book, _fill_row, _now_of

__all__ = ["RoundRows", "round_rows"]


@dataclass(frozen=True, slots=True)
class RoundRows:
    """The parameters of every statement of a round's commit (chained rows end in their link)."""

    observation_sets: list[tuple[str, str]]
    observations: list[tuple[Any, ...]]
    decisions: list[tuple[Any, ...]]
    calls: list[tuple[Any, ...]]
    fill_sets: list[tuple[str, str]]
    fills: list[tuple[Any, ...]]
    books: list[tuple[str, str, float]]
    equity: list[tuple[Any, ...]]


def round_rows(rc: RoundCommit, run_id: int | None, chains: Chains) -> RoundRows:
    """Return the rows ``rc`` writes, linking the chained ones to ``chains`` (their heads move
    in the open transaction): pure Python on data the round no longer changes, so it may run
    in a worker thread while the event loop handles prices."""
    lists = rc.observation_assets
    observations = [(sha, *row, lists[sha][0] if sha in lists else None)
                    for sha, row in rc.observations.items()]
    decisions = [(d.agent, d.market, d.scheduled_ts, d.decided_ts, d.outcome, d.reason,
                  d.input_json, d.input_sha256, d.raw_output,
                  d.allocation_json if d.allocation_json is not None
                  else encode_allocation(d.allocation),  # sparse: issue 16 point 4
                  d.template_version, d.attempts, d.duration_s, run_id,
                  d.observation_sha256, d.reasoning)
                 for d in rc.decisions]
    calls = [
        (d.agent, d.market, d.scheduled_ts, int(c.get("attempt", 0)),
         float(c.get("ts", d.decided_ts)), c.get("model"), c.get("raw_response"),
         c.get("error"), c.get("finish_reason"), c.get("tokens_in"),
         c.get("tokens_out"), c.get("latency_s"), c.get("cost_usd"), c.get("step"),
         c.get("input_sha256"), c.get("outcome"),
         None if c.get("parsed") is None else _dumps(c["parsed"]))
        for d in rc.decisions for c in d.calls
    ]
    fills = [_fill_row(f) for f in rc.fills]  # sparse weights: issue 16 point 4
    sets = {row[-2]: row[-1] for row in fills if row[-2] is not None}
    fill_rows = [row[:-1] for row in fills]
    now = _now_of(rc)
    return RoundRows(
        observation_sets=sorted(set(lists.values())) if rc.observations else [],
        observations=observations,
        decisions=with_chains(decisions, chains.link("decisions", decisions)),
        calls=with_chains(calls, chains.link("llm_calls", calls)),
        fill_sets=sorted(sets.items()),
        fills=with_chains(fill_rows, chains.link("fills", fill_rows)),
        books=[(market, _encode_book(state), now) for market, state in rc.books.items()],
        equity=with_chains(rc.equity, chains.link("equity", rc.equity)),
    )
