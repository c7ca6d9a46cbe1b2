"""Consistency probe: ask an agent K times about the same frozen observation.

Repeat consistency (AlphaForgeBench) is the mean pairwise L1 distance between the valid
allocations returned for one frozen input: ``L1(a, b) = sum_i |a_i - b_i|`` over every asset and
CASH (0 = identical, 2 = disjoint). The spread is reported as the population standard deviation
(ddof=0), minimum and maximum over the K*(K-1)/2 pairs; with fewer than two valid answers they are
``None``. Non-``ok`` answers are counted as invalid and left out of the distances.

The frozen input is read from the store's ``decisions`` table and checked against its stored
SHA-256 before any call.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agents.base import Agent, AgentDecision, Observation
from agents.config import AgentConfig
from agents.protocols import build_llm_agent
from agents.stored_input import load_input

log = structlog.get_logger(__name__)


class ProbeError(Exception):
    """The probe cannot run (no such agent, no stored input, hash mismatch...); one line."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Distances between the allocations an agent returned for one frozen observation."""

    repeats: int
    valid: int
    invalid: int
    mean_l1: float | None
    std_l1: float | None
    min_l1: float | None
    max_l1: float | None
    distances: tuple[float, ...]
    outcomes: Mapping[str, int]
    decisions: tuple[AgentDecision, ...] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary (allocations and reasons included, raw calls not)."""
        return {
            "repeats": self.repeats,
            "valid": self.valid,
            "invalid": self.invalid,
            "mean_l1": self.mean_l1,
            "std_l1": self.std_l1,
            "min_l1": self.min_l1,
            "max_l1": self.max_l1,
            "pairs": len(self.distances),
            "distances": list(self.distances),
            "outcomes": dict(self.outcomes),
            "answers": [
                {
                    "outcome": d.outcome,
                    "reason": d.reason,
                    "attempts": d.attempts,
                    "allocation": None if d.allocation is None else dict(d.allocation),
                    "usage": dict(d.usage),
                }
                for d in self.decisions
            ],
        }


def l1_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Return ``sum |a_i - b_i|`` over the union of keys (a missing key weighs 0)."""
    return math.fsum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def pairwise_l1(allocations: Sequence[Mapping[str, float]]) -> list[float]:
    """Return the L1 distance of every unordered pair of ``allocations``."""
    return [l1_distance(a, b) for a, b in itertools.combinations(allocations, 2)]


async def probe(agent: Agent, obs: Observation, repeats: int) -> ProbeResult:
    """Ask ``agent`` ``repeats`` times about ``obs`` (sequentially) and measure consistency."""
    if repeats < 1:
        raise ProbeError("repeats must be at least 1")
    decisions: list[AgentDecision] = []
    for i in range(repeats):
        decision = await agent.decide(obs)
        log.info("probe.answer", agent=agent.id, repeat=i + 1, outcome=decision.outcome)
        decisions.append(decision)
    valid = [d.allocation for d in decisions if d.outcome == "ok" and d.allocation is not None]
    dist = pairwise_l1(valid)
    mean = std = lo = hi = None
    if dist:
        mean = math.fsum(dist) / len(dist)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in dist) / len(dist))
        lo, hi = min(dist), max(dist)
    return ProbeResult(
        repeats=repeats,
        valid=len(valid),
        invalid=repeats - len(valid),
        mean_l1=mean,
        std_l1=std,
        min_l1=lo,
        max_l1=hi,
        distances=tuple(dist),
        outcomes=dict(Counter(d.outcome for d in decisions)),
        decisions=tuple(decisions),
    )


@dataclass(frozen=True, slots=True)
class FrozenInput:
    """A stored decision input, rebuilt and verified."""

    obs: Observation
    market: str
    scheduled_ts: float
    input_sha256: str


def load_frozen_row(
    db_path: str,
    agent_id: str,
    market: str | None = None,
    scheduled_ts: float | None = None,
) -> FrozenInput:
    """Return the stored input of one decision of ``agent_id`` (the latest unless selected)."""
    if not Path(db_path).exists():
        raise ProbeError(f"database {db_path} does not exist")
    sql = (
        "SELECT market, scheduled_ts, input_json, input_sha256 FROM decisions"
        " WHERE agent = ? AND input_json IS NOT NULL AND input_json != ''"
    )
    params: list[Any] = [agent_id]
    if market is not None:
        sql += " AND market = ?"
        params.append(market)
    if scheduled_ts is not None:
        sql += " AND abs(scheduled_ts - ?) < 1e-6"
        params.append(float(scheduled_ts))
    sql += " ORDER BY scheduled_ts DESC LIMIT 1"
    try:
        con = sqlite3.connect(db_path)
        try:
            row = con.execute(sql, params).fetchone()
            if row is not None:  # the whole input, rebuilt from its stored parts
                row = (*row[:2], load_input(con, agent_id, row[0], row[1]), row[3])
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise ProbeError(f"cannot read decisions from {db_path}: {exc}") from exc
    except ValueError as exc:
        raise ProbeError(f"stored input of {agent_id} cannot be rebuilt: {exc}") from exc
    if row is None:
        where = f"agent {agent_id!r}"
        if market is not None:
            where += f", market {market!r}"
        if scheduled_ts is not None:
            where += f", scheduled_ts {scheduled_ts}"
        raise ProbeError(f"no stored decision input for {where} in {db_path}")
    row_market, row_ts, input_json, stored_sha = row
    try:
        obs = Observation.from_dict(json.loads(input_json))
    except (ValueError, KeyError, TypeError) as exc:
        raise ProbeError(
            f"stored input of {agent_id} at {row_ts} cannot be rebuilt: {exc}"
        ) from exc
    actual = hashlib.sha256(obs.canonical_json()).hexdigest()
    if not stored_sha or actual != stored_sha:
        raise ProbeError(
            f"stored input of {agent_id}/{row_market} at {row_ts} does not match its hash:"
            f" stored {stored_sha or '(none)'}, rebuilt {actual}"
        )
    return FrozenInput(obs=obs, market=row_market, scheduled_ts=float(row_ts), input_sha256=actual)


def load_frozen_input(
    db_path: str,
    agent_id: str,
    market: str | None = None,
    scheduled_ts: float | None = None,
) -> Observation:
    """Return the verified observation of a stored decision (the latest unless selected)."""
    return load_frozen_row(db_path, agent_id, market, scheduled_ts).obs


async def run_probe_command(
    agents: Sequence[AgentConfig], config_name: str, db_path: str, agent_id: str, repeats: int
) -> dict[str, Any]:
    """Run ``paperarena probe``: find the agent among ``agents`` (the config named
    ``config_name``), load its latest frozen input, probe, summarise."""
    cfg = next((a for a in agents if a.id == agent_id), None)
    if cfg is None:
        raise ProbeError(f"no agent {agent_id!r} in {config_name}")
    if cfg.kind != "llm":
        raise ProbeError(f"agent {agent_id!r} is a {cfg.kind} agent, not an LLM agent")
    if cfg.protocol == "capitalbench":
        raise ProbeError(f"agent {agent_id!r} answers CapitalBench rounds, not decision rounds:"
                         " its repeat consistency is [capitalbench] consistency_repeats (run"
                         " 'consistency' in paperarena report)")
    if cfg.protocol == "alphaforgebench":
        raise ProbeError(f"agent {agent_id!r} writes AlphaForgeBench strategy code: measure its"
                         " run-to-run instability with paperarena alphaforge-instability")
    frozen = load_frozen_row(db_path, agent_id)
    agent = build_llm_agent(cfg)  # the agent's own protocol
    result = await probe(agent, frozen.obs, repeats)
    usage: dict[str, float] = {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "latency_s": 0.0}
    for d in result.decisions:
        for k in usage:
            usage[k] += d.usage.get(k, 0)
    return {
        "agent": agent_id,
        "model": cfg.model,
        "market": frozen.market,
        "scheduled_ts": frozen.scheduled_ts,
        "decision_ts": frozen.obs.decision_ts,
        "input_sha256": frozen.input_sha256,
        "template_version": agent.prompt_version(frozen.obs),
        **result.to_dict(),
        "usage": usage,
    }
