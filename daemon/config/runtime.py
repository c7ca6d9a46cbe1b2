"""The runtime sections: ``[leaderboard]``, ``[scheduler]``, ``[store]``, ``[http]``,
``[logging]`` and ``[evaluator]``. Every field's meaning and default is stated here, once.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from daemon.core.durations import Duration
from daemon.core.fields import PositiveDuration, _Frozen, host_problem, positive_duration


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

    misfire_grace: PositiveDuration = Field(
        default=300.0,
        description="a decision later than this is recorded as missed, never run (> 0)",
    )


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

    # -- shared PostgreSQL store (issue 19, daemon/store/pg.py) --
    url: str | None = Field(
        default=None, description="postgresql://user@host:5432/db: the shared store of a split"
        " deployment instead of the SQLite file (no password in it)")
    password_env: str = Field(
        default="PGPASSWORD", description="environment variable holding the PostgreSQL password")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        from daemon.store.pg import url_problem

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
    header_timeout: Annotated[Duration, Field(gt=0, le=3600)] = Field(
        default=10.0,
        description="seconds a client gets to send a request's headers (also the keep-alive "
        "idle limit); slower connections are closed",
    )
    body_timeout: Annotated[Duration, Field(gt=0, le=3600)] = Field(
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
    publisher_timeout: Annotated[Duration, Field(gt=0)] = Field(
        default=600.0,
        description="how long `replay-evaluate` waits for a running replay-publish to announce "
        "its stream before giving up with one line (default 10 min)",
    )

