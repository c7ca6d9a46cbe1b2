"""Pure news parsing: items, Google RSS / Finnhub / Alpaca payload parsers, dedupe, queries.

Nothing here does I/O; :mod:`feeds.news` fetches and polls around these functions.
"""

from __future__ import annotations

import hashlib
import html
import re
import unicodedata
import xml.etree.ElementTree as ET
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from feeds.alpaca import parse_rfc3339

__all__ = [
    "DEFAULT_COMPANY_NAMES",
    "NewsDeduper",
    "NewsItem",
    "NewsParseError",
    "equity_news_queries",
    "normalise_title",
    "parse_alpaca_news",
    "parse_finnhub_news",
    "parse_google_rss",
    "question_query",
    "split_publisher",
]

#: Company names of the default equity universe (used to build news queries).
DEFAULT_COMPANY_NAMES: Mapping[str, str] = {
    "AAPL": "Apple",
    "MSFT": "Microsoft",
    "NVDA": "Nvidia",
    "META": "Meta Platforms",
    "JPM": "JPMorgan Chase",
    "V": "Visa",
    "XOM": "Exxon Mobil",
    "CAT": "Caterpillar",
    "TSLA": "Tesla",
    "PG": "Procter & Gamble",
    "KO": "Coca-Cola",
    "AMZN": "Amazon",
    "WMT": "Walmart",
    "JNJ": "Johnson & Johnson",
    "UNH": "UnitedHealth",
}


# --------------------------------------------------------------------------------- items


@dataclass(frozen=True)
class NewsItem:
    """One parsed item before de-duplication (``native_id`` is stable across polls)."""

    provider: str
    native_id: str
    headline: str
    published: float
    source: str = ""
    url: str = ""
    summary: str = ""
    keys: tuple[str, ...] = ()

    @property
    def event_id(self) -> str:
        """Return the stable event id (``<provider>:<native id>``)."""
        return f"{self.provider}:{self.native_id}"


_PUNCT = re.compile(r"[^\w]+", re.UNICODE)


def normalise_title(title: str) -> str:
    """Return a headline reduced for comparison (case, accents, punctuation, spacing)."""
    text = unicodedata.normalize("NFKD", title)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return _PUNCT.sub(" ", text.casefold()).strip()


def _stable_hash(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:20]


_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def _plain(text: str, limit: int) -> str:
    out = _SPACE.sub(" ", html.unescape(_TAG.sub(" ", text))).strip()
    return out[:limit]


def split_publisher(title: str, publisher: str) -> str:
    """Return a Google News title without its ``" - Publisher"`` suffix."""
    title = title.strip()
    if publisher and title.endswith(f" - {publisher}"):
        return title[: -len(publisher) - 3].rstrip()
    head, sep, _tail = title.rpartition(" - ")
    return head.rstrip() if sep and head else title


class NewsParseError(ValueError):
    """A news payload could not be parsed."""


def _rfc822(text: str | None) -> float | None:
    if not text:
        return None
    try:
        dt = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_google_rss(
    body: bytes, key: str, *, max_items: int = 200, max_summary: int = 1000
) -> tuple[list[NewsItem], int]:
    """Parse a Google News RSS document into items for ``key``; return (items, bad item count).

    Raise :class:`NewsParseError` if the document is not RSS or declares a DTD / entities.
    """
    head = body[:4096]
    if b"<!DOCTYPE" in head.upper() or b"<!ENTITY" in body.upper():
        raise NewsParseError("RSS with DTD or entity declarations refused")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise NewsParseError(f"invalid XML: {exc}") from exc
    channel = root.find("channel")
    if root.tag != "rss" or channel is None:
        raise NewsParseError(f"not an RSS document (root {root.tag!r})")
    items: list[NewsItem] = []
    bad = 0
    for el in channel.iterfind("item"):
        if len(items) >= max_items:
            break
        raw_title = (el.findtext("title") or "").strip()
        src_el = el.find("source")
        publisher = (src_el.text or "").strip() if src_el is not None else ""
        published = _rfc822(el.findtext("pubDate"))
        if not raw_title or published is None:
            bad += 1
            continue
        headline = split_publisher(raw_title, publisher)
        link = (el.findtext("link") or "").strip()
        guid = (el.findtext("guid") or "").strip() or _stable_hash(link or headline)
        summary = _plain(el.findtext("description") or "", max_summary)
        norm_sum = normalise_title(summary)
        if norm_sum.startswith(normalise_title(headline)):
            summary = ""  # Google's description only repeats the headline and publisher
        items.append(
            NewsItem(
                provider="google",
                native_id=guid,
                headline=headline,
                published=published,
                source=publisher,
                url=link,
                summary=summary,
                keys=(key,),
            )
        )
    return items, bad


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def parse_finnhub_news(
    payload: Any, symbol: str, *, max_items: int = 200, max_summary: int = 1000
) -> tuple[list[NewsItem], int]:
    """Parse a Finnhub ``company-news`` list for ``symbol``; return (items, bad item count)."""
    if not isinstance(payload, list):
        raise NewsParseError("company-news payload is not a list")
    items: list[NewsItem] = []
    bad = 0
    for raw in payload[:max_items]:
        if not isinstance(raw, dict):
            bad += 1
            continue
        headline = _text(raw.get("headline"))
        t = raw.get("datetime")
        if not headline or isinstance(t, bool) or not isinstance(t, int | float) or t <= 0:
            bad += 1
            continue
        native = raw.get("id")
        native_id = (
            str(native)
            if native not in (None, "", 0)
            else _stable_hash(_text(raw.get("url")) or headline)
        )
        items.append(
            NewsItem(
                provider="finnhub",
                native_id=native_id,
                headline=headline,
                published=float(t),
                source=_text(raw.get("source")),
                url=_text(raw.get("url")),
                summary=_plain(_text(raw.get("summary")), max_summary),
                keys=(symbol,),
            )
        )
    return items, bad


def parse_alpaca_news(
    payload: Any, wanted: Sequence[str], *, max_items: int = 200, max_summary: int = 1000
) -> tuple[list[NewsItem], int, str | None]:
    """Parse an Alpaca news page; keys are the item's symbols among ``wanted``.

    Return (items, bad item count, next_page_token).
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("news"), list):
        raise NewsParseError("alpaca news payload has no 'news' list")
    want = set(wanted)
    items: list[NewsItem] = []
    bad = 0
    for raw in payload["news"][:max_items]:
        if not isinstance(raw, dict):
            bad += 1
            continue
        headline = _text(raw.get("headline"))
        try:
            published = parse_rfc3339(_text(raw.get("created_at")))
        except (ValueError, IndexError):
            bad += 1
            continue
        listed = raw.get("symbols")
        symbols: list[Any] = listed if isinstance(listed, list) else []
        keys = tuple(s for s in symbols if s in want)
        if not headline or not keys:
            bad += 1
            continue
        native = raw.get("id")
        native_id = str(native) if native not in (None, "") else _stable_hash(headline)
        items.append(
            NewsItem(
                provider="alpaca",
                native_id=native_id,
                headline=headline,
                published=published,
                source=_text(raw.get("source")),
                url=_text(raw.get("url")),
                summary=_plain(_text(raw.get("summary")), max_summary),
                keys=keys,
            )
        )
    token = payload.get("next_page_token")
    return items, bad, token if isinstance(token, str) and token else None


# --------------------------------------------------------------------------------- dedupe


class NewsDeduper:
    """Bounded LRU memory of item identities (provider id and normalised headline)."""

    def __init__(self, capacity: int = 50_000) -> None:
        """Create an empty memory of at most ``capacity`` identities."""
        self.capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    @staticmethod
    def identities(item: NewsItem) -> tuple[str, ...]:
        """Return the identities of ``item``."""
        norm = normalise_title(item.headline)
        ids = [f"id:{item.event_id}"]
        if norm:
            ids.append(f"title:{norm}")
        return tuple(ids)

    def is_duplicate(self, item: NewsItem) -> bool:
        """Return whether any identity of ``item`` was already remembered."""
        return any(i in self._seen for i in self.identities(item))

    def remember(self, item: NewsItem) -> None:
        """Remember every identity of ``item`` (evicting the oldest beyond capacity)."""
        for i in self.identities(item):
            self._seen[i] = None
            self._seen.move_to_end(i)
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seen)


# --------------------------------------------------------------------------------- queries


def equity_news_queries(
    symbols: Sequence[str], names: Mapping[str, str] = DEFAULT_COMPANY_NAMES
) -> dict[str, str]:
    """Return a Google News query per ticker: ``TICKER OR "Company Name"`` if the name is known."""
    out = {}
    for s in symbols:
        name = names.get(s)
        out[s] = f'{s} OR "{name}"' if name else s
    return out


_QUESTION_LEAD = re.compile(r"^(will|is|are|does|do|did|has|have|can|should)\s+", re.IGNORECASE)


def question_query(question: str, *, max_words: int = 12) -> str:
    """Turn a Polymarket question into a search query (no leading auxiliary, no punctuation)."""
    text = _QUESTION_LEAD.sub("", question.strip())
    text = re.sub(r"[?!\"“”]", " ", text)
    words = text.split()
    return " ".join(words[:max_words])
