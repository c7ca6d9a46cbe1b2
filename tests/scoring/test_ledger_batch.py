"""Rebalancing a round's agents in one vectorised call equals doing it one by one (issue 16,
point 5)."""

from __future__ import annotations

import numpy as np
import pytest

from scoring.ledger.batch import rebalance_many
from scoring.ledger.ledger import Book
from scoring.ledger.types import CASH, CostModel, Fill, RebalanceRejected


def book(cost: str = "realistic") -> Book:
    b = Book("polymarket", cost=CostModel.preset(cost))
    for q in range(4):
        b.add_asset(f"y{q}", question=f"q{q}")
        b.add_asset(f"n{q}", question=f"q{q}")
    b.add_asset("unpriced")
    for j, a in enumerate(b.assets[:-1]):
        b.set_price(a, 0.1 + 0.1 * j, 1.0)
    for i in range(6):
        b.add_agent(f"a{i}")
        b.rebalance(f"a{i}", {"y0": 0.3, "n1": 0.3, CASH: 0.4})
    return b


TARGETS = [
    ("a0", {"y0": 0.5, "y1": 0.25, CASH: 0.25}),
    ("a1", {"n0": 0.2, "y2": 0.2, "n3": 0.2, CASH: 0.4}),
    ("a2", {"y0": 0.5, "n0": 0.5}),  # both sides of q0
    ("a3", {"zz": 0.5, CASH: 0.5}),  # unknown asset
    ("a4", {"unpriced": 0.5, CASH: 0.5}),  # no price
    ("a5", {"y3": 0.3 + 2e-10, CASH: 0.7}),  # sums to 1 within the tolerance: normalised
]


@pytest.mark.parametrize("cost", ["realistic", "none"])
def test_batch_equals_one_by_one(cost: str) -> None:
    one, many = book(cost), book(cost)
    want: list[Fill | RebalanceRejected] = []
    for agent, t in TARGETS:
        try:
            want.append(one.rebalance(agent, t))
        except RebalanceRejected as exc:
            want.append(exc)
    got = list(rebalance_many(many, TARGETS))
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        if isinstance(w, RebalanceRejected):
            assert isinstance(g, RebalanceRejected) and str(g) == str(w)
            continue
        assert isinstance(g, Fill) and g.agent == w.agent
        for f in ("traded_value", "cost", "value_before", "value_after", "cash_before",
                  "cash_after"):
            assert getattr(g, f) == pytest.approx(getattr(w, f), rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(g.trades, w.trades, rtol=1e-12, atol=1e-12)
        assert g.weights_after.keys() == w.weights_after.keys()
        np.testing.assert_allclose(list(g.weights_after.values()),
                                   list(w.weights_after.values()), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(many.holdings, one.holdings, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(many.cash, one.cash, rtol=1e-12)
    np.testing.assert_allclose(many.values(), one.values(), rtol=1e-12)


def test_an_agent_twice_or_unknown_is_refused() -> None:
    b = book()
    with pytest.raises(ValueError, match="more than once"):
        rebalance_many(b, [("a0", {CASH: 1.0}), ("a0", {CASH: 1.0})])
    with pytest.raises(KeyError):
        rebalance_many(b, [("ghost", {CASH: 1.0})])
    assert len(rebalance_many(b, [])) == 0
    got = rebalance_many(b, [("a0", {CASH: "x"})])  # type: ignore[dict-item]
    assert isinstance(got[0], RebalanceRejected) and "not a number" in str(got[0])
