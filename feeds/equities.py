"""US-equity price sources: pick one streaming provider, plus the Yahoo REST fallback.

``build_equity_sources`` returns the sources for the daemon to run (each ``await source.run()``
in its own task). Staleness alarms only fire while ``is_open(now)`` (the NYSE calendar), so a
closed market never looks like a broken feed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict

from daemon.core.bus import Bus
from feeds.alpaca import AlpacaSettings, build_alpaca_source
from feeds.connection import StreamingSource
from feeds.finnhub import FinnhubSettings, build_finnhub_source
from feeds.source_contract import Source
from feeds.yahoo import YahooRestFallback, YahooSettings, YahooStreamAdapter

__all__ = ["EquitySourcesSettings", "build_equity_sources", "build_yahoo_source"]

log = structlog.get_logger(__name__)


class EquitySourcesSettings(BaseModel):
    """Which equity provider streams prices, and each provider's settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: Literal["yahoo", "alpaca", "finnhub"] = "yahoo"
    yahoo: YahooSettings = YahooSettings()
    alpaca: AlpacaSettings = AlpacaSettings()
    finnhub: FinnhubSettings = FinnhubSettings()
    rest_fallback: bool = True


def build_yahoo_source(
    settings: YahooSettings,
    symbols: Sequence[str],
    *,
    bus: Bus,
    now: Callable[[], float],
    is_open: Callable[[float], bool],
) -> StreamingSource:
    """Build the keyless Yahoo streamer source (sharded at ``max_per_connection`` symbols)."""
    return StreamingSource(
        YahooStreamAdapter(settings),
        symbols,
        bus=bus,
        now=now,
        is_open=is_open,
        **settings.stream_options(),
        ws_options={"user_agent_header": settings.user_agent},
    )


def build_equity_sources(
    settings: EquitySourcesSettings,
    symbols: Sequence[str],
    *,
    bus: Bus,
    now: Callable[[], float],
    is_open: Callable[[float], bool],
) -> list[Source]:
    """Build the streaming source of ``settings.provider`` and, if enabled, the REST fallback.

    Raise ``MissingCredentialError`` (a ``ValueError`` naming the env var) when a keyed provider
    has no credentials.
    """
    syms = list(dict.fromkeys(symbols))
    sources: list[Source] = []
    if settings.provider == "yahoo":
        sources.append(build_yahoo_source(settings.yahoo, syms, bus=bus, now=now, is_open=is_open))
        stale_after = settings.yahoo.stale_after
    elif settings.provider == "alpaca":
        if len(syms) > settings.alpaca.max_symbols:
            log.warning(
                "alpaca symbol count above max_symbols: extra connections may be refused",
                symbols=len(syms),
                max_symbols=settings.alpaca.max_symbols,
            )
        sources.append(
            build_alpaca_source(settings.alpaca, syms, bus=bus, now=now, is_open=is_open)
        )
        stale_after = settings.alpaca.stale_after
    else:
        sources.append(
            build_finnhub_source(settings.finnhub, syms, bus=bus, now=now, is_open=is_open)
        )
        stale_after = settings.finnhub.stale_after
    if settings.rest_fallback and syms:
        sources.append(
            YahooRestFallback(
                settings.yahoo, syms, bus=bus, now=now, is_open=is_open, stale_after=stale_after
            )
        )
    return sources
