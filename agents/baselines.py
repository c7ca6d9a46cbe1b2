"""Baseline agents, run as real agents under the same cost model as everyone else.

Polymarket convention for the baselines (a question has two tokens and only one side may be
held): an equal-weight baseline holds, per question, the side the market currently favours (the
token with the higher price; YES on a tie).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np

from agents.base import CASH, AgentDecision, Observation


def _investable(obs: Observation) -> list[str]:
    """Return one asset per position slot: equities, or the favoured side of each question."""
    if not obs.questions:
        return [a for a in obs.assets if a in obs.prices]
    out = []
    for q in obs.questions:
        py, pn = obs.prices.get(q.yes), obs.prices.get(q.no)
        if py is None and pn is None:
            continue
        if pn is None or (py is not None and py.price >= pn.price):
            out.append(q.yes)
        else:
            out.append(q.no)
    return out


def equal_weights(assets: list[str]) -> dict[str, float]:
    """Return equal weights over ``assets`` (all cash when there are none)."""
    if not assets:
        return {CASH: 1.0}
    w = 1.0 / len(assets)
    return {a: w for a in assets} | {CASH: 0.0}


def _decision(weights: Mapping[str, float], reasoning: str) -> AgentDecision:
    return AgentDecision(allocation=dict(weights), reasoning=reasoning)


class AllCash:
    """Hold cash, always (the zero-risk floor)."""

    def __init__(self, agent_id: str) -> None:
        self.id = agent_id

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return 100 % CASH."""
        return _decision({CASH: 1.0}, "all cash")


class EqualWeightRebalanced:
    """Rebalance to equal weights over every priced asset at each decision."""

    def __init__(self, agent_id: str) -> None:
        self.id = agent_id

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return equal weights over the investable assets."""
        return _decision(equal_weights(_investable(obs)), "equal weight, rebalanced")


class BuyAndHold:
    """Buy equal weights once, then hold (StockBench's passive baseline).

    It buys at the first decision that has something to buy (no past allocation held anything
    but cash); afterwards it answers ``hold`` (keep the drifted portfolio, trade nothing). Cash
    freed by a Polymarket resolution stays in cash.
    """

    def __init__(self, agent_id: str) -> None:
        self.id = agent_id

    async def decide(self, obs: Observation) -> AgentDecision:
        """Buy equal weights once; afterwards hold."""
        bought = any(
            w > 0 for p in obs.recent_allocations for a, w in p.weights.items() if a != CASH
        ) or any(q > 0 for q in obs.holdings.values())
        if not bought:
            return _decision(equal_weights(_investable(obs)), "initial equal-weight buy")
        return AgentDecision(allocation=None, outcome="hold", reasoning="hold")


class Momentum:
    """Hold the top-k assets by trailing return over ``lookback`` daily closes, equally.

    Equities: rank by price now / close ``lookback`` days ago - 1 and keep the top ``top_k`` with
    a positive return (the rest in cash). Polymarket: per question, the YES price change decides
    the side (up: YES, down: NO); the ``top_k`` largest absolute moves are held.
    """

    def __init__(self, agent_id: str, *, lookback: int = 5, top_k: int = 3) -> None:
        self.id = agent_id
        self.lookback = lookback
        self.top_k = top_k

    def _ret(self, obs: Observation, asset: str) -> float | None:
        hist = obs.history.get(asset, ())
        now = obs.prices.get(asset)
        if now is None or len(hist) < self.lookback:
            return None
        past = hist[-self.lookback].price
        return now.price / past - 1.0 if past > 0 else None

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return equal weights over the strongest trailing movers."""
        scored: list[tuple[float, str]] = []
        if obs.questions:
            for q in obs.questions:
                r = self._ret(obs, q.yes)
                if r is None or r == 0.0:
                    continue
                side = q.yes if r > 0 else q.no
                if side in obs.prices:
                    scored.append((abs(r), side))
        else:
            for a in obs.assets:
                r = self._ret(obs, a)
                if r is not None and r > 0:
                    scored.append((r, a))
        scored.sort(key=lambda x: (-x[0], x[1]))
        chosen = [a for _, a in scored[: self.top_k]]
        return _decision(equal_weights(chosen), f"momentum top {len(chosen)}")


class RandomGuess:
    """Allocate at random, seeded: the chance baseline (LiveTradeBench asks whether LLM agents
    are merely random guessers).

    Each decision draws weights over the priced assets and CASH from a flat Dirichlet
    distribution (every split of the account equally likely); on Polymarket it first picks a
    side of each question at random (a side without a price gives way to the other). The
    generator is seeded from ``seed``, the agent id and the decision time, so a decision is the
    same in every replay and after a restart, whatever ran before it.
    """

    def __init__(self, agent_id: str, *, seed: int = 0) -> None:
        self.id = agent_id
        self.seed = seed

    def rng(self, obs: Observation) -> np.random.Generator:
        """Return the generator of the decision ``obs`` asks for."""
        return np.random.default_rng([self.seed, zlib.crc32(f"{self.id}/{obs.market}".encode()),
                                      round(obs.decision_ts * 1000)])

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return random weights over the investable assets and CASH."""
        rng = self.rng(obs)
        if obs.questions:
            slots = []
            for q in obs.questions:
                first, other = (q.yes, q.no) if rng.integers(2) == 0 else (q.no, q.yes)
                if first in obs.prices:
                    slots.append(first)
                elif other in obs.prices:
                    slots.append(other)
        else:
            slots = [a for a in obs.assets if a in obs.prices]
        w = rng.dirichlet(np.ones(len(slots) + 1))
        weights = {a: float(x) for a, x in zip(slots, w[:-1], strict=True)}
        weights[CASH] = float(w[-1])
        return _decision(weights, f"random guess (seed {self.seed})")
