"""One reader of ``Retry-After`` for every HTTP client (webhooks, Yahoo, news, LLM providers):
seconds, an HTTP date or ``retry-after-ms``; anything else is no advice."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

from daemon.core.durations import retry_after_seconds

NOW = 1_793_000_000.0


def _date(ts: float) -> str:
    return format_datetime(datetime.fromtimestamp(ts, UTC), usegmt=True)


def test_seconds_dates_and_milliseconds() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds(_date(NOW + 30), now=NOW) == 30.0
    assert retry_after_seconds(_date(NOW - 30), now=NOW) == 0.0  # already past: go now
    assert retry_after_seconds("7", ms="1500") == 1.5  # retry-after-ms comes first
    assert retry_after_seconds(None, ms="250") == 0.25


def test_anything_else_is_no_advice() -> None:
    for value in (None, "", "soon", "-3", "nan", "inf", "Tue, 99 Foo 2026"):
        assert retry_after_seconds(value, now=NOW) is None, value
    assert retry_after_seconds("7", ms="x") is None  # a broken retry-after-ms is not guessed
    assert retry_after_seconds(None, ms="-1") is None
