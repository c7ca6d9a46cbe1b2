"""Strict validation of a target allocation against an observation's universe.

Every agent's answer (baselines included) passes through :func:`validate_allocation` before the
ledger sees it, so no invalid allocation is ever applied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agents.base import CASH, Observation

#: Weights may sum to 1 +/- this (bounds included) and are then renormalised; beyond, invalid.
SUM_TOLERANCE = 0.02
#: Slack on the tolerance for float rounding: 0.49 + 0.49 is 0.98 to the user, not 0.98 - 2e-17.
SUM_EPSILON = 1e-9


class InvalidAllocation(ValueError):
    """A target allocation is not acceptable; the message is one clear line."""


def validate_allocation(
    raw: Mapping[str, Any] | Any, obs: Observation, *, tolerance: float = SUM_TOLERANCE
) -> dict[str, float]:
    """Return normalised weights (every asset plus CASH, summing to 1) or raise InvalidAllocation.

    Rules: a mapping of known assets (or CASH) to finite, non-negative real numbers (no strings,
    no booleans); positive weight only on assets that have a price; at most one side of a
    Polymarket question; the sum within ``tolerance`` of 1, bounds included (renormalised only
    then).
    """
    if not isinstance(raw, Mapping):
        raise InvalidAllocation(f"allocations must be an object, got {type(raw).__name__}")
    if not raw:
        raise InvalidAllocation("allocations is empty")
    known = set(obs.assets)
    weights: dict[str, float] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise InvalidAllocation(f"asset name must be a string, got {key!r}")
        if key != CASH and key not in known:
            raise InvalidAllocation(f"unknown asset {key!r}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidAllocation(f"weight of {key} is not a number: {value!r}")
        try:
            w = float(value)
        except OverflowError:
            raise InvalidAllocation(f"weight of {key} is out of range") from None
        if not math.isfinite(w):
            raise InvalidAllocation(f"weight of {key} is not finite: {value!r}")
        if w < 0:
            raise InvalidAllocation(f"weight of {key} is negative: {w}")
        weights[key] = weights.get(key, 0.0) + w
    try:
        total = math.fsum(weights.values())
    except OverflowError:
        raise InvalidAllocation("weights are out of range") from None
    if abs(total - 1.0) > tolerance + SUM_EPSILON:
        raise InvalidAllocation(f"weights sum to {total:.6g}, not 1 (tolerance {tolerance})")
    for key, w in weights.items():
        if w > 0 and key != CASH and key not in obs.prices:
            raise InvalidAllocation(f"no price for {key}: cannot buy it")
    for q in obs.questions:
        if weights.get(q.yes, 0.0) > 0 and weights.get(q.no, 0.0) > 0:
            raise InvalidAllocation(f"both YES and NO of question {q.id}: hold at most one side")
    out = {a: weights.get(a, 0.0) / total for a in obs.assets}
    out[CASH] = weights.get(CASH, 0.0) / total
    # Make the sum exactly 1 by putting float residue into CASH (never below zero).
    residue = 1.0 - math.fsum(out.values())
    out[CASH] = max(0.0, out[CASH] + residue)
    return out
