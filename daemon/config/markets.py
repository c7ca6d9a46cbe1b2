"""The ``[markets]`` section: the US-equity and Polymarket paper markets.

Universe and asset classes, initial cash, cost model, decision schedule, risk-free rate,
annualisation, benchmark asset and price staleness of each market. Every field's meaning and
default is stated here, once.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from daemon.core.durations import parse_duration
from daemon.core.fields import PositiveDuration, _Frozen, _valid_hhmm, check_hhmm
from daemon.core.universe import DEFAULT_ASSET_CLASSES, DEFAULT_EQUITIES


class CostConfig(_Frozen):
    """Transaction cost model: proportional fee and slippage in bps of traded value."""

    preset: Literal["none", "realistic"] | None = Field(
        default=None, description="'none' = 0/0; 'realistic' = 5 bps fee + 10 bps slippage"
    )
    fee_bps: Annotated[float, Field(ge=0, le=1000)] = 0.0
    slippage_bps: Annotated[float, Field(ge=0, le=1000)] = 0.0

    @model_validator(mode="after")
    def _preset_excludes_numbers(self) -> CostConfig:
        if self.preset is not None and (self.fee_bps or self.slippage_bps):
            raise ValueError("give either preset or fee_bps/slippage_bps, not both")
        return self

    def rates(self) -> tuple[float, float]:
        """Return (fee_bps, slippage_bps) with the preset applied."""
        if self.preset == "realistic":
            return 5.0, 10.0
        if self.preset == "none":
            return 0.0, 0.0
        return self.fee_bps, self.slippage_bps


class ScheduleConfig(_Frozen):
    """When decisions are taken for one market."""

    kind: Literal["nyse", "interval", "daily"] = Field(
        description="nyse = NYSE session days only; interval / daily = 24/7"
    )
    times: tuple[str, ...] = Field(
        default=("close-30m",), description="nyse: 'open+30m', 'close-30m', 'close' or 'HH:MM'"
    )
    every: float = Field(default=3600.0, description="interval: period (e.g. '1h'), 1 s to 3650d")
    at: str = Field(default="00:00", description="daily: wall time HH:MM in timezone")
    timezone: str = Field(default="America/New_York", description="IANA timezone of times/at")
    # issue 13 (StockBench): fill at the session's opening price
    fill_at: Literal["latest", "session_open", "next_price"] = Field(
        default="latest", description="'latest' fills at the latest price; 'session_open'"
        " (nyse) shows and fills at each stock's first regular-session price of the session (a"
        " round before every stock has one is skipped; docs/protocol-stockbench.md);"
        " 'next_price' fills at each asset's first price after the decision (LiveTradeBench's"
        " Eq. 2; docs/llm-agents.md)",
    )

    @model_validator(mode="after")
    def _fill_at(self) -> ScheduleConfig:
        if self.fill_at == "session_open" and self.kind != "nyse":
            raise ValueError("fill_at = 'session_open' needs kind = 'nyse' (a session open)")
        return self

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, v: Any) -> float:
        seconds = parse_duration(v)
        if seconds < 1:
            raise ValueError("interval must be at least 1 second")
        return seconds

    @field_validator("at")
    @classmethod
    def _at(cls, v: str) -> str:
        return check_hhmm(v)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {v!r}") from None
        return v

    @field_validator("times")
    @classmethod
    def _times(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        pat = re.compile(r"^(open|close)([+-]\d+m)?$|^\d{1,2}:\d{2}$")
        for t in v:
            if not pat.match(t) or not _valid_hhmm(t):
                raise ValueError(f"invalid time {t!r} (use 'open+30m', 'close-30m' or 'HH:MM'"
                                 " from 00:00 to 23:59)")
        if not v:
            raise ValueError("at least one time is required")
        return v


#: The annual risk-free rate of a market: bounded, finite (checked when the config is loaded).
RiskFreeRate = Annotated[float, Field(ge=-0.05, le=0.5, allow_inf_nan=False)]
RISK_FREE_DOC = ("annual risk-free rate (default 0): CASH accrues risk_free_rate / "
                 "periods_per_year at every daily mark, and Sharpe, Sortino, ranks and the "
                 "leaderboard's tests use the returns in excess of that same rate")


class PolymarketQuestion(_Frozen):
    """A Polymarket binary question fixed in the config (id with its YES/NO token ids)."""

    id: str
    question: str = ""
    yes: str
    no: str


class EquityMarketConfig(_Frozen):
    """The US-equity paper market."""

    enabled: bool = True
    assets: tuple[str, ...] = DEFAULT_EQUITIES
    initial_cash: Annotated[float, Field(gt=0)] = Field(default=1000.0, description="USD per agent")
    cost: CostConfig = CostConfig()
    schedule: ScheduleConfig = ScheduleConfig(kind="nyse")
    risk_free_rate: RiskFreeRate = Field(default=0.0, description=RISK_FREE_DOC)
    periods_per_year: Annotated[int, Field(ge=1, le=366)] = Field(
        default=252, description="periods a year that annualise this market's daily figures "
        "(volatility, Sharpe, Sortino, annualised return); 252 is LiveTradeBench's convention "
        "for both markets"
    )
    benchmark: str = Field(
        default="SPY", description="asset the leaderboard's relative figures (excess "
        "return, beta, tracking error, information ratio) also compare with, when it is in "
        "the universe; the market's equal-weight index is always used"
    )
    stale_after: PositiveDuration = Field(
        default=900.0,
        description="a price older than this, counted in NYSE open time, is stale (> 0)",
    )
    min_price_coverage: Annotated[float, Field(ge=0, le=1)] = Field(
        default=1.0, description="share of the tradable assets that need a fresh price for a "
        "round to run; below it the round is 'skipped' (1 = every asset)"
    )
    asset_classes: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ASSET_CLASSES),
        description="asset -> class (sector) for the leaderboard's diversification scores; an "
        "asset missing from the map is its own class",
    )

    @field_validator("asset_classes")
    @classmethod
    def _classes(cls, v: dict[str, str]) -> dict[str, str]:
        for asset, klass in v.items():
            if not klass.strip():
                raise ValueError(f"empty asset class for {asset!r}")
        return v

    @field_validator("assets")
    @classmethod
    def _assets(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("duplicate asset")
        for a in v:
            if not re.match(r"^[A-Z][A-Z0-9.\-]{0,9}$", a):
                raise ValueError(f"invalid ticker {a!r}")
        return v


class PolymarketMarketConfig(_Frozen):
    """The Polymarket paper market (YES/NO tokens, 24/7)."""

    enabled: bool = True
    initial_cash: Annotated[float, Field(gt=0)] = Field(default=500.0, description="USD per agent")
    cost: CostConfig = CostConfig()
    schedule: ScheduleConfig = ScheduleConfig(kind="interval", every=86400.0, timezone="UTC")
    questions: tuple[PolymarketQuestion, ...] = Field(
        default=(), description="fixed questions; empty = discovered by the feed / recording"
    )
    risk_free_rate: RiskFreeRate = Field(default=0.0, description=RISK_FREE_DOC)
    periods_per_year: Annotated[int, Field(ge=1, le=366)] = Field(
        default=252, description="periods a year that annualise this market's daily figures "
        "(volatility, Sharpe, Sortino, annualised return); 252 is LiveTradeBench's convention "
        "for both markets"
    )
    benchmark: str = Field(
        default="", description="asset the leaderboard's relative figures (excess "
        "return, beta, tracking error, information ratio) also compare with, when it is in "
        "the universe (a token id; empty: none); the market's equal-weight index is always used"
    )
    stale_after: PositiveDuration = Field(
        default=3600.0, description="a price older than this is stale (> 0)")
    min_price_coverage: Annotated[float, Field(ge=0, le=1)] = Field(
        default=1.0, description="share of the tradable YES/NO tokens (unresolved questions) "
        "that need a fresh price for a round to run; below it the round is 'skipped'"
    )



class MarketsConfig(_Frozen):
    """Both paper markets."""

    equity: EquityMarketConfig = EquityMarketConfig()
    polymarket: PolymarketMarketConfig = PolymarketMarketConfig()
