"""``paperarena status``: the running daemon's state on one screen, read from its HTTP API.

It reads ``GET /api/status`` (sources, rounds per market, agents with their live status and
provisional marks; see :mod:`daemon.web.page`) and prints sources, the last round per market with
missed and skipped rounds and when its next round is due (UTC, and how long from the
daemon's clock), every agent's figures, and the halted or provisional agents.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any


class StatusError(Exception):
    """No daemon answered, or it answered something else than its status (one line)."""


def fetch_status(base: str, timeout: float = 10.0) -> dict[str, Any]:
    """Return the JSON of ``{base}/api/status``; raise :class:`StatusError` with one line."""
    url = f"{base.rstrip('/')}/api/status"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        raise StatusError(f"{url} answered {exc.code}: "
                          f"{exc.read().decode(errors='replace')[:200]}") from None
    except (OSError, ValueError) as exc:
        raise StatusError(f"no daemon answering at {url}: {exc}") from None
    if not isinstance(data, dict) or "sources" not in data:
        raise StatusError(f"{url} did not answer a daemon status")
    return data


def _time(ts: Any) -> str:
    if not isinstance(ts, int | float) or not math.isfinite(ts):
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%MZ")


def _age(s: Any) -> str:
    if not isinstance(s, int | float) or not math.isfinite(s):
        return "never"
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.1f} d ago"


def _until(s: Any) -> str:
    """``in 3 h 12 min``, ``in 40 min``, ``in 25 s``, ``in 2 d 4 h`` (or ``due`` when past)."""
    if not isinstance(s, int | float) or not math.isfinite(s):
        return ""
    if s <= 0:
        return "due"
    if s < 60:
        return f"in {s:.0f} s"
    m = int(s // 60)
    if m < 60:
        return f"in {m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"in {h} h {m} min"
    d, h = divmod(h, 24)
    return f"in {d} d {h} h"


def _pct(x: Any) -> str:
    return f"{x * 100:+.2f}%" if isinstance(x, int | float) and math.isfinite(x) else "-"


def _money(x: Any) -> str:
    return f"{x:,.2f}" if isinstance(x, int | float) and math.isfinite(x) else "-"


def _counts(d: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((d or {}).items())) or "-"


def render_status(st: dict[str, Any], base: str) -> str:
    """Return the status as a few aligned lines."""
    out = [f"paperarena at {base} · clock {_time(st.get('clock'))}"]
    sources = st.get("sources") or []
    live = sum(1 for s in sources if s.get("state") == "live")
    out.append(f"sources: {live}/{len(sources)} live")
    for s in sources:
        market = s.get("market") or "all"
        if s.get("market_open") is False:
            market += " (closed)"
        out.append(f"  {s.get('name', '?')!s:<16} {s.get('state', '?')!s:<12} {market:<20} "
                   f"last data {_age(s.get('data_age_s'))}")
    sandbox = st.get("sandbox") or {}
    if sandbox.get("state") == "degraded":
        missing = "; ".join(f"{k} ({v})" for k, v in (sandbox.get("missing") or {}).items())
        out.append(f"sandbox: DEGRADED, strategies run without: {missing}")
    elif sandbox.get("state") == "on":
        out.append("sandbox: every layer on")
    out.append("rounds:")
    for market, r in sorted((st.get("rounds") or {}).items()):
        last = (f"{_time(r.get('last_ts'))} ({_age(r.get('last_age_s'))})"
                if r.get("last_ts") is not None else "none yet")
        nxt, clock = r.get("next_ts"), st.get("clock")
        until = (_until(nxt - clock) if isinstance(nxt, int | float)
                 and isinstance(clock, int | float) else "")
        out.append(f"  {market:<12} last {last:<32} {_counts(r.get('last_outcomes')):<18} "
                   f"missed {r.get('missed', 0)}, skipped {r.get('skipped', 0)}; "
                   f"next {_time(nxt)}" + (f" ({until})" if until else ""))
    out.append("agents:            market      status             value   return  drawdown/limit")
    flagged = []
    for a in st.get("agents") or []:
        status = str(a.get("status", "?")) + (" (prov.)" if a.get("provisional") else "")
        dd = f"{_pct(a.get('drawdown')).lstrip('+')}/{_pct(a.get('limit')).lstrip('+')}"
        out.append(f"  {a.get('agent', '?')!s:<16} {a.get('market', '?')!s:<11} "
                   f"{status:<16} {_money(a.get('value')):>9} "
                   f"{_pct(a.get('return_ratio')):>8}  {dd}")
        if a.get("status") not in (None, "active"):
            flagged.append(f"{a.get('agent')} ({a.get('market')}) {a.get('status')}"
                           + (f": {a['reason']}" if a.get("reason") else ""))
        if a.get("provisional"):
            flagged.append(f"{a.get('agent')} ({a.get('market')}) provisional"
                           + (f": {a['provisional_reason']}" if a.get("provisional_reason")
                              else ""))
    out.append("attention: " + ("; ".join(flagged) if flagged else "none (no agent halted, "
                                "paused or provisional)"))
    return "\n".join(out) + "\n"
