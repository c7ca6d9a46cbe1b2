"""Build the live sources the config asks for (keyless defaults when it names none)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog

from daemon.config.settings import Config
from daemon.core.events import HistoryEvent, MarketListed
from daemon.timing.nyse import get_nyse_calendar
from feeds.alpaca import MissingCredentialError, secret_from_env
from feeds.equities import build_equity_sources
from feeds.fundamentals import FundamentalsSource
from feeds.health import short_error
from feeds.news import build_news_sources
from feeds.news_parse import equity_news_queries, question_query
from feeds.polymarket.source import build_polymarket_source
from feeds.source_contract import SourceCounters, SourceState
from feeds.yahoo import backfill_daily_closes

if TYPE_CHECKING:
    from daemon.engine.engine import Engine

log = structlog.get_logger(__name__)


class EquityHistoryBackfill:
    """A one-shot source: seed the observation history with recent daily closes at start-up."""

    name = "equity-backfill"

    def __init__(self, config: Config, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.state = SourceState.CONNECTING
        self.counters = SourceCounters()
        #: Short name of the failure that left symbols without history ("" if none).
        self.last_error = ""
        #: History only: its health never decides whether rounds have prices.
        self.provides_prices = False

    async def run(self) -> None:
        """Fetch daily closes once (errors are logged, never raised)."""
        symbols = list(self.config.markets.equity.assets)
        errors: dict[str, str] = {}
        try:
            async with aiohttp.ClientSession() as session:
                closes = await backfill_daily_closes(
                    session, self.config.sources.equity.yahoo, symbols,
                    now=self.engine.clock.now, errors=errors,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.state = SourceState.DOWN
            self.last_error = short_error(exc)
            log.warning("equity history backfill failed", error=self.last_error)
            return
        now = self.engine.clock.now()
        for sym, rows in closes.items():
            if rows:
                # Through the bus, so the recorder keeps it and a replay sees the same history.
                await self.engine.bus.publish(HistoryEvent(
                    ts=now, recv_ts=now, market="equity", asset=sym,
                    points=tuple((float(t), float(p)) for t, p in rows), source="yahoo-rest",
                ))
            self.counters.messages += len(rows)
        got = sum(1 for rows in closes.values() if rows)
        self.state = SourceState.LIVE if got else SourceState.DOWN
        if not got and errors:
            self.last_error = next(iter(errors.values()))
        log.info("equity history backfilled", symbols=got, of=len(symbols))


def build_sources(config: Config, engine: Engine, *,
                  protocols: Iterable[str] | None = None) -> list[Any]:
    """Return the sources to run for ``config``, wired to the engine's bus and clock.

    ``protocols`` are the agents' protocols that decide whether fundamentals are wanted (default:
    those of ``config.agents``; the feeds role, which runs no agent, passes the whole config's).
    """
    src_cfg = config.sources
    if not src_cfg.enabled:
        return []
    bus, now = engine.bus, engine.clock.now
    sources: list[Any] = []
    equities = tuple(config.markets.equity.assets) if "equity" in engine.books else ()
    if equities:
        sources += build_equity_sources(src_cfg.equity, equities, bus=bus, now=now,
                                        is_open=get_nyse_calendar().is_open)
        if src_cfg.backfill:
            sources.append(EquityHistoryBackfill(config, engine))
    if "polymarket" in engine.books:

        async def seed(history: dict[str, list[tuple[float, float]]]) -> None:
            t = now()
            for token, rows in history.items():
                if rows:
                    await bus.publish(HistoryEvent(
                        ts=t, recv_ts=t, market="polymarket", asset=token,
                        points=tuple((float(a), float(b)) for a, b in rows),
                        source="polymarket-history",
                    ))

        questions = [q.model_dump() for q in config.markets.polymarket.questions]
        sources.append(build_polymarket_source(
            src_cfg.polymarket, bus=bus, now=now, questions=questions or None,
            history_sink=seed if src_cfg.backfill else None,
        ))
    queries = equity_news_queries(equities)
    news = build_news_sources(src_cfg.news, queries, bus=bus, now=now, symbols=equities)
    if news:

        def add_question(ev: MarketListed) -> None:
            queries[ev.question_id] = question_query(ev.question)
            for poller in news:
                poller.set_queries(queries)

        bus.add_tap("market.#", add_question)  # type: ignore[arg-type]
        sources += news
    fund = src_cfg.fundamentals
    wanted = protocols if protocols is not None else (a.protocol for a in config.agents)
    if equities and fund.wanted(wanted):
        token = None
        if fund.provider == "finnhub":
            try:
                token = secret_from_env(fund.finnhub_key_env)
            except MissingCredentialError as exc:
                raise MissingCredentialError(f"sources.fundamentals (finnhub): {exc}") from None
        sources.append(FundamentalsSource(fund, equities, bus.publish, token=token, clock=now))
    return sources
