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

Isolation: each plugin agent has a worker of its own, a daemon thread running its own event loop
(started when the agent is built, stopped by :meth:`GuardedAgent.aclose`, which the engine calls
when it closes or replaces its agents). ``decide`` runs there, never on the daemon's loop, and
the daemon waits for it under the deadline: a plugin that blocks (``time.sleep``, a CPU loop,
synchronous I/O) holds only its own thread (and, looping, the GIL for at most
:data:`SWITCH_INTERVAL_S` at a time), and its decision is ``error`` at the deadline; an
answer that comes later is dropped. Until that late call has returned, each new decision of the
agent is ``error`` at once ("still busy"), without asking the plugin: it would only queue
behind the blocked call. Calls within their deadline may overlap (the same agent in two markets'
rounds): they share the worker's loop. The observation handed over is frozen and nothing of it
is changed by the daemon after the round built it, so the plugin reads it without a copy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import sys
import threading
from collections.abc import Coroutine
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError

from agents.base import Agent, AgentDecision, Observation
from agents.config import PLUGIN_GROUP, AgentConfig, unknown_kind_problem

log = structlog.get_logger(__name__)

GROUP = PLUGIN_GROUP
#: Longest reason text kept from a plugin's exception.
REASON_CHARS = 300
#: Seconds :meth:`GuardedAgent.aclose` waits for the worker thread to end. A plugin still
#: blocked then keeps its thread until it returns (a daemon thread: the process does not wait).
CLOSE_GRACE_S = 2.0
#: The interpreter's thread switch interval while plugin workers exist (CPython's default is
#: 5 ms): a plugin looping on the CPU holds the GIL for at most this long before the daemon's
#: event loop gets it back, so it adds about this much to a price's latency, not 5 ms per turn.
SWITCH_INTERVAL_S = 0.0005


def _shorten_switch_interval() -> None:
    """Lower ``sys.setswitchinterval`` to :data:`SWITCH_INTERVAL_S` (never raise it)."""
    if sys.getswitchinterval() > SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S)


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
        agent = build_plugin_agent(cfg)
    except PluginError as exc:
        return exc.key, str(exc)
    agent.close()  # built only to be checked: its worker thread is not needed
    return None


class _Exited(Exception):
    """A plugin raised ``SystemExit`` or ``KeyboardInterrupt``: kept from stopping its worker."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.kind = type(exc).__name__


class _Worker:
    """A daemon thread running an event loop of its own: where one plugin agent's calls run."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        """Done when the thread has closed its loop."""
        self.closed = False
        _shorten_switch_interval()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # Stopped by close(): cancel the calls still running and let them end.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # nobody waits
                self.ended.set_result(None)

    def submit(self, coro: Coroutine[Any, Any, AgentDecision]
               ) -> concurrent.futures.Future[AgentDecision]:
        """Start ``coro`` on the worker's loop (``RuntimeError`` once the loop is closed)."""
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:
            coro.close()
            raise

    def close(self) -> None:
        """Ask the worker's loop to stop (it does once the call running there yields)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self.loop.call_soon_threadsafe(self.loop.stop)


class GuardedAgent:
    """A plugin agent run in a worker thread with a deadline; failures become ``error``s.

    See the module doc for the policy (a blocked plugin, late answers, overlapping calls).
    """

    def __init__(self, agent_id: str, inner: Agent, *, deadline: float, kind: str) -> None:
        """Wrap ``inner`` and start its worker; ``deadline`` is the seconds a decision may take."""
        self.id = agent_id
        self.inner = inner
        self.deadline = deadline
        self.kind = kind
        self._worker = _Worker(f"paperarena-plugin-{agent_id}")
        self._overdue: list[threading.Event] = []
        """Calls given up (deadline, cancellation) that still run: set when each returns."""

    @property
    def thread(self) -> threading.Thread:
        """Return the worker thread the plugin's calls run in."""
        return self._worker.thread

    @property
    def busy(self) -> bool:
        """Return whether a call given up at its deadline still runs in the worker."""
        self._overdue = [done for done in self._overdue if not done.is_set()]
        return bool(self._overdue)

    def _error(self, what: str) -> AgentDecision:
        return AgentDecision(None, outcome="error", reason=_one_line(f"plugin {self.kind!r}{what}"))

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return the plugin's decision, or an ``error`` one saying in one line what went wrong."""
        if self._worker.closed:
            return self._error(": the agent is closed (stopping or replaced); not asked")
        if self.busy:
            return self._error(f": still busy with a previous decision that ran past its"
                               f" {self.deadline:g}s timeout; not asked")
        finished = threading.Event()
        try:
            future = self._worker.submit(self._call(obs, finished))
        except RuntimeError:  # the worker's loop ended
            return self._error(": its worker has stopped; not asked")
        try:
            async with asyncio.timeout(self.deadline):
                dec = await asyncio.wrap_future(future)
        except TimeoutError:
            return self._error(f": no answer within {self.deadline:g}s (timeout)")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this call was cancelled (the round, the daemon stopping)
            return self._error(": its worker stopped before it answered (the agent was closed)")
        except _Exited as exc:
            return self._error(f" raised {exc.kind}: {exc}")
        except Exception as exc:
            return self._error(f" raised {type(exc).__name__}: {exc}")
        finally:
            if not finished.is_set():  # given up while running: a late answer is dropped
                self._overdue.append(finished)
        if not isinstance(dec, AgentDecision):
            return self._error(f" returned {type(dec).__name__}, not an AgentDecision")
        return dec

    async def _call(self, obs: Observation, finished: threading.Event) -> AgentDecision:
        """Run the plugin's ``decide`` (on the worker's loop); set ``finished`` when it ends."""
        try:
            return await self.inner.decide(obs)
        except (SystemExit, KeyboardInterrupt) as exc:  # would stop the worker's loop
            raise _Exited(exc) from None
        finally:
            finished.set()

    def close(self) -> None:
        """Stop the worker without waiting for it (later decisions are ``error``)."""
        self._worker.close()

    async def aclose(self) -> None:
        """Stop the worker and wait up to :data:`CLOSE_GRACE_S` for its thread to end."""
        self._worker.close()
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):
                await asyncio.wrap_future(self._worker.ended)
            self._worker.thread.join(0.5)  # its loop is closed: the thread is only returning
        except TimeoutError:
            log.warning("plugin agent still running at close; its thread ends when it returns",
                        agent=self.id, kind=self.kind)
