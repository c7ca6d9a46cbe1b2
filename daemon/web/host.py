"""What the page's route modules (:mod:`.chart`, :mod:`.decisions`, :mod:`.positions`) read of
the HTTP server: its engine, leaderboard cache, query slots, table namer and asset names."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from daemon.web.labels import AssetLabels


class Host(Protocol):
    """The server the routes answer from (:class:`daemon.web.http.HttpServer`)."""

    engine: Any
    board_cache: Any  # a daemon.web.board_cache.BoardCache, or None for an in-memory store
    _queries: asyncio.Semaphore

    async def _tables_of(self, agent: str) -> Callable[[str], str] | None:
        """Return the table namer of ``agent``'s scope (``None``: unknown agent)."""
        ...

    @property
    def asset_labels(self) -> AssetLabels:
        """Return the Polymarket token names."""
        ...
