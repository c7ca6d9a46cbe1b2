"""Price coverage of a market at a decision time: how many tradable assets have a fresh price,
with NYSE regular-session time as the age of an equity price."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = ["PriceCoverage", "format_age", "nyse_open_seconds"]

NY = ZoneInfo("America/New_York")


@dataclass(frozen=True, slots=True)
class PriceCoverage:
    """Which tradable assets of a market have a fresh price at a decision time."""

    universe: int
    """Number of assets an agent could trade (resolved Polymarket tokens excluded)."""
    fresh: int
    stale: tuple[tuple[str, float | None], ...] = ()
    """(asset, seconds since its last price, ``None`` when never priced), by asset."""

    @property
    def ratio(self) -> float:
        """Return fresh / universe (0 for an empty universe)."""
        return self.fresh / self.universe if self.universe else 0.0

    @property
    def text(self) -> str:
        """Return ``fresh/universe``."""
        return f"{self.fresh}/{self.universe}"

    def enough(self, min_ratio: float) -> bool:
        """Tell whether a round may run: a non-empty universe with enough fresh prices."""
        return self.universe > 0 and self.ratio >= min_ratio - 1e-12

    def reason(self, min_ratio: float, limit: str, shown: int = 10) -> str:
        """Return the one-line reason of a skipped round (which assets, how old)."""
        if not self.universe:
            return "no tradable asset (no question listed or every one resolved)"
        parts = [f"{a}: no price" if age is None else f"{a}: last price {format_age(age)} ago"
                 for a, age in self.stale[:shown]]
        if len(self.stale) > shown:
            parts.append(f"... and {len(self.stale) - shown} more")
        return (f"price coverage {self.text} fresh, need {100 * min_ratio:.0f}% "
                f"(stale after {limit}): {', '.join(parts)}")


def format_age(seconds: float) -> str:
    """Format a duration compactly: ``45s``, ``12m``, ``1h``, ``1h5m``, ``3d2h``."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    big, small = (s // 3600, s % 3600 // 60) if s < 86400 else (s // 86400, s % 86400 // 3600)
    units = ("h", "m") if s < 86400 else ("d", "h")
    return f"{big}{units[0]}" + (f"{small}{units[1]}" if small else "")


def nyse_open_seconds(t0: float, t1: float, cap: float = float("inf")) -> float:
    """Return the NYSE regular-session seconds between ``t0`` and ``t1`` (stops past ``cap``)."""
    if t1 <= t0:
        return 0.0
    from daemon.timing.nyse import get_nyse_calendar

    cal = get_nyse_calendar()
    day = datetime.fromtimestamp(t0, NY).date()
    last = datetime.fromtimestamp(t1, NY).date()
    total = 0.0
    while day <= last and total <= cap:
        bounds = cal.session_bounds(day)
        if bounds is not None:
            lo, hi = max(bounds[0].timestamp(), t0), min(bounds[1].timestamp(), t1)
            total += max(hi - lo, 0.0)
        day += timedelta(days=1)
    return total
