"""The ``[sources]`` section of the config: which live sources run and where they connect."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from daemon.core.durations import Duration
from feeds.equities import EquitySourcesSettings
from feeds.fundamentals import FundamentalsSettings
from feeds.news import NewsSettings
from feeds.polymarket.source import PolymarketSettings


class SourcesSettings(BaseModel):
    """Live sources; the defaults are the keyless ones (Yahoo, Polymarket, Google News RSS)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=True, description="false: run without live sources")
    equity: EquitySourcesSettings = EquitySourcesSettings()
    polymarket: PolymarketSettings = PolymarketSettings()
    news: NewsSettings = NewsSettings()
    fundamentals: FundamentalsSettings = FundamentalsSettings()
    backfill: bool = Field(default=True, description="fetch recent daily history at start-up")
    health_min_gap: Duration = Field(
        default=10.0, gt=0, description="at most one source-health line per this many seconds"
    )
    health_repeat: Duration = Field(
        default=900.0, gt=0, description="repeat the health line this often while a source is down"
    )
