"""What a protocol's runner may ask of the daemon that hosts it, as structural types.

A protocol's home (``agents/<protocol>/``) sits below the engine and the store: it never imports
them (the import contracts in pyproject.toml). Where a protocol needs the store or the market's
closes (CapitalBench's round runner, PortBench's delayed stage scoring), it is handed the
daemon's objects and sees them through these protocols: :class:`daemon.store.store.Store` is a
:class:`StoreAccess`, :class:`daemon.market.state.MarketState` a :class:`PriceHistory`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["Now", "PriceHistory", "StoreAccess"]


class StoreAccess(Protocol):
    """Reads and atomic writes of the daemon's store."""

    @property
    def path(self) -> str:
        """Return the store's file path or URL."""
        ...

    @property
    def db(self) -> Any:
        """Return the store's backend (a shared store's has ``claim_agents``)."""
        ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Return every row of ``sql``."""
        ...

    async def execute_atomic(self, statements: Sequence[tuple[str, Sequence[Any]]], *,
                             appends: Sequence[tuple[str, Sequence[tuple[Any, ...]]]] = (),
                             states: Sequence[str] = ()) -> None:
        """Run ``statements`` in one transaction, then insert the chained rows of ``appends``
        ((table, rows of its hashed columns)) and append the state of each CapitalBench round
        of ``states``."""
        ...


class Now(Protocol):
    """The daemon's clock: live or simulated time."""

    def now(self) -> float:
        """Return the current time (epoch seconds)."""
        ...


class PriceHistory(Protocol):
    """The market state's recent prices: market -> asset -> the recent (ts, price) history."""

    @property
    def history(self) -> Mapping[str, Mapping[str, Any]]:
        """Return market -> asset -> history."""
        ...
