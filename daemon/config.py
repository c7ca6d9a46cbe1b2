"""One TOML file validated at load into frozen, typed config objects.

Every field's meaning and default is stated here, once. Unknown keys, wrong types and impossible
values are refused with one clear line per problem (:class:`ConfigError`).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from daemon.capital_config import CapitalBenchConfig, capital_problems, orphan_problems
from daemon.durations import parse_duration
from daemon.mqtt import MqttSettings
from feeds.settings import SourcesSettings

DEFAULT_EQUITIES: tuple[str, ...] = (
    "AAPL", "MSFT", "NVDA", "META", "JPM", "V", "XOM", "CAT",
    "TSLA", "PG", "KO", "AMZN", "WMT", "JNJ", "UNH",
)  # fmt: skip

#: Default asset classes (sectors) of the default universe, used by the PortBench diversification
#: scores (s_intra / s_inter / s_corr) of the leaderboard.
DEFAULT_ASSET_CLASSES: dict[str, str] = {
    "AAPL": "tech", "MSFT": "tech", "NVDA": "tech", "META": "tech", "AMZN": "tech",
    "JPM": "financials", "V": "financials",
    "XOM": "energy_industrials", "CAT": "energy_industrials",
    "TSLA": "consumer", "PG": "consumer", "KO": "consumer", "WMT": "consumer",
    "JNJ": "health", "UNH": "health",
}  # fmt: skip

#: Role of an asset class in PortBench's investor limits and the 60/40 baseline: "equity" and
#: "crypto" count toward a profile's equity cap, "bond" and "cash" (and CASH itself) toward its
#: bond floor, "other" toward neither. A class not listed here is "equity" (so the sectors of
#: the default stock universe are equities).
DEFAULT_CLASS_ROLES: dict[str, str] = {
    "equities": "equity", "crypto": "crypto", "bonds": "bond", "cash": "cash",
    "commodities": "other", "real_estate": "other",
}  # fmt: skip
CLASS_ROLES: tuple[str, ...] = ("equity", "crypto", "bond", "cash", "other")


def class_role(asset: str, classes: Mapping[str, str], roles: Mapping[str, str]) -> str:
    """Return the role of ``asset``'s class (an unmapped asset is its own class: "equity")."""
    return roles.get(classes.get(asset, asset), "equity")


@dataclass(frozen=True, slots=True)
class AllocationLimits:
    """An investor profile's allocation limits (PortBench, Table 7), as weights of the account."""

    equity_cap: float
    """Largest weight of equity- and crypto-role assets together."""
    bond_floor: float
    """Smallest weight of bond- and cash-role assets plus CASH together."""


#: The allocation limits of each risk profile (the drawdown and VaR limits are in
#: ``scoring.benchmarks.RISK_PROFILES``).
PROFILE_LIMITS: dict[str, AllocationLimits] = {
    "conservative": AllocationLimits(equity_cap=0.40, bond_floor=0.40),
    "balanced": AllocationLimits(equity_cap=0.65, bond_floor=0.20),
    "aggressive": AllocationLimits(equity_cap=0.90, bond_floor=0.05),
}

#: How deeply arrays and tables may nest in a config file.
MAX_DEPTH = 32

_HHMM = re.compile(r"^(\d{1,2}):(\d{2})$")
_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def positive_duration(value: Any, minimum: float = 0.0) -> float:
    """Parse a duration that must be greater than 0 (and at least ``minimum`` seconds)."""
    seconds = parse_duration(value)
    if seconds <= 0 or seconds < minimum:
        floor = f"at least {minimum:g} s" if minimum else "greater than 0"
        raise ValueError(f"duration must be {floor}")
    return seconds


def check_hhmm(value: str) -> str:
    """Return ``value`` if it is a wall time ``HH:MM`` (00:00 to 23:59), else raise."""
    if not _HHMM.match(value) or not _valid_hhmm(value):
        raise ValueError(f"invalid time {value!r} (use HH:MM, 00:00 to 23:59)")
    return value


def host_problem(host: str) -> str | None:
    """Return why ``host`` is not an IP address or DNS name, or None if it is one."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if (not host or len(host) > 253 or not all(_HOST_LABEL.match(x) for x in labels)
            or all(x.isdigit() for x in labels)):
        return f"not an IP address or host name: {host!r}"
    return None


def url_problem(url: str, schemes: tuple[str, ...]) -> str | None:
    """Return why ``url`` is not an absolute URL with one of ``schemes``, or None if it is."""
    want = " or ".join(f"{s}://" for s in schemes)
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return f"not a valid URL: {url!r}"
    if parts.scheme not in schemes:
        return f"expected a {want} URL, got {url!r}"
    if not parts.hostname or any(c.isspace() for c in url) or not port_ok:
        return f"not a valid URL (host or port): {url!r}"
    return host_problem(parts.hostname)


def _duration_field(default: float, description: str) -> Any:
    return Field(default=default, description=description)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


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
    fill_at: Literal["latest", "session_open"] = Field(
        default="latest", description="nyse: 'latest' fills at the latest price; 'session_open'"
        " shows and fills at each stock's first regular-session price of the session (a round"
        " before every stock has one is skipped); see docs/protocol-stockbench.md",
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


def _valid_hhmm(value: str) -> bool:
    """Return False for an ``HH:MM`` time out of range (True for anything else)."""
    m = _HHMM.match(value)
    return m is None or (int(m.group(1)) <= 23 and int(m.group(2)) <= 59)


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
    risk_free_rate: Annotated[float, Field(ge=-0.05, le=0.5)] = Field(
        default=0.04, description="annual risk-free rate used by Sharpe/Sortino"
    )
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
    stale_after: float = Field(
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

    @field_validator("stale_after", mode="before")
    @classmethod
    def _stale(cls, v: Any) -> float:
        return positive_duration(v)

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
    stale_after: float = Field(default=3600.0, description="a price older than this is stale (> 0)")
    min_price_coverage: Annotated[float, Field(ge=0, le=1)] = Field(
        default=1.0, description="share of the tradable YES/NO tokens (unresolved questions) "
        "that need a fresh price for a round to run; below it the round is 'skipped'"
    )

    @field_validator("stale_after", mode="before")
    @classmethod
    def _stale(cls, v: Any) -> float:
        return positive_duration(v)


class MarketsConfig(_Frozen):
    """Both paper markets."""

    equity: EquityMarketConfig = EquityMarketConfig()
    polymarket: PolymarketMarketConfig = PolymarketMarketConfig()


AgentKind = Literal[
    "buy_and_hold", "equal_weight", "cash", "momentum", "llm", "http",
    "sixty_forty", "risk_parity", "equal_risk_contribution", "min_variance",
]  # fmt: skip
#: The agent kinds built into paperarena; any other ``kind`` names an installed plugin.
BUILTIN_KINDS: tuple[str, ...] = (
    "buy_and_hold", "equal_weight", "cash", "momentum", "llm", "http",
    "sixty_forty", "risk_parity", "equal_risk_contribution", "min_variance",
)  # fmt: skip


#: Entry-point group through which installed packages register agent kinds (agents/plugins.py).
PLUGIN_GROUP = "paperarena.agents"


def unknown_kind_problem(kind: str) -> str | None:
    """Return why ``kind`` is neither built in nor registered by an installed plugin, or None."""
    from importlib.metadata import entry_points

    if kind in BUILTIN_KINDS or entry_points(group=PLUGIN_GROUP, name=kind):
        return None
    return (f"unknown agent kind {kind!r}: not built in ({', '.join(BUILTIN_KINDS)}) and no"
            f" installed package registers it in the entry-point group {PLUGIN_GROUP!r}")


class HttpAgentSettings(_Frozen):
    """A remote agent service called once per decision (``kind = "http"``; docs/agents-http.md)."""

    url: str = Field(description="http(s) URL the decision request is POSTed to")
    token_env: str | None = Field(
        default=None, description="env var holding the bearer token sent; none = no token"
    )
    timeout: float = Field(default=30.0, description="seconds per request, answer included (> 0)")
    max_attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=3, description="requests per decision; only transport failures are retried"
    )
    max_body: Annotated[int, Field(ge=1024, le=1 << 26)] = Field(
        default=1 << 20, description="largest answer body read, in bytes (larger: invalid)"
    )

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        return positive_duration(v)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        problem = url_problem(v, ("http", "https"))
        if problem:
            raise ValueError(problem)
        return v


class PromptFiles(_Frozen):
    """An LLM agent's own prompt templates (relative paths: from the config file's folder)."""

    equity: str | None = Field(default=None, description="template for equity decisions")
    polymarket: str | None = Field(default=None, description="template for Polymarket decisions")


#: What a retry after a rejected answer tells the model (``{error}``: the one-line reason).
DEFAULT_RETRY_FEEDBACK = (
    "Your previous answer was rejected: {error}. Answer again with only the JSON object in the"
    " required format."
)


# -- alphaforgebench (issue 14, points 5-7) ------------------------------------------------------
DEFAULT_STRATEGY_QUERY = (
    "Design a daily trend-following strategy with risk control: be invested when the price trend"
    " is up and momentum confirms it, size the position by the strength of the signal, and step"
    " aside when the trend breaks or the asset is overbought."
)


class StrategySettings(_Frozen):
    """An alphaforgebench strategy: what is asked for, when it is renewed, its sandbox."""

    query: Annotated[str, Field(min_length=1, max_length=4000)] = Field(
        default=DEFAULT_STRATEGY_QUERY,
        description="the strategy request sent to the model (the paper's strategy query)",
    )
    regenerate_every: float = Field(
        default=604_800.0,
        description="ask the model for a new strategy version this often (default 7d);"
        " 0 keeps the first valid version",
    )
    lookback: Annotated[int, Field(ge=2, le=5000)] = Field(
        default=300, description="daily bars the strategy sees, the current one included"
    )
    timeout: float = Field(default=10.0, description="wall-clock seconds per bar (all assets)")
    cpu_seconds: float = Field(default=5.0, description="CPU seconds per bar (RLIMIT_CPU)")
    memory_mb: Annotated[int, Field(ge=256, le=65_536)] = Field(
        default=1024, description="address space of the strategy process (RLIMIT_AS)"
    )
    network_namespace: bool = Field(
        default=True, description="run the strategy under 'unshare --net' where that works"
    )

    @field_validator("regenerate_every", mode="before")
    @classmethod
    def _every(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("timeout", "cpu_seconds", mode="before")
    @classmethod
    def _positive(cls, v: Any) -> float:
        return positive_duration(v)


class AgentConfig(_Frozen):
    """One agent under evaluation."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
    kind: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")] = Field(
        description="a built-in kind (BUILTIN_KINDS) or the name of an installed plugin"
    )
    markets: tuple[Literal["equity", "polymarket"], ...] = ("equity", "polymarket")
    risk_profile: Literal["conservative", "balanced", "aggressive"] = "balanced"
    max_drawdown: Annotated[float, Field(gt=0, lt=1)] | None = Field(
        default=None, description="explicit drawdown limit; overrides the risk profile"
    )
    halt_on_breach: bool = False
    # issue 13: runs of one model reported as one (scoring/run_groups.py)
    run_group: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")] | None = Field(
        default=None, description="agents with the same run_group are runs of one model: the"
        " report adds one row per group with the mean and spread of their figures",
    )
    # momentum
    lookback_days: Annotated[int, Field(ge=1, le=250)] = 5
    top_k: Annotated[int, Field(ge=1, le=100)] = 3
    # covariance baselines (risk_parity, equal_risk_contribution, min_variance)
    cov_window: Annotated[int, Field(ge=2, le=250)] = Field(
        default=60, description="daily returns in the rolling covariance window (default 60)"
    )
    # asset classes (portbench limits, sixty_forty)
    asset_classes: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ASSET_CLASSES),
        description="asset -> asset class (an unmapped asset is its own class); default: the"
        " equity market's asset_classes",
    )
    class_roles: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_CLASS_ROLES),
        description="asset class -> equity | crypto | bond | cash | other (unlisted: equity)",
    )
    # llm (used by the LLM agent; ignored by baselines)
    model: str | None = None
    api_base: str | None = Field(default=None, description="http(s) URL of the provider's API")
    api_key_env: str | None = Field(default=None, description="env var holding the provider key")
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.3
    max_tokens: Annotated[int, Field(ge=16, le=200_000)] = 4000
    timeout: float = Field(default=60.0, description="seconds per model call (> 0)")
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    max_concurrency: Annotated[int, Field(ge=1, le=256)] = 4
    daily_budget_usd: Annotated[float, Field(ge=0)] | None = None
    daily_budget_tokens: Annotated[int, Field(ge=0)] | None = None
    memory: Annotated[int, Field(ge=0, le=100)] = Field(
        default=5, description="how many past allocations the prompt shows"
    )
    news_window: float = Field(default=172800.0, description="news lookback (default 48h)")
    news_per_asset: Annotated[int, Field(ge=0, le=50)] = 5
    retry_after_cap: Annotated[float, Field(le=3600)] = Field(
        default=60.0, description="longest wait honoured from a 429's Retry-After (default 60s)"
    )
    protocol: Literal["livetradebench", "stockbench", "portbench", "capitalbench",
                      "alphaforgebench"] = Field(
        default="livetradebench",
        description="LLM decision workflow: 'livetradebench' (one call returns the allocation)"
        ", 'stockbench' (overview -> pick stocks -> fundamentals -> per-stock dollar orders)"
        ", 'portbench' (views -> signals -> weights -> execution -> risk monitor)"
        ", 'capitalbench' (one frozen-round submission per [capitalbench] round)"
        " or 'alphaforgebench' (the model writes strategy code run on every bar);"
        " see docs/protocols.md",
    )
    # alphaforgebench (docs/protocol-alphaforgebench.md)
    strategy: StrategySettings = Field(
        default_factory=lambda: StrategySettings(),
        description="alphaforgebench: strategy query, regeneration and sandbox limits",
    )
    revision_rounds: Annotated[int, Field(ge=0, le=10)] = Field(
        default=3,
        description="stockbench: times orders exceeding the account may be revised before the"
        " agent holds (default 3)",
    )
    action_days: Annotated[int, Field(ge=0, le=60)] = Field(
        default=7, description="stockbench: days of past actions the overview shows (default 7)"
    )
    retry_feedback: str = Field(
        default=DEFAULT_RETRY_FEEDBACK,
        max_length=500,
        description="line added to the prompt of a retry after a rejected answer; '{error}' is"
        " replaced by the one-line reason; empty = retry with the unchanged prompt",
    )

    # own agents (docs/agents-http.md, README "Your own agent")
    http: HttpAgentSettings | None = Field(default=None, description="kind = 'http' only")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="a plugin's settings, validated by the plugin's model"
    )
    prompt_files: PromptFiles | None = Field(
        default=None, description="an llm agent's own prompt templates (default: built-in)"
    )

    @field_validator("class_roles")
    @classmethod
    def _roles(cls, v: dict[str, str]) -> dict[str, str]:
        for klass, role in v.items():
            if role not in CLASS_ROLES:
                raise ValueError(
                    f"role of class {klass!r} must be one of {', '.join(CLASS_ROLES)}, got {role!r}"
                )
        return v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        problem = unknown_kind_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        return positive_duration(v)

    @field_validator("news_window", "retry_after_cap", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("retry_feedback")
    @classmethod
    def _one_line_feedback(cls, v: str) -> str:
        if "\n" in v or "\r" in v:
            raise ValueError("retry_feedback must be one line")
        return v

    @field_validator("api_base")
    @classmethod
    def _api_base(cls, v: str | None) -> str | None:
        problem = None if v is None else url_problem(v, ("http", "https"))
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _llm_needs_model(self) -> AgentConfig:
        if self.kind == "llm" and not self.model:
            raise ValueError("an llm agent needs 'model' (a LiteLLM model string)")
        if self.kind != "llm" and self.protocol != "livetradebench":
            raise ValueError(f"protocol {self.protocol!r} is for llm agents only")
        if (self.protocol in ("stockbench", "portbench", "alphaforgebench")
                and self.markets != ("equity",)):
            raise ValueError(
                f"protocol {self.protocol!r} trades the equity market only:"
                " set markets = ['equity']"
            )
        if not self.markets:
            raise ValueError("an agent must trade at least one market")
        if (self.kind == "http") != (self.http is not None):
            raise ValueError("an http agent needs an [agents.http] table (url), and only it")
        if self.settings and self.kind in BUILTIN_KINDS:
            raise ValueError(f"'settings' is for plugin agents, not kind {self.kind!r}")
        if self.prompt_files is not None and self.kind != "llm":
            raise ValueError("'prompt_files' is for llm agents only")
        return self


class LeaderboardConfig(_Frozen):
    """Who is ranked: agents below either minimum are listed as ``provisional``, without rank."""

    min_valid_rate: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.8, description="minimum share of valid decisions (applied or held on purpose) "
        "among the rounds the agent was asked"
    )
    min_days: Annotated[int, Field(ge=0, le=100_000)] = Field(
        default=5, description="minimum number of scored days (daily marks) in the window"
    )


class SchedulerConfig(_Frozen):
    """Scheduler behaviour shared by all schedules."""

    misfire_grace: float = Field(
        default=300.0,
        description="a decision later than this is recorded as missed, never run (> 0)",
    )

    @field_validator("misfire_grace", mode="before")
    @classmethod
    def _grace(cls, v: Any) -> float:
        return positive_duration(v)


class StoreConfig(_Frozen):
    """The store: a SQLite file, or a shared PostgreSQL database (``url``)."""

    path: Annotated[str, Field(min_length=1)] = Field(
        default="paperarena.db", description="SQLite database file"
    )
    batch_size: Annotated[int, Field(ge=1, le=1_000_000)] = 5000
    flush_interval: float = Field(
        default=1.0, description="max seconds between event flushes (at least 10 ms)"
    )
    busy_timeout: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=30.0,
        description="how long a write waits for another process's write lock before the round"
        " is recorded as error (seconds)")
    max_buffered_events: Annotated[int, Field(ge=1000, le=100_000_000)] = Field(
        default=1_000_000,
        description="market events kept in memory while the store cannot be written; beyond it"
        " the oldest are dropped and counted (paperarena_store_events_dropped_total)")

    @field_validator("flush_interval", "busy_timeout", mode="before")
    @classmethod
    def _flush(cls, v: Any) -> float:
        return positive_duration(v, minimum=0.01)

    # -- shared PostgreSQL store (issue 19, daemon/pgstore.py) --
    url: str | None = Field(
        default=None, description="postgresql://user@host:5432/db: the shared store of a split"
        " deployment instead of the SQLite file (no password in it)")
    password_env: str = Field(
        default="PGPASSWORD", description="environment variable holding the PostgreSQL password")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        from daemon.pgstore import url_problem

        problem = None if v is None else url_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class HttpConfig(_Frozen):
    """HTTP server for /metrics, /healthz, /readyz and the JSON API."""

    enabled: bool = True
    host: str = Field(default="127.0.0.1", description="IP address or host name to bind")
    port: Annotated[int, Field(ge=0, le=65535)] = 9464
    replay: bool = Field(
        default=False, description="also serve HTTP (/metrics, API) during `paperarena replay`"
    )
    header_timeout: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=10.0,
        description="seconds a client gets to send a request's headers (also the keep-alive "
        "idle limit); slower connections are closed",
    )
    body_timeout: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=10.0, description="seconds a client gets to send a request body (else 408)"
    )
    max_body: Annotated[int, Field(ge=2, le=1 << 24)] = Field(
        default=16384, description="largest accepted request body in bytes (else 413)"
    )
    max_connections: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=64, description="open client connections at most; more are answered 503"
    )
    max_queries: Annotated[int, Field(ge=1, le=64)] = Field(
        default=4, description="API requests reading the database at once; more wait"
    )

    @field_validator("header_timeout", "body_timeout", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        problem = host_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class LoggingConfig(_Frozen):
    """structlog output."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class EvaluatorConfig(_Frozen):
    """What an evaluator process (``--role evaluator``, ``replay-evaluate``) owns."""

    agents: tuple[str, ...] = Field(
        default=(), description="ids of the agents this evaluator runs; empty = every agent"
    )
    publisher_timeout: Annotated[float, Field(gt=0)] = Field(
        default=600.0,
        description="how long `replay-evaluate` waits for a running replay-publish to announce "
        "its stream before giving up with one line (default 10 min)",
    )

    @field_validator("publisher_timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)


class Config(_Frozen):
    """The whole daemon configuration."""

    markets: MarketsConfig = MarketsConfig()
    agents: tuple[AgentConfig, ...] = Field(
        default_factory=lambda: default_agents(), description="agents under evaluation"
    )
    leaderboard: LeaderboardConfig = LeaderboardConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    store: StoreConfig = StoreConfig()
    http: HttpConfig = HttpConfig()
    logging: LoggingConfig = LoggingConfig()
    sources: SourcesSettings = Field(
        default_factory=SourcesSettings, description="live sources and their endpoints"
    )
    alerts: dict[str, Any] = Field(
        default_factory=dict, description="alert notifiers (see docs); validated by the notifier"
    )
    mqtt: MqttSettings | None = Field(
        default=None, description="MQTT broker for split roles (docs/distributed.md)"
    )
    evaluator: EvaluatorConfig = EvaluatorConfig()
    capitalbench: CapitalBenchConfig | None = Field(
        default=None, description="CapitalBench rounds (docs/protocol-capitalbench.md)"
    )

    @model_validator(mode="after")
    def _capitalbench(self) -> Config:
        pairs: list[tuple[str, str]] = [(a.id, a.protocol) for a in self.agents]
        if self.capitalbench is None:
            problems = orphan_problems(pairs)
        else:
            problems = capital_problems(self.capitalbench, self.markets.equity.assets, pairs)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _unique_agents(self) -> Config:
        ids = [a.id for a in self.agents]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate agent id(s): {', '.join(dupes)}")
        unknown = sorted(set(self.evaluator.agents) - set(ids))
        if unknown:
            raise ValueError(f"evaluator.agents: unknown agent(s): {', '.join(unknown)}")
        return self

    def enabled_markets(self) -> tuple[str, ...]:
        """Return the markets that are enabled."""
        out = []
        if self.markets.equity.enabled:
            out.append("equity")
        if self.markets.polymarket.enabled:
            out.append("polymarket")
        return tuple(out)


def default_agents() -> tuple[AgentConfig, ...]:
    """Return the baseline agents used when the config names none."""
    return (
        AgentConfig(id="buy_and_hold", kind="buy_and_hold"),
        AgentConfig(id="equal_weight", kind="equal_weight"),
        AgentConfig(id="all_cash", kind="cash"),
        AgentConfig(id="momentum", kind="momentum"),
    )


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        kind = err["type"]
        msg = err["msg"]
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif kind == "missing":
            msg = "required key is missing"
        lines.append(f"{loc}: {' '.join(str(msg).split())}")
    return lines


def _scan(data: Mapping[str, Any]) -> list[str]:
    """Return one line per value no setting accepts: non-finite numbers, TOML dates, deep nests."""
    problems: list[str] = []
    stack: list[tuple[str, Any, int]] = [(k, v, 1) for k, v in data.items()]
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            problems.append(f"{key}: nested too deeply (more than {MAX_DEPTH} levels)")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{key}: must be a finite number (got {value})")
        elif isinstance(value, _dt.date | _dt.time):
            problems.append(f"{key}: dates and times are not accepted here (use a string)")
        elif isinstance(value, Mapping):
            stack.extend((f"{key}.{k}", v, depth + 1) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{key}.{i}", v, depth + 1) for i, v in enumerate(value))
    return sorted(problems)


def _url_problems(settings: BaseModel, prefix: str) -> list[str]:
    """Return one line per ``*_url`` setting under ``settings`` that is not a usable URL."""
    problems = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, BaseModel):
            problems += _url_problems(value, f"{prefix}.{name}")
        elif name.endswith("_url") and isinstance(value, str):
            schemes = ("ws", "wss") if name.startswith("ws") else ("http", "https")
            problem = url_problem(value, schemes)
            if problem:
                problems.append(f"{prefix}.{name}: {problem}")
    return problems


def _market_classes(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return ``data`` with the equity market's ``asset_classes`` given to every agent that
    has none of its own."""
    markets = data.get("markets")
    equity = markets.get("equity") if isinstance(markets, dict) else None
    classes = equity.get("asset_classes") if isinstance(equity, dict) else None
    agents = data.get("agents")
    if not isinstance(classes, dict) or not isinstance(agents, list):
        return data
    filled = [
        {**a, "asset_classes": classes} if isinstance(a, dict) and "asset_classes" not in a else a
        for a in agents
    ]
    return {**data, "agents": filled}


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> Config:
    """Validate a parsed TOML mapping into a :class:`Config` or raise :class:`ConfigError`.

    Types are strict: a string is never read as a number or a boolean, nor a number as a
    boolean (``enabled = "yes"`` and ``initial_cash = "1000"`` are refused); an integer is
    accepted where a float is expected.
    """
    problems = _scan(data)
    if problems:
        raise ConfigError(source, problems)
    try:
        cfg = Config.model_validate_json(json.dumps(_market_classes(data)), strict=True)
    except ValidationError as exc:
        raise ConfigError(source, _format_errors(exc)) from None
    problems = _url_problems(cfg.sources, "sources")
    if problems:
        raise ConfigError(source, problems)
    return cfg


def load_config(path: str | Path | None) -> Config:
    """Load and validate the TOML file at ``path`` (``None`` gives the built-in defaults)."""
    if path is None:
        return Config()
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(str(p), [f"cannot read file: {exc.strerror or exc}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(p), [f"not UTF-8 text (invalid byte at offset {exc.start})"]
                          ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(p), [f"invalid TOML: {exc}"]) from None
    except RecursionError:
        raise ConfigError(str(p), ["invalid TOML: arrays or tables nested too deeply"]) from None
    cfg = _with_prompt_paths(parse_config(data, str(p)), p.parent)
    from agents.factory import agent_problems  # plugins and prompt files, checked at load

    problems = agent_problems(cfg.agents)
    if problems:
        raise ConfigError(str(p), problems)
    return cfg


def _with_prompt_paths(cfg: Config, base: Path) -> Config:
    """Return ``cfg`` with every relative ``prompt_files`` path made relative to ``base``."""
    agents = []
    for a in cfg.agents:
        pf = a.prompt_files
        if pf is not None:
            paths = {k: str(base / v) for k, v in pf.model_dump().items()
                     if v is not None and not Path(v).is_absolute()}
            a = a.model_copy(update={"prompt_files": pf.model_copy(update=paths)})
        agents.append(a)
    return cfg.model_copy(update={"agents": tuple(agents)})


def missing_api_keys(config: Config, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """Return (agent id, variable) for each unset or empty ``api_key_env`` / ``http.token_env``.

    An LLM agent whose ``api_base`` is a loopback address (a local server) needs no key; an
    http agent that names a ``token_env`` always needs it (the service may require it).
    """
    out = []
    for agent in config.agents:
        if agent.http is not None and agent.http.token_env and not environ.get(
                agent.http.token_env):
            out.append((agent.id, agent.http.token_env))  # a remote agent's bearer token
        if agent.kind != "llm" or not agent.api_key_env or environ.get(agent.api_key_env):
            continue
        if agent.api_base and is_loopback_url(agent.api_base):
            continue
        out.append((agent.id, agent.api_key_env))
    return out


def missing_keys_line(missing: list[tuple[str, str]]) -> str:
    """Describe unset key variables in one line (see :func:`missing_api_keys`)."""
    names = ", ".join(f"{var} (agent {agent})" for agent, var in missing)
    return (f"unset API key variable(s): {names}; set them, or pass --allow-missing-keys to "
            "run with these agents failing every decision")


def is_loopback_url(url: str) -> bool:
    """Return whether ``url``'s host is a loopback address (``localhost``, 127.0.0.0/8, ::1)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
