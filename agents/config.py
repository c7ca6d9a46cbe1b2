"""The ``[[agents]]`` tables: one agent under evaluation each.

Kind (built in or a plugin), markets, risk profile and PortBench allocation limits, asset-class
roles, the LLM settings and decision protocol, the alphaforgebench strategy, a remote agent's
HTTP settings and an LLM agent's own prompt files. Every field's meaning and default is stated
here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from daemon.core.durations import Duration
from daemon.core.fields import PositiveDuration, _Frozen, url_problem
from daemon.core.universe import DEFAULT_ASSET_CLASSES

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
#: ``scoring.stats.benchmarks.RISK_PROFILES``).
PROFILE_LIMITS: dict[str, AllocationLimits] = {
    "conservative": AllocationLimits(equity_cap=0.40, bond_floor=0.40),
    "balanced": AllocationLimits(equity_cap=0.65, bond_floor=0.20),
    "aggressive": AllocationLimits(equity_cap=0.90, bond_floor=0.05),
}


AgentKind = Literal[
    "buy_and_hold", "equal_weight", "cash", "momentum", "llm", "http",
    "sixty_forty", "risk_parity", "equal_risk_contribution", "min_variance", "random_guess",
]  # fmt: skip
#: The agent kinds built into paperarena; any other ``kind`` names an installed plugin.
BUILTIN_KINDS: tuple[str, ...] = (
    "buy_and_hold", "equal_weight", "cash", "momentum", "llm", "http",
    "sixty_forty", "risk_parity", "equal_risk_contribution", "min_variance", "random_guess",
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
    timeout: PositiveDuration = Field(
        default=30.0, description="seconds per request, answer included (> 0)")
    max_attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=3, description="requests per decision; only transport failures are retried"
    )
    max_body: Annotated[int, Field(ge=1024, le=1 << 26)] = Field(
        default=1 << 20, description="largest answer body read, in bytes (larger: invalid)"
    )

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
    regenerate_every: Duration = Field(
        default=604_800.0,
        description="ask the model for a new strategy version this often (default 7d);"
        " 0 keeps the first valid version",
    )
    lookback: Annotated[int, Field(ge=2, le=5000)] = Field(
        default=300, description="daily bars the strategy sees, the current one included"
    )
    timeout: PositiveDuration = Field(
        default=10.0, description="wall-clock seconds per bar (all assets)")
    cpu_seconds: PositiveDuration = Field(
        default=5.0, description="CPU seconds per bar (RLIMIT_CPU)")
    memory_mb: Annotated[int, Field(ge=256, le=65_536)] = Field(
        default=1024, description="address space of the strategy process (RLIMIT_AS)"
    )



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
    # issue 13: runs of one model reported as one (scoring/board/run_groups.py)
    run_group: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")] | None = Field(
        default=None, description="agents with the same run_group are runs of one model: the"
        " report adds one row per group with the mean and spread of their figures",
    )
    # momentum
    lookback_days: Annotated[int, Field(ge=1, le=250)] = 5
    top_k: Annotated[int, Field(ge=1, le=100)] = 3
    # random_guess
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = Field(
        default=0, description="random_guess: the seed of its draws (with its id and the time)"
    )
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
    timeout: PositiveDuration = Field(default=60.0, description="seconds per model call (> 0)")
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    max_concurrency: Annotated[int, Field(ge=1, le=256)] = 4
    daily_budget_usd: Annotated[float, Field(ge=0)] | None = None
    daily_budget_tokens: Annotated[int, Field(ge=0)] | None = None
    memory: Annotated[int, Field(ge=0, le=100)] = Field(
        default=5, description="how many past allocations the prompt shows"
    )
    news_window: Duration = Field(default=172800.0, description="news lookback (default 48h)")
    news_per_asset: Annotated[int, Field(ge=0, le=50)] = 5
    retry_after_cap: Annotated[Duration, Field(le=3600)] = Field(
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
    enforce_profile: bool = Field(
        default=False,
        description="portbench: reject and retry a target above the profile's equity cap or"
        " below its bond floor; default false, the paper's: the profile is stated in the prompt"
        " and its limits are scored after the fact (profile alignment)",
    )
    rebalance_rule: Literal["drift", "model"] = Field(
        default="drift",
        description="portbench: what decides S5's rebalance: 'drift' (the paper: the target is"
        " applied when its largest single-asset drift from the current weights exceeds 5 %),"
        " 'model' (the model's rebalance flag); the model's estimates are scored either way",
    )
    revision_rounds: Annotated[int, Field(ge=0, le=10)] | Literal["until_fit"] = Field(
        default="until_fit",
        description="stockbench: revisions of orders exceeding the account: 'until_fit' (the"
        " default, the paper's: revised until they fit, within the decision's deadline and the"
        " daily budget) or at most N (0..10) before the agent holds",
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


def default_agents() -> tuple[AgentConfig, ...]:
    """Return the baseline agents used when the config names none."""
    return (
        AgentConfig(id="buy_and_hold", kind="buy_and_hold"),
        AgentConfig(id="equal_weight", kind="equal_weight"),
        AgentConfig(id="all_cash", kind="cash"),
        AgentConfig(id="momentum", kind="momentum"),
    )
