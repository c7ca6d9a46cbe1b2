"""Pluggable daemon components (HTTP/metrics, alerts, systemd notify, MQTT bridge...).

A component is started after the engine is restored and the bus runs, and stopped before the
store closes, in reverse order. Live runs and replays use the same components, so what a
replay shows on /metrics is what a live run would show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from daemon.config import Config
    from daemon.engine import Engine


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
    del config, mode
    return components
