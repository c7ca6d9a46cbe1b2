"""The ``[alerts]`` configuration: webhooks, tuning, validation and per-agent drawdown limits."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.config import AgentConfig
from daemon.alerts.kinds import ALERT_KINDS
from daemon.config.settings import ConfigError
from daemon.core.durations import parse_duration
from scoring.stats.benchmarks import RISK_PROFILES

#: Limit used for an agent that runs but is no longer in the config.
DEFAULT_LIMIT = RISK_PROFILES["balanced"].max_drawdown

class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WebhookConfig(_Frozen):
    """One alert notifier (``[[alerts.webhooks]]``)."""

    url: str = Field(description="http(s) URL the alert is POSTed to")
    kind: Literal["json", "slack", "discord"] = Field(
        default="json",
        description="json = the alert as JSON; slack = {'text': ...}; discord = {'content': ...}",
    )
    name: str | None = Field(default=None, description="label in logs and metrics")
    token_env: str | None = Field(
        default=None, description="environment variable holding a bearer token (never logged)"
    )
    kinds: tuple[str, ...] | None = Field(
        default=None, description="only these alert kinds (default: all)"
    )
    min_severity: Literal["info", "warning", "critical"] = "info"
    timeout: float = Field(default=10.0, description="per-attempt HTTP timeout")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z0-9_.\-]{1,64}$", v):
            raise ValueError("use 1-64 letters, digits, '_', '.' or '-'")
        return v

    @field_validator("token_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("must be an environment variable name")
        return v

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            unknown = sorted(set(v) - set(ALERT_KINDS))
            if unknown:
                raise ValueError(f"unknown alert kind(s) {', '.join(unknown)} "
                                 f"(known: {', '.join(ALERT_KINDS)})")
        return v

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        seconds = parse_duration(v)
        if seconds <= 0:
            raise ValueError("must be > 0")
        return seconds


class AlertsConfig(_Frozen):
    """The ``[alerts]`` table: drawdown/feed alert tuning and notifiers."""

    webhooks: tuple[WebhookConfig, ...] = ()
    hysteresis: float = Field(
        default=0.02, ge=0.0, lt=1.0,
        description="re-arm a drawdown alert once drawdown <= limit - hysteresis",
    )
    check_interval: float = Field(
        default=60.0, description="evaluate drawdowns at most this often (engine clock)"
    )
    feed_stale_after: float = Field(
        default=300.0, description="a source not live this long while its market is open alerts"
    )
    feed_recovered_after: float = Field(
        default=60.0, description="live again this long re-arms the stale-feed alert"
    )
    feed_check_interval: float = Field(default=5.0, description="how often feeds are checked")
    notify_recovery: bool = Field(
        default=True, description="also notify recoveries and operator resumes (info)"
    )
    max_attempts: int = Field(default=5, ge=1, le=20, description="delivery attempts per alert")
    backoff_initial: float = Field(default=1.0, description="first retry delay")
    backoff_max: float = Field(default=60.0, description="longest retry delay")
    queue_size: int = Field(default=1000, ge=1, le=100_000,
                            description="alerts queued per webhook (oldest dropped beyond)")

    @field_validator("check_interval", "feed_stale_after", "feed_recovered_after",
                     "feed_check_interval", "backoff_initial", "backoff_max", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("check_interval", "feed_check_interval", "backoff_initial")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be > 0")
        return v


def parse_alerts_config(data: Mapping[str, Any] | None, source: str = "config") -> AlertsConfig:
    """Validate the ``[alerts]`` mapping or raise :class:`ConfigError` (one line per problem)."""
    try:
        return AlertsConfig.model_validate(dict(data or {}))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in ("alerts", *err["loc"]))
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing":
                msg = "required key is missing"
            elif msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            lines.append(f"{loc}: {msg}")
        raise ConfigError(source, lines) from None


def drawdown_limit(cfg: AgentConfig | None) -> float:
    """Return an agent's drawdown limit: explicit ``max_drawdown``, else its risk profile's."""
    if cfg is None:
        return DEFAULT_LIMIT
    if cfg.max_drawdown is not None:
        return float(cfg.max_drawdown)
    return RISK_PROFILES[cfg.risk_profile].max_drawdown

