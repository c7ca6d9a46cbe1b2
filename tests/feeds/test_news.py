"""News pollers against a local fake: RSS parsing, dedupe, future items, 429 backoff, providers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from daemon.core.bus import Bus
from daemon.core.events import Event, NewsEvent, SourceStatus
from feeds.alpaca import MissingCredentialError
from feeds.news import NewsPoller, NewsSettings, build_news_sources
from feeds.news_parse import (
    NewsDeduper,
    NewsParseError,
    equity_news_queries,
    normalise_title,
    parse_google_rss,
    question_query,
)
from feeds.source_contract import Source, SourceState
from tests.fakes.news_server import FakeNews, RssItem, rss_document
from tests.helpers import collecting_bus, wait_for

HOUR = 3600.0


@pytest.fixture
async def fake() -> AsyncIterator[FakeNews]:
    server = FakeNews()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FH_NEWS", "TOKEN")
    monkeypatch.setenv("AP_KEY", "KEY")
    monkeypatch.setenv("AP_SECRET", "SECRET")


def settings_for(fake: FakeNews, **kw: Any) -> NewsSettings:
    base: dict[str, Any] = dict(
        google_url=f"{fake.base}/rss/search",
        finnhub_url=f"{fake.base}/api/v1",
        alpaca_url=f"{fake.base}/v1beta1/news",
        finnhub_key_env="FH_NEWS",
        alpaca_key_env="AP_KEY",
        alpaca_secret_env="AP_SECRET",
        poll_interval=0.2,
        request_spacing=0.0,
        backoff_initial=0.05,
        backoff_max=0.2,
        request_timeout=2.0,
    )
    base.update(kw)
    return NewsSettings(**base)




def news(seen: list[Event]) -> list[NewsEvent]:
    return [e for e in seen if isinstance(e, NewsEvent)]


@contextlib.asynccontextmanager
async def running(source: Any) -> AsyncIterator[Any]:
    task = asyncio.get_running_loop().create_task(source.run())
    try:
        yield source
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ------------------------------------------------------------------------------ parsing


def test_parse_google_rss() -> None:
    t = 1_788_000_000.0
    doc = rss_document(
        [
            RssItem("Apple beats - estimates - again", "Reuters", t, "g1"),
            RssItem(
                "Apple & friends <rally>",
                "The Wall Street Journal",
                t - HOUR,
                "g2",
                description="A real summary of the <b>story</b>.",
            ),
        ]
    )
    items, bad = parse_google_rss(doc.encode(), "AAPL")
    assert bad == 0
    a, b = items
    assert a.headline == "Apple beats - estimates - again"  # only the publisher suffix goes
    assert (a.source, a.published, a.native_id, a.keys) == ("Reuters", t, "g1", ("AAPL",))
    assert a.summary == ""  # Google's description only repeats headline + publisher
    assert a.event_id == "google:g1"
    assert b.headline == "Apple & friends <rally>" and b.source == "The Wall Street Journal"
    assert b.summary == "A real summary of the story ."


def test_parse_google_rss_pubdate_timezones_and_bad_items() -> None:
    doc = (
        '<rss version="2.0"><channel>'
        "<item><title>A - P</title><guid>1</guid><pubDate>Mon, 14 Sep 2026 13:00:00 -0400"
        "</pubDate></item>"
        "<item><title>B - P</title><guid>2</guid><pubDate>yesterday</pubDate></item>"
        "<item><title></title><guid>3</guid><pubDate>Mon, 14 Sep 2026 13:00:00 GMT</pubDate>"
        "</item></channel></rss>"
    )
    items, bad = parse_google_rss(doc.encode(), "K")
    assert bad == 2 and len(items) == 1
    assert items[0].published == 1789405200.0  # 17:00 UTC


@pytest.mark.parametrize(
    "body",
    [
        b"<not-xml",
        b"<feed></feed>",
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">]><rss><channel/></rss>',
    ],
)
def test_parse_google_rss_refuses(body: bytes) -> None:
    with pytest.raises(NewsParseError):
        parse_google_rss(body, "K")


def test_dedupe_identities_and_bound() -> None:
    assert normalise_title("Apple’s  Q3: Beats!") == normalise_title("apple s q3 beats")
    d = NewsDeduper(capacity=4)
    items, _ = parse_google_rss(
        rss_document(
            [
                RssItem("One", "P", 1.0, "a"),
                RssItem("Two", "P", 1.0, "b"),
                RssItem("Three", "P", 1.0, "c"),
            ]
        ).encode(),
        "K",
    )
    for it in items:
        assert not d.is_duplicate(it)
        d.remember(it)
    assert len(d) == 4  # two identities per item, oldest evicted
    assert d.is_duplicate(items[2]) and not d.is_duplicate(items[0])


def test_queries() -> None:
    q = equity_news_queries(["AAPL", "ZZZZ"])
    assert q == {"AAPL": 'AAPL OR "Apple"', "ZZZZ": "ZZZZ"}
    assert question_query("Will the Fed cut rates in September 2026?") == (
        "the Fed cut rates in September 2026"
    )


# ------------------------------------------------------------------------------ google poller


async def test_google_poll_dedupe_future_and_multi_key(fake: FakeNews) -> None:
    bus, seen = collecting_bus()
    now = time.time()
    shared = RssItem("Big tech rallies", "Reuters", now - 2 * HOUR, "shared")
    fake.rss["AAPL"] = rss_document(
        [
            RssItem("Apple unveils phone", "Reuters", now - HOUR, "a1"),
            RssItem("Apple unveils phone", "Reuters", now - HOUR, "a1"),  # same item twice
            RssItem("apple UNVEILS phone!", "Yahoo Finance", now - HOUR, "a2"),  # same headline
            RssItem("Apple from the future", "Reuters", now + 2 * HOUR, "future"),
            RssItem("Apple slightly ahead", "Reuters", now + 60, "skew"),  # within the skew
            RssItem("Apple ancient history", "Reuters", now - 10 * 86400, "old"),
            shared,
        ]
    )
    fake.rss["MSFT"] = rss_document(
        [shared, RssItem("Microsoft cloud", "CNBC", now - 3 * HOUR, "m1")]
    )
    queries = {"AAPL": 'AAPL OR "Apple"', "MSFT": 'MSFT OR "Microsoft"'}
    (poller,) = build_news_sources(settings_for(fake), queries, bus=bus, now=time.time)
    async with aiohttp.ClientSession() as session:
        n = await poller.poll_once(session)
        assert n == 4
        evs = news(seen)
        by_id = {e.id: e for e in evs}
        assert set(by_id) == {"google:a1", "google:skew", "google:shared", "google:m1"}
        assert by_id["google:shared"].keys == ("AAPL", "MSFT")
        a1 = by_id["google:a1"]
        assert a1.headline == "Apple unveils phone" and a1.source == "Reuters"
        assert a1.ts == pytest.approx(float(int(now - HOUR)))
        assert a1.recv_ts >= a1.ts and a1.url.startswith("https://news.google.com/")
        skew = by_id["google:skew"]
        assert skew.ts <= skew.recv_ts  # clamped, never stamped after its receipt
        assert [e.ts for e in evs] == sorted(e.ts for e in evs)
        assert poller.future_dropped == 1 and poller.counters.rejected == 1
        # the next poll brings nothing new
        assert await poller.poll_once(session) == 0
        assert len(news(seen)) == 4 and poller.duplicates >= 4
    q = [r[1] for r in fake.requests]
    assert q[0] == {"q": 'AAPL OR "Apple" when:1d', "hl": "en-US", "gl": "US", "ceid": "US:en"}
    assert all(r[2]["User-Agent"].startswith("Mozilla/") for r in fake.requests)


async def test_google_429_backs_off_then_recovers(fake: FakeNews) -> None:
    bus, seen = collecting_bus()
    now = time.time()
    fake.rss["AAPL"] = rss_document([RssItem("Apple news", "Reuters", now - HOUR, "a1")])
    fake.fail_next(2, 429)
    s = settings_for(fake, rate_limit_penalty=4.0, poll_interval=10.0)
    (poller,) = build_news_sources(s, {"AAPL": "AAPL"}, bus=bus, now=time.time)
    async with running(poller):
        await wait_for(lambda: len(news(seen)) == 1, 5.0)
    assert len(fake.requests) == 3  # the same request, retried after each 429
    assert poller.backoff.attempt == 0  # reset by the success
    assert poller.last_delay is not None and poller.last_delay <= 0.1 * 4.0
    sts = [e.state for e in seen if isinstance(e, SourceStatus)]
    assert sts == ["connecting", "backing_off", "live"]
    assert poller.state is SourceState.LIVE


async def test_retry_after_is_honoured(fake: FakeNews) -> None:
    bus, seen = collecting_bus()
    fake.rss["AAPL"] = rss_document([RssItem("Apple news", "Reuters", time.time(), "a1")])
    fake.fail_next(1, 429, retry_after="0.3")
    (poller,) = build_news_sources(settings_for(fake), {"AAPL": "AAPL"}, bus=bus, now=time.time)
    t0 = time.monotonic()
    async with running(poller):
        await wait_for(lambda: len(news(seen)) == 1, 5.0)
    assert time.monotonic() - t0 >= 0.3 and poller.last_delay == pytest.approx(0.3)


async def test_errors_move_on_and_huge_payload_refused(fake: FakeNews) -> None:
    bus, seen = collecting_bus()
    now = time.time()
    fake.rss["AAPL"] = b"<rss><channel>" + b"<item>" * 200_000 + b"</channel></rss>"
    fake.rss["MSFT"] = rss_document([RssItem("Microsoft news", "CNBC", now - HOUR, "m1")])
    fake.rss["NVDA"] = b"<garbage"
    s = settings_for(fake, max_bytes=100_000)
    (poller,) = build_news_sources(
        s, {"AAPL": "AAPL", "NVDA": "NVDA", "MSFT": "MSFT"}, bus=bus, now=time.time
    )
    async with aiohttp.ClientSession() as session:
        assert await poller.poll_once(session) == 1
    assert [e.id for e in news(seen)] == ["google:m1"]
    assert poller.counters.decode_errors == 1 and poller.counters.messages == 1


# ------------------------------------------------------------------------------ keyed providers


async def test_finnhub_and_alpaca_news_and_cross_source_dedupe(fake: FakeNews, creds: None) -> None:
    bus, seen = collecting_bus()
    now = time.time()
    fake.rss["AAPL"] = rss_document([RssItem("Apple sues rival", "Reuters", now - HOUR, "g1")])
    fake.finnhub["AAPL"] = [
        {
            "category": "company",
            "datetime": int(now - HOUR),
            "headline": "Apple sues rival",
            "id": 1,
            "related": "AAPL",
            "source": "Reuters",
            "summary": "dup",
            "url": "u1",
        },
        {
            "category": "company",
            "datetime": int(now - 2 * HOUR),
            "headline": "Apple buys AI firm",
            "id": 2,
            "related": "AAPL",
            "source": "Bloomberg",
            "summary": "S2",
            "url": "u2",
        },
        {
            "category": "company",
            "datetime": int(now + 86400),
            "headline": "From tomorrow",
            "id": 3,
            "related": "AAPL",
            "source": "X",
            "summary": "",
            "url": "u3",
        },
    ]
    fake.alpaca_pages = [
        {
            "news": [
                {
                    "id": 10,
                    "headline": "Microsoft and Apple partner",
                    "author": "a",
                    "created_at": "2026-01-01T00:00:00Z",
                    "updated_at": "x",
                    "summary": "S10",
                    "url": "u10",
                    "symbols": ["AAPL", "MSFT", "GOOG"],
                    "source": "benzinga",
                }
            ],
            "next_page_token": "1",
        },
        {
            "news": [
                {
                    "id": 11,
                    "headline": "Apple buys AI firm",
                    "created_at": "2026-01-01T00:00:00Z",
                    "symbols": ["AAPL"],
                    "source": "benzinga",
                }
            ],
            "next_page_token": None,
        },
    ]
    s = settings_for(fake, providers=("google", "finnhub", "alpaca"), max_age="3650d")
    queries = {"AAPL": 'AAPL OR "Apple"', "MSFT": "MSFT", "0xabc": "Fed cuts rates"}
    google, finnhub, alpaca = build_news_sources(s, queries, bus=bus, now=time.time)
    assert (google.name, finnhub.name, alpaca.name) == (
        "news-google",
        "news-finnhub",
        "news-alpaca",
    )
    async with aiohttp.ClientSession() as session:
        await google.poll_once(session)
        await finnhub.poll_once(session)
        await alpaca.poll_once(session)
    ids = [e.id for e in news(seen)]
    assert ids == ["google:g1", "finnhub:2", "alpaca:10"]
    f2 = news(seen)[1]
    assert (f2.ts, f2.keys, f2.summary, f2.source) == (
        float(int(now - 2 * HOUR)),
        ("AAPL",),
        "S2",
        "Bloomberg",
    )
    a10 = news(seen)[2]
    assert a10.keys == ("AAPL", "MSFT") and a10.ts == 1767225600.0
    assert finnhub.future_dropped == 1
    fin = [r for r in fake.requests if r[0] == "/api/v1/company-news"]
    assert [r[1]["symbol"] for r in fin] == ["AAPL", "MSFT"]  # tickers only, not "0xabc"
    assert fin[0][1]["token"] == "TOKEN" and len(fin[0][1]["from"]) == 10
    alp = [r for r in fake.requests if r[0] == "/v1beta1/news"]
    assert alp[0][1]["symbols"] == "AAPL,MSFT" and alp[0][1]["sort"] == "desc"
    assert alp[0][1]["limit"] == "50" and alp[1][1]["page_token"] == "1"
    assert alp[0][2]["APCA-API-KEY-ID"] == "KEY"


def test_missing_news_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINNHUB_API_KEY", raising=False)
    with pytest.raises(MissingCredentialError, match="FINNHUB_API_KEY"):
        build_news_sources(
            NewsSettings(providers=("finnhub",)), {"AAPL": "AAPL"}, bus=Bus(), now=time.time
        )
    (g,) = build_news_sources(NewsSettings(), {"AAPL": "AAPL"}, bus=Bus(), now=time.time)
    assert isinstance(g, NewsPoller) and g.settings.poll_interval == 300.0
    assert isinstance(g, Source) and g.state is SourceState.CONNECTING
