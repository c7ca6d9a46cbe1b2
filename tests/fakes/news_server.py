"""Local fake of the news endpoints: Google News RSS, Finnhub company-news, Alpaca news.

One aiohttp app on 127.0.0.1 (random port):

- ``GET /rss/search?q=..&hl=..&gl=..&ceid=..`` -> the RSS document configured for the query's
  key (the first word of ``q``), empty channel otherwise;
- ``GET /api/v1/company-news?symbol=..&from=..&to=..&token=..`` -> configured list (401 on a bad
  token);
- ``GET /v1beta1/news?symbols=..&start=..&end=..&limit=..&sort=..[&page_token=..]`` -> configured
  pages (401 without the key headers).

Knobs: answer the next N requests with a status (e.g. 429 with Retry-After), serve a huge body.
Every request is recorded (path, query, headers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from xml.sax.saxutils import escape

from aiohttp import web


@dataclass
class RssItem:
    """One Google News RSS item."""

    title: str
    publisher: str
    published: float
    guid: str
    link: str = "https://news.google.com/rss/articles/x"
    description: str | None = None


def rss_document(items: list[RssItem]) -> str:
    """Render a Google-News-like RSS document (RFC 822 ``pubDate`` in GMT)."""
    parts = []
    for it in items:
        pub = format_datetime(datetime.fromtimestamp(it.published, tz=UTC), usegmt=True)
        desc = (
            it.description
            if it.description is not None
            else (
                f'<a href="{it.link}">{it.title}</a>&nbsp;&nbsp;<font color="#6f6f6f">'
                f"{it.publisher}</font>"
            )
        )
        parts.append(
            "<item>"
            f"<title>{escape(it.title)} - {escape(it.publisher)}</title>"
            f"<link>{escape(it.link)}</link>"
            f'<guid isPermaLink="false">{escape(it.guid)}</guid>'
            f"<pubDate>{pub}</pubDate>"
            f"<description>{escape(desc)}</description>"
            f'<source url="https://{it.publisher.lower().replace(" ", "")}.com">'
            f"{escape(it.publisher)}</source>"
            "</item>"
        )
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<rss version="2.0" xmlns:media="http://search.yahoo.com/mrss/"><channel>'
        "<generator>NFE/5.0</generator><title>Google News</title>"
        f"<link>https://news.google.com</link>{''.join(parts)}</channel></rss>"
    )


class FakeNews:
    """The fake news endpoints and their knobs."""

    def __init__(self, token: str = "TOKEN", key: str = "KEY", secret: str = "SECRET") -> None:
        """Create the fake with no news."""
        self.token = token
        self.key = key
        self.secret = secret
        self.rss: dict[str, str | bytes] = {}
        self.finnhub: dict[str, list[dict[str, Any]]] = {}
        self.alpaca_pages: list[dict[str, Any]] = []
        self.fail: list[tuple[int, dict[str, str]]] = []
        self.requests: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        """Start the app on a random local port."""
        app = web.Application()
        app.router.add_get("/rss/search", self._rss)
        app.router.add_get("/api/v1/company-news", self._finnhub)
        app.router.add_get("/v1beta1/news", self._alpaca)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Stop the app."""
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base(self) -> str:
        """Return the base URL."""
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, n: int, status: int = 429, retry_after: str | None = None) -> None:
        """Answer the next ``n`` requests with ``status`` (and a Retry-After header)."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        self.fail.extend([(status, headers)] * n)

    def _record(self, request: web.Request) -> web.Response | None:
        self.requests.append((request.path, dict(request.query), dict(request.headers)))
        if self.fail:
            status, headers = self.fail.pop(0)
            return web.Response(status=status, text="slow down", headers=headers)
        return None

    async def _rss(self, request: web.Request) -> web.Response:
        failed = self._record(request)
        if failed is not None:
            return failed
        key = request.query.get("q", "").split(" ")[0]
        body = self.rss.get(key, rss_document([]))
        return web.Response(
            body=body if isinstance(body, bytes) else body.encode(), content_type="application/xml"
        )

    async def _finnhub(self, request: web.Request) -> web.Response:
        failed = self._record(request)
        if failed is not None:
            return failed
        if request.query.get("token") != self.token:
            return web.json_response({"error": "Invalid API key"}, status=401)
        return web.json_response(self.finnhub.get(request.query.get("symbol", ""), []))

    async def _alpaca(self, request: web.Request) -> web.Response:
        failed = self._record(request)
        if failed is not None:
            return failed
        if (
            request.headers.get("APCA-API-KEY-ID") != self.key
            or request.headers.get("APCA-API-SECRET-KEY") != self.secret
        ):
            return web.json_response({"message": "forbidden"}, status=401)
        token = request.query.get("page_token")
        index = int(token) if token else 0
        if index >= len(self.alpaca_pages):
            return web.json_response({"news": [], "next_page_token": None})
        return web.json_response(self.alpaca_pages[index])
