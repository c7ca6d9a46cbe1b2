"""The rows a store transaction writes: decision, fill and round records and their JSON encoding."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from daemon.core.sparse_rows import fill_columns


@dataclass(slots=True)
class DecisionRecord:
    """One stored decision with its audit trail."""

    agent: str
    market: str
    scheduled_ts: float
    decided_ts: float
    outcome: str
    reason: str = ""
    input_json: str | None = None
    """The observation's per-agent part when :attr:`observation_sha256` is set, else all of it."""
    input_sha256: str | None = None
    raw_output: str | None = None
    allocation: dict[str, float] | None = None
    template_version: str = ""
    attempts: int = 0
    duration_s: float = 0.0
    calls: Sequence[dict[str, Any]] = ()
    observation_sha256: str | None = None
    """The round's market-wide part of the input (a key of ``observations``), if split."""
    allocation_json: str | None = None
    """:attr:`allocation` already encoded (:func:`daemon.core.sparse_rows.encode_allocation`; rounds
    do it as they go, by index into the round's asset list)."""
    reasoning: str | None = None
    """The reasoning per step as JSON (:func:`agents.reasoning.reasoning_json`); None: none
    was derived (a decision the round did not ask, e.g. missed or abandoned)."""


@dataclass(slots=True)
class FillRecord:
    """One applied rebalance."""

    agent: str
    market: str
    scheduled_ts: float
    ts: float
    trades: dict[str, float]
    traded_value: float
    cost: float
    value_before: float
    value_after: float
    weights: dict[str, float]
    trades_json: str | None = None
    """:attr:`trades` already encoded (:func:`daemon.core.sparse_rows.fill_columns`; rounds do it as
    they go)."""
    weights_json: str | None = None
    """:attr:`weights` already encoded (:func:`daemon.core.sparse_rows.fill_columns`)."""
    assets_sha256: str | None = None
    """With a sparse :attr:`weights_json`: the key of every asset the weights had."""
    assets_json: str | None = None
    """The sorted asset list :attr:`assets_sha256` names."""


@dataclass(slots=True)
class RoundCommit:
    """Everything one decision round (or one daily mark) writes, in one transaction."""

    decisions: list[DecisionRecord] = field(default_factory=list)
    fills: list[FillRecord] = field(default_factory=list)
    books: dict[str, dict[str, Any]] = field(default_factory=dict)
    equity: list[tuple[str, str, float, str, float, float]] = field(default_factory=list)
    """(agent, market, ts, kind, value, cash)"""
    agent_states: list[tuple[str, str, str, str, float]] = field(default_factory=list)
    checkpoint: tuple[int, float, dict[str, Any]] | None = None
    resolutions: list[tuple[str, str, float, dict[str, float], str]] = field(default_factory=list)
    """(question_id, market, ts, payouts, source) paid out since the last commit."""
    observations: dict[str, tuple[str, float, str]] = field(default_factory=dict)
    """sha256 -> (market, decision_ts, canonical JSON) of the round's market-wide inputs."""
    observation_assets: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Observation sha256 -> (``asset_sets`` key, JSON) of the round's asset list, which the
    round's allocations index (:func:`daemon.core.sparse_rows.asset_list`)."""


def _fill_row(f: FillRecord) -> tuple[Any, ...]:
    """Return a fill's column values, then its asset list (sparse weights, issue 16 point 4)."""
    sha: str | None
    assets: str | None
    trades = f.trades_json
    if f.weights_json is None:
        weights, sha, assets, tjson = fill_columns(
            f.weights, f.trades if trades is None else None)
        trades = trades or tjson
    else:
        weights, sha, assets = f.weights_json, f.assets_sha256, f.assets_json
    return (f.agent, f.market, f.scheduled_ts, f.ts,
            _dumps(f.trades) if trades is None else trades, f.traded_value,
            f.cost, f.value_before, f.value_after, weights, sha, assets)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


#: The store's JSON encoding (sorted keys, compact), for callers that encode rows ahead.
encode_json = _dumps


def _encode_book(state: dict[str, Any]) -> str:
    """Encode a book's state (finite numbers, None for missing prices) as sorted JSON.

    msgspec writes the same values as :func:`_dumps` (shortest round-trip floats, read back
    identically) about ten times faster, which matters at 1,000 agents: the commit holds the
    event loop while it encodes.
    """
    return msgspec.json.encode(state, order="sorted").decode()


def _now_of(rc: RoundCommit) -> float:
    if rc.checkpoint is not None:
        return rc.checkpoint[1]
    if rc.decisions:
        return rc.decisions[0].decided_ts
    if rc.equity:
        return rc.equity[0][2]
    return 0.0
