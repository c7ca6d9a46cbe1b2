"""Cost of one Polymarket observation at 25, 250 and 1,000 questions (issue 16, point 3).

    python bench/bench_observation.py [--json]

Each question has a YES and a NO token with a price, 30 daily closes and one news item; the agent
holds a few tokens. Beside each figure: the machine's limit for the same work, encoding the
resulting observation to its canonical JSON (what the round stores for every decision anyway),
and the cost the old tuple membership test alone would add (questions x assets comparisons).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.core.events import MarketListed, NewsEvent, PriceEvent  # noqa: E402
from daemon.market.state import MarketState  # noqa: E402
from scoring.ledger.ledger import Book  # noqa: E402
from scoring.ledger.types import CostModel  # noqa: E402

T = 1_793_000_000.0
DAY = 86_400.0
SIZES = (25, 250, 1000)


def market(questions: int, agents: int = 1) -> MarketState:
    """Return a Polymarket state with ``questions`` priced questions and ``agents`` agents."""
    book = Book("polymarket", cost=CostModel(), initial_cash=1000.0, lazy_mark=True)
    for k in range(agents):
        book.add_agent(f"a{k}")
    st = MarketState({"polymarket": book})
    for q in range(questions):
        yes, no = f"y{q}", f"n{q}"
        st.on_listed(MarketListed(ts=T - 40 * DAY, recv_ts=T - 40 * DAY, market="polymarket",
                                  question_id=f"q{q}", question=f"Will {q} happen?",
                                  yes_asset=yes, no_asset=no))
        for d in range(30, 0, -1):
            for a, p in ((yes, 0.4), (no, 0.6)):
                st.on_price(PriceEvent(ts=T - d * DAY, recv_ts=T - d * DAY, market="polymarket",
                                       asset=a, price=p))
        st.on_news(NewsEvent(ts=T - 600, recv_ts=T - 600, id=f"n{q}", headline=f"news {q}",
                             keys=(f"q{q}",)))
    for k in range(agents):
        book.rebalance(f"a{k}", {"y0": 0.2, f"n{questions - 1}": 0.2, "CASH": 0.6})
    return st


def best(fn: object, repeats: int) -> float:
    """Return the best of ``repeats`` timings of ``fn()`` in seconds."""
    out = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out = min(out, time.perf_counter() - t0)
    return out


def run(sizes: tuple[int, ...] = SIZES, repeats: int = 5) -> dict:
    """Measure one observation per size; return per-size figures in ms."""
    rows = {}
    for n in sizes:
        st = market(n)

        def build(st: MarketState = st) -> object:
            return st.observation("a0", "polymarket", T, recent=[], news_window=2 * DAY,
                                  news_per_key=5)

        obs = build()
        assets = obs.assets  # type: ignore[attr-defined]
        qs = list(st.questions.values())
        rows[str(n)] = {
            "assets": len(assets),
            "observation_ms": round(1e3 * best(build, repeats), 3),
            "limit_canonical_json_ms": round(
                1e3 * best(lambda o=obs: o.canonical_json(), repeats), 3),  # type: ignore[misc]
            "old_tuple_membership_ms": round(1e3 * best(
                lambda qs=qs, a=assets: [q for q in qs if q.yes in a and q.no in a], repeats), 3),
        }
    per_q = {k: v["observation_ms"] / int(k) for k, v in rows.items()}
    return {"questions": rows,
            "ms_per_question": {k: round(v, 5) for k, v in per_q.items()},
            "growth_1000_vs_25_per_question": round(per_q[str(sizes[-1])] / per_q[str(sizes[0])],
                                                    2)}


def main(argv: list[str] | None = None) -> int:
    """Print the observation benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run()
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        for n, row in r["questions"].items():
            print(f"{n:>5} questions: observation {row['observation_ms']} ms "
                  f"(canonical JSON {row['limit_canonical_json_ms']} ms, old tuple test "
                  f"{row['old_tuple_membership_ms']} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
