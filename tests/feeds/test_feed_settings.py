"""``[sources.*]`` settings: durations as strings, the data-silence default, clear errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from daemon.config.settings import ConfigError, parse_config
from daemon.core.events import PriceEvent
from feeds.source_contract import SourceCounters
from tests.web.test_alerts import FakeSource
from tests.web.test_metrics_http import start_daemon, stop_daemon, value


def test_sources_durations_accept_strings_like_every_other_section() -> None:
    cfg = parse_config(
        {
            "sources": {
                "polymarket": {"stale_after": "20s", "dead_after": "2m", "ping_interval": "5s"},
                "equity": {"yahoo": {"rest_poll_interval": "1m", "backoff_max": "90s"}},
                "news": {"poll_interval": "15m"},
            }
        }
    )
    pm = cfg.sources.polymarket
    assert (pm.stale_after, pm.dead_after, pm.ping_interval) == (20.0, 120.0, 5.0)
    assert cfg.sources.equity.yahoo.rest_poll_interval == 60.0
    assert cfg.sources.equity.yahoo.backoff_max == 90.0
    assert cfg.sources.news.poll_interval == 900.0


def test_bad_source_duration_is_one_clear_line() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"sources": {"polymarket": {"stale_after": "soon"}}})
    text = "; ".join(err.value.problems)
    assert "sources.polymarket.stale_after" in text and "invalid duration 'soon'" in text


async def test_unknown_feed_events_are_exported_as_a_counter(tmp_path: Path) -> None:
    src = FakeSource("polymarket", market="polymarket", counters=SourceCounters(unknown=3))  # type: ignore[arg-type]
    d = await start_daemon(tmp_path, sources=[src])
    try:
        await d.engine.bus.publish(PriceEvent(ts=1.0, market="equity", asset="A", price=math.nan))
        m = await d.metrics()
        assert value(m["paperarena_feed_unknown_events_total"], source="polymarket") == 3.0
        assert value(m["paperarena_bus_invalid_prices_total"]) == 1.0
    finally:
        await stop_daemon(d)
