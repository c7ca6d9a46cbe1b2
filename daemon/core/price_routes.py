"""Whether a topic pattern routes every price of a market alike, whatever its asset.

A frame's prices all go to the same taps and subscribers when no pattern names an asset (the
daemon's case: ``price.#``, ``#``, ``price.polymarket.#``); the bus then routes a batch once
instead of once per event. An asset may contain dots (``BRK.B``), so a pattern that reaches the
asset level without ``#`` depends on the asset.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["PatternReach", "price_pattern_reach"]

PatternReach = Literal["all", "none", "asset"]


def price_pattern_reach(pattern: str, market: str) -> PatternReach:
    """Return whether ``pattern`` matches every ``price.<market>.<asset>`` topic ("all"),
    none of them ("none"), or some depending on the asset ("asset")."""
    for i, part in enumerate(pattern.split(".")):
        if part == "#":
            return "all"
        if i >= 2:
            return "asset"
        if part != "+" and part != ("price", market)[i]:
            return "none"
    return "none"  # ends above the asset level: a price topic has at least three levels
