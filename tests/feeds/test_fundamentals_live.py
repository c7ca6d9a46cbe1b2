"""The fundamentals source in the live daemon: configured, built by the registry, stored."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.app.cli import main
from daemon.app.live import LiveDaemon
from daemon.app.sources import build_sources
from daemon.config.settings import parse_config
from daemon.core.bus import Bus
from feeds.alpaca import MissingCredentialError
from feeds.fundamentals import FundamentalsSettings, FundamentalsSource
from feeds.health import SourceHealth
from tests.helpers import HANG_GUARD
from tests.protocols.test_stockbench_fundamentals import FakeProviders

STOCKS = ["AAPL", "MSFT", "NVDA"]
STOCKBENCH = {"id": "sb", "kind": "llm", "protocol": "stockbench", "markets": ["equity"],
              "model": "openai/x", "api_base": "http://127.0.0.1:9/v1"}


def live_config(fundamentals: dict[str, Any], agents: list[dict[str, Any]]) -> Any:
    """A config whose only reachable source is the fundamentals one (others point nowhere)."""
    return parse_config({
        "http": {"enabled": False},
        "markets": {"equity": {"assets": STOCKS}, "polymarket": {"enabled": False}},
        "sources": {
            "backfill": False,
            "equity": {"rest_fallback": False,
                       "yahoo": {"ws_url": "ws://127.0.0.1:9/", "chart_url": "http://127.0.0.1:9/"}},
            "news": {"providers": []},
            "fundamentals": fundamentals,
        },
        "agents": agents,
    })


@pytest.mark.parametrize(("line", "key"), [
    ('yahoo_url = "not a url"', "sources.fundamentals.yahoo_url"),
    ('finnhub_url = "ftp://h/x"', "sources.fundamentals.finnhub_url"),
    ('poll_interval = "6 hours"', "sources.fundamentals.poll_interval"),
    ('poll_interval = "0s"', "sources.fundamentals.poll_interval"),
    ('provider = "bloomberg"', "sources.fundamentals.provider"),
    ('enabled = "yes"', "sources.fundamentals.enabled"),
])
def test_check_config_refuses_a_bad_fundamentals_section(
    tmp_path: Path, line: str, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(f"[sources.fundamentals]\n{line}\n")
    assert main(["check-config", str(f)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{f}: {key}:"), lines


def test_section_parses_durations_and_defaults() -> None:
    cfg = parse_config({"sources": {"fundamentals": {"poll_interval": "6h",
                                                     "provider": "finnhub"}}})
    fund = cfg.sources.fundamentals
    assert fund.poll_interval == 21_600.0 and fund.provider == "finnhub"
    assert fund.enabled is None and fund.finnhub_key_env == "FINNHUB_API_KEY"
    assert not fund.wanted(["livetradebench"]) and fund.wanted(["livetradebench", "stockbench"])
    assert FundamentalsSettings(enabled=False).wanted(["stockbench"]) is False


async def test_live_daemon_polls_fundamentals_into_the_store(tmp_path: Path) -> None:
    async with FakeProviders() as fake:
        cfg = live_config({"yahoo_url": f"{fake.base}/v7/finance/quote"}, [STOCKBENCH])
        db = tmp_path / "live.db"
        daemon = LiveDaemon(cfg, db=str(db), sources=lambda eng: build_sources(cfg, eng))
        await daemon.start()
        try:
            fund = [s for s in daemon.sources if isinstance(s, FundamentalsSource)]
            assert len(fund) == 1
            deadline = time.monotonic() + HANG_GUARD
            while fund[0].state != "live" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert fund[0].state == "live"
            line = SourceHealth(daemon.sources).line()
            assert "fundamentals" not in line.split("(")[-1]  # live: not among the down ones
        finally:
            await daemon.stop()
    assert fake.requests and fake.requests[0][1]["symbols"] == ",".join(STOCKS)
    rows = sqlite3.connect(db).execute(
        "SELECT asset, payload FROM market_events WHERE kind = 'FundamentalsEvent'").fetchall()
    assert all(asset == json.loads(payload)["asset"] for asset, payload in rows)  # queryable
    stored = {e["asset"]: e for e in (json.loads(r[1]) for r in rows)}
    assert sorted(stored) == ["AAPL", "MSFT"]  # the fake quotes no NVDA
    assert stored["AAPL"]["source"] == "yahoo" and stored["AAPL"]["metrics"]["market_cap_usd"] > 0


def test_registry_builds_it_only_when_wanted(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def names(fundamentals: dict[str, Any], agents: list[dict[str, Any]],
              protocols: list[str] | None = None) -> list[str]:
        cfg = live_config(fundamentals, agents)
        # What build_sources reads of an engine: its bus, clock and markets.
        engine = SimpleNamespace(bus=Bus(), clock=SimpleNamespace(now=time.time),
                                 books={"equity": None})
        return [s.name for s in build_sources(cfg, engine,  # type: ignore[arg-type]
                                              protocols=protocols)]

    cash = [{"id": "c", "kind": "cash", "markets": ["equity"]}]
    assert "fundamentals" not in names({}, cash)
    assert "fundamentals" in names({}, [STOCKBENCH])
    assert "fundamentals" in names({"enabled": True}, cash)
    assert "fundamentals" not in names({"enabled": False}, [STOCKBENCH])
    # The feeds role runs no agent but polls for the evaluators' StockBench agents.
    assert "fundamentals" in names({}, [], protocols=["stockbench"])
    monkeypatch.delenv("FUNDS_KEY", raising=False)
    with pytest.raises(MissingCredentialError,
                       match=r"sources.fundamentals \(finnhub\): .*FUNDS_KEY"):
        names({"provider": "finnhub", "finnhub_key_env": "FUNDS_KEY"}, [STOCKBENCH])


async def test_a_failed_poll_is_down_with_its_reason_and_retried(tmp_path: Path) -> None:
    got: list[Any] = []

    async def publish(ev: Any) -> None:
        got.append(ev)

    settings = FundamentalsSettings(yahoo_url="http://127.0.0.1:9/v7/finance/quote",
                                    request_timeout=2, retry_interval=0.05)
    src = FundamentalsSource(settings, ["AAPL"], publish)
    assert src.state == "connecting" and src.provides_prices is False
    task = asyncio.ensure_future(src.run())
    deadline = time.monotonic() + HANG_GUARD
    while src.errors < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert src.errors >= 2 and src.state == "down" and src.last_error and not got
    assert f"fundamentals: {src.last_error}" in SourceHealth([src]).line()
