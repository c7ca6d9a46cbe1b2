"""An observation costs work linear in the market's questions and assets (issue 16, point 3).

No timing: asset names are a ``str`` subclass that counts equality comparisons, which is what a
membership test in a tuple or list does for every element it passes.
"""

from __future__ import annotations

from agents.base import Observation
from daemon.core.events import MarketListed, PriceEvent
from daemon.market.state import MarketState
from scoring.ledger.ledger import Book
from scoring.ledger.types import CostModel

T = 1_793_000_000.0


class Name(str):
    """A string that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def polymarket(questions: int) -> tuple[MarketState, Book]:
    """Return a market state with ``questions`` listed, priced questions and one agent."""
    book = Book("polymarket", cost=CostModel(), initial_cash=1000.0, lazy_mark=True)
    book.add_agent("a")
    st = MarketState({"polymarket": book})
    for k in range(questions):
        yes, no = Name(f"y{k}"), Name(f"n{k}")
        st.on_listed(MarketListed(ts=T - 100, recv_ts=T - 100, market="polymarket",
                                  question_id=f"q{k}", question=f"Q{k}?", yes_asset=yes,
                                  no_asset=no))
        for a, p in ((yes, 0.4), (no, 0.6)):
            st.on_price(PriceEvent(ts=T - 50, recv_ts=T - 50, market="polymarket", asset=a,
                                   price=p))
    book.rebalance("a", {"y0": 0.5, "CASH": 0.5})
    return st, book


def comparisons(questions: int) -> tuple[int, Observation]:
    """Return the equality comparisons of one observation, and the observation."""
    st, _ = polymarket(questions)
    Name.compared = 0
    obs = st.observation("a", "polymarket", T, recent=[], news_window=3600, news_per_key=5)
    return Name.compared, obs


def test_observation_work_grows_linearly_with_questions() -> None:
    small, obs = comparisons(50)
    assert len(obs.questions) == 50 and len(obs.prices) == 100
    assert obs.holdings and set(obs.weights) == {"y0", "CASH"}
    large, obs = comparisons(400)
    assert len(obs.questions) == 400
    # Linear work compares each name a bounded number of times; a tuple membership test per
    # question compares about questions x assets / 2 times (80,000 at 400 questions).
    assert large <= 8 * 400, (small, large)
