"""The accounting core's value types: the cost model, a fill, a snapshot of every position and
the one-line rejection of a rebalance (used by :mod:`scoring.ledger.ledger`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["CASH", "BookSnapshot", "CostModel", "Fill", "RebalanceRejected"]

CASH = "CASH"


class RebalanceRejected(ValueError):
    """Raised when a target allocation cannot be applied; message is one clear line."""


@dataclass(frozen=True, slots=True)
class CostModel:
    """Proportional trading costs charged on traded value (prices are never moved)."""

    fee_bps: float = 0.0
    slippage_bps: float = 0.0

    def __post_init__(self) -> None:
        """Validate that both components are finite, non-negative and the total rate below 1."""
        for name in ("fee_bps", "slippage_bps"):
            x = getattr(self, name)
            if not isinstance(x, int | float) or isinstance(x, bool):
                raise ValueError(f"CostModel.{name} must be a number, got {x!r}")
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"CostModel.{name} must be finite and >= 0, got {x!r}")
        if self.rate >= 1.0:
            raise ValueError(f"CostModel total rate must be < 1 (100%), got {self.rate!r}")

    @property
    def rate(self) -> float:
        """Return the total cost rate as a fraction of traded value."""
        return (self.fee_bps + self.slippage_bps) / 1e4

    @classmethod
    def preset(cls, name: str) -> CostModel:
        """Return preset ``none`` (0/0) or ``realistic`` (PortBench: fee 5 bps + slippage 10)."""
        key = name.strip().lower()
        if key == "none":
            return cls(0.0, 0.0)
        if key == "realistic":
            return cls(fee_bps=5.0, slippage_bps=10.0)
        raise ValueError(f"unknown cost preset {name!r} (expected 'none' or 'realistic')")


@dataclass(frozen=True, slots=True)
class Fill:
    """Record of one applied rebalance."""

    agent: str
    assets: tuple[str, ...]
    trades: np.ndarray
    prices: np.ndarray
    traded_value: float
    cost: float
    value_before: float
    value_after: float
    cash_before: float
    cash_after: float
    weights_after: dict[str, float]


@dataclass(frozen=True, slots=True)
class BookSnapshot:
    """Every agent's position at one instant (a decision round reads it while prices move on)."""

    assets: tuple[str, ...]
    index: dict[str, int]
    """Agent -> row."""
    holdings: np.ndarray
    cash: np.ndarray
    values: np.ndarray
    held: np.ndarray
    """Value held per agent and asset (holdings x price)."""

    def holdings_of(self, agent: str) -> dict[str, float]:
        """Return ``agent``'s non-zero holdings, in column order."""
        row = self.holdings[self.index[agent]]
        vals, assets = row.tolist(), self.assets
        return {assets[j]: vals[j] for j in np.flatnonzero(row).tolist()}

    def weights_of(self, agent: str) -> dict[str, float]:
        """Return ``agent``'s non-zero weights and ``CASH`` (as :meth:`Book.weights`, filtered)."""
        i = self.index[agent]
        held = self.held[i]
        cash = float(self.cash[i])
        v = cash + float(held.sum())
        if v <= 0.0:
            return {CASH: 1.0}
        ws, assets = (held / v).tolist(), self.assets
        out = {assets[j]: ws[j] for j in np.flatnonzero(held).tolist() if ws[j] != 0.0}
        out[CASH] = cash / v
        return out
