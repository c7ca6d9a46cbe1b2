"""Finnhub trades WebSocket (free key passed as ``?token=``).

Subscribe one symbol per message (``{"type":"subscribe","symbol":"AAPL"}``); trades arrive as
``{"type":"trade","data":[{"p":..,"s":..,"t":<ms>,"v":..},..]}``, keep-alives as
``{"type":"ping"}`` and problems as ``{"type":"error","msg":..}``. Finnhub is known to repeat
trades: a bounded window of recent ``(s, t, p, v)`` drops duplicates. The token never appears in
logs (:func:`redact_url`).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec
import structlog
from pydantic import ConfigDict, Field
from websockets.asyncio.client import ClientConnection

from daemon.core.bus import Bus
from daemon.core.durations import Duration
from daemon.core.events import NonMarkingPrice, PriceEvent
from feeds.alpaca import secret_from_env
from feeds.backoff import EquityStreamSettings
from feeds.connection import StreamingSource
from feeds.source_contract import DecodeResult, http_status_of

__all__ = [
    "FinnhubSettings",
    "FinnhubStreamAdapter",
    "TradeDeduper",
    "build_finnhub_source",
    "redact_url",
]

log = structlog.get_logger(__name__)

_SECRET_PARAMS = frozenset({"token", "apikey", "api_key", "key", "secret"})
_SECRET_IN_TEXT = re.compile(r"(?i)\b(token|apikey|api_key|secret)=[^&\s'\"]+")


def redact_url(url: str) -> str:
    """Return ``url`` with the values of token-like query parameters replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _SECRET_IN_TEXT.sub(r"\1=***", url)
    if not parts.query:
        return url
    query = [
        (k, "***" if k.lower() in _SECRET_PARAMS else v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(query=urlencode(query, safe="*")))


def redact_text(text: str) -> str:
    """Replace ``token=...``-like fragments in free text (error messages) by ``token=***``."""
    return _SECRET_IN_TEXT.sub(r"\1=***", text)


class FinnhubSettings(EquityStreamSettings):
    """Finnhub WebSocket and REST settings; the key comes from the env var ``key_env``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ws_url: str = "wss://ws.finnhub.io"
    rest_url: str = "https://finnhub.io/api/v1"
    bars_adjusted: bool = Field(default=False, description="historical candles (build-recording"
                                " --bars finnhub): also adjusted for dividends")
    key_env: str = "FINNHUB_API_KEY"
    max_per_connection: int = Field(default=50, ge=1)
    stale_after: Duration = Field(default=120.0, gt=0)
    stale_policy: Literal["any", "all"] = "all"
    dead_after: Duration | None = Field(default=None, gt=0)
    dedupe_window: int = Field(default=4096, ge=1)
    rate_limit_penalty: float = Field(default=4.0, ge=1.0)


class TradeDeduper:
    """Remember the last ``capacity`` trade identities; report repeats."""

    def __init__(self, capacity: int) -> None:
        """Create an empty window of ``capacity`` entries."""
        self.capacity = capacity
        self._seen: OrderedDict[tuple[Any, ...], None] = OrderedDict()

    def seen(self, ident: tuple[Any, ...]) -> bool:
        """Return True if ``ident`` is in the window, else record it and return False."""
        if ident in self._seen:
            return True
        self._seen[ident] = None
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self._seen)


class _Trade(msgspec.Struct):
    p: float | None = None
    s: str | None = None
    t: int | float | None = None
    v: float | None = None


class _Frame(msgspec.Struct):
    type: str = ""
    data: list[_Trade] | None = None
    msg: str | None = None


_decoder = msgspec.json.Decoder(_Frame)
_encoder = msgspec.json.Encoder()


class FinnhubStreamAdapter:
    """Protocol adapter of the Finnhub trades WebSocket."""

    def __init__(
        self,
        settings: FinnhubSettings,
        token: str,
        *,
        name: str = "finnhub",
        is_open: Callable[[float], bool] | None = None,
    ) -> None:
        """Create the adapter with the API token (kept out of logs and repr).

        With ``is_open`` (the NYSE calendar), trades stamped outside the regular session are
        published as :class:`NonMarkingPrice` unless ``extended_hours_marks``.
        """
        self.settings = settings
        self._is_open = is_open
        self.name = name
        self.max_keys_per_connection = settings.max_per_connection
        self._token = token
        self.dedupe = TradeDeduper(settings.dedupe_window)
        self.duplicates = 0

    def __repr__(self) -> str:
        return f"FinnhubStreamAdapter(name={self.name!r}, url={self.settings.ws_url!r})"

    def url(self) -> str:
        """Return the WebSocket URL with the token (never log it: see :func:`redact_url`)."""
        base = self.settings.ws_url
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}{urlencode({'token': self._token})}"

    async def on_open(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Subscribe every key (one message per symbol)."""
        await self.subscribe(ws, keys)

    async def subscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Subscribe ``keys`` on a live connection."""
        for k in keys:
            await ws.send(_encoder.encode({"type": "subscribe", "symbol": k}).decode())

    async def unsubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Unsubscribe ``keys`` on a live connection."""
        for k in keys:
            await ws.send(_encoder.encode({"type": "unsubscribe", "symbol": k}).decode())

    async def heartbeat(self, ws: ClientConnection) -> None:
        """Return at once: the server sends ``{"type":"ping"}``, nothing to answer."""

    async def periodic(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Return at once: nothing periodic."""

    def backoff_penalty(self, exc: BaseException | None, close_code: int | None) -> float:
        """Back off longer after HTTP 429 on the upgrade."""
        if http_status_of(exc) == 429:
            return self.settings.rate_limit_penalty
        return 1.0

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        """Decode one frame: trades become price events, duplicates are dropped."""
        res = DecodeResult()
        try:
            msg = _decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError):
            res.decode_errors = 1
            return res
        kind = msg.type
        if kind == "trade":
            self._trades(msg.data or [], now, res)
        elif kind == "ping":
            pass
        elif kind == "error":
            res.rejected = 1
            log.warning("finnhub error", msg=redact_text(str(msg.msg)))
        else:
            res.unknown = 1
        return res

    def _trades(self, trades: list[_Trade], now: float, res: DecodeResult) -> None:
        stale_after = self.settings.stale_after
        fresh: set[str] = set()
        for tr in trades:
            p, s, t = tr.p, tr.s, tr.t
            if s is None or not s or p is None or t is None or not (p > 0 and math.isfinite(p)):
                res.rejected += 1
                continue
            if self.dedupe.seen((s, t, p, tr.v)):
                self.duplicates += 1
                continue
            ts = t / 1000.0
            event = PriceEvent(
                ts=ts, recv_ts=now, market="equity", asset=s, price=float(p), source=self.name
            )
            if not self.settings.marks_at(self._is_open, ts):
                event = NonMarkingPrice(**msgspec.structs.asdict(event),
                                        reason="outside regular session")
            res.events.append(event)
            if now - ts <= stale_after:
                fresh.add(s)
        res.data_keys.extend(fresh)


def build_finnhub_source(
    settings: FinnhubSettings,
    symbols: Sequence[str],
    *,
    bus: Bus,
    now: Callable[[], float],
    is_open: Callable[[float], bool],
) -> StreamingSource:
    """Build the Finnhub stream source; raise ``MissingCredentialError`` without a key."""
    token = secret_from_env(settings.key_env)
    return StreamingSource(
        FinnhubStreamAdapter(settings, token, is_open=is_open),
        symbols,
        bus=bus,
        now=now,
        is_open=is_open,
        **settings.stream_options(),
    )
