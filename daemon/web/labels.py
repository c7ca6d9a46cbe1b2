"""Names, not ids: each Polymarket token as its question's title and side (YES / NO).

The same lookup as the HTML report (:func:`scoring.board.figures._labels`): a book's
``questions`` map each question id to its tokens (YES first, then NO); the title comes from the
configs the store ran with (``markets.polymarket.questions``, :mod:`daemon.core.run_configs`)
or the ``MarketListed`` events recorded when the question was listed. :class:`AssetLabels`
reads them through the server's store, remembers them, and reads again only the events stored
since (by row id) when a token is not known yet, at most once every :data:`RETRY` seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from daemon.core.run_configs import fetch_run_configs

#: The sides of a question's tokens, in the order a book lists them.
SIDES = ("YES", "NO")
#: Seconds between two reads for tokens not known yet.
RETRY = 10.0

Fetch = Callable[..., Awaitable[list[tuple[Any, ...]]]]


class AssetLabels:
    """Polymarket tokens' question titles and sides, read from a store and remembered."""

    def __init__(self) -> None:
        """Start empty (the first :meth:`labels` call reads the store)."""
        self.tokens: dict[str, tuple[str, str]] = {}  # token -> (question id, side)
        self.titles: dict[str, str] = {}
        self._last_event = 0
        self._read_at = -RETRY
        self._config_read = False

    async def refresh(self, fetch: Fetch) -> None:
        """Read the books' questions and the titles stored since the last read."""
        self._read_at = time.monotonic()
        for (state,) in await fetch("SELECT state_json FROM books WHERE market='polymarket'"):
            try:
                questions = json.loads(state or "{}").get("questions", {})
            except ValueError:
                continue
            for q, members in questions.items():
                for side, token in zip(SIDES, members, strict=False):
                    self.tokens[str(token)] = (str(q), side)
        if not self._config_read:
            self._config_read = True
            for text in await fetch_run_configs(fetch):  # every run's and reload's
                try:
                    cfg = json.loads(text or "{}")
                except ValueError:
                    continue
                pm = (cfg.get("markets") or {}).get("polymarket") or {}
                for q in pm.get("questions") or []:
                    if isinstance(q, dict) and q.get("id") and q.get("question"):
                        self.titles.setdefault(str(q["id"]), str(q["question"]))
        rows = await fetch("SELECT id, payload FROM market_events WHERE id > ?"
                           " AND kind='MarketListed' ORDER BY id", (self._last_event,))
        for row_id, payload in rows:
            self._last_event = max(self._last_event, int(row_id))
            try:
                ev = json.loads(payload or "{}")
            except ValueError:
                continue
            if ev.get("question_id") and ev.get("question"):
                self.titles.setdefault(str(ev["question_id"]), str(ev["question"]))

    async def labels(self, fetch: Fetch, assets: Iterable[str]) -> dict[str, dict[str, str]]:
        """Return ``{token: {"label", "question", "side", "question_id"}}`` for the Polymarket
        tokens among ``assets`` (other assets are left out: their id is their name)."""
        wanted = {a for a in assets if a and a != "CASH"}
        unknown = {a for a in wanted if (a not in self.tokens and _token_like(a))
                   or (a in self.tokens and self.tokens[a][0] not in self.titles)}
        if unknown and time.monotonic() - self._read_at >= RETRY:
            await self.refresh(fetch)
        out: dict[str, dict[str, str]] = {}
        for a in sorted(wanted):
            if a not in self.tokens:
                continue
            q, side = self.tokens[a]
            title = self.titles.get(q, q)
            out[a] = {"label": f"{title} {side}", "question": title, "side": side,
                      "question_id": q}
        return out


def assets_in(value: Any) -> set[str]:
    """Return the asset ids used as keys anywhere in ``value`` (weights, allocations, trades)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.add(str(k))
            else:
                out |= assets_in(v)
    elif isinstance(value, list):
        for v in value:
            out |= assets_in(v)
    return out


def _token_like(asset: str) -> bool:
    """Return whether ``asset`` looks like a Polymarket token id (a long decimal number)."""
    return asset.isdigit() and len(asset) >= 10
