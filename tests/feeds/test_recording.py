"""Recording format: round trip, header checks, ts order, fast resume, crash tolerance, sample."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from collections import defaultdict
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import exchange_calendars as xcals
import pytest

from daemon.core.events import (
    DecisionEvent,
    MarketListed,
    NewsEvent,
    PriceEvent,
    ResolutionEvent,
    encode_event,
)
from daemon.core.universe import DEFAULT_EQUITIES
from feeds.recording import (
    RECORDING_VERSION,
    RecordingError,
    RecordingHeader,
    RecordingWriter,
    count_events,
    iter_events,
    read_header,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"
GENERATOR = ROOT / "examples" / "make_sample_recording.py"
NY = ZoneInfo("America/New_York")

HEADER = RecordingHeader(
    start=1_792_368_000.0,
    end=1_792_368_100.0,
    description="unit test",
    equities=("AAPL", "MSFT"),
    questions=({"id": "q1", "question": "Will it rain?", "yes": "y1", "no": "n1"},),
    meta={"seed": 1, "nested": {"a": [1, 2]}},
)


def every_type(t0: float = 1_792_368_000.0) -> list[Any]:
    """Return one or more events of every recorded type, in ts order."""
    return [
        MarketListed(
            ts=t0 + 1,
            recv_ts=t0 + 1.25,
            question_id="q1",
            question="Will it rain?",
            yes_asset="y1",
            no_asset="n1",
            end_ts=t0 + 86_400,
        ),
        PriceEvent(
            ts=t0 + 60,
            recv_ts=t0 + 60.2,
            market="equity",
            asset="AAPL",
            price=255.37,
            bid=255.36,
            ask=255.38,
            source="sample",
        ),
        PriceEvent(ts=t0 + 60, market="polymarket", asset="y1", price=0.347),
        NewsEvent(
            ts=t0 + 61,
            recv_ts=t0 + 62,
            id="n1",
            headline="Apple expands AI features",
            source="Reuters",
            url="https://www.reuters.com/x/",
            summary="s",
            keys=("AAPL",),
        ),
        NewsEvent(ts=t0 + 61, id="n2", headline="Rain likely", keys=("q1",)),
        ResolutionEvent(ts=t0 + 90, question_id="q1", payouts={"y1": 0.5, "n1": 0.5}),
    ]


def prices(n: int, t0: float = 1_792_368_000.0) -> list[PriceEvent]:
    """Return ``n`` equity price events one second apart."""
    return [
        PriceEvent(ts=t0 + i, market="equity", asset="AAPL", price=100.0 + i / 100, source="t")
        for i in range(n)
    ]


def write(path: Path, events: list[Any], header: RecordingHeader = HEADER) -> None:
    """Write a recording of ``events``."""
    with RecordingWriter(path, header) as w:
        for e in events:
            w.write(e)


def read(path: Path, start_offset: int = 0) -> list[tuple[int, Any]]:
    """Read every (offset, event) of a recording."""
    return list(iter_events(path, start_offset=start_offset))


def plain_lines(path: Path) -> list[bytes]:
    """Return the lines of a plain recording (with their newlines)."""
    return path.read_bytes().splitlines(keepends=True)


# --------------------------------------------------------------------------------------------
# Round trip and header


@pytest.mark.parametrize("name", ["rec.jsonl", "rec.jsonl.gz"])
def test_round_trip_every_event_type(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    events = every_type()
    write(path, events)
    assert read_header(path) == HEADER
    got = read(path)
    assert [o for o, _ in got] == list(range(len(events)))
    assert [e for _, e in got] == events
    assert count_events(path) == len(events)
    raw = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    lines = raw.splitlines()
    assert json.loads(lines[0])["paperarena_recording"] == RECORDING_VERSION
    assert lines[1:] == [encode_event(e) for e in events]


def test_gzip_output_is_deterministic(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl.gz", every_type())
    write(tmp_path / "b.jsonl.gz", every_type())
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_header_only_and_gzip_detected_by_magic(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl.gz"
    write(path, [])
    assert read(path) == [] and count_events(path) == 0
    renamed = tmp_path / "no_suffix"
    renamed.write_bytes(path.read_bytes())
    assert read_header(renamed) == HEADER


def test_header_dict_round_trip_and_validation() -> None:
    assert RecordingHeader.from_dict(HEADER.to_dict()) == HEADER
    with pytest.raises(RecordingError, match="before start"):
        RecordingHeader(start=10.0, end=5.0)
    with pytest.raises(RecordingError, match="question lacks"):
        RecordingHeader(start=0.0, end=1.0, questions=({"id": "q"},))  # type: ignore[arg-type]
    with pytest.raises(RecordingError, match="unsupported recording version 2"):
        RecordingHeader.from_dict({**HEADER.to_dict(), "paperarena_recording": 2})


@pytest.mark.parametrize(
    "content",
    [
        b'{"hello": "world", "start": 1}\n{"x": 1}\n',  # random JSON object
        b"[1, 2, 3]\n",  # JSON but not an object
        b"hello, this is not JSON\n",
        b"\x00\x01\x02\xff\xfe binary junk",
        b"",
    ],
)
@pytest.mark.parametrize("compress", [False, True])
def test_not_a_recording(tmp_path: Path, content: bytes, compress: bool) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(gzip.compress(content, mtime=0) if compress else content)
    for call in (read_header, read, count_events):
        with pytest.raises(RecordingError, match="not a paperarena recording") as info:
            call(path)
        assert "\n" not in str(info.value)


def test_corrupt_gzip_is_not_a_recording(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(b"\x1f\x8b" + bytes(range(200)))
    with pytest.raises(RecordingError, match="not a paperarena recording"):
        read_header(path)


# --------------------------------------------------------------------------------------------
# Writer rules


def test_writer_enforces_non_decreasing_ts(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with RecordingWriter(path, HEADER) as w:
        w.write(prices(1)[0])
        w.write(prices(1)[0])  # equal ts is fine
        late = PriceEvent(ts=HEADER.start - 1, market="equity", asset="MSFT", price=1.0)
        with pytest.raises(RecordingError, match="non-decreasing"):
            w.write(late)
        with pytest.raises(RecordingError, match="not finite"):
            w.write(PriceEvent(ts=float("nan"), market="equity", asset="MSFT", price=1.0))
        assert w.count == 2
    assert count_events(path) == 2


def test_writer_refuses_non_market_data(tmp_path: Path) -> None:
    decision = DecisionEvent(
        ts=HEADER.start, agent="a", market="equity", scheduled_ts=HEADER.start, outcome="ok"
    )
    with (
        RecordingWriter(tmp_path / "r.jsonl", HEADER) as w,
        pytest.raises(RecordingError, match="DecisionEvent"),
    ):
        w.write(decision)


def test_flush_makes_a_gzip_recording_readable_before_close(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl.gz"
    events = prices(50)
    w = RecordingWriter(path, HEADER)
    for e in events[:30]:
        w.write(e)
    w.flush()
    assert [e for _, e in read(path)] == events[:30]  # no gzip trailer yet: a crash here is fine
    for e in events[30:]:
        w.write(e)
    w.close()
    w.close()
    assert [e for _, e in read(path)] == events


# --------------------------------------------------------------------------------------------
# Reading: offsets, fast skip, crash tolerance


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[PriceEvent]]:
    """A plain recording larger than the reader's chunk (several blocks)."""
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    events = prices(12_000)
    write(path, events)
    assert path.stat().st_size > 1_200_000
    return path, events


@pytest.mark.parametrize("start", [0, 1, 7, 5_000, 8_123, 11_999, 12_000, 20_000])
def test_start_offset_skips_exactly(big: tuple[Path, list[PriceEvent]], start: int) -> None:
    path, events = big
    got = read(path, start)
    assert [o for o, _ in got] == list(range(start, len(events)))
    assert [e for _, e in got] == events[start:]


def test_start_offset_across_gzip_blocks(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl.gz"
    events = prices(12_000)
    write(path, events)
    assert [e for _, e in read(path, 9_001)] == events[9_001:]
    with pytest.raises(ValueError, match="start_offset"):
        read(path, -1)


def test_skipped_lines_are_not_decoded(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    events = prices(100)
    write(path, events)
    lines = plain_lines(path)
    lines[1 + 10] = b'{"type":"PriceEvent","ts":"garbage"}\n'  # event offset 10
    path.write_bytes(b"".join(lines))
    assert [e for _, e in read(path, 11)] == events[11:]
    with pytest.raises(RecordingError, match="line 12: invalid event"):
        read(path, 5)


@pytest.mark.parametrize("bad", [b"{not json\n", b'{"type":"Nope","ts":1}\n', b"\n"])
def test_corrupt_middle_line_names_its_line(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "r.jsonl"
    events = prices(40)
    write(path, events)
    lines = plain_lines(path)
    lines[1 + 20] = bad  # event offset 20 is file line 22
    path.write_bytes(b"".join(lines))
    got: list[Any] = []
    with pytest.raises(RecordingError) as info:
        for _, e in iter_events(path):
            got.append(e)
    msg = str(info.value)
    assert msg.startswith(f"{path} line 22: ") and "\n" not in msg
    assert got == events[:20]


def test_recorded_decision_event_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write(path, prices(3))
    decision = DecisionEvent(ts=0.0, agent="a", market="equity", scheduled_ts=0.0, outcome="x")
    path.write_bytes(path.read_bytes() + encode_event(decision) + b"\n")
    with pytest.raises(RecordingError, match="line 5: invalid event"):
        read(path)


def test_truncated_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    events = prices(30)
    write(path, events)
    data = path.read_bytes()
    for cut in (2, 5, 40, len(encode_event(events[-1]))):
        path.write_bytes(data[:-cut])  # the final newline and part of the last event are lost
        assert [e for _, e in read(path)] == events[:-1]
        assert count_events(path) == 29
        assert read(path, 29) == []
    path.write_bytes(data[:-1])  # only the newline lost: the last event is whole
    assert [e for _, e in read(path)] == events
    assert count_events(path) == 30


def test_gzip_cut_by_a_crash_reads_a_prefix(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    events = prices(3_000)
    write(path, events)
    data = path.read_bytes()
    header_end = len(data) // 20
    for cut in range(header_end, len(data), max(1, (len(data) - header_end) // 25)):
        path.write_bytes(data[:cut])
        got = [e for _, e in read(path)]
        assert got == events[: len(got)]
        assert count_events(path) == len(got)


def test_concatenated_gzip_members(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    events = prices(20)
    write(path, events[:10])
    extra = b"".join(encode_event(e) + b"\n" for e in events[10:])
    path.write_bytes(path.read_bytes() + gzip.compress(extra, mtime=0))
    assert [e for _, e in read(path)] == events
    path.write_bytes(path.read_bytes() + b"garbage!")
    with pytest.raises(RecordingError, match="trailing garbage"):
        read(path)


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_header(tmp_path / "nope.jsonl.gz")


# --------------------------------------------------------------------------------------------
# The sample generator and the shipped sample


def load_generator() -> ModuleType:
    """Import examples/make_sample_recording.py as a module."""
    spec = importlib.util.spec_from_file_location("make_sample_recording", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_generator_is_byte_for_byte_deterministic(tmp_path: Path) -> None:
    gen = load_generator()
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    counts = gen.generate(3, a, sessions=2, poly_step=900.0, compresslevel=1)
    gen.generate(3, b, sessions=2, poly_step=900.0, compresslevel=1)
    assert a.read_bytes() == b.read_bytes()
    assert counts["PriceEvent"] >= 15 * 390 * 2
    assert count_events(a) == sum(counts.values())
    gen.generate(4, b, sessions=2, poly_step=900.0, compresslevel=1)
    assert a.read_bytes() != b.read_bytes()


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    """Read the shipped sample once and index it."""
    header = read_header(SAMPLE)
    equity: dict[str, list[PriceEvent]] = defaultdict(list)
    poly: dict[str, list[PriceEvent]] = defaultdict(list)
    news: list[NewsEvent] = []
    listed: list[MarketListed] = []
    resolutions: list[ResolutionEvent] = []
    last_ts = -1.0
    ordered = True
    for _, e in iter_events(SAMPLE):
        ordered &= e.ts >= last_ts
        last_ts = e.ts
        if type(e) is PriceEvent:
            (equity if e.market == "equity" else poly)[e.asset].append(e)
        elif type(e) is NewsEvent:
            news.append(e)
        elif type(e) is MarketListed:
            listed.append(e)
        else:
            resolutions.append(e)
    return {
        "header": header,
        "equity": equity,
        "poly": poly,
        "news": news,
        "listed": listed,
        "resolutions": resolutions,
        "ordered": ordered,
        "last_ts": last_ts,
    }


def test_sample_file_and_header(sample: dict[str, Any]) -> None:
    header: RecordingHeader = sample["header"]
    assert SAMPLE.stat().st_size < 8_000_000
    assert sample["ordered"]
    assert header.end == sample["last_ts"]
    assert header.meta["seed"] == 7
    assert header.meta["generator"] == "examples/make_sample_recording.py"
    assert set(header.equities) == set(DEFAULT_EQUITIES)


def test_sample_equities_cover_20_sessions_at_one_minute(sample: dict[str, Any]) -> None:
    equity: dict[str, list[PriceEvent]] = sample["equity"]
    assert len(equity) >= 15 and set(equity) == set(sample["header"].equities)
    cal = xcals.get_calendar("XNYS")
    for ticker, events in equity.items():
        by_day: dict[str, list[float]] = defaultdict(list)
        for e in events:
            assert e.bid is not None and e.ask is not None
            assert 0 < e.bid <= e.price <= e.ask, ticker
            assert e.ts < e.recv_ts <= e.ts + 0.5
            by_day[datetime.fromtimestamp(e.ts, NY).date().isoformat()].append(e.ts)
        assert len(by_day) >= 20
        for day, ts in by_day.items():
            assert cal.is_session(day)
            open_ = cal.session_open(day).timestamp()
            close = cal.session_close(day).timestamp()
            assert ts[0] == open_ + 60 and ts[-1] == close, (ticker, day)
            assert all(b - a == 60 for a, b in pairwise(ts)), (ticker, day)


def test_sample_polymarket_questions(sample: dict[str, Any]) -> None:
    questions = sample["header"].questions
    poly: dict[str, list[PriceEvent]] = sample["poly"]
    assert len(questions) >= 6
    assert {m.question_id for m in sample["listed"]} == {q["id"] for q in questions}
    resolved = {r.question_id: r for r in sample["resolutions"]}
    for q in questions:
        yes, no = poly[q["yes"]], poly[q["no"]]
        assert yes and no and len(yes) == len(no)
        assert len(q["yes"]) >= 70 and q["yes"].isdigit()
        for y, n in zip(yes, no, strict=True):
            assert y.ts == n.ts and abs(y.price + n.price - 1.0) <= 0.0011
            assert 0.001 <= y.bid <= y.price <= y.ask <= 0.999  # type: ignore[operator]
        if q["id"] in resolved:
            r = resolved[q["id"]]
            assert set(r.payouts) == {q["yes"], q["no"]}
            assert sum(r.payouts.values()) == 1.0
            assert yes[-1].ts < r.ts  # no prices after the resolution
    payouts = [sorted(r.payouts.values()) for r in sample["resolutions"]]
    assert [0.0, 1.0] in payouts and [0.5, 0.5] in payouts


def test_sample_has_a_swing_and_resolve_market(sample: dict[str, Any]) -> None:
    swing = sample["header"].meta["stress"]["swing_question"]
    q = next(q for q in sample["header"].questions if q["id"] == swing)
    path = [e.price for e in sample["poly"][q["yes"]]]
    peak = max(range(len(path)), key=path.__getitem__)
    assert path[0] < 0.4 and path[peak] > 0.8 and min(path[peak:]) < 0.25
    r = next(r for r in sample["resolutions"] if r.question_id == swing)
    assert r.payouts[q["yes"]] == 0.0


def test_sample_has_a_stress_episode(sample: dict[str, Any]) -> None:
    equity: dict[str, list[PriceEvent]] = sample["equity"]
    closes: dict[str, dict[str, float]] = defaultdict(dict)
    for ticker, events in equity.items():
        for e in events:
            closes[datetime.fromtimestamp(e.ts, NY).date().isoformat()][ticker] = e.price
    days = sorted(closes)
    index = [sum(closes[d][t] / closes[days[0]][t] for t in equity) / len(equity) for d in days]
    worst = min(index[k + 3] / index[k] - 1.0 for k in range(len(index) - 3))
    assert -0.12 <= worst <= -0.08


def test_sample_news(sample: dict[str, Any]) -> None:
    news: list[NewsEvent] = sample["news"]
    known = set(sample["header"].equities) | {q["id"] for q in sample["header"].questions}
    assert len(news) >= 200
    assert len({n.id for n in news}) == len(news)
    assert all(n.keys and set(n.keys) <= known for n in news)
    assert all(n.source and not n.headline.endswith(f" - {n.source}") for n in news)
    assert {k for n in news for k in n.keys} == known  # every ticker and question has news
    hours = {datetime.fromtimestamp(n.ts, NY).hour for n in news}
    assert hours & {6, 7, 8} and hours & {17, 18, 19, 20}  # outside market hours too
