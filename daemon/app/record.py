"""``paperarena record``: write the normalised market events a live run sees to a recording.

The recorder is a bus tap on market data (prices, news, listings, resolutions), so it writes
exactly what the engine's taps apply, in the same order. Each event is written at the time the
daemon received it (``ts = recv_ts``, kept non-decreasing): a recording is what the daemon saw,
when it saw it. A live round at T acted on the events received before T, and a replay round at
T sees exactly the recorded events with ts <= T, so a replay reproduces the live books. The
cost: the source's own timestamp is not kept in the file (a news item is stamped when it was
received, which is never before it was published).

At the end :meth:`Recorder.summary` says what was recorded, per event class and per source
(its state and data messages); a recording holding nothing but its closing clock event is a
failed recording (``paperarena record`` exits 1).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import structlog

from daemon.app.components import Component
from daemon.config.settings import Config
from daemon.core.events import ClockEvent, Event
from feeds.recording import RecordingHeader, RecordingWriter

log = structlog.get_logger(__name__)

MARKET_DATA = ("price.#", "news.#", "market.#", "resolution.#", "history.#", "fundamentals.#")


class Recorder:
    """A component that taps market data on the bus and appends it to a recording file."""

    name = "recorder"

    def __init__(self, out: str | Path, config: Config, *, description: str = "") -> None:
        self.out = Path(out)
        self.config = config
        self.description = description or "live recording"
        self.writer: RecordingWriter | None = None
        self._last = 0.0
        self.written = 0
        #: Market events written, by class (price, news, market, resolution, history).
        self.by_class: Counter[str] = Counter()
        self.sources: list[Any] = []
        self._started = time.monotonic()

    async def start(self, engine: Any, *, sources: list[Any]) -> None:
        """Open the recording and start tapping market data."""
        now = engine.clock.now()
        header = RecordingHeader(
            start=now, end=now, description=self.description,
            equities=tuple(self.config.markets.equity.assets),
            questions=tuple({"id": q.id, "question": q.question, "yes": q.yes, "no": q.no}
                            for q in self.config.markets.polymarket.questions),
            meta={"recorded_by": "paperarena record", "sources": [s.name for s in sources],
                  "started_wall": time.time()},
        )
        self._clock = engine.clock
        self.sources = list(sources)
        self._started = time.monotonic()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.writer = RecordingWriter(self.out, header)
        self._last = now - 86_400.0
        for pattern in MARKET_DATA:
            engine.bus.add_tap(pattern, self._write)

    def _write(self, ev: Event) -> None:
        if self.writer is None:
            return
        ts = ev.recv_ts or ev.ts
        if ts < self._last:
            ts = self._last
        if ts != ev.ts:
            ev = msgspec.structs.replace(ev, ts=ts)
        self._last = ts
        self.writer.write(ev)
        self.written += 1
        if not isinstance(ev, ClockEvent):
            self.by_class[ev.topic_class] += 1

    @property
    def market_events(self) -> int:
        """Return how many market events (everything but clock events) were recorded."""
        return sum(self.by_class.values())

    def summary(self) -> str:
        """Return one line: what was recorded, per class and per source, and where."""
        elapsed = time.monotonic() - self._started
        classes = ", ".join(f"{k} {n}" for k, n in sorted(self.by_class.items()))
        per_source = "; ".join(_source_summary(src) for src in self.sources) or "no sources"
        if not self.market_events:
            return (f"recorded nothing but its own clock in {elapsed:.0f}s to {self.out} "
                    f"(sources: {per_source}): check the network and [sources]")
        return (f"recorded {self.market_events} market events ({classes}) in {elapsed:.0f}s "
                f"to {self.out} (sources: {per_source})")

    def on_stopping(self, ts: float) -> None:
        """Seal the recording where the daemon stops scheduling: a final clock event at ``ts``.

        A replay then runs exactly the rounds due up to ``ts`` (as the live run did); events
        arriving while the daemon shuts down are not recorded (no round saw them).
        """
        if self.writer is not None:
            self._write(ClockEvent(ts=ts, recv_ts=ts, reason="recording stopped"))
            self.writer.close()
            log.info("recording closed", path=str(self.out), events=self.written)
            self.writer = None

    async def stop(self) -> None:
        """Seal the recording now if :meth:`on_stopping` did not, and close it."""
        if self.writer is not None:
            now = self._clock.now()
            self._write(ClockEvent(ts=now, recv_ts=now, reason="recording stopped"))
            self.writer.close()
            log.info("recording closed", path=str(self.out), events=self.written)
            self.writer = None


def _source_summary(src: Any) -> str:
    """Return ``name: state, N data messages`` for one source."""
    state = getattr(src, "state", "?")
    counters = getattr(src, "counters", None)
    data = getattr(counters, "data_messages", None)
    text = f"{getattr(src, 'name', '?')}: {getattr(state, 'value', state)}"
    return text if data is None else f"{text}, {data} data messages"


def recorder_components(out: str, config: Config) -> list[Component]:
    """Return the components of a recording run."""
    return [Recorder(out, config)]
