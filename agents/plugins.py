"""Agent kinds from installed packages: the ``paperarena.agents`` entry-point group.

A package registers a kind in its metadata (``pyproject.toml``)::

    [project.entry-points."paperarena.agents"]
    my_kind = "my_package:MyAgent"

and a config selects it with ``kind = "my_kind"``. The entry point names a factory (usually the
agent class) called as ``factory(agent_id, settings)``; its ``settings_model`` attribute, a
pydantic model, validates the agent's ``[agents.settings]`` table at load (no attribute: the
table must be empty and ``settings`` is ``None``). The object returned must have an async
``decide(obs) -> AgentDecision`` (see :mod:`agents.base`). It runs inside :class:`GuardedAgent`:
the agent's ``timeout`` is its deadline per decision, and whatever it raises or returns that is
not an :class:`~agents.base.AgentDecision` becomes an ``error`` decision with a one-line reason
(the portfolio is held). Its allocation is validated like every agent's before it is applied.
"""

from __future__ import annotations

import asyncio
import inspect
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel, ValidationError

from agents.base import Agent, AgentDecision, Observation
from agents.config import PLUGIN_GROUP, AgentConfig, unknown_kind_problem

GROUP = PLUGIN_GROUP
#: Longest reason text kept from a plugin's exception.
REASON_CHARS = 300


class PluginError(ValueError):
    """A plugin is missing, broken or misconfigured; the message is one line."""

    def __init__(self, message: str, key: str = "kind") -> None:
        """Say ``message``; ``key`` is the agent's config key at fault (``kind``, ``settings``)."""
        super().__init__(message)
        self.key = key


def _one_line(s: str, limit: int = REASON_CHARS) -> str:
    flat = " ".join(str(s).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def installed_plugins() -> dict[str, EntryPoint]:
    """Return kind name -> entry point of every installed plugin (first one wins on a clash)."""
    out: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        out.setdefault(ep.name, ep)
    return out


def load_factory(kind: str) -> Any:
    """Return the factory the plugin ``kind`` registers, or raise :class:`PluginError`."""
    ep = installed_plugins().get(kind)
    if ep is None:
        raise PluginError(unknown_kind_problem(kind) or f"no plugin registers kind {kind!r}")
    try:
        factory = ep.load()
    except Exception as exc:
        raise PluginError(_one_line(
            f"plugin {kind!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
        )) from None
    if not callable(factory):
        raise PluginError(f"plugin {kind!r} ({ep.value}) is not callable")
    model = getattr(factory, "settings_model", None)
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise PluginError(f"plugin {kind!r}: settings_model is not a pydantic model class")
    return factory


def plugin_settings(factory: Any, cfg: AgentConfig) -> BaseModel | None:
    """Validate ``cfg.settings`` with the plugin's own model; one line per problem, joined."""
    model = getattr(factory, "settings_model", None)
    if model is None:
        if cfg.settings:
            raise PluginError(f"plugin {cfg.kind!r} takes no settings; remove [agents.settings]",
                              key="settings")
        return None
    try:
        return model.model_validate(cfg.settings)  # type: ignore[no-any-return]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            lines.append(f"settings.{loc}: {msg}" if loc else f"settings: {msg}")
        raise PluginError(_one_line("; ".join(lines)), key="settings") from None


def build_plugin_agent(cfg: AgentConfig) -> GuardedAgent:
    """Load the plugin ``cfg.kind``, validate its settings and build the guarded agent."""
    factory = load_factory(cfg.kind)
    settings = plugin_settings(factory, cfg)
    try:
        agent = factory(cfg.id, settings)
    except Exception as exc:
        raise PluginError(_one_line(
            f"plugin {cfg.kind!r} raised building agent {cfg.id}: {type(exc).__name__}: {exc}"
        )) from None
    if not inspect.iscoroutinefunction(getattr(agent, "decide", None)):
        raise PluginError(f"plugin {cfg.kind!r}: the agent has no async decide(obs) method")
    return GuardedAgent(cfg.id, agent, deadline=cfg.timeout, kind=cfg.kind)


def plugin_problem(cfg: AgentConfig) -> tuple[str, str] | None:
    """Return (config key at fault, one line) if the plugin agent ``cfg`` cannot be built."""
    try:
        build_plugin_agent(cfg)
    except PluginError as exc:
        return exc.key, str(exc)
    return None


class GuardedAgent:
    """A plugin agent run with a deadline; its failures become ``error`` decisions."""

    def __init__(self, agent_id: str, inner: Agent, *, deadline: float, kind: str) -> None:
        """Wrap ``inner``; ``deadline`` is the seconds a decision may take."""
        self.id = agent_id
        self.inner = inner
        self.deadline = deadline
        self.kind = kind

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return the plugin's decision, or an ``error`` one saying in one line what went wrong."""
        try:
            async with asyncio.timeout(self.deadline):
                dec = await self.inner.decide(obs)
        except TimeoutError:
            reason = f"plugin {self.kind!r}: no answer within {self.deadline:g}s (timeout)"
            return AgentDecision(None, outcome="error", reason=reason)
        except Exception as exc:
            return AgentDecision(None, outcome="error", reason=_one_line(
                f"plugin {self.kind!r} raised {type(exc).__name__}: {exc}"))
        if not isinstance(dec, AgentDecision):
            return AgentDecision(None, outcome="error", reason=_one_line(
                f"plugin {self.kind!r} returned {type(dec).__name__}, not an AgentDecision"))
        return dec
