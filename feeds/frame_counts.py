"""Count what a source's frames were refused for, and log it rate-limited (the read loop's
bookkeeping: the 1st to 10th time, then at every power of two)."""

from __future__ import annotations

import structlog

from feeds.source_contract import DecodeResult, SourceCounters

__all__ = ["count_failure", "count_refusals", "should_log"]

log = structlog.get_logger("feeds.connection")


def should_log(n: int) -> bool:
    """Return whether the ``n``-th occurrence of something is logged."""
    return n <= 10 or n & (n - 1) == 0


def count_failure(counters: SourceCounters, source: str, exc: BaseException) -> None:
    """Count a frame whose decoding raised (a decode error)."""
    counters.decode_errors += 1
    if should_log(counters.decode_errors):
        log.warning("feed decode failed", source=source, error=repr(exc),
                    count=counters.decode_errors)


def count_refusals(counters: SourceCounters, source: str, res: DecodeResult,
                   frame: str | bytes) -> None:
    """Count a frame's decode errors, unknown events and rejected content."""
    if res.decode_errors:
        counters.decode_errors += res.decode_errors
        if should_log(counters.decode_errors):
            log.warning("feed frame undecodable", source=source, count=counters.decode_errors,
                        sample=str(frame)[:120])
    if res.unknown:
        counters.unknown += res.unknown
    if res.rejected:
        counters.rejected += res.rejected
        if should_log(counters.rejected):
            log.warning("feed frame rejected", source=source, count=counters.rejected,
                        sample=str(frame)[:120])
