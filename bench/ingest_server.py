"""The Polymarket side of the ingest benchmark, in its own process (``bench/bench_ingest.py``).

    python bench/ingest_server.py --tokens 500 --seed 7

The local fake of Polymarket (``tests/fakes/polymarket_server.py``: Gamma markets, the market
channel's subscribe and book snapshots, PING/PONG) with one market per pair of tokens. Commands
on stdin, one JSON line of answer on stdout each:

- (at start) ``{"ws": url, "http": url, "ids": [market ids], "pairs": [[yes, no]]}``;
- ``prepare <page events url>``: pre-encode the frames of every subscribed connection (its own
  tokens, a share of ``--frames`` as large as its share of the tokens; cached, so every run gets
  the same), write them to a file for the decode limits, open the live page's event stream as a
  browser does and read it until told otherwise; answer ``{"frames_file", "frames"}``;
- ``go``: send every connection its frames, as fast as the sockets take them (whole WebSocket
  frames, encoded before, written to the socket 64 at a time: the sender costs next to nothing);
  answer ``{"sent", "seconds"}`` once every frame is written;
- ``quit``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_polymarket_decode import price_change_frames  # noqa: E402

from tests.fakes.polymarket_server import Book, FakeConn, FakePolymarket, gamma_market  # noqa: E402

#: Bytes queued on a connection before the sender waits for the client to read.
WRITE_BUFFER = 4 << 20
#: Frames written to the socket per call.
CHUNK = 64


def _header(n: int) -> bytes:
    """Return the header of an unmasked, final text frame of ``n`` payload bytes (RFC 6455)."""
    if n < 126:
        return bytes((0x81, n))
    if n < 1 << 16:
        return bytes((0x81, 126)) + n.to_bytes(2, "big")
    return bytes((0x81, 127)) + n.to_bytes(8, "big")


def _wire(frames: list[str]) -> list[bytes]:
    """Return ``frames`` as WebSocket text frames on the wire, ``CHUNK`` to a write."""
    out = []
    for i in range(0, len(frames), CHUNK):
        parts: list[bytes] = []
        for f in frames[i:i + CHUNK]:
            data = f.encode()
            parts += (_header(len(data)), data)
        out.append(b"".join(parts))
    return out


class _Server(FakePolymarket):
    """The fake with fixed snapshot timestamps, so every run decodes the same books."""

    def __init__(self, ts_ms: int) -> None:
        super().__init__()
        self.base_ms = ts_ms
        self.compression = None  # frames go out as pre-encoded, not deflated per send

    def next_ts(self) -> int:
        """Return the one snapshot timestamp (every run sees the same books)."""
        return self.base_ms


def _books(tokens: list[str], rng: random.Random) -> tuple[dict[str, Book], dict[str, float]]:
    books: dict[str, Book] = {}
    mids: dict[str, float] = {}
    for t in tokens:
        mid = rng.randint(10, 90) / 100
        mids[t] = mid
        books[t] = Book(
            bids=[(round(mid - i / 100, 2), round(rng.uniform(10, 5000), 2))
                  for i in range(30, 0, -1) if mid - i / 100 > 0],
            asks=[(round(mid + i / 100, 2), round(rng.uniform(10, 5000), 2))
                  for i in range(30, 0, -1) if mid + i / 100 < 1],
            last=mid)
    return books, mids


async def _page_reader(url: str, opened: asyncio.Event) -> None:
    """Read the page's event stream as a browser does, until cancelled."""
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        opened.set()
        async for _ in resp.content.iter_any():
            pass


async def main(argv: list[str] | None = None) -> int:
    """Serve until ``quit``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=500)
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    tokens = [str(rng.randrange(10**76, 10**77)) for _ in range(a.tokens)]
    books, mids = _books(tokens, rng)
    base = int(time.time() * 1000)
    fake = _Server(base)
    await fake.start()
    ids = []
    for q in range(0, len(tokens) - 1, 2):
        mid = str(1000 + q)
        ids.append(mid)
        fake.add_market(gamma_market(mid, f"Question {q}?", tokens[q], tokens[q + 1],
                                     volume_24h=1e6 - q),
                        {tokens[q]: books[tokens[q]], tokens[q + 1]: books[tokens[q + 1]]})
    out = tempfile.mkdtemp(prefix="ingest-frames-")
    cache: dict[tuple[str, ...], tuple[list[str], list[bytes]]] = {}
    plan: list[tuple[FakeConn, list[str], list[bytes]]] = []
    page: asyncio.Task[None] | None = None
    say = sys.stdout

    def answer(obj: object) -> None:
        say.write(json.dumps(obj) + "\n")
        say.flush()

    answer({"ws": fake.ws_url, "http": fake.http_url, "ids": ids,
            "pairs": [tokens[q:q + 2] for q in range(0, len(tokens) - 1, 2)]})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    n_prep = 0
    while True:
        line = (await reader.readline()).decode().strip()
        if not line or line == "quit":
            break
        cmd, _, arg = line.partition(" ")
        if cmd == "prepare":
            plan = []
            for conn in [c for c in fake.open_conns if c.subscribed.is_set()]:
                key = tuple(sorted(conn.assets))
                if key not in cache:
                    n = max(1, round(a.frames * len(key) / len(tokens)))
                    text = [f.decode() for f in price_change_frames(
                        list(key), mids, n_frames=n, ts0=base + 1000,
                        rng=random.Random(f"{a.seed}-{key[0]}"))]  # text, as the live server
                    cache[key] = (text, _wire(text))
                plan.append((conn, *cache[key]))
            n_prep += 1
            path = Path(out) / f"frames-{n_prep}.msgpack"
            snapshots = [json.dumps(fake.snapshot(t)) for c, _, _ in plan for t in c.assets]
            path.write_bytes(msgspec.msgpack.encode(
                {"snapshots": snapshots, "frames": [f for _, fr, _ in plan for f in fr]}))
            if page is not None:
                page.cancel()
                with contextlib.suppress(BaseException):
                    await page
            page = None
            if arg:
                opened = asyncio.Event()
                page = asyncio.create_task(_page_reader(arg, opened))
                await asyncio.wait_for(opened.wait(), 10)
            answer({"frames_file": str(path), "frames": sum(len(fr) for _, fr, _ in plan),
                    "connections": len(plan)})
        elif cmd == "go":
            t0 = time.perf_counter()

            async def blast(conn: FakeConn, frames: list[str], wire: list[bytes]) -> int:
                transport = conn.ws.transport
                for chunk in wire:
                    while transport.get_write_buffer_size() > WRITE_BUFFER:
                        await asyncio.sleep(0.0005)  # the client's socket is full: wait
                    transport.write(chunk)
                return len(frames)

            sent = await asyncio.gather(*(blast(c, fr, w) for c, fr, w in plan))
            answer({"sent": sum(sent), "seconds": time.perf_counter() - t0})
        else:
            answer({"error": f"unknown command {cmd!r}"})
    if page is not None:
        page.cancel()
        with contextlib.suppress(BaseException):
            await page
    await fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
