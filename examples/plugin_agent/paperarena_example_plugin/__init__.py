"""A sample paperarena agent plugin (``kind = "tilt"``).

It holds ``cash`` in CASH and spreads the rest over the ``top`` priced assets with the highest
return over the daily closes it sees (one side per Polymarket question: the dearer one).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.base import CASH, AgentDecision, Observation


class TiltSettings(BaseModel):
    """The ``[agents.settings]`` of a tilt agent."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    cash: float = Field(default=0.2, ge=0.0, le=1.0, description="weight kept in CASH")
    top: int = Field(default=3, ge=1, le=50, description="how many assets to hold")


class TiltAgent:
    """Hold the ``top`` best recent performers in equal weight, plus ``cash``."""

    settings_model = TiltSettings

    def __init__(self, agent_id: str, settings: TiltSettings) -> None:
        """Build the agent from its validated settings."""
        self.id = agent_id
        self.settings = settings

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return the tilted allocation for ``obs``."""
        losers = set()
        for q in obs.questions:  # one side per question: drop the cheaper one
            yes, no = obs.prices.get(q.yes), obs.prices.get(q.no)
            if yes is not None and no is not None:
                losers.add(q.no if yes.price >= no.price else q.yes)

        def score(asset: str) -> float:
            hist = obs.history.get(asset) or ()
            first = hist[0].price if hist else 0.0
            return obs.prices[asset].price / first - 1.0 if first > 0 else 0.0

        picks = sorted((a for a in obs.tradable if a not in losers), key=score, reverse=True)
        picks = picks[: self.settings.top]
        if not picks:
            return AgentDecision(None, outcome="hold", reason="nothing to buy")
        weights = {a: (1.0 - self.settings.cash) / len(picks) for a in picks}
        weights[CASH] = self.settings.cash
        return AgentDecision(weights, reasoning=f"top {len(picks)} by recent return")
