"""One TOML file validated at load into frozen, typed config objects.

Every field's meaning and default is stated here, once. Unknown keys, wrong types and impossible
values are refused with one clear line per problem (:class:`ConfigError`).
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Parse ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` or a number of seconds into seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '30s', '15m' or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"invalid duration {value!r} (use e.g. '30s', '15m', '2h', '1d')")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ValueError("expected a duration such as '30s', '15m' or a number of seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("duration must be a finite, non-negative number of seconds")
    return seconds


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
    every: float = Field(default=3600.0, description="interval: period (e.g. '1h')")
    at: str = Field(default="00:00", description="daily: wall time HH:MM in timezone")
    timezone: str = Field(default="America/New_York", description="IANA timezone of times/at")

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, v: Any) -> float:
        seconds = parse_duration(v)
        if seconds < 1:
            raise ValueError("interval must be at least 1 second")
        return seconds

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
            if not pat.match(t):
                raise ValueError(f"invalid time {t!r} (use 'open+30m', 'close-30m' or 'HH:MM')")
        if not v:
            raise ValueError("at least one time is required")
        return v


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
    stale_after: float = Field(default=900.0, description="price older than this is stale")
    asset_classes: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ASSET_CLASSES),
        description="asset -> class (sector) for the leaderboard's diversification scores; an "
        "asset missing from the map is its own class",
    )

    @field_validator("stale_after", mode="before")
    @classmethod
    def _stale(cls, v: Any) -> float:
        return parse_duration(v)

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
    stale_after: float = 3600.0

    @field_validator("stale_after", mode="before")
    @classmethod
    def _stale(cls, v: Any) -> float:
        return parse_duration(v)


class MarketsConfig(_Frozen):
    """Both paper markets."""

    equity: EquityMarketConfig = EquityMarketConfig()
    polymarket: PolymarketMarketConfig = PolymarketMarketConfig()


AgentKind = Literal["buy_and_hold", "equal_weight", "cash", "momentum", "llm"]


#: What a retry after a rejected answer tells the model (``{error}``: the one-line reason).
DEFAULT_RETRY_FEEDBACK = (
    "Your previous answer was rejected: {error}. Answer again with only the JSON object in the"
    " required format."
)


class AgentConfig(_Frozen):
    """One agent under evaluation."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
    kind: AgentKind
    markets: tuple[Literal["equity", "polymarket"], ...] = ("equity", "polymarket")
    risk_profile: Literal["conservative", "balanced", "aggressive"] = "balanced"
    max_drawdown: Annotated[float, Field(gt=0, lt=1)] | None = Field(
        default=None, description="explicit drawdown limit; overrides the risk profile"
    )
    halt_on_breach: bool = False
    # momentum
    lookback_days: Annotated[int, Field(ge=1, le=250)] = 5
    top_k: Annotated[int, Field(ge=1, le=100)] = 3
    # llm (used by the LLM agent; ignored by baselines)
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = Field(default=None, description="env var holding the provider key")
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.3
    max_tokens: Annotated[int, Field(ge=16, le=200_000)] = 4000
    timeout: float = 60.0
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
    protocol: Literal["livetradebench", "stockbench"] = Field(
        default="livetradebench",
        description="LLM decision workflow: 'livetradebench' (one call returns the allocation)"
        " or 'stockbench' (overview -> pick stocks -> fundamentals -> per-stock dollar orders);"
        " see docs/protocols.md",
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

    @field_validator("timeout", "news_window", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("retry_after_cap", mode="before")
    @classmethod
    def _retry_after_cap(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("retry_feedback")
    @classmethod
    def _one_line_feedback(cls, v: str) -> str:
        if "\n" in v or "\r" in v:
            raise ValueError("retry_feedback must be one line")
        return v

    @model_validator(mode="after")
    def _llm_needs_model(self) -> AgentConfig:
        if self.kind == "llm" and not self.model:
            raise ValueError("an llm agent needs 'model' (a LiteLLM model string)")
        if self.kind != "llm" and self.protocol != "livetradebench":
            raise ValueError(f"protocol {self.protocol!r} is for llm agents only")
        if self.protocol == "stockbench" and self.markets != ("equity",):
            raise ValueError("protocol 'stockbench' trades stocks only: set markets = ['equity']")
        if not self.markets:
            raise ValueError("an agent must trade at least one market")
        return self


class SchedulerConfig(_Frozen):
    """Scheduler behaviour shared by all schedules."""

    misfire_grace: float = Field(
        default=300.0, description="a decision later than this is recorded as missed, never run"
    )

    @field_validator("misfire_grace", mode="before")
    @classmethod
    def _grace(cls, v: Any) -> float:
        return parse_duration(v)


class StoreConfig(_Frozen):
    """SQLite store."""

    path: str = Field(default="paperarena.db", description="SQLite database file")
    batch_size: Annotated[int, Field(ge=1, le=1_000_000)] = 5000
    flush_interval: float = Field(default=1.0, description="max seconds between event flushes")

    @field_validator("flush_interval", mode="before")
    @classmethod
    def _flush(cls, v: Any) -> float:
        return parse_duration(v)


class HttpConfig(_Frozen):
    """HTTP server for /metrics, /healthz, /readyz and the JSON API."""

    enabled: bool = True
    host: str = "127.0.0.1"
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
        lines.append(f"{loc}: {msg}")
    return lines


def parse_config(data: dict[str, Any], source: str = "<config>") -> Config:
    """Validate a parsed TOML mapping into a :class:`Config` or raise :class:`ConfigError`."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _format_errors(exc)) from None


def load_config(path: str | Path | None) -> Config:
    """Load and validate the TOML file at ``path`` (``None`` gives the built-in defaults)."""
    if path is None:
        return Config()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(p), [f"cannot read file: {exc.strerror or exc}"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(p), [f"invalid TOML: {exc}"]) from None
    return parse_config(data, str(p))
