"""Pluggable daemon components (HTTP/metrics, alerts, systemd notify, MQTT bridge...).

A component is started after the engine is restored and the bus runs, and stopped before the
store closes, in reverse order. Live runs and replays use the same components, so what a
replay shows on /metrics is what a live run would show.

Optional methods, called when present: ``async on_ready()`` once the live scheduler runs (the
systemd notifier sends READY=1 there) and ``async reload(config)`` after a validated SIGHUP
reload of the agent and alert configuration.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from daemon.config.settings import Config
    from daemon.engine.engine import Engine


class Component(Protocol):
    """Something that runs beside the engine."""

    name: str

    async def start(self, engine: Engine, *, sources: list[Any]) -> None:
        """Start; ``sources`` are the live sources (empty in a replay)."""
        ...

    async def stop(self) -> None:
        """Stop and release everything."""
        ...


def default_components(config: Config, *, mode: str) -> list[Component]:
    """Return the components a daemon in ``mode`` ('live' or 'replay') runs for ``config``."""
    components: list[Component] = []
    from daemon.web.observability import Observability  # metrics, HTTP, alerts; validates [alerts]

    obs = Observability.from_config(config, mode=mode)
    if obs is not None:
        components.append(obs)
    if mode == "live" and os.environ.get("NOTIFY_SOCKET"):
        from daemon.app.systemd import SystemdNotifier  # READY=1 via on_ready(), once all runs

        components.append(SystemdNotifier())
    return components
