"""Alpaca market-data WebSocket v2 (free key, IEX feed, one connection).

Handshake (inside ``on_open``, bounded by the source's ``open_timeout``): wait for
``[{"T":"success","msg":"connected"}]``, send ``{"action":"auth",..}``, wait for
``[{"T":"success","msg":"authenticated"}]`` (the connection only becomes LIVE then), send one
subscribe for trades / quotes / bars / dailyBars / statuses. Every frame is a JSON array.

Prices: trade ``T:"t"`` -> ``p`` at ``t``; quote ``T:"q"`` -> mid of ``bp``/``ap`` (both > 0);
minute bar ``T:"b"`` / updated bar ``T:"u"`` -> close ``c`` at ``t + 60 s`` (``t`` is the minute
start); daily bar ``T:"d"`` -> close at the bar's own ``t`` (never counted as fresh data: after
hours identical daily bars are re-sent). Only data whose own time is within ``stale_after`` of
now counts as DATA for the watchdog.

Errors: 406 (connection limit) and HTTP 429 on the upgrade back off ``limit_penalty`` times
longer; 402 (auth failed) makes the source DOWN (logged once per failure, naming the env vars
only) and backs off ``auth_penalty`` times longer; any other error is logged and counted.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec
import structlog
from pydantic import ConfigDict, Field
from websockets.asyncio.client import ClientConnection

from daemon.core.bus import Bus
from daemon.core.durations import Duration
from daemon.core.events import NonMarkingPrice, PriceEvent
from feeds.backoff import EquityStreamSettings
from feeds.connection import StreamingSource
from feeds.source_contract import DecodeResult, SourceState, http_status_of

__all__ = [
    "AlpacaAuthError",
    "AlpacaError",
    "AlpacaSettings",
    "AlpacaSource",
    "AlpacaStreamAdapter",
    "MissingCredentialError",
    "parse_rfc3339",
    "secret_from_env",
]

log = structlog.get_logger(__name__)

#: Error codes that mean "too many connections / too fast": back off longer.
LIMIT_CODES = frozenset({406, 429})
AUTH_FAILED = 402


class MissingCredentialError(ValueError):
    """A credential environment variable named in the config is not set."""


def secret_from_env(env_name: str) -> str:
    """Return the value of environment variable ``env_name``; raise if unset or empty."""
    value = os.environ.get(env_name, "")
    if not value:
        raise MissingCredentialError(f"environment variable {env_name} is not set")
    return value


class AlpacaSettings(EquityStreamSettings):
    """Alpaca data WebSocket and news REST settings; credentials come from the named env vars."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ws_url: str = "wss://stream.data.alpaca.markets/v2/iex"
    news_url: str = "https://data.alpaca.markets/v1beta1/news"
    bars_url: str = Field(default="https://data.alpaca.markets/v2/stocks/bars",
                          description="historical bars (build-recording --bars alpaca)")
    bars_adjustment: Literal["raw", "split", "dividend", "all"] = Field(
        default="split", description="historical bars: adjusted for splits ('split'), "
        "dividends, both ('all') or neither ('raw')")
    bars_feed: str | None = Field(default=None, description="historical bars' feed (sip, iex); "
                                  "None: the account's default")
    key_env: str = "APCA_API_KEY_ID"
    secret_env: str = "APCA_API_SECRET_KEY"
    trades: bool = True
    quotes: bool = False
    bars: bool = True
    daily_bars: bool = False
    statuses: bool = True
    max_symbols: int = Field(default=30, ge=1, description="IEX free plan: 30 symbols")
    dead_after: Duration = Field(default=165.0, gt=0)
    stale_after: Duration = Field(default=300.0, gt=0)
    stale_policy: Literal["any", "all"] = "all"
    limit_penalty: float = Field(default=4.0, ge=1.0)
    auth_penalty: float = Field(default=10.0, ge=1.0)


class AlpacaError(Exception):
    """The server sent ``{"T":"error"}`` during the handshake."""

    def __init__(self, code: int, msg: str) -> None:
        """Record the Alpaca error code and message."""
        super().__init__(f"alpaca error {code}: {msg}")
        self.code = code
        self.msg = msg


class AlpacaAuthError(AlpacaError):
    """Authentication failed (402) or was refused."""


_EPOCH_HOUR: dict[str, float] = {}


def parse_rfc3339(s: str) -> float:
    """Parse an RFC 3339 UTC time with up to nanosecond precision into epoch seconds.

    The fast path handles ``YYYY-MM-DDTHH:MM:SS[.fffffffff]Z``; anything else goes through
    :meth:`datetime.fromisoformat`. Raise ``ValueError`` if unparsable.
    """
    if len(s) >= 20 and s[-1] == "Z" and s[10] == "T" and s[13] == ":" and s[16] == ":":
        hour = s[:13]
        base = _EPOCH_HOUR.get(hour)
        if base is None:
            base = datetime.fromisoformat(hour + ":00:00+00:00").timestamp()
            if len(_EPOCH_HOUR) > 10_000:
                _EPOCH_HOUR.clear()
            _EPOCH_HOUR[hour] = base
        secs = int(s[14:16]) * 60 + int(s[17:19])
        if len(s) > 20:
            if s[19] != "." or not s[20:-1].isdigit():
                raise ValueError(f"invalid RFC 3339 time {s!r}")
            frac = s[20:-1]
            return base + secs + int(frac) / 10 ** len(frac)
        return base + secs
    dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


_decoder = msgspec.json.Decoder(list[Any])
_encoder = msgspec.json.Encoder()


def _pos(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    f = float(x)
    return f if f > 0 and math.isfinite(f) else None


class AlpacaStreamAdapter:
    """Protocol adapter of the Alpaca data WebSocket v2."""

    def __init__(
        self,
        settings: AlpacaSettings,
        key: str,
        secret: str,
        *,
        name: str = "alpaca",
        is_open: Callable[[float], bool] | None = None,
    ) -> None:
        """Create the adapter with the credentials (kept out of every log and repr).

        With ``is_open`` (the NYSE calendar), prices stamped outside the regular session are
        published as :class:`NonMarkingPrice` unless ``extended_hours_marks``.
        """
        self.settings = settings
        self._is_open = is_open
        self.name = name
        self.max_keys_per_connection = settings.max_symbols
        self._key = key
        self._secret = secret
        self.auth_failed = False
        self.last_error: int | None = None
        self.subscribed: dict[str, list[str]] = {}

    def __repr__(self) -> str:
        return f"AlpacaStreamAdapter(name={self.name!r}, url={self.settings.ws_url!r})"

    def url(self) -> str:
        """Return the data stream URL."""
        return self.settings.ws_url

    async def _expect(self, ws: ClientConnection, want: str) -> None:
        while True:
            raw = await ws.recv()
            try:
                items = _decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.warning("alpaca handshake frame undecodable", sample=str(raw)[:120])
                continue
            for item in items:
                if not isinstance(item, dict):
                    continue
                kind = item.get("T")
                if kind == "success" and item.get("msg") == want:
                    return
                if kind == "error":
                    code = item.get("code")
                    code = code if isinstance(code, int) else 0
                    msg = str(item.get("msg", ""))
                    self.last_error = code
                    if code in (401, AUTH_FAILED, 404):
                        raise AlpacaAuthError(code, msg)
                    raise AlpacaError(code, msg)

    async def on_open(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Wait for ``connected``, authenticate, wait for ``authenticated``, then subscribe."""
        await self._expect(ws, "connected")
        await ws.send(
            _encoder.encode({"action": "auth", "key": self._key, "secret": self._secret}).decode()
        )
        try:
            await self._expect(ws, "authenticated")
        except AlpacaAuthError as exc:
            if not self.auth_failed:
                log.error(
                    "alpaca authentication failed: check the credentials",
                    code=exc.code,
                    msg=exc.msg,
                    key_env=self.settings.key_env,
                    secret_env=self.settings.secret_env,
                )
            self.auth_failed = True
            raise
        self.auth_failed = False
        self.last_error = None
        await self.subscribe(ws, keys)

    def _channels(self, keys: Sequence[str]) -> dict[str, list[str]]:
        s = self.settings
        symbols = list(keys)
        ch: dict[str, list[str]] = {}
        if s.trades:
            ch["trades"] = symbols
        if s.quotes:
            ch["quotes"] = symbols
        if s.bars:
            ch["bars"] = symbols
        if s.daily_bars:
            ch["dailyBars"] = symbols
        if s.statuses:
            ch["statuses"] = symbols
        return ch

    async def subscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Subscribe ``keys`` on every configured channel."""
        if keys:
            msg = {"action": "subscribe", **self._channels(keys)}
            await ws.send(_encoder.encode(msg).decode())

    async def unsubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Unsubscribe ``keys`` from every configured channel."""
        if keys:
            msg = {"action": "unsubscribe", **self._channels(keys)}
            await ws.send(_encoder.encode(msg).decode())

    async def heartbeat(self, ws: ClientConnection) -> None:
        """Return at once: the server pings, websockets answers."""

    async def periodic(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Return at once: nothing periodic."""

    def backoff_penalty(self, exc: BaseException | None, close_code: int | None) -> float:
        """Back off longer after 406 / HTTP 429 and much longer after a failed auth."""
        if isinstance(exc, AlpacaAuthError) or self.auth_failed:
            return self.settings.auth_penalty
        code = exc.code if isinstance(exc, AlpacaError) else self.last_error
        if http_status_of(exc) == 429 or code in LIMIT_CODES:
            return self.settings.limit_penalty
        return 1.0

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        """Decode one frame (a JSON array of messages)."""
        res = DecodeResult()
        try:
            items = _decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError):
            res.decode_errors = 1
            return res
        stale_after = self.settings.stale_after
        for item in items:
            if not isinstance(item, dict):
                res.decode_errors += 1
                continue
            kind = item.get("T")
            if kind in ("t", "q", "b", "u", "d"):
                self._price(item, kind, now, stale_after, res)
            elif kind == "subscription":
                self._on_subscription(item)
            elif kind == "error":
                self._on_error(item, res)
            elif kind == "s":
                log.info(
                    "alpaca trading status",
                    symbol=item.get("S"),
                    status=item.get("sc"),
                    message=item.get("sm"),
                    reason=item.get("rm"),
                )
            elif kind in ("success", "l", "c", "x"):
                pass  # success notices, LULD bands, corrections, cancels: not prices
            else:
                res.unknown += 1
        return res

    def _price(
        self, item: dict[str, Any], kind: str, now: float, stale_after: float, res: DecodeResult
    ) -> None:
        symbol = item.get("S")
        t = item.get("t")
        if not isinstance(symbol, str) or not symbol or not isinstance(t, str):
            res.rejected += 1
            return
        try:
            ts = parse_rfc3339(t)
        except ValueError:
            res.decode_errors += 1
            return
        bid = ask = None
        if kind == "t":
            price = _pos(item.get("p"))
        elif kind == "q":
            bid, ask = _pos(item.get("bp")), _pos(item.get("ap"))
            price = (bid + ask) / 2 if bid is not None and ask is not None and ask >= bid else None
        else:
            price = _pos(item.get("c"))
            if kind != "d":
                ts += 60.0  # minute bar: t is the minute start, the close is known at its end
        if price is None:
            res.rejected += 1
            return
        event = PriceEvent(
            ts=ts,
            recv_ts=now,
            market="equity",
            asset=symbol,
            price=price,
            bid=bid,
            ask=ask,
            source=self.name,
        )
        # A daily bar is the official close whatever its time stamp (the start of the day).
        if kind != "d" and not self.settings.marks_at(self._is_open, ts):
            event = NonMarkingPrice(**msgspec.structs.asdict(event),
                                    reason="outside regular session")
        res.events.append(event)
        if kind != "d" and now - ts <= stale_after:
            res.data_keys.append(symbol)

    def _on_subscription(self, item: dict[str, Any]) -> None:
        state = {k: v for k, v in item.items() if k != "T" and isinstance(v, list)}
        self.subscribed = state
        log.info("alpaca subscription", **{k: len(v) for k, v in state.items()})

    def _on_error(self, item: dict[str, Any], res: DecodeResult) -> None:
        code = item.get("code")
        code = code if isinstance(code, int) else 0
        self.last_error = code
        res.rejected += 1
        log.warning("alpaca error", code=code, msg=item.get("msg"))


class AlpacaSource(StreamingSource):
    """A :class:`StreamingSource` that reports DOWN while the credentials are refused."""

    adapter: AlpacaStreamAdapter

    @property
    def state(self) -> SourceState:
        """Return DOWN after a failed auth, else the aggregate shard state."""
        if self.adapter.auth_failed:
            return SourceState.DOWN
        return super().state


def build_alpaca_source(
    settings: AlpacaSettings,
    symbols: Sequence[str],
    *,
    bus: Bus,
    now: Callable[[], float],
    is_open: Callable[[float], bool],
) -> AlpacaSource:
    """Build the Alpaca stream source; raise :class:`MissingCredentialError` without credentials."""
    key = secret_from_env(settings.key_env)
    secret = secret_from_env(settings.secret_env)
    adapter = AlpacaStreamAdapter(settings, key, secret, is_open=is_open)
    return AlpacaSource(
        adapter,
        symbols,
        bus=bus,
        now=now,
        is_open=is_open,
        **settings.stream_options(),
    )
