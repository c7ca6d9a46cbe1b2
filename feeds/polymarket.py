"""Polymarket live source: Gamma discovery, CLOB market WebSocket, resolutions, history backfill.

- Discovery (Gamma REST): explicit ``slugs`` / ``ids``, or the top ``top_n`` binary order-book
  markets by 24 h volume; questions fixed in the config skip discovery. One
  :class:`~daemon.events.MarketListed` is published per question (``question_id`` = Gamma id;
  YES/NO tokens taken from ``clobTokenIds`` in the order of ``outcomes``). Rediscovery runs every
  ``discovery_interval``; new markets are added to the live connections (``operation:
  subscribe``, no reconnect).
- Prices: :class:`PolymarketAdapter` speaks the market channel (first frame with
  ``initial_dump``, text ``PING`` heartbeat, ``operation`` subscribe/unsubscribe) over the shared
  :class:`~feeds.connection.StreamingSource`; :mod:`feeds.polymarket_decode` keeps the books and
  emits the PriceEvents (mark rules documented there).
- Resolutions: the ``market_resolved`` WS event AND a Gamma poll (``closed=true`` +
  ``outcomePrices``, the source of truth); exactly one ResolutionEvent per question whichever
  comes first. ``["0","0"]`` (legacy) and non-final prices are "not resolved yet"; ``endDate`` is
  never used. Resolved questions' tokens are unsubscribed.
- History: :func:`backfill_history` (``/prices-history``) for the daemon's observation history
  (never published as live prices); :func:`fetch_midpoint` (``/midpoint``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import aiohttp
import msgspec
import structlog
from pydantic import ConfigDict, Field, model_validator
from websockets.asyncio.client import ClientConnection

from daemon.bus import Bus
from daemon.durations import Duration
from daemon.events import Event, MarketListed, ResolutionEvent, SourceStatus
from feeds.backoff import Backoff, StreamSettings
from feeds.connection import (
    DecodeResult,
    SourceCounters,
    SourceState,
    StreamingSource,
    http_status_of,
)
from feeds.health import failure_is_news, short_error
from feeds.polymarket_decode import PolymarketDecoder, WsEvent

__all__ = [
    "GammaMarket",
    "HttpStatusError",
    "PolymarketAdapter",
    "PolymarketSettings",
    "PolymarketSource",
    "Question",
    "ResolutionTracker",
    "backfill_history",
    "build_polymarket_source",
    "fetch_midpoint",
    "gamma_payout",
    "parse_gamma_market",
]

log = structlog.get_logger(__name__)

History = dict[str, list[tuple[float, float]]]
HistorySink = Callable[[History], Awaitable[None] | None]


class PolymarketSettings(StreamSettings):
    """Settings of the Polymarket source (``sources.polymarket`` in the config)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ws_url: str = "wss://ws-subscriptions-clob.polymarket.com/ws/market"
    gamma_url: str = "https://gamma-api.polymarket.com"
    clob_url: str = "https://clob.polymarket.com"
    slugs: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    top_n: int = Field(default=10, ge=0)
    min_volume_24h: float = Field(default=0, ge=0)
    max_per_connection: int = Field(default=200, ge=1)
    ping_interval: Duration = Field(default=10.0, description="text PING period; 0 disables")
    stale_after: Duration = Field(default=600.0, gt=0)
    resolution_poll_interval: Duration = Field(default=300.0, gt=0)
    discovery_interval: Duration = Field(default=3600.0, gt=0)
    history_interval: str = "1w"
    history_fidelity: int = Field(default=60, ge=1)
    mark: Literal["mid", "last", "bid"] = "mid"
    # Additions to the documented settings (tuning; defaults suit production).
    stale_policy: Literal["any", "all"] = "any"
    dead_after: Duration | None = Field(default=60.0, description="no frame at all (not even PONG)")
    http_timeout: Duration = Field(default=15.0, gt=0)
    discovery_pages: int = Field(default=5, ge=1, description="max Gamma pages of 100 scanned")
    backfill: bool = True

    @model_validator(mode="after")
    def _check(self) -> PolymarketSettings:
        """Reject a dead-socket timeout shorter than the PING period (PONGs keep it alive)."""
        if self.dead_after is not None and 0 < self.dead_after <= self.ping_interval:
            raise ValueError("dead_after must exceed ping_interval")
        return self


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


@dataclass(frozen=True)
class Question:
    """A binary question we track: Gamma id, text and its YES / NO tokens."""

    id: str
    question: str
    yes: str
    no: str
    end_ts: float | None = None
    closed: bool = False

    @classmethod
    def from_market(cls, m: GammaMarket) -> Question:
        """Build from a decoded Gamma market (annotating non Yes/No outcomes in the text)."""
        text = m.question
        if not m.is_yes_no:
            text = f"{text} [yes = {m.outcomes[0]}, no = {m.outcomes[1]}]"
        return cls(m.id, text, m.yes_token, m.no_token, m.end_ts, m.closed)

    @classmethod
    def from_config(cls, q: Mapping[str, Any] | Any) -> Question:
        """Build from a config entry ({"id","question","yes","no"} mapping or object)."""

        def get(key: str) -> Any:
            return q.get(key) if isinstance(q, Mapping) else getattr(q, key, None)

        return cls(str(get("id")), str(get("question") or ""), str(get("yes")), str(get("no")))


# --------------------------------------------------------------------------------- resolutions


class ResolutionTracker:
    """Known questions and which are resolved; guarantees one ResolutionEvent per question."""

    def __init__(self, on_resolved: Callable[[Question], None] | None = None) -> None:
        """Create an empty tracker; ``on_resolved`` is called once per resolved question."""
        self.questions: dict[str, Question] = {}
        self.by_token: dict[str, str] = {}
        self.by_condition: dict[str, str] = {}
        self.resolved: set[str] = set()
        self.on_resolved = on_resolved

    def add(self, q: Question, condition_id: str = "") -> bool:
        """Track ``q``; return False if it was already known."""
        if q.id in self.questions:
            return False
        self.questions[q.id] = q
        self.by_token[q.yes] = q.id
        self.by_token[q.no] = q.id
        if condition_id:
            self.by_condition[condition_id] = q.id
        return True

    def unresolved(self) -> list[Question]:
        """Return the known questions not resolved yet."""
        return [q for qid, q in self.questions.items() if qid not in self.resolved]

    def resolve(
        self, qid: str, p_yes: float, ts: float, recv_ts: float, source: str
    ) -> ResolutionEvent | None:
        """Mark ``qid`` resolved and return its event, or None if unknown or already resolved."""
        q = self.questions.get(qid)
        if q is None or qid in self.resolved:
            return None
        self.resolved.add(qid)
        log.info("polymarket question resolved", question_id=qid, yes=p_yes, source=source)
        if self.on_resolved is not None:
            self.on_resolved(q)
        return ResolutionEvent(
            ts=ts,
            recv_ts=recv_ts,
            question_id=qid,
            payouts={q.yes: p_yes, q.no: 1.0 - p_yes},
            source=source,
        )

    def from_ws(self, ev: WsEvent, ts: float, now: float) -> ResolutionEvent | None:
        """Handle a ``market_resolved`` event (custom feature)."""
        qid: str | None = ev.id if ev.id in self.questions else None
        for tok in (ev.winning_asset_id, *(ev.assets_ids or ())):
            if qid is not None:
                break
            qid = self.by_token.get(tok)
        if qid is None:
            qid = self.by_condition.get(ev.market)
        if qid is None:
            return None
        q = self.questions[qid]
        win = ev.winning_asset_id
        outcome = ev.winning_outcome.strip().lower()
        if win == q.yes or (not win and outcome == "yes"):
            p_yes = 1.0
        elif win == q.no or (not win and outcome == "no"):
            p_yes = 0.0
        elif outcome in ("50-50", "50/50", "split"):
            p_yes = 0.5
        else:
            log.warning(
                "polymarket market_resolved not understood",
                question_id=qid,
                winning_asset_id=win,
                winning_outcome=ev.winning_outcome,
            )
            return None
        return self.resolve(qid, p_yes, ts, now, "polymarket.ws")

    def from_gamma(self, m: GammaMarket, now: float) -> ResolutionEvent | None:
        """Handle a polled Gamma market (the source of truth)."""
        if m.id not in self.questions or m.id in self.resolved or not m.closed:
            return None
        p = gamma_payout(m)
        if p is None:
            log.info(
                "polymarket market closed without final prices",
                question_id=m.id,
                outcome_prices=list(m.outcome_prices),
                uma=list(m.uma_statuses),
            )
            return None
        return self.resolve(m.id, p, now, now, "polymarket.gamma")


# --------------------------------------------------------------------------------- REST helpers


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


# --------------------------------------------------------------------------------- WS adapter


class PolymarketAdapter:
    """CLOB market-channel protocol for :class:`~feeds.connection.StreamingSource`."""

    def __init__(self, settings: PolymarketSettings, decoder: PolymarketDecoder) -> None:
        """Bind the adapter to its settings and (shared) decoder."""
        self.name = "polymarket"
        self.max_keys_per_connection = settings.max_per_connection
        self.settings = settings
        self.decoder = decoder

    def url(self) -> str:
        """Return the market-channel URL."""
        return self.settings.ws_url

    async def on_open(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Reset the books of ``keys`` and send the initial subscription."""
        self.decoder.reset(keys)
        msg = {
            "assets_ids": list(keys),
            "type": "market",
            "custom_feature_enabled": True,
            "initial_dump": True,
        }
        await ws.send(json.dumps(msg))

    async def heartbeat(self, ws: ClientConnection) -> None:
        """Send the text ``PING`` every ``ping_interval`` seconds (disabled if <= 0)."""
        period = self.settings.ping_interval
        if period <= 0:
            return
        while True:
            await asyncio.sleep(period)
            await ws.send("PING")

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        """Decode one frame."""
        return self.decoder.decode(frame, now)

    async def periodic(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """No periodic duty on this channel."""
        return

    def backoff_penalty(self, exc: BaseException | None, close_code: int | None) -> float:
        """Back off 4x harder after HTTP 429 and 2x after 1013 (try again later)."""
        if http_status_of(exc) == 429:
            return 4.0
        if close_code == 1013:
            return 2.0
        return 1.0

    async def subscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Add ``keys`` to a live connection (their books wait for a snapshot)."""
        self.decoder.reset(keys)
        msg = {"assets_ids": list(keys), "operation": "subscribe", "custom_feature_enabled": True}
        await ws.send(json.dumps(msg))

    async def unsubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Remove ``keys`` from a live connection."""
        self.decoder.forget(keys)
        await ws.send(json.dumps({"assets_ids": list(keys), "operation": "unsubscribe"}))

    async def resubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Ask for fresh snapshots of ``keys`` (unsubscribe, then subscribe)."""
        await self.unsubscribe(ws, keys)
        await self.subscribe(ws, keys)


# --------------------------------------------------------------------------------- the source


class PolymarketSource:
    """Discovery + WebSocket prices + resolutions for Polymarket (implements ``Source``)."""

    def __init__(
        self,
        settings: PolymarketSettings,
        *,
        bus: Bus,
        now: Callable[[], float],
        questions: Sequence[Mapping[str, Any] | Any] | None = None,
        history_sink: HistorySink | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """Prepare the source; nothing runs before :meth:`run`."""
        self.name = "polymarket"
        self.settings = settings
        self._bus = bus
        self._now = now
        self._history_sink = history_sink
        self._fixed = [Question.from_config(q) for q in (questions or ())]
        self.tracker = ResolutionTracker(on_resolved=self._on_resolved)
        self.decoder = PolymarketDecoder(mark=settings.mark, on_resolved=self._ws_resolved)
        self.adapter = PolymarketAdapter(settings, self.decoder)
        self._policy = settings.backoff_policy()
        self._rng = rng if rng is not None else random.Random()
        self.streaming = StreamingSource(
            self.adapter,
            (),
            bus=bus,
            now=now,
            **settings.stream_options(),
            name=self.name,
            rng=self._rng,
        )
        self._session: aiohttp.ClientSession | None = None
        self._rest_state = SourceState.CONNECTING
        self._rest_published: SourceState | None = None
        self._rest_failures = 0
        self._rest_error = ""
        self._keys_dirty = asyncio.Event()
        self._stop_evt: asyncio.Event | None = None
        self._discovered = asyncio.Event()

    # ----------------------------------------------------------------------------- Source

    @property
    def counters(self) -> SourceCounters:
        """Return the WebSocket counters."""
        return self.streaming.counters

    @property
    def state(self) -> SourceState:
        """Return the streaming state (or the REST state while there is nothing to stream)."""
        if self.streaming.keys:
            return self.streaming.state
        return self._rest_state

    @property
    def last_error(self) -> str:
        """Return the short name of the last failure of what :attr:`state` reports on."""
        if self.streaming.keys:
            return self.streaming.last_error
        return self._rest_error

    @property
    def questions(self) -> dict[str, Question]:
        """Return every known question by id."""
        return dict(self.tracker.questions)

    def tokens(self) -> list[str]:
        """Return the tokens that should be streamed (known, open, unresolved questions)."""
        out: list[str] = []
        for q in self.tracker.unresolved():
            if not q.closed:
                out.extend((q.yes, q.no))
        return out

    async def run(self) -> None:
        """Discover, stream, poll resolutions and rediscover until stopped or cancelled."""
        self._stop_evt = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=self.settings.http_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            loop = asyncio.get_running_loop()
            tasks = [
                loop.create_task(self.streaming.run(), name="polymarket-ws"),
                loop.create_task(self._guarded(self._discovery_loop), name="polymarket-disc"),
                loop.create_task(self._guarded(self._resolution_loop), name="polymarket-res"),
                loop.create_task(self._guarded(self._keys_loop), name="polymarket-keys"),
            ]
            try:
                await self._stop_evt.wait()
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await self.streaming.stop()
                self._session = None

    async def stop(self) -> None:
        """Make :meth:`run` return after closing every connection."""
        await self.streaming.stop()
        if self._stop_evt is not None:
            self._stop_evt.set()

    # ----------------------------------------------------------------------------- discovery

    async def discover(self) -> list[Question]:
        """Find markets, publish MarketListed for new ones, update the subscription; return new."""
        found: list[tuple[Question, str]] = [(q, "") for q in self._fixed]
        s = self.settings
        if s.slugs or s.ids:
            markets = await self._fetch_explicit()
        elif not self._fixed and s.top_n > 0:
            markets = await self._fetch_top()
        else:
            markets = []
        for m in markets:
            found.append((Question.from_market(m), m.condition_id))
        new: list[Question] = []
        now = self._now()
        for q, cond in found:
            if not self.tracker.add(q, cond):
                continue
            new.append(q)
            await self._bus.publish(
                MarketListed(
                    ts=now,
                    recv_ts=now,
                    question_id=q.id,
                    question=q.question,
                    yes_asset=q.yes,
                    no_asset=q.no,
                    end_ts=q.end_ts,
                )
            )
        if new:
            log.info("polymarket markets listed", count=len(new), total=len(self.tracker.questions))
            if self._history_sink is not None and self.settings.backfill:
                # history first, so the sink never receives it after live prices of a token
                await self._backfill_into_sink([t for q in new for t in (q.yes, q.no)])
            self.streaming.set_keys(self.tokens())
        self._discovered.set()
        return new

    async def _fetch_explicit(self) -> list[GammaMarket]:
        base = self.settings.gamma_url.rstrip("/")
        out: list[GammaMarket] = []
        async with _Session(self._session, self.settings.http_timeout) as s:
            for mid in self.settings.ids:
                try:
                    raw = await _get_json(s, f"{base}/markets/{mid}")
                except HttpStatusError as exc:
                    if exc.status != 404:
                        raise
                    log.warning("polymarket market not found", id=mid)
                    continue
                m = parse_gamma_market(raw) if isinstance(raw, dict) else None
                if m is not None:
                    out.append(m)
            for slug in self.settings.slugs:
                try:
                    raw = await _get_json(s, f"{base}/markets/slug/{slug}")
                    items = [raw]
                except HttpStatusError as exc:
                    if exc.status != 404:
                        raise
                    raw = await _get_json(s, f"{base}/markets", [("slug", slug)])
                    items = raw if isinstance(raw, list) else []
                    if not items:
                        log.warning("polymarket market not found", slug=slug)
                for it in items:
                    m = parse_gamma_market(it) if isinstance(it, dict) else None
                    if m is not None:
                        out.append(m)
        usable = []
        for m in out:
            if m.is_binary:
                usable.append(m)
            else:
                log.warning(
                    "polymarket market not binary, skipped", id=m.id, outcomes=list(m.outcomes)
                )
        return usable

    async def _fetch_top(self) -> list[GammaMarket]:
        s = self.settings
        base = s.gamma_url.rstrip("/")
        out: list[GammaMarket] = []
        page = 100
        async with _Session(self._session, s.http_timeout) as sess:
            for i in range(s.discovery_pages):
                params = [
                    ("order", "volume_24hr"),
                    ("ascending", "false"),
                    ("active", "true"),
                    ("closed", "false"),
                    ("limit", str(page)),
                    ("offset", str(i * page)),
                ]
                raw = await _get_json(sess, f"{base}/markets", params)
                items = raw if isinstance(raw, list) else []
                for it in items:
                    m = parse_gamma_market(it) if isinstance(it, dict) else None
                    if (
                        m is None
                        or not m.enable_order_book
                        or not m.is_yes_no
                        or m.closed
                        or m.volume_24h < s.min_volume_24h
                    ):
                        continue
                    out.append(m)
                    if len(out) >= s.top_n:
                        return out
                if len(items) < page:
                    break
        return out

    async def _discovery_loop(self) -> None:
        backoff = Backoff(self._policy, rng=self._rng)
        while True:
            try:
                await self.discover()
            except (aiohttp.ClientError, TimeoutError, HttpStatusError, ValueError) as exc:
                penalty = 4.0 if isinstance(exc, HttpStatusError) and exc.status == 429 else 1.0
                delay = backoff.next_delay(penalty=penalty)
                self._rest_error = short_error(exc)
                n = self._rest_failures + 1
                (log.warning if failure_is_news(n) else log.debug)(
                    "polymarket discovery failed", error=self._rest_error, failures=n,
                    delay=round(delay, 3),
                )
                await self._rest_result(ok=False)
                await asyncio.sleep(delay)
                continue
            backoff.reset()
            await self._rest_result(ok=True)
            if not (self.settings.slugs or self.settings.ids) and self._fixed:
                return  # fixed universe: nothing to rediscover
            await asyncio.sleep(self.settings.discovery_interval)

    # ----------------------------------------------------------------------------- resolutions

    def _ws_resolved(self, ev: WsEvent, ts: float) -> Event | None:
        return self.tracker.from_ws(ev, ts, self._now())

    def _on_resolved(self, q: Question) -> None:
        del q
        self._keys_dirty.set()

    async def poll_resolutions(self) -> list[ResolutionEvent]:
        """Poll Gamma once for closed markets among the unresolved questions; publish results."""
        pending = self.tracker.unresolved()
        if not pending:
            return []
        base = self.settings.gamma_url.rstrip("/")
        out: list[ResolutionEvent] = []
        async with _Session(self._session, self.settings.http_timeout) as s:
            for i in range(0, len(pending), 50):
                chunk = pending[i : i + 50]
                params = [("id", q.id) for q in chunk]
                params += [("closed", "true"), ("limit", str(len(chunk)))]
                raw = await _get_json(s, f"{base}/markets", params)
                for it in raw if isinstance(raw, list) else []:
                    m = parse_gamma_market(it) if isinstance(it, dict) else None
                    if m is None:
                        continue
                    ev = self.tracker.from_gamma(m, self._now())
                    if ev is not None:
                        out.append(ev)
                        await self._bus.publish(ev)
        return out

    async def _resolution_loop(self) -> None:
        backoff = Backoff(self._policy, rng=self._rng)
        await self._discovered.wait()
        while True:
            delay = self.settings.resolution_poll_interval
            try:
                await self.poll_resolutions()
                backoff.reset()
            except (aiohttp.ClientError, TimeoutError, HttpStatusError, ValueError) as exc:
                penalty = 4.0 if isinstance(exc, HttpStatusError) and exc.status == 429 else 1.0
                delay = min(delay, backoff.next_delay(penalty=penalty))
                log.warning("polymarket resolution poll failed", error=short_error(exc))
            await asyncio.sleep(delay)

    async def _keys_loop(self) -> None:
        while True:
            await self._keys_dirty.wait()
            self._keys_dirty.clear()
            self.streaming.set_keys(self.tokens())

    # ----------------------------------------------------------------------------- history

    async def backfill_history(self, tokens: Iterable[str] | None = None) -> History:
        """Fetch the configured price history of ``tokens`` (default: every streamed token)."""
        s = self.settings
        return await backfill_history(
            self.tokens() if tokens is None else tokens,
            clob_url=s.clob_url,
            interval=s.history_interval,
            fidelity=s.history_fidelity,
            session=self._session,
            timeout=s.http_timeout,
        )

    async def midpoint(self, token: str) -> float | None:
        """Return the CLOB midpoint of ``token``."""
        return await fetch_midpoint(
            token,
            clob_url=self.settings.clob_url,
            session=self._session,
            timeout=self.settings.http_timeout,
        )

    async def _backfill_into_sink(self, tokens: list[str]) -> None:
        assert self._history_sink is not None
        hist = await self.backfill_history(tokens)
        try:
            res = self._history_sink(hist)
            if inspect.isawaitable(res):
                await res
        except Exception as exc:
            log.error("polymarket history sink failed", error=repr(exc))

    # ----------------------------------------------------------------------------- status

    async def _rest_result(self, *, ok: bool) -> None:
        if ok:
            self._rest_failures = 0
            self._rest_error = ""
            state = SourceState.LIVE
        else:
            self._rest_failures += 1
            down = self._rest_failures >= self.streaming.down_after
            state = SourceState.DOWN if down else SourceState.BACKING_OFF
        self._rest_state = state
        if state != self._rest_published:
            self._rest_published = state
            now = self._now()
            await self._bus.publish(
                SourceStatus(ts=now, recv_ts=now, source=f"{self.name}.gamma", state=str(state),
                             detail=self._rest_error)
            )

    async def _guarded(self, factory: Callable[[], Awaitable[None]]) -> None:
        try:
            await factory()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a loop must not kill the source silently
            log.exception("polymarket loop crashed", error=repr(exc))


def build_polymarket_source(
    settings: PolymarketSettings,
    *,
    bus: Bus,
    now: Callable[[], float],
    questions: Sequence[Mapping[str, Any] | Any] | None = None,
    history_sink: HistorySink | None = None,
) -> PolymarketSource:
    """Build the Polymarket source; ``questions`` fixed in the config skip discovery."""
    return PolymarketSource(
        settings, bus=bus, now=now, questions=questions, history_sink=history_sink
    )
