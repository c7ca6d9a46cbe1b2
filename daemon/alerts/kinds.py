"""Alert kinds, severities and the :class:`Alert` record raised, persisted and delivered."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from daemon.core.events import AlertEvent

DRAWDOWN_BREACH = "drawdown_breach"
DRAWDOWN_RECOVERED = "drawdown_recovered"
FEED_STALE = "feed_stale"
FEED_RECOVERED = "feed_recovered"
AGENT_RESUMED = "agent_resumed"
#: Every alert kind the alert monitor raises (metrics pre-create a counter per kind).
ALERT_KINDS: tuple[str, ...] = (DRAWDOWN_BREACH, DRAWDOWN_RECOVERED, FEED_STALE, FEED_RECOVERED,
                                AGENT_RESUMED)
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert as raised, persisted and delivered."""

    ts: float
    kind: str
    severity: str
    message: str
    agent: str = ""
    market: str = ""
    source: str = ""
    value: float = 0.0
    limit: float = 0.0

    def to_event(self) -> AlertEvent:
        """Return the bus event of this alert."""
        return AlertEvent(ts=self.ts, recv_ts=self.ts, kind=self.kind, severity=self.severity,
                          agent=self.agent, market=self.market, value=self.value,
                          limit=self.limit, message=self.message)

    def to_json(self) -> dict[str, Any]:
        """Return the generic JSON webhook payload."""
        return {
            "app": "paperarena",
            "kind": self.kind,
            "severity": self.severity,
            "ts": self.ts,
            "time": datetime.fromtimestamp(self.ts, UTC).isoformat().replace("+00:00", "Z"),
            "agent": self.agent or None,
            "market": self.market or None,
            "source": self.source or None,
            "value": self.value if math.isfinite(self.value) else None,
            "limit": self.limit if math.isfinite(self.limit) else None,
            "message": self.message,
        }

    def text(self) -> str:
        """Return a one-line human text (Slack/Discord)."""
        icon = {"critical": ":rotating_light:", "warning": ":warning:"}.get(self.severity,
                                                                             ":information_source:")
        return f"{icon} [paperarena {self.severity}] {self.message}"

