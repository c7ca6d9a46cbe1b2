"""The ``[capitalbench]`` config section: CapitalBench rounds (docs/protocol-capitalbench.md).

Kept apart from :mod:`daemon.config.settings` (which only names the section) so the round mode's
settings live with it. Checks that need the rest of the config (options inside the equity universe,
agents following the ``capitalbench`` protocol) are made by :func:`capital_problems`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from daemon.core.durations import parse_duration

CASH = "CASH"
PROTOCOL = "capitalbench"
_SESSION_TIME = re.compile(r"^(open|close)([+-]\d+m)?$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


class CapitalOption(_Frozen):
    """One choice a model may allocate to: a ticker of the equity universe or ``CASH``."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,32}$")]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    asset_class: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        description="e.g. 'us_equity', 'bond_etf', 'cash'")
    # The paper's other model-facing fields (seed 004); shown only when set, so a config
    # without them freezes the same bytes as before.
    symbol: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-^=]{1,32}$")] | None = Field(
        default=None, description="the public ticker (CASH has none)")
    category: Annotated[str, Field(max_length=64)] = Field(
        default="", description="e.g. 'broad market', 'sector', 'treasuries'")
    group: Annotated[str, Field(max_length=64)] = Field(
        default="", description="e.g. 'US equities', 'fixed income'")
    risk_bucket: Annotated[str, Field(max_length=32)] = Field(
        default="", description="e.g. 'low', 'medium', 'high'")
    exposure: Annotated[str, Field(max_length=300)] = Field(
        default="", description="what the option is exposed to, in a sentence")

    def facts(self) -> dict[str, str]:
        """Return the option's model-facing fields, the optional ones only when set."""
        out = {"id": self.id, "name": self.name, "asset_class": self.asset_class}
        extra = {"symbol": self.symbol or "", "category": self.category, "group": self.group,
                 "risk_bucket": self.risk_bucket, "exposure": self.exposure}
        return out | {k: v for k, v in extra.items() if v}

    def line(self) -> str:
        """Return the option as the prompt lists it."""
        text = f"- {self.id}: {self.name} ({self.asset_class})"
        parts = [f"{label} {v}" for label, v in (
            ("symbol", self.symbol), ("category", self.category), ("group", self.group),
            ("risk bucket", self.risk_bucket)) if v]
        if self.exposure:
            parts.append(f"exposure: {self.exposure}")
        return text + ("; " + "; ".join(parts) if parts else "")


class CapitalTrack(_Frozen):
    """A weekly or monthly track: one round on the first NYSE session of each week / month."""

    kind: Literal["weekly", "monthly"]
    at: str = Field(default="open-30m",
                    description="session time of the freeze: 'open-30m', 'open+5m', 'close-1m'")
    consistency_repeats: Annotated[int, Field(ge=0, le=20)] = Field(
        default=0, description="extra calls per model (run id 'consistency'), never scored "
        "officially; 0 = none")

    @field_validator("at")
    @classmethod
    def _at(cls, v: str) -> str:
        if not _SESSION_TIME.match(v):
            raise ValueError(f"invalid session time {v!r} (use 'open-30m', 'open+5m', 'close')")
        return v


class CapitalBenchConfig(_Frozen):
    """CapitalBench rounds: frozen packages, one call per model, scored after the end rule."""

    rounds_dir: Annotated[str, Field(min_length=1)] = Field(
        default="rounds", description="directory holding one folder per round")
    briefing: Annotated[str, Field(min_length=1)] = Field(
        description="path of the neutral briefing file (markdown) the operator supplies")
    options: tuple[CapitalOption, ...] = Field(description="the choices, in prompt order")
    benchmark: str = Field(default="SPY", description="the S&P 500's price (a ticker)")
    submission_format: Literal["portfolio", "single_allocation"] = "portfolio"
    max_holdings: Annotated[int, Field(ge=1, le=20)] = 5
    increment_pct: Annotated[int, Field(ge=1, le=100)] = 5
    collect_window: float = Field(
        default=3600.0, description="deadline of the model calls after the freeze (e.g. '1h')")
    methodology_version: Annotated[str, Field(min_length=1)] = "paperarena-capitalbench-1"
    universe_version: Annotated[str, Field(min_length=1)] = "1"
    tracks: tuple[CapitalTrack, ...] = (CapitalTrack(kind="weekly"),)
    roster: tuple[str, ...] = Field(
        default=(), description="comparison-set roster (agent ids); default: every "
        "capitalbench agent")
    adjusted_closes: bool = Field(
        default=False, description="live rounds use Yahoo's dividend-adjusted closes (adjclose,"
        " sources.equity.yahoo's chart history): the trailing table's fetched at the freeze, the"
        " start and end closes fetched together after the end session; a replay uses the"
        " recording's closes (build it with --dividend-adjusted)")
    show_retrospective: bool = Field(
        default=False, description="show rounds built from history (frozen in a replay, marked"
        " 'retrospective' in their manifest) in reports and on the page; off: the public"
        " board holds live rounds only")

    @field_validator("collect_window", mode="before")
    @classmethod
    def _window(cls, v: Any) -> float:
        seconds = parse_duration(v)
        if not 60 <= seconds <= 7 * 86_400:
            raise ValueError("collect_window must be between 1 minute and 7 days")
        return seconds

    @model_validator(mode="after")
    def _check(self) -> CapitalBenchConfig:
        ids = [o.id for o in self.options]
        if not ids:
            raise ValueError("options: at least one option is required")
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"options: duplicate id(s): {', '.join(dupes)}")
        if 100 % self.increment_pct:
            raise ValueError(f"increment_pct must divide 100, got {self.increment_pct}")
        twice = sorted({a for a in self.roster if self.roster.count(a) > 1})
        if twice:
            raise ValueError(f"roster: listed twice: {', '.join(twice)}")
        kinds = [t.kind for t in self.tracks]
        if len(set(kinds)) != len(kinds):
            raise ValueError("tracks: one track per kind (weekly, monthly)")
        return self

    @property
    def option_ids(self) -> tuple[str, ...]:
        """Return the option ids in prompt order."""
        return tuple(o.id for o in self.options)

    @property
    def tickers(self) -> tuple[str, ...]:
        """Return the options that have a price (every one but CASH)."""
        return tuple(o.id for o in self.options if o.id != CASH)


def briefing_problems(cap: CapitalBenchConfig) -> list[str]:
    """Return one line when the briefing file cannot be read as UTF-8 text (checked when a config
    file is loaded: without it no round could be frozen)."""
    try:
        Path(cap.briefing).read_bytes().decode("utf-8")
    except OSError as exc:
        return [f"capitalbench.briefing: cannot read {cap.briefing}: {exc.strerror or exc}"]
    except UnicodeDecodeError as exc:
        return [f"capitalbench.briefing: not UTF-8 text: {cap.briefing} (invalid byte at offset"
                f" {exc.start})"]
    return []


def capital_problems(cap: CapitalBenchConfig, equity_assets: tuple[str, ...],
                     agents: list[tuple[str, str]]) -> list[str]:
    """Return one line per cross-section problem (``agents``: (id, protocol) pairs)."""
    out = []
    missing = [t for t in cap.tickers if t not in equity_assets]
    if missing:
        out.append(f"capitalbench.options: not in markets.equity.assets (no prices): "
                   f"{', '.join(missing)}")
    ours = {a for a, p in agents if p == PROTOCOL}
    unknown = sorted(set(cap.roster) - ours)
    if unknown:
        out.append(f"capitalbench.roster: not a capitalbench agent: {', '.join(unknown)}")
    return out


def orphan_problems(agents: list[tuple[str, str]]) -> list[str]:
    """Return one line naming the ``capitalbench`` agents of a config without a
    ``[capitalbench]`` section (they would never be asked)."""
    ids = [a for a, p in agents if p == PROTOCOL]
    if not ids:
        return []
    return [f"protocol 'capitalbench' needs a [capitalbench] section: {', '.join(ids)}"]
