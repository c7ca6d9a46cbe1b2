"""Nonzero holdings of a book, agent by agent, for marking a batch of price changes.

A batch of price changes moves each agent's value by the sum of quantity x change over the
batch's columns. The dense way gathers the batch's columns of the (agents x assets) holdings;
when agents hold few of many assets (Polymarket) and a batch touches many columns (a burst of
frames), going over the held entries only is far cheaper. Both sum each agent's terms in
ascending column order from zero, so an agent's value does not depend on which way was taken,
nor on the other agents in the book.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np

__all__ = ["SPARSE_COST", "HeldEntries", "held_entries", "use_held", "value_change"]

#: Cost of one held entry in :func:`value_change` relative to one (agent, column) cell of the
#: dense gather (measured: about 6 ns against 1 ns at 1,000 agents x 500 assets).
SPARSE_COST: Final[int] = 6


class HeldEntries(NamedTuple):
    """The nonzero cells of a holdings matrix in row-major order (each row's columns rising)."""

    rows: np.ndarray
    cols: np.ndarray
    qty: np.ndarray


def held_entries(h: np.ndarray) -> HeldEntries:
    """Return the nonzero cells of holdings ``h`` (agents x assets)."""
    rows, cols = np.nonzero(h)
    return HeldEntries(rows, cols, h[rows, cols])


def use_held(held: HeldEntries, n_agents: int, n_cols: int) -> bool:
    """Return whether a batch of ``n_cols`` columns is cheaper over the held entries."""
    return SPARSE_COST * len(held.rows) < n_agents * n_cols


def value_change(held: HeldEntries, n_agents: int, n_assets: int, cols: np.ndarray,
                 change: np.ndarray) -> np.ndarray:
    """Return each agent's value change for price ``change`` at ``cols`` (each at most once)."""
    d = np.zeros(n_assets, dtype=np.float64)
    d[cols] = change
    return np.bincount(held.rows, weights=held.qty * d[held.cols], minlength=n_agents)
