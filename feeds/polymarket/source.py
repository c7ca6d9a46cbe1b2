"""Polymarket live source: Gamma discovery, CLOB market WebSocket, resolutions, history backfill.

- Discovery (Gamma REST): explicit ``slugs`` / ``ids``, or the top ``top_n`` binary order-book
  markets by 24 h volume; questions fixed in the config skip discovery. One
  :class:`~daemon.core.events.MarketListed` is published per question (``question_id`` = Gamma id;
  YES/NO tokens taken from ``clobTokenIds`` in the order of ``outcomes``). Rediscovery runs every
  ``discovery_interval``; new markets are added to the live connections (``operation:
  subscribe``, no reconnect).
- Prices: :class:`PolymarketAdapter` speaks the market channel (first frame with
  ``initial_dump``, text ``PING`` heartbeat, ``operation`` subscribe/unsubscribe) over the shared
  :class:`~feeds.connection.StreamingSource`; :mod:`feeds.polymarket.decode` keeps the books and
  emits the PriceEvents (mark rules documented there).
- Resolutions: the ``market_resolved`` WS event AND a Gamma poll (``closed=true`` +
  ``outcomePrices``, the source of truth); exactly one ResolutionEvent per question whichever
  comes first. ``["0","0"]`` (legacy) and non-final prices are "not resolved yet"; ``endDate`` is
  never used. Resolved questions' tokens are unsubscribed (tracking in
  :mod:`feeds.polymarket.resolution`).
- History: :func:`backfill_history` (``/prices-history``) for the daemon's observation history
  (never published as live prices); :func:`fetch_midpoint` (``/midpoint``). These and the Gamma
  market decoding live in :mod:`feeds.polymarket.gamma`.

Why one module over 500 lines: the source, its WebSocket adapter and its REST fallbacks share the
token table and the subscription state; decoding is :mod:`feeds.polymarket.decode`, Gamma
:mod:`feeds.polymarket.gamma`, resolutions :mod:`feeds.polymarket.resolution`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import aiohttp
import structlog
from pydantic import ConfigDict, Field, model_validator
from websockets.asyncio.client import ClientConnection

from daemon.core.bus import Bus
from daemon.core.durations import Duration
from daemon.core.events import Event, MarketListed, ResolutionEvent, SourceStatus
from daemon.core.price_columns import PriceColumns
from feeds.backoff import Backoff, StreamSettings
from feeds.connection import StreamingSource
from feeds.health import failure_is_news, short_error
from feeds.polymarket.decode import PolymarketDecoder, WsEvent
from feeds.polymarket.gamma import (
    GammaMarket,
    History,
    HttpStatusError,
    _get_json,
    _Session,
    backfill_history,
    fetch_midpoint,
    parse_gamma_market,
)
from feeds.polymarket.resolution import Question, ResolutionTracker
from feeds.source_contract import DecodeResult, SourceCounters, SourceState, http_status_of

__all__ = [
    "PolymarketAdapter",
    "PolymarketSettings",
    "PolymarketSource",
    "build_polymarket_source",
]

log = structlog.get_logger(__name__)

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

    def decode_columns(self, frame: str | bytes, now: float, prices: PriceColumns
                       ) -> DecodeResult:
        """Decode one frame, its prices appended to ``prices`` (the read loop's path)."""
        return self.decoder.decode_columns(frame, now, prices)

    def price_columns(self) -> PriceColumns:
        """Return empty columns for this source's prices."""
        return self.decoder.price_columns()

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
