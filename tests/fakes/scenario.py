"""A scripted market scenario over the fake Polymarket, Yahoo and Google News servers.

Used by the end-to-end test of ``paperarena run`` (``tests/app/test_live_e2e.py``). The
scenario owns the three fakes (random 127.0.0.1 ports), a small universe (equities and binary
questions) and a seeded random walk of prices, and knows how to:

- stream one *burst* of price moves (Yahoo ``pricing`` frames and Polymarket ``price_change``
  deltas stamped with the wall clock), keeping the fakes' server-side state (Yahoo prices,
  Polymarket order books) in step, so that every snapshot a reconnecting client receives carries
  exactly the prices already streamed ("value-neutral" snapshots);
- wait for a phase of the decision period (rounds fire at multiples of ``period`` since the
  epoch), so bursts land in quiet gaps away from round boundaries;
- serve daily history for the start-up backfill (Yahoo chart, Polymarket prices-history);
- inject garbage, truncated and unknown frames, and resolve a question over the WebSocket and in
  Gamma.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.fakes.news_server import FakeNews, RssItem, rss_document
from tests.fakes.polymarket_server import Book, FakePolymarket, change, gamma_market, price_change
from tests.fakes.yahoo_server import FakeYahoo, chart_payload, pricing_frame
from tests.helpers import HANG_GUARD

__all__ = ["QuestionSpec", "Scenario", "WallClockPolymarket", "wait_until"]

#: Polymarket half spread: every token's book is one bid level and one ask level around the mid.
HALF_SPREAD = 0.01
LEVEL_SIZE = 100.0


class WallClockPolymarket(FakePolymarket):
    """The fake Polymarket with snapshots stamped by the wall clock, like the real server."""

    def next_ts(self) -> int:
        """Return the current wall-clock time in ms."""
        return int(time.time() * 1000)


@dataclass(frozen=True)
class QuestionSpec:
    """A binary question of the scenario: Gamma id, text, YES/NO tokens and YES mid range."""

    id: str
    text: str
    yes: str
    no: str
    yes_mid: float
    low: float
    high: float


DEFAULT_EQUITIES: dict[str, float] = {"AAPL": 190.0, "MSFT": 410.0, "NVDA": 120.0}
DEFAULT_QUESTIONS: tuple[QuestionSpec, ...] = (
    # YES stays favoured on the first question, NO on the second (the baselines' side choice
    # never flips on a tie).
    QuestionSpec("101", "Will the Fed cut rates in December?", "Y101", "N101", 0.66, 0.56, 0.80),
    QuestionSpec("102", "Will it snow in Paris on Christmas?", "Y102", "N102", 0.30, 0.16, 0.42),
    QuestionSpec("103", "Will BTC close the year above 150k?", "Y103", "N103", 0.25, 0.12, 0.40),
)


async def wait_until(
    pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.02
) -> None:
    """Poll ``pred()`` until true; fail with ``what`` after ``timeout`` seconds (at least
    :data:`~tests.helpers.HANG_GUARD`: a hang guard, not a speed requirement)."""
    timeout = max(timeout, HANG_GUARD)
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)


class Scenario:
    """The fakes, the universe and the scripted price walk."""

    def __init__(
        self,
        *,
        seed: int = 7,
        period: float = 2.0,
        equities: dict[str, float] | None = None,
        questions: tuple[QuestionSpec, ...] = DEFAULT_QUESTIONS,
    ) -> None:
        """Create the (stopped) fakes for the universe."""
        self.period = period
        self.rng = random.Random(seed)
        self.pm = WallClockPolymarket()
        self.yahoo = FakeYahoo()
        self.news = FakeNews()
        self.equities: dict[str, float] = dict(equities or DEFAULT_EQUITIES)
        self.questions = {q.id: q for q in questions}
        self.yes_mid: dict[str, float] = {q.id: q.yes_mid for q in questions}
        self.resolved: set[str] = set()
        self.bursts = 0

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the three fakes and load the universe into them."""
        await self.pm.start()
        await self.yahoo.start()
        await self.news.start()
        # The first data is sent by the test (send_initial), at a time of its choosing.
        self.pm.initial_dump = False
        self.yahoo.snapshot_on_subscribe = False
        for q in self.questions.values():
            self.pm.add_market(gamma_market(q.id, q.text, q.yes, q.no, volume_24h=5000.0))
        self._sync_books()
        self.yahoo.prices.update(self.equities)
        now = time.time()
        self.news.rss["AAPL"] = rss_document([
            RssItem("Apple unveils a thing", "Reuters", now - 3600, "g-aapl-1"),
            RssItem("Apple supplier beats estimates", "Bloomberg", now - 7200, "g-aapl-2"),
        ])
        self.news.rss["Fed"] = rss_document([
            RssItem("Fed officials signal patience", "WSJ", now - 1800, "g-fed-1"),
        ])

    def serve_daily_history(self, days: int = 10) -> None:
        """Serve ``days`` completed daily closes per equity (chart) and token (prices-history).

        The first equity trended up, the others down; the first question's YES went up, the
        others' down (what the momentum agent ranks on).
        """
        today = int(time.time() // 86_400) * 86_400
        stamps = [today - (days - i) * 86_400 + 72_000 for i in range(days)]
        for k, (sym, px) in enumerate(self.equities.items()):
            drift = 0.02 if k == 0 else -0.01
            bars = [(t, round(px * (1 + drift * (i - days)), 2)) for i, t in enumerate(stamps)]
            self.yahoo.charts[sym] = chart_payload(sym, px, int(time.time()) - 60, bars)
        for k, q in enumerate(self.questions.values()):
            drift = -0.01 if k == 0 else 0.01
            yes = [round(q.yes_mid + drift * (i - days), 2) for i in range(days)]
            self.pm.history[q.yes] = [{"t": t, "p": p} for t, p in zip(stamps, yes, strict=True)]
            self.pm.history[q.no] = [
                {"t": t, "p": round(1 - p, 2)} for t, p in zip(stamps, yes, strict=True)
            ]

    async def stop(self) -> None:
        """Stop the fakes."""
        await self.pm.stop()
        await self.yahoo.stop()
        await self.news.stop()

    def sources_config(self) -> dict[str, Any]:
        """Return the ``[sources]`` config table pointing every source at the fakes.

        Staleness and backoff are short so faults heal within a round or two. The start-up
        backfill is off unless the caller turns it on (see :meth:`serve_daily_history`). The
        Yahoo stream's staleness watchdog only runs while the NYSE is open: its ``stale_after``
        is longer than the test, so the behaviour is the same whatever the calendar says.
        """
        return {
            "backfill": False,
            "equity": {
                "provider": "yahoo",
                "yahoo": {
                    "ws_url": self.yahoo.ws_url,
                    "chart_url": self.yahoo.chart_url,
                    "stale_after": 60.0,
                    "watchdog_interval": 0.1,
                    "backoff_initial": 0.1,
                    "backoff_max": 0.3,
                    "open_timeout": 5.0,
                    "rest_timeout": 5.0,
                },
            },
            "polymarket": {
                "ws_url": self.pm.ws_url,
                "gamma_url": self.pm.http_url,
                "clob_url": self.pm.http_url,
                "ping_interval": 0.5,
                # Dead-socket detection (no frame at all) would fire before data staleness: the
                # PONGs to our PINGs must keep a frozen connection "alive", so that only the
                # data-staleness watchdog can catch the freeze.
                "dead_after": 2.0,
                "stale_after": 3.0,
                "watchdog_interval": 0.1,
                "backoff_initial": 0.1,
                "backoff_max": 0.3,
                "resolution_poll_interval": 0.5,
                "discovery_interval": 3600.0,
                "open_timeout": 5.0,
                "http_timeout": 5.0,
            },
            "news": {
                "google_url": f"{self.news.base}/rss/search",
                "poll_interval": 3600.0,
                "request_spacing": 0.0,
                "request_timeout": 5.0,
            },
        }

    # ------------------------------------------------------------------------------ time

    async def wait_phase(self, phase: float) -> float:
        """Sleep until the next instant at ``phase`` seconds into a period; return that instant."""
        now = time.time()
        base = now - now % self.period
        target = base + phase
        if target <= now + 0.005:
            target += self.period
        await asyncio.sleep(target - time.time())
        while time.time() < target:  # asyncio may wake a hair early
            await asyncio.sleep(0.001)
        return target

    # ------------------------------------------------------------------------------ prices

    def active_questions(self) -> list[QuestionSpec]:
        """Return the questions not resolved yet."""
        return [q for qid, q in self.questions.items() if qid not in self.resolved]

    def token_mids(self) -> dict[str, float]:
        """Return the current mid of every token of the unresolved questions."""
        out: dict[str, float] = {}
        for q in self.active_questions():
            y = self.yes_mid[q.id]
            out[q.yes] = y
            out[q.no] = round(1.0 - y, 2)
        return out

    def expected_marks(self) -> dict[str, float]:
        """Return the mark the daemon should hold for every live token (mid of bid and ask)."""
        out = {}
        for tok, mid in self.token_mids().items():
            bid, ask = self._quote(mid)
            out[tok] = (float(f"{bid:.2f}") + float(f"{ask:.2f}")) / 2.0
        return out

    @staticmethod
    def _quote(mid: float) -> tuple[float, float]:
        return round(mid - HALF_SPREAD, 2), round(mid + HALF_SPREAD, 2)

    def _sync_books(self) -> None:
        for tok, mid in self.token_mids().items():
            bid, ask = self._quote(mid)
            self.pm.books[tok] = Book(bids=[(bid, LEVEL_SIZE)], asks=[(ask, LEVEL_SIZE)])

    def step(self) -> None:
        """Move every price one step of the seeded random walk."""
        for sym, px in self.equities.items():
            pct = self.rng.choice((-0.012, -0.006, 0.004, 0.009, 0.015))
            self.equities[sym] = round(px * (1.0 + pct), 2)
        for q in self.active_questions():
            y = self.yes_mid[q.id]
            d = self.rng.choice((-0.02, -0.01, 0.01, 0.02))
            if not q.low <= y + d <= q.high:
                d = -d
            self.yes_mid[q.id] = round(y + d, 2)

    async def send_equities(self) -> None:
        """Stream the current equity prices (and make them the fake's snapshot prices)."""
        self.yahoo.prices.update(self.equities)
        t = int(time.time() * 1000)
        for sym, px in self.equities.items():
            await self.yahoo.push(sym, px, t)

    async def send_polymarket(self, old: dict[str, float]) -> None:
        """Stream ``price_change`` deltas from the ``old`` mids to the current ones."""
        entries = []
        for tok, mid in self.token_mids().items():
            if tok not in old:
                continue
            ob, oa = self._quote(old[tok])
            nb, na = self._quote(mid)
            hint = {"best_bid": f"{nb:.2f}", "best_ask": f"{na:.2f}"}
            entries += [
                change(tok, f"{ob:.2f}", "0", "BUY", **hint),
                change(tok, f"{nb:.2f}", f"{LEVEL_SIZE:g}", "BUY", **hint),
                change(tok, f"{oa:.2f}", "0", "SELL", **hint),
                change(tok, f"{na:.2f}", f"{LEVEL_SIZE:g}", "SELL", **hint),
            ]
        self._sync_books()
        if entries:
            await self.pm.send(price_change(entries, int(time.time() * 1000)))

    async def burst(self, *, equities: bool = True, polymarket: bool = True) -> None:
        """Move the prices one step and stream the moves (a silenced feed keeps its prices)."""
        old_eq = dict(self.equities)
        old_pm = self.token_mids()
        self.step()
        if not equities:
            self.equities = old_eq
        if not polymarket:
            for q in self.active_questions():
                self.yes_mid[q.id] = old_pm[q.yes]
        if equities:
            await self.send_equities()
        if polymarket:
            await self.send_polymarket(old_pm)
        self.bursts += 1

    async def send_initial(self) -> None:
        """Send the first snapshots (books and quotes) and serve snapshots on reconnect from now."""
        for c in self.pm.open_conns:
            await self.pm.send([self.pm.snapshot(a) for a in c.assets], c)
        await self.send_equities()
        self.pm.initial_dump = True
        self.yahoo.snapshot_on_subscribe = True

    # ------------------------------------------------------------------------------ faults

    async def send_garbage(self) -> None:
        """Send undecodable, truncated and unknown frames on both WebSockets."""
        tok = next(iter(self.token_mids()))
        book = json.dumps(self.pm.snapshot(tok))
        for raw in (
            "this is not json",
            book[: len(book) // 2],  # truncated
            json.dumps({"event_type": "gossip", "asset_id": tok}),  # unknown event type
        ):
            await self.pm.send(raw)
        sym = next(iter(self.equities))
        good = pricing_frame(sym, self.equities[sym], int(time.time() * 1000))
        msg = json.loads(good)["message"]
        for raw in (
            "<html>502 Bad Gateway</html>",
            good[: len(good) // 2],  # truncated JSON
            json.dumps({"type": "pricing", "message": msg[: len(msg) // 2] + "!!"}),  # bad b64
            json.dumps({"type": "heartbeat", "message": ""}),  # unknown frame type
        ):
            await self.yahoo.send(raw)

    async def resolve_ws(self, qid: str, yes_wins: bool = True) -> None:
        """Send ``market_resolved`` for ``qid`` on the WebSocket."""
        q = self.questions[qid]
        await self.pm.send({
            "event_type": "market_resolved",
            "id": q.id,
            "market": f"0xcond{q.id}",
            "assets_ids": [q.yes, q.no],
            "winning_asset_id": q.yes if yes_wins else q.no,
            "winning_outcome": "Yes" if yes_wins else "No",
            "timestamp": str(int(time.time() * 1000)),
        })
        self.resolved.add(qid)

    def resolve_gamma(self, qid: str, yes_wins: bool = True) -> None:
        """Close ``qid`` in Gamma with final prices (what the resolution poll reads)."""
        m = self.pm.markets[qid]
        m["closed"] = True
        m["acceptingOrders"] = False
        m["outcomePrices"] = json.dumps(["1", "0"] if yes_wins else ["0", "1"])
        m["closedTime"] = datetime.now(UTC).isoformat()
        self.resolved.add(qid)

    def gamma_resolution_polls(self) -> int:
        """Return how many Gamma resolution polls (``closed=true`` by id) the fake answered."""
        return sum(
            1
            for path, query in self.pm.http_requests
            if path == "/markets"
            and ("closed", "true") in query
            and any(k == "id" for k, _ in query)
        )
