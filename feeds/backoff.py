"""Exponential reconnect backoff with full jitter, shared by every feed source.

``delay = uniform(0, cap)`` with ``cap = penalty * min(maximum, initial * multiplier**attempt)``;
each call to :meth:`Backoff.next_delay` counts one attempt. A connection that stays up for
``reset_after`` seconds resets the attempt counter (see :meth:`Backoff.maybe_reset`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.core.durations import Duration

__all__ = ["CLOSE_GRACE", "Backoff", "BackoffPolicy", "EquityStreamSettings", "StreamSettings"]

#: Prices stamped up to this long after the close still belong to the regular session (the
#: closing auction prints at the close, sometimes stamped a few hundred milliseconds later).
CLOSE_GRACE = 10.0


@dataclass(frozen=True)
class BackoffPolicy:
    """Parameters of a :class:`Backoff` (seconds)."""

    initial: float = 1.0
    maximum: float = 60.0
    multiplier: float = 2.0
    reset_after: float = 60.0

    def __post_init__(self) -> None:
        """Validate the parameters."""
        if not (self.initial > 0 and self.maximum >= self.initial):
            raise ValueError(f"need 0 < initial <= maximum, got {self.initial}, {self.maximum}")
        if not self.multiplier >= 1.0:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not self.reset_after >= 0:
            raise ValueError(f"reset_after must be >= 0, got {self.reset_after}")


class Backoff:
    """Exponential backoff with full jitter, bounded, reset after a stable connection."""

    def __init__(self, policy: BackoffPolicy, *, rng: random.Random | None = None) -> None:
        """Create a backoff in its initial state (attempt 0)."""
        self.policy = policy
        self.attempt = 0
        self._rng = rng if rng is not None else random.Random()
        self._connected_at: float | None = None

    def cap(self, *, penalty: float = 1.0) -> float:
        """Return the upper bound of the next delay (without consuming an attempt)."""
        p = self.policy
        try:
            raw = p.initial * p.multiplier**self.attempt
        except OverflowError:
            raw = math.inf
        return min(p.maximum, raw) * max(penalty, 0.0)

    def next_delay(self, *, penalty: float = 1.0) -> float:
        """Return a delay drawn uniformly in ``[0, cap]`` and count one more attempt.

        ``penalty`` multiplies the cap (e.g. 4.0 after HTTP 429); the delay stays bounded by
        ``maximum * penalty``. A failure also ends the current stable period.
        """
        cap = self.cap(penalty=penalty)
        self.attempt += 1
        self._connected_at = None
        return self._rng.uniform(0.0, cap)

    def connected(self, now: float) -> None:
        """Record that a connection became healthy at ``now``."""
        self._connected_at = now

    def maybe_reset(self, now: float) -> None:
        """Reset the attempt counter if connected for at least ``reset_after`` seconds."""
        if self._connected_at is not None and now - self._connected_at >= self.policy.reset_after:
            self.attempt = 0

    def reset(self) -> None:
        """Reset the attempt counter unconditionally."""
        self.attempt = 0

    @property
    def stable_since(self) -> float | None:
        """Return when the current healthy period started (None while failing)."""
        return self._connected_at


class BackoffSettings(BaseModel):
    """Backoff fields shared by every source's settings, and the policy they make."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backoff_initial: Duration = Field(default=1.0, gt=0, description="first retry delay cap (s)")
    backoff_max: Duration = Field(default=60.0, gt=0, description="largest retry delay cap (s)")
    backoff_reset_after: Duration = Field(
        default=60.0, ge=0, description="stable seconds after which backoff starts over"
    )

    def backoff_policy(self) -> BackoffPolicy:
        """Return the reconnect (or retry) backoff policy."""
        return BackoffPolicy(
            initial=self.backoff_initial,
            maximum=max(self.backoff_max, self.backoff_initial),
            reset_after=self.backoff_reset_after,
        )


class StreamSettings(BackoffSettings):
    """Settings shared by every streaming (WebSocket) source."""

    open_timeout: Duration = Field(default=10.0, gt=0, description="connect + handshake bound (s)")
    watchdog_interval: Duration = Field(default=1.0, gt=0, description="staleness check period (s)")
    stale_after: Duration = Field(default=120.0, gt=0, description="a key without data is stale")
    stale_policy: Literal["any", "all"] = Field(
        default="any", description="reconnect when any / all of a shard's keys are stale"
    )
    dead_after: Duration | None = Field(
        default=None, gt=0, description="reconnect after this long without any frame"
    )
    silent_after: Duration = Field(
        default=60.0,
        ge=0,
        description="reconnect a connection that sent no DATA frame for this long while its "
        "market is open (PONGs / heartbeats do not count); 0 disables",
    )

    def stream_options(self) -> dict[str, Any]:
        """Return the :class:`feeds.connection.StreamingSource` options these settings set."""
        return {
            "stale_after": self.stale_after,
            "stale_policy": self.stale_policy,
            "dead_after": self.dead_after,
            "silent_after": self.silent_after or None,
            "backoff": self.backoff_policy(),
            "open_timeout": self.open_timeout,
            "watchdog_interval": self.watchdog_interval,
        }


class EquityStreamSettings(StreamSettings):
    """Settings shared by the equity streams: only regular-session prices mark by default."""

    extended_hours_marks: bool = Field(
        default=False,
        description="pre-/post-market and extended-hours prices mark (default: data only, "
        "published as NonMarkingPrice; marks and daily closes use the regular session)",
    )

    def marks_at(self, is_open: Callable[[float], bool] | None, t: float) -> bool:
        """Return whether a price stamped ``t`` marks under the session calendar ``is_open``.

        True inside the regular session (the close plus :data:`CLOSE_GRACE` included), always
        with ``extended_hours_marks`` or without a calendar.
        """
        if is_open is None or self.extended_hours_marks:
            return True
        return is_open(t) or is_open(t - CLOSE_GRACE)
