"""Polymarket Gamma and CLOB REST: market decoding, payouts, price history and midpoints.

- :func:`parse_gamma_market` decodes one Gamma market object into a :class:`GammaMarket`
  (JSON-string fields parsed); :func:`gamma_payout` says what YES pays once it is resolved.
- :func:`backfill_history` (``/prices-history``) for the daemon's observation history (never
  published as live prices); :func:`fetch_midpoint` (``/midpoint``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
import msgspec
import structlog

from feeds.health import short_error

__all__ = [
    "GammaMarket",
    "History",
    "HttpStatusError",
    "backfill_history",
    "fetch_midpoint",
    "gamma_payout",
    "parse_gamma_market",
]

log = structlog.get_logger(__name__)

History = dict[str, list[tuple[float, float]]]


class HttpStatusError(Exception):
    """A REST call answered with a non-2xx status."""

    def __init__(self, url: str, status: int) -> None:
        """Record the URL and status."""
        super().__init__(f"HTTP {status} from {url}")
        self.url = url
        self.status = status


# --------------------------------------------------------------------------------- Gamma parsing


def _json_list(value: Any) -> list[Any]:
    """Return a list from a Gamma field that is a JSON-encoded string (or already a list)."""
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value.strip():
        try:
            out = json.loads(value)
        except ValueError:
            return []
        return out if isinstance(out, list) else []
    return []


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    return dt.timestamp()


@dataclass(frozen=True)
class GammaMarket:
    """The fields of a Gamma market we use, decoded (JSON-string fields parsed)."""

    id: str
    question: str
    slug: str
    condition_id: str
    outcomes: tuple[str, ...]
    outcome_prices: tuple[float | None, ...]
    token_ids: tuple[str, ...]
    yes_index: int | None
    closed: bool
    active: bool
    enable_order_book: bool
    accepting_orders: bool
    volume_24h: float
    end_ts: float | None
    uma_statuses: tuple[str, ...]

    @property
    def is_binary(self) -> bool:
        """Return whether it has two outcomes with two CLOB tokens."""
        return len(self.outcomes) == 2 and len(self.token_ids) == 2

    @property
    def is_yes_no(self) -> bool:
        """Return whether the outcomes are Yes and No (in any order)."""
        return self.is_binary and {o.lower() for o in self.outcomes} == {"yes", "no"}

    @property
    def yes_token(self) -> str:
        """Return the YES token (the first outcome's when outcomes are not Yes/No)."""
        return self.token_ids[self.yes_index or 0]

    @property
    def no_token(self) -> str:
        """Return the NO token."""
        return self.token_ids[1 - (self.yes_index or 0)]


def parse_gamma_market(m: Mapping[str, Any]) -> GammaMarket | None:
    """Decode one Gamma market object; return None if it has no usable id."""
    mid = m.get("id")
    if mid is None or mid == "":
        return None
    outcomes = tuple(str(o) for o in _json_list(m.get("outcomes")))
    prices = tuple(_float(p) for p in _json_list(m.get("outcomePrices")))
    tokens = tuple(str(t) for t in _json_list(m.get("clobTokenIds")))
    yes_index: int | None = None
    for i, o in enumerate(outcomes):
        if o.strip().lower() == "yes":
            yes_index = i
            break
    vol = _float(m.get("volume24hr"))
    if vol is None:
        vol = _float(m.get("volume24hrClob")) or 0.0
    return GammaMarket(
        id=str(mid),
        question=str(m.get("question") or ""),
        slug=str(m.get("slug") or ""),
        condition_id=str(m.get("conditionId") or ""),
        outcomes=outcomes,
        outcome_prices=prices,
        token_ids=tokens,
        yes_index=yes_index,
        closed=bool(m.get("closed", False)),
        active=bool(m.get("active", True)),
        enable_order_book=bool(m.get("enableOrderBook", False)),
        accepting_orders=bool(m.get("acceptingOrders", False)),
        volume_24h=vol,
        end_ts=_epoch(m.get("endDate")),
        uma_statuses=tuple(str(s) for s in _json_list(m.get("umaResolutionStatuses"))),
    )


def gamma_payout(market: GammaMarket) -> float | None:
    """Return what YES pays if ``market`` is resolved (1, 0 or 0.5), else None.

    Resolved means ``closed`` with final ``outcomePrices`` (["1","0"], ["0","1"] or 0.5/0.5).
    Legacy ["0","0"] and any other prices mean "not resolved yet"; ``endDate`` is ignored.
    """
    if not market.closed or not market.is_binary or len(market.outcome_prices) != 2:
        return None
    yi = market.yes_index if market.yes_index is not None else 0
    py, pn = market.outcome_prices[yi], market.outcome_prices[1 - yi]
    if py is None or pn is None:
        return None
    for p in (1.0, 0.0, 0.5):
        if abs(py - p) < 1e-6 and abs(pn - (1.0 - p)) < 1e-6:
            return p
    return None





async def _get_json(
    session: aiohttp.ClientSession, url: str, params: Sequence[tuple[str, str]] | None = None
) -> Any:
    async with session.get(url, params=params) as resp:
        if resp.status >= 300:
            raise HttpStatusError(url, resp.status)
        body = await resp.read()
    return msgspec.json.decode(body)


class _Session:
    """Use the given aiohttp session or a temporary one."""

    def __init__(self, session: aiohttp.ClientSession | None, timeout: float) -> None:
        self._given = session
        self._own: aiohttp.ClientSession | None = None
        self._timeout = timeout

    async def __aenter__(self) -> aiohttp.ClientSession:
        if self._given is not None:
            return self._given
        self._own = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        return self._own

    async def __aexit__(self, *exc: object) -> None:
        if self._own is not None:
            await self._own.close()


def _parse_history(raw: Any) -> list[tuple[float, float]]:
    items = raw.get("history") if isinstance(raw, dict) else None
    out: list[tuple[float, float]] = []
    for it in items or ():
        if not isinstance(it, dict):
            continue
        t, p = _float(it.get("t")), _float(it.get("p"))
        if t is not None and p is not None:
            out.append((t, p))
    out.sort()
    return out


async def backfill_history(
    tokens: Iterable[str],
    *,
    clob_url: str = "https://clob.polymarket.com",
    interval: str = "1w",
    fidelity: int = 60,
    session: aiohttp.ClientSession | None = None,
    concurrency: int = 8,
    timeout: float = 15.0,
) -> History:
    """Fetch ``/prices-history`` for each token: {token: [(t seconds, price), ...] ascending}.

    A token whose fetch fails maps to an empty list (logged). Not live prices: feed these into
    the observation history, never publish them as PriceEvents.
    """
    toks = list(dict.fromkeys(tokens))
    out: History = {t: [] for t in toks}
    sem = asyncio.Semaphore(max(1, concurrency))
    url = clob_url.rstrip("/") + "/prices-history"
    async with _Session(session, timeout) as s:

        async def one(tok: str) -> None:
            params = [("market", tok), ("interval", interval), ("fidelity", str(fidelity))]
            async with sem:
                try:
                    out[tok] = _parse_history(await _get_json(s, url, params))
                except (aiohttp.ClientError, TimeoutError, HttpStatusError, ValueError) as exc:
                    log.warning("polymarket history failed", token=tok, error=short_error(exc))

        await asyncio.gather(*(one(t) for t in toks))
    return out


async def fetch_midpoint(
    token: str,
    *,
    clob_url: str = "https://clob.polymarket.com",
    session: aiohttp.ClientSession | None = None,
    timeout: float = 15.0,
) -> float | None:
    """Return the CLOB midpoint of ``token`` (``{"mid": ..}`` or ``{"mid_price": ..}``) or None."""
    url = clob_url.rstrip("/") + "/midpoint"
    async with _Session(session, timeout) as s:
        try:
            raw = await _get_json(s, url, [("token_id", token)])
        except (aiohttp.ClientError, TimeoutError, HttpStatusError, ValueError) as exc:
            log.warning("polymarket midpoint failed", token=token, error=short_error(exc))
            return None
    if not isinstance(raw, dict):
        return None
    return _float(raw.get("mid", raw.get("mid_price")))
