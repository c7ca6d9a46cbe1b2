"""The recording format: a header line then one market-data event per line (write and read).

A recording is JSON lines, gzip-compressed when the path ends in ``.gz`` (readers detect gzip by
its magic bytes, whatever the name). Line 1 is the header object::

    {"paperarena_recording": 1, "start": <epoch s>, "end": <epoch s>, "description": "...",
     "equities": ["AAPL", ...], "questions": [{"id", "question", "yes", "no"}, ...], "meta": {...}}

Every further line is exactly :func:`daemon.core.events.encode_event` of one market-data event
(:class:`PriceEvent`, :class:`NewsEvent`, :class:`MarketListed`, :class:`ResolutionEvent`), in
non-decreasing ``ts`` order. An event's *offset* is its 0-based index after the header, so event
``k`` sits on file line ``k + 2``.

Crash tolerance: the writer's :meth:`RecordingWriter.flush` makes everything written so far
readable (gzip sync flush), and readers ignore an unterminated last line that does not decode (a
recording cut by a crash) as well as a gzip stream that stops before its trailer, unless asked
to be strict (``iter_events(..., strict=True)``, what ``paperarena replay`` does): then such a
recording raises :class:`RecordingDamaged` after its last whole event, saying where it is cut and
how many events were read. Any other bad line raises :class:`RecordingError` naming the file and
line.

Speed: files are read in large binary chunks, whole blocks of lines are decoded by one
module-level msgspec decoder (``decode_lines``), and lines before ``start_offset`` are counted,
never decoded.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import msgspec

from daemon.core.events import (
    BarEvent,
    ClockEvent,
    Event,
    FundamentalsEvent,
    HistoryEvent,
    MarketData,
    MarketListed,
    NewsEvent,
    PriceEvent,
    ResolutionEvent,
    encode_event,
)

RECORDING_VERSION = 1
HEADER_KEY = "paperarena_recording"
QUESTION_KEYS: tuple[str, ...] = ("id", "question", "yes", "no")

#: Event types a recording may hold (the market-data union of :mod:`daemon.core.events`).
RECORDED_TYPES: tuple[type, ...] = (
    PriceEvent, NewsEvent, MarketListed, ResolutionEvent, HistoryEvent, ClockEvent,
    FundamentalsEvent, BarEvent,
)

StrPath = str | os.PathLike[str]

_CHUNK = 1 << 20
_WRITE_BUFFER = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 31  # zlib: gzip container

_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(MarketData)
_header_encoder = msgspec.json.Encoder()


class RecordingError(Exception):
    """A recording cannot be written or read (one-line message naming file and line)."""


class RecordingDamaged(RecordingError):
    """A recording ends before it is complete: gzip cut before its trailer or last line cut."""

    def __init__(self, message: str, events: int) -> None:
        super().__init__(message)
        self.events = events
        """How many whole events were read before the cut."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class RecordingHeader:
    """The first line of a recording: time window, universe and free-form metadata."""

    start: float
    end: float
    description: str = ""
    equities: tuple[str, ...] = ()
    questions: tuple[dict[str, str], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Validate the fields and normalise sequences to tuples."""
        if not _is_number(self.start) or not _is_number(self.end):
            raise RecordingError("invalid header: start and end must be finite epoch seconds")
        if self.end < self.start:
            raise RecordingError(f"invalid header: end {self.end} is before start {self.start}")
        if not isinstance(self.description, str):
            raise RecordingError("invalid header: description must be a string")
        if isinstance(self.equities, str) or not all(isinstance(s, str) for s in self.equities):
            raise RecordingError("invalid header: equities must be a list of tickers")
        questions: list[dict[str, str]] = []
        for q in self.questions:
            if not isinstance(q, dict):
                raise RecordingError("invalid header: each question must be an object")
            missing = [k for k in ("id", "yes", "no") if not isinstance(q.get(k), str)]
            if missing:
                raise RecordingError(f"invalid header: question lacks string {', '.join(missing)}")
            questions.append({k: str(q.get(k, "")) for k in QUESTION_KEYS})
        if not isinstance(self.meta, dict):
            raise RecordingError("invalid header: meta must be an object")
        object.__setattr__(self, "start", float(self.start))
        object.__setattr__(self, "end", float(self.end))
        object.__setattr__(self, "equities", tuple(self.equities))
        object.__setattr__(self, "questions", tuple(questions))

    def to_dict(self) -> dict[str, Any]:
        """Return the header as the JSON object written on line 1."""
        return {
            HEADER_KEY: RECORDING_VERSION,
            "start": self.start,
            "end": self.end,
            "description": self.description,
            "equities": list(self.equities),
            "questions": [dict(q) for q in self.questions],
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: Any) -> RecordingHeader:
        """Build a header from a decoded line 1; raise :class:`RecordingError` if it is not one."""
        if not isinstance(data, dict) or HEADER_KEY not in data:
            raise RecordingError("not a paperarena recording")
        version = data[HEADER_KEY]
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise RecordingError(f"invalid header: bad version {version!r}")
        if version > RECORDING_VERSION:
            raise RecordingError(
                f"unsupported recording version {version} (this build reads {RECORDING_VERSION})"
            )
        equities = data.get("equities", [])
        questions = data.get("questions", [])
        if not isinstance(equities, list) or not isinstance(questions, list):
            raise RecordingError("invalid header: equities and questions must be lists")
        return cls(
            start=data.get("start"),  # type: ignore[arg-type]  # validated in __post_init__
            end=data.get("end"),  # type: ignore[arg-type]
            description=data.get("description", ""),
            equities=tuple(equities),
            questions=tuple(questions),
            meta=data.get("meta", {}),
        )


class RecordingWriter:
    """Write a recording: header on open, then one event per :meth:`write`, in ts order."""

    def __init__(self, path: StrPath, header: RecordingHeader, *, compresslevel: int = 6) -> None:
        """Create (truncate) ``path`` and write the header; gzip it if the name ends in ``.gz``."""
        self.path = Path(path)
        self.header = header
        self._name = os.fspath(path)
        self._compressor = (
            zlib.compressobj(compresslevel, zlib.DEFLATED, _GZIP_WBITS)
            if self._name.endswith(".gz")
            else None
        )
        self._buffer = bytearray()
        self._last_ts = -math.inf
        self._count = 0
        self._closed = False
        self._file = open(path, "wb")  # noqa: SIM115  # closed by close()
        try:
            self._buffer += _header_encoder.encode(header.to_dict())
            self._buffer += b"\n"
            self.flush()
        except BaseException:
            self._closed = True
            self._file.close()
            raise

    @property
    def count(self) -> int:
        """Return the number of events written."""
        return self._count

    @property
    def last_ts(self) -> float:
        """Return the ts of the last event written (``-inf`` before the first)."""
        return self._last_ts

    def write(self, event: Event) -> None:
        """Append one market-data event; refuse other types and a ts before the previous one."""
        if self._closed:
            raise RecordingError(f"{self._name}: recording is closed")
        if not isinstance(event, RECORDED_TYPES):
            raise RecordingError(
                f"{self._name}: cannot record {type(event).__name__} (market-data events only)"
            )
        ts = event.ts
        if not math.isfinite(ts):
            raise RecordingError(f"{self._name}: event ts {ts} is not finite")
        if ts < self._last_ts:
            raise RecordingError(
                f"{self._name}: event ts {ts} is before the previous event's {self._last_ts} "
                "(events must be in non-decreasing ts order)"
            )
        self._buffer += encode_event(event)
        self._buffer += b"\n"
        self._last_ts = ts
        self._count += 1
        if len(self._buffer) >= _WRITE_BUFFER:
            self._drain()

    def _drain(self) -> None:
        if not self._buffer:
            return
        if self._compressor is None:
            self._file.write(self._buffer)
        else:
            self._file.write(self._compressor.compress(self._buffer))
        self._buffer.clear()

    def flush(self, *, sync: bool = False) -> None:
        """Make every event written so far readable from the file (``sync``: also fsync)."""
        if self._closed:
            return
        self._drain()
        if self._compressor is not None:
            self._file.write(self._compressor.flush(zlib.Z_SYNC_FLUSH))
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Flush, finish the gzip stream and close the file (idempotent)."""
        if self._closed:
            return
        try:
            self._drain()
            if self._compressor is not None:
                self._file.write(self._compressor.flush(zlib.Z_FINISH))
        finally:
            self._closed = True
            self._file.close()

    def __enter__(self) -> Self:
        """Return the writer itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the recording."""
        self.close()


class _Corrupt(Exception):
    """Undecompressible gzip data (internal)."""


@dataclass
class _ReadStatus:
    """What reading a file found besides its bytes."""

    cut_gzip: bool = False
    """The gzip stream stopped before its trailer."""


def _chunks(path: StrPath, status: _ReadStatus | None = None) -> Iterator[bytes]:
    """Yield the file's decompressed bytes in large chunks; stop quietly at a truncated gzip
    (noted in ``status``)."""
    with open(path, "rb") as f:
        data = f.read(_CHUNK)
        if not data.startswith(_GZIP_MAGIC):
            while data:
                yield data
                data = f.read(_CHUNK)
            return
        dec = zlib.decompressobj(_GZIP_WBITS)
        while data:
            try:
                out = dec.decompress(data)
                if out:
                    yield out
                while dec.eof and dec.unused_data:  # concatenated gzip members
                    rest = dec.unused_data
                    if not rest.startswith(_GZIP_MAGIC):
                        if rest.strip(b"\x00"):
                            raise _Corrupt("trailing garbage after gzip data")
                        return
                    dec = zlib.decompressobj(_GZIP_WBITS)
                    out = dec.decompress(rest)
                    if out:
                        yield out
            except zlib.error as exc:
                raise _Corrupt(f"corrupt gzip data: {exc}") from None
            data = f.read(_CHUNK)
        if status is not None and not dec.eof:
            status.cut_gzip = True
        out = dec.flush()
        if out:
            yield out


def _blocks(path: StrPath, status: _ReadStatus | None = None) -> Iterator[tuple[bytes, bool]]:
    """Yield ``(block, True)`` for runs of whole lines, then ``(tail, False)`` for the rest."""
    pending = b""
    for chunk in _chunks(path, status):
        buf = pending + chunk if pending else chunk
        cut = buf.rfind(b"\n") + 1
        if cut:
            yield buf[:cut], True
            pending = buf[cut:]
        else:
            pending = buf
    yield pending, False


def _parse_header(line: bytes, name: str) -> RecordingHeader:
    try:
        data = msgspec.json.decode(line)
    except msgspec.DecodeError:
        raise RecordingError(f"{name}: not a paperarena recording") from None
    try:
        return RecordingHeader.from_dict(data)
    except RecordingError as exc:
        raise RecordingError(f"{name}: {exc}") from None


def _split_header(data: bytes, complete: bool, name: str) -> tuple[RecordingHeader, bytes]:
    if not complete:
        if not data:
            raise RecordingError(f"{name}: empty file, not a paperarena recording")
        return _parse_header(data, name), b""
    cut = data.index(b"\n")
    return _parse_header(data[:cut], name), data[cut + 1 :]


def read_header(path: StrPath) -> RecordingHeader:
    """Read and validate line 1 of a recording."""
    name = os.fspath(path)
    try:
        for data, complete in _blocks(path):
            return _split_header(data, complete, name)[0]
    except _Corrupt:
        raise RecordingError(f"{name}: not a paperarena recording") from None
    raise RecordingError(f"{name}: empty file, not a paperarena recording")  # pragma: no cover


def _decode_block(data: bytes, offset: int, name: str) -> Iterator[tuple[int, Event]]:
    """Decode a block of whole lines; on any problem find and report the first bad line."""
    expected = data.count(b"\n")
    try:
        events = _decoder.decode_lines(data)
    except msgspec.DecodeError:
        events = None
    if events is not None and len(events) == expected:
        yield from enumerate(events, offset)
        return
    for i, line in enumerate(data.split(b"\n")[:expected]):
        if not line.strip():
            raise RecordingError(f"{name} line {offset + i + 2}: empty line")
        try:
            event = _decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise RecordingError(
                f"{name} line {offset + i + 2}: invalid event: {_one_line(exc)}"
            ) from None
        yield offset + i, event


def _skip_lines(data: bytes, n: int) -> bytes:
    pos = 0
    for _ in range(n):
        pos = data.index(b"\n", pos) + 1
    return data[pos:]


def _decode_tail(tail: bytes) -> Event | None:
    """Decode the unterminated last line; ``None`` if it was cut short (or is empty)."""
    if not tail.strip():
        return None
    try:
        return _decoder.decode(tail)
    except msgspec.DecodeError:
        return None


def iter_events(path: StrPath, *, start_offset: int = 0,
                strict: bool = False) -> Iterator[tuple[int, Event]]:
    """Yield ``(offset, event)`` from ``start_offset`` on, without decoding skipped lines.

    Raise :class:`RecordingError` on a bad header or a bad line (with its line number); an
    unterminated last line that does not decode is a crash-truncated write and is ignored, and a
    gzip stream cut before its trailer ends the events; with ``strict`` both raise
    :class:`RecordingDamaged` once every whole event before the cut was yielded.
    """
    if start_offset < 0:
        raise ValueError("start_offset must be >= 0")
    name = os.fspath(path)
    offset = 0
    header_seen = False
    status = _ReadStatus()
    try:
        for data, complete in _blocks(path, status):
            if not header_seen:
                _, data = _split_header(data, complete, name)
                header_seen = True
                if not data and complete:
                    continue
            if not complete:
                event = _decode_tail(data)
                if event is not None and offset >= start_offset:
                    yield offset, event
                if strict:
                    _check_complete(name, offset + (event is not None),
                                    cut_line=bool(data.strip()) and event is None,
                                    cut_gzip=status.cut_gzip)
                return
            n = data.count(b"\n")
            if offset + n <= start_offset:
                offset += n
                continue
            if offset < start_offset:
                data = _skip_lines(data, start_offset - offset)
                n -= start_offset - offset
                offset = start_offset
            yield from _decode_block(data, offset, name)
            offset += n
    except _Corrupt as exc:
        where = f"{name} line {offset + 2}" if header_seen else name
        raise RecordingError(f"{where}: {exc}") from None


def _check_complete(name: str, events: int, *, cut_line: bool, cut_gzip: bool) -> None:
    """Raise :class:`RecordingDamaged` if the recording was cut (``events`` whole ones read)."""
    if not (cut_line or cut_gzip):
        return
    how = []
    if cut_gzip:
        how.append("the gzip stream ends before its trailer")
    if cut_line:
        how.append(f"line {events + 2} is cut mid-event")
    raise RecordingDamaged(
        f"{name}: recording is damaged: {' and '.join(how)}; {events} events read "
        f"(up to line {events + 1})", events)


def count_events(path: StrPath) -> int:
    """Count the events of a recording (lines after the header; lines are not validated)."""
    name = os.fspath(path)
    total = 0
    header_seen = False
    try:
        for data, complete in _blocks(path):
            if not header_seen:
                _, data = _split_header(data, complete, name)
                header_seen = True
            if complete:
                total += data.count(b"\n")
            elif data and _decode_tail(data) is not None:
                total += 1
    except _Corrupt as exc:
        raise RecordingError(f"{name}: {exc}") from None
    return total
