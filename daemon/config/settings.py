"""One TOML file validated at load into frozen, typed config objects.

Every field's meaning and default is stated once, in the module of its section:
``daemon.config.markets`` (``[markets]``), ``agents.config`` (``[[agents]]``) and
``daemon.config.runtime`` (``[leaderboard]``, ``[scheduler]``, ``[store]``, ``[http]``,
``[logging]``, ``[evaluator]``) and ``daemon.config.season`` (``[season]``), with the shared
validators in ``daemon.core.fields``. This module assembles them into :class:`Config` and loads
and checks a file; each section's names are imported from the module that defines them. Unknown
keys, wrong types and impossible values are refused with one clear line per problem
(:class:`ConfigError`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from agents.alphaforgebench.isolation import SandboxConfig
from agents.capitalbench.config import CapitalBenchConfig, capital_problems, orphan_problems
from agents.config import (
    AgentConfig,
    default_agents,
)
from daemon.config.errors import ConfigError
from daemon.config.markets import (
    MarketsConfig,
)
from daemon.config.runtime import (
    EvaluatorConfig,
    HttpConfig,
    LeaderboardConfig,
    LoggingConfig,
    SchedulerConfig,
    StoreConfig,
)
from daemon.config.season import SeasonConfig
from daemon.core.fields import (
    _Frozen,
    is_loopback_url,
    url_problem,
)
from daemon.mqtt.settings import MqttSettings
from feeds.settings import SourcesSettings

__all__ = [
    "MAX_DEPTH",
    "Config",
    "ConfigError",
    "load_config",
    "missing_api_keys",
    "missing_keys_line",
    "parse_config",
]

#: How deeply arrays and tables may nest in a config file.
MAX_DEPTH = 32


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
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig,
        description="the AlphaForgeBench strategy sandbox (docs/protocol-alphaforgebench.md)",
    )
    season: SeasonConfig = Field(
        default_factory=SeasonConfig,
        description="the season whose lineup is frozen (daemon/config/season.py)",
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


