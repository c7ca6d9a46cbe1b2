"""Tests for scoring.ledger.ledger: LiveTradeBench Eq. 2 rebalancing, costs, resolution,
persistence.

Why one module over 500 lines: the accounting core's tests share hand-derived books and cost cases.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.ledger.ledger import Book
from scoring.ledger.types import CASH, CostModel, Fill, RebalanceRejected

REALISTIC = CostModel.preset("realistic")
NO_COST = CostModel()
PROP = settings(max_examples=150, deadline=None)

prices_st = st.floats(min_value=0.01, max_value=1e4, allow_nan=False, allow_infinity=False)
weight_st = st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1.0))
cost_st = st.sampled_from([CostModel(), REALISTIC, CostModel(fee_bps=10.0), CostModel(50.0, 50.0)])


def normalise(raw: list[float]) -> list[float]:
    """Return ``raw`` scaled to sum 1 (all-cash if every weight is zero)."""
    total = math.fsum(raw)
    if total == 0.0:
        return [0.0] * (len(raw) - 1) + [1.0]
    return [w / total for w in raw]


def target_of(names: list[str], raw: list[float]) -> dict[str, float]:
    """Return a target mapping over ``names`` + CASH from unnormalised ``raw`` weights."""
    return dict(zip([*names, CASH], normalise(raw), strict=True))


@st.composite
def scenario(draw: st.DrawFn, max_assets: int = 6) -> tuple[list[str], list[float], list[float]]:
    """Draw asset names, their prices and raw weights (one per asset plus CASH)."""
    n = draw(st.integers(min_value=1, max_value=max_assets))
    names = [f"A{i}" for i in range(n)]
    prices = draw(st.lists(prices_st, min_size=n, max_size=n))
    raw = draw(st.lists(weight_st, min_size=n + 1, max_size=n + 1))
    return names, prices, raw


def make_book(names: list[str], prices: list[float], cost: CostModel = NO_COST) -> Book:
    """Return a book with one agent ``a`` (1000 cash) and priced assets."""
    book = Book("test", cost=cost)
    book.add_agent("a")
    for name, p in zip(names, prices, strict=True):
        book.add_asset(name)
        book.set_price(name, p, 0.0)
    return book


def full_value(book: Book, agent: str) -> float:
    """Return the agent's value recomputed from holdings, cash and prices."""
    i = book.agent_index(agent)
    p = np.nan_to_num(book.prices, nan=0.0)
    return float(book.cash[i] + book.holdings[i] @ p)


# --------------------------------------------------------------------------- properties


@PROP
@given(
    first=scenario(),
    moves=st.lists(st.floats(min_value=0.5, max_value=2.0), min_size=6, max_size=6),
    raw2=st.lists(weight_st, min_size=7, max_size=7),
)
def test_cost_free_rebalance_conserves_value_and_hits_target(
    first: tuple[list[str], list[float], list[float]], moves: list[float], raw2: list[float]
) -> None:
    names, prices, raw = first
    book = make_book(names, prices)
    fill = book.rebalance("a", target_of(names, raw))
    assert fill.cost == 0.0
    assert fill.value_after == pytest.approx(1000.0, rel=1e-9)
    for name, p, m in zip(names, prices, moves, strict=False):
        book.set_price(name, p * m, 1.0)
    v = full_value(book, "a")
    target = target_of(names, raw2[: len(names) + 1])
    fill = book.rebalance("a", target)
    assert fill.value_before == pytest.approx(v, rel=1e-12)
    assert full_value(book, "a") == pytest.approx(v, rel=1e-9)
    assert book.value("a") == pytest.approx(v, rel=1e-9)
    assert math.fsum(fill.weights_after.values()) == pytest.approx(1.0, abs=1e-12)
    for name, w in target.items():
        assert fill.weights_after[name] == pytest.approx(w, abs=1e-9)
        assert book.weights("a")[name] == pytest.approx(w, abs=1e-9)


@PROP
@given(
    first=scenario(),
    cost=cost_st,
    moves=st.lists(st.floats(min_value=0.5, max_value=2.0), min_size=6, max_size=6),
    raw2=st.lists(weight_st, min_size=7, max_size=7),
)
def test_cost_equals_rate_times_traded_value(
    first: tuple[list[str], list[float], list[float]],
    cost: CostModel,
    moves: list[float],
    raw2: list[float],
) -> None:
    names, prices, raw = first
    book = make_book(names, prices, cost)
    book.rebalance("a", target_of(names, raw))
    for name, p, m in zip(names, prices, moves, strict=False):
        book.set_price(name, p * m, 1.0)
    i = book.agent_index("a")
    q_old = book.holdings[i].copy()
    p = book.prices.copy()
    target = target_of(names, raw2[: len(names) + 1])
    fill = book.rebalance("a", target)
    k = cost.rate
    traded = float(np.abs(fill.trades) @ p)
    assert fill.traded_value == pytest.approx(traded, rel=1e-12, abs=1e-12)
    assert fill.cost == pytest.approx(k * fill.traded_value, rel=1e-12, abs=1e-15)
    assert np.allclose(fill.trades, book.holdings[i] - q_old, rtol=0, atol=1e-12 * 1e4)
    after = fill.cash_after + float(book.holdings[i] @ p)
    assert after == pytest.approx(fill.value_before - fill.cost, rel=1e-12)
    assert fill.value_after == pytest.approx(after, rel=1e-12)
    # V' solves Eq. 2 with costs: V' = v - k * sum |V' a_i - h_i|.
    a = np.array([target[n] for n in names])
    h = q_old * p
    rhs = fill.value_before - k * float(np.abs(after * a - h).sum())
    assert after == pytest.approx(rhs, rel=1e-12)
    assert fill.cash_after == pytest.approx(after * target[CASH], rel=1e-12, abs=1e-12)


@PROP
@given(
    names_prices=scenario(),
    cost=cost_st,
    steps=st.lists(
        st.tuples(
            st.lists(weight_st, min_size=7, max_size=7),
            st.lists(st.floats(min_value=0.2, max_value=5.0), min_size=6, max_size=6),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_holdings_never_negative(
    names_prices: tuple[list[str], list[float], list[float]],
    cost: CostModel,
    steps: list[tuple[list[float], list[float]]],
) -> None:
    names, prices, _ = names_prices
    book = make_book(names, prices, cost)
    cur = list(prices)
    for raw, moves in steps:
        fill = book.rebalance("a", target_of(names, raw[: len(names) + 1]))
        assert np.all(book.holdings >= 0.0)
        assert np.all(book.cash >= 0.0)
        assert math.fsum(fill.weights_after.values()) == pytest.approx(1.0, abs=1e-12)
        for j, name in enumerate(names):
            cur[j] *= moves[j]
            book.set_price(name, cur[j], 2.0)
    assert book.value("a") == pytest.approx(full_value(book, "a"), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    n_agents=st.integers(min_value=1, max_value=40),
    n_assets=st.integers(min_value=1, max_value=12),
    n_ticks=st.integers(min_value=50, max_value=2000),
)
def test_incremental_mark_matches_full_mark(
    seed: int, n_agents: int, n_assets: int, n_ticks: int
) -> None:
    rng = np.random.default_rng(seed)
    book = Book("m", cost=REALISTIC)
    names = [f"X{j}" for j in range(n_assets)]
    for j, name in enumerate(names):
        book.add_asset(name)
        book.set_price(j, float(rng.uniform(1, 100)), 0.0)
    for i in range(n_agents):
        book.add_agent(f"g{i}", cash=float(rng.uniform(10, 5000)))
        w = rng.dirichlet(np.ones(n_assets + 1)).tolist()
        book.rebalance(f"g{i}", dict(zip([*names, CASH], w, strict=True)))
    js = rng.integers(0, n_assets, n_ticks)
    factors = rng.lognormal(0.0, 0.05, n_ticks)
    cur = np.array(book.prices)
    for t, (j, f) in enumerate(zip(js.tolist(), factors.tolist(), strict=True)):
        cur[j] *= f
        book.set_price(names[j] if t % 2 else j, float(cur[j]), float(t))
        if t % 97 == 0:
            g = f"g{int(rng.integers(0, n_agents))}"
            w = rng.dirichlet(np.ones(n_assets + 1)).tolist()
            book.rebalance(g, dict(zip([*names, CASH], w, strict=True)))
    inc = book.values()
    full = book.mark()
    np.testing.assert_allclose(inc, full, rtol=1e-9)
    np.testing.assert_array_equal(book.values(), full)


# --------------------------------------------------------------------------- hand cases


def test_cost_model_presets_and_validation() -> None:
    none = CostModel.preset("none")
    assert (none.fee_bps, none.slippage_bps, none.rate) == (0.0, 0.0, 0.0)
    real = CostModel.preset("realistic")
    assert (real.fee_bps, real.slippage_bps) == (5.0, 10.0)
    assert real.rate == pytest.approx(0.0015, abs=1e-18)
    with pytest.raises(ValueError, match="unknown cost preset"):
        CostModel.preset("cheap")
    for bad in ({"fee_bps": -1.0}, {"slippage_bps": math.nan}, {"fee_bps": math.inf}):
        with pytest.raises(ValueError):
            CostModel(**bad)
    with pytest.raises(ValueError, match="< 1"):
        CostModel(fee_bps=5000.0, slippage_bps=5000.0)


def test_eq2_two_assets_cost_free() -> None:
    book = make_book(["A", "B"], [10.0, 20.0])
    fill = book.rebalance("a", {"A": 0.5, "B": 0.3, CASH: 0.2})
    assert isinstance(fill, Fill)
    assert fill.assets == ("A", "B")
    np.testing.assert_allclose(book.holdings[0], [50.0, 15.0], rtol=1e-15)
    assert book.cash[0] == pytest.approx(200.0, rel=1e-15)
    np.testing.assert_allclose(fill.trades, [50.0, 15.0], rtol=1e-15)
    assert fill.traded_value == pytest.approx(800.0, rel=1e-15)
    # Prices move: v- = q_t . p_{t+1} = 50*12 + 15*18 + 200 = 1070.
    book.set_price("A", 12.0, 1.0)
    book.set_price("B", 18.0, 1.0)
    assert book.value("a") == pytest.approx(1070.0, rel=1e-15)
    fill = book.rebalance("a", {"A": 0.2, "B": 0.6, CASH: 0.2})
    # q_{t+1} = v- * a / p_{t+1}: A 1070*.2/12, B 1070*.6/18, cash 1070*.2.
    np.testing.assert_allclose(book.holdings[0], [214.0 / 12.0, 642.0 / 18.0], rtol=1e-14)
    assert book.cash[0] == pytest.approx(214.0, rel=1e-14)
    np.testing.assert_allclose(fill.trades, [214.0 / 12.0 - 50.0, 642.0 / 18.0 - 15.0], rtol=1e-14)
    assert fill.value_after == pytest.approx(1070.0, rel=1e-15)
    with pytest.raises(ValueError):
        fill.trades[0] = 1.0  # read-only


def test_eq2_two_assets_with_costs() -> None:
    k = 0.0015
    book = make_book(["A", "B"], [10.0, 20.0], REALISTIC)
    fill = book.rebalance("a", {"A": 0.5, "B": 0.3, CASH: 0.2})
    # All buys from cash: V' = 1000 - k * 0.8 V'  =>  V' = 1000 / (1 + 0.8 k).
    v1 = 1000.0 / (1.0 + 0.8 * k)
    assert fill.value_after == pytest.approx(v1, rel=1e-13)
    assert fill.cost == pytest.approx(1000.0 - v1, rel=1e-10)
    np.testing.assert_allclose(book.holdings[0], [0.5 * v1 / 10.0, 0.3 * v1 / 20.0], rtol=1e-13)
    assert book.cash[0] == pytest.approx(0.2 * v1, rel=1e-13)
    # Reset to the cost-free holdings of the previous test to check a sell + buy.
    book2 = Book.from_state(
        {
            **make_book(["A", "B"], [12.0, 18.0]).state(),
            "holdings": [[50.0, 15.0]],
            "cash": [200.0],
        },
        cost=REALISTIC,
    )
    fill = book2.rebalance("a", {"A": 0.2, "B": 0.6, CASH: 0.2})
    # Sell A (h=600), buy B (h=270): V' = 1070 - k (600 - .2V' + .6V' - 270)
    #   =>  V' = (1070 - 330 k) / (1 + 0.4 k).
    v2 = (1070.0 - 330.0 * k) / (1.0 + 0.4 * k)
    assert fill.value_before == pytest.approx(1070.0, rel=1e-15)
    assert fill.value_after == pytest.approx(v2, rel=1e-13)
    assert fill.traded_value == pytest.approx((600.0 - 0.2 * v2) + (0.6 * v2 - 270.0), rel=1e-12)
    np.testing.assert_allclose(book2.holdings[0], [0.2 * v2 / 12.0, 0.6 * v2 / 18.0], rtol=1e-13)


def test_rejections_have_clear_one_line_messages() -> None:
    book = make_book(["A", "B"], [10.0, 20.0])
    book.add_asset("C")  # no price yet
    cases = [
        ({"Z": 1.0}, "unknown asset 'Z'"),
        ({"A": -0.1, CASH: 1.1}, "must be finite and >= 0"),
        ({"A": math.nan, CASH: 1.0}, "must be finite and >= 0"),
        ({"A": math.inf}, "must be finite and >= 0"),
        ({"A": 0.5, CASH: 0.4}, "weights sum to"),
        ({"A": 0.5, CASH: 0.5 + 1e-8}, "weights sum to"),
        ({"C": 0.5, CASH: 0.5}, "no price for 'C': cannot buy"),
        ({"A": "x", CASH: 1.0}, "not a number"),
    ]
    for target, msg in cases:
        with pytest.raises(RebalanceRejected, match=msg) as exc:
            book.rebalance("a", target)
        assert "\n" not in str(exc.value)
        assert isinstance(exc.value, ValueError)
    assert book.cash[0] == 1000.0 and not book.holdings.any()
    # Within tolerance is accepted and renormalised exactly.
    fill = book.rebalance("a", {"A": 0.5, CASH: 0.5 + 5e-10, "C": 0.0})
    assert fill.value_after == pytest.approx(1000.0, rel=1e-15)
    book.set_price("B", 0.0, 2.0)
    with pytest.raises(RebalanceRejected, match="price of 'B' is 0"):
        book.rebalance("a", {"B": 1.0})
    with pytest.raises(KeyError, match="unknown agent 'nobody'"):
        book.rebalance("nobody", {CASH: 1.0})


def test_zero_value_agent_only_all_cash() -> None:
    book = make_book(["A"], [10.0])
    book.add_agent("broke", cash=0.0)
    with pytest.raises(RebalanceRejected, match="only an all-cash target"):
        book.rebalance("broke", {"A": 1.0})
    fill = book.rebalance("broke", {CASH: 1.0})
    assert fill.value_before == fill.value_after == fill.cost == 0.0
    assert book.weights("broke") == {"A": 0.0, CASH: 1.0}


def test_polymarket_one_side_per_question_and_switching_sides() -> None:
    book = Book("polymarket", cost=REALISTIC, initial_cash=500.0)
    book.add_agent("a")
    yes = book.add_asset("Q1-YES", question="Q1")
    no = book.add_asset("Q1-NO", question="Q1")
    assert book.add_asset("Q1-YES", question="Q1") == yes
    with pytest.raises(ValueError, match="already has 2 assets"):
        book.add_asset("Q1-MAYBE", question="Q1")
    with pytest.raises(ValueError, match="already belongs to question"):
        book.add_asset("Q1-NO", question="Q2")
    book.set_price("Q1-YES", 0.6, 0.0)
    book.set_price("Q1-NO", 0.4, 0.0)
    with pytest.raises(RebalanceRejected, match="at most one side per question"):
        book.rebalance("a", {"Q1-YES": 0.3, "Q1-NO": 0.2, CASH: 0.5})
    # Zero weight on the other side is fine.
    book.rebalance("a", {"Q1-YES": 0.5, "Q1-NO": 0.0, CASH: 0.5})
    assert book.holdings[0, yes] > 0 and book.holdings[0, no] == 0
    fill = book.rebalance("a", {"Q1-NO": 0.5, CASH: 0.5})
    assert book.holdings[0, yes] == 0.0 and book.holdings[0, no] > 0
    assert fill.trades[yes] < 0 < fill.trades[no]
    assert book.questions() == {"Q1": ("Q1-YES", "Q1-NO")}


def _poly_book() -> Book:
    """Return a Polymarket book: agent y holds YES, n holds NO, c all cash."""
    book = Book("polymarket", initial_cash=500.0)
    for a in ("y", "n", "c"):
        book.add_agent(a)
    book.add_asset("Q-YES", question="Q")
    book.add_asset("Q-NO", question="Q")
    book.add_asset("R-YES", question="R")
    book.set_price("Q-YES", 0.25, 0.0)
    book.set_price("Q-NO", 0.75, 0.0)
    book.set_price("R-YES", 0.5, 0.0)
    book.rebalance("y", {"Q-YES": 0.5, "R-YES": 0.5})  # 1000 YES tokens, 500 R-YES
    book.rebalance("n", {"Q-NO": 0.75, CASH: 0.25})  # 500 NO tokens
    return book


def test_resolve_pays_winner_one_loser_zero() -> None:
    book = _poly_book()
    paid = book.resolve("Q", {"Q-YES": 1.0, "Q-NO": 0.0}, ts=10.0)
    np.testing.assert_allclose(paid, [1000.0, 0.0, 0.0], rtol=1e-14)
    np.testing.assert_allclose(book.cash, [1000.0, 125.0, 500.0], rtol=1e-14)
    assert not book.holdings[:, :2].any()
    np.testing.assert_allclose(book.holdings[:, 2], [500.0, 0.0, 0.0], rtol=1e-14)
    assert book.tradable.tolist() == [False, False, True]
    assert book.prices.tolist()[:2] == [1.0, 0.0]
    assert book.price_times.tolist()[:2] == [10.0, 10.0]
    np.testing.assert_allclose(book.values(), [1250.0, 125.0, 500.0], rtol=1e-14)
    np.testing.assert_allclose(book.values(), book.mark(), rtol=1e-15)
    with pytest.raises(ValueError, match="question 'Q' already resolved"):
        book.resolve("Q", {"Q-YES": 1.0, "Q-NO": 0.0}, ts=11.0)
    with pytest.raises(RebalanceRejected, match="'Q-YES' is resolved: cannot buy"):
        book.rebalance("c", {"Q-YES": 1.0})
    # Resolved prices stay frozen; selling-to-zero of a resolved asset is a no-op.
    book.set_price("Q-YES", 0.3, 12.0)
    assert book.prices[0] == 1.0
    book.rebalance("c", {"R-YES": 1.0, "Q-YES": 0.0})
    with pytest.raises(ValueError, match="already resolved"):
        book.add_asset("Q-OTHER", question="Q")


def test_resolve_fifty_fifty_and_validation() -> None:
    book = _poly_book()
    with pytest.raises(ValueError, match="missing payouts"):
        book.resolve("Q", {"Q-YES": 0.5}, ts=1.0)
    with pytest.raises(ValueError, match="not in question"):
        book.resolve("Q", {"Q-YES": 0.5, "Q-NO": 0.5, "R-YES": 1.0}, ts=1.0)
    with pytest.raises(ValueError, match="unknown question"):
        book.resolve("nope", {}, ts=1.0)
    paid = book.resolve("Q", {"Q-YES": 0.5, "Q-NO": 0.5}, ts=1.0)
    np.testing.assert_allclose(paid, [500.0, 250.0, 0.0], rtol=1e-14)
    np.testing.assert_allclose(book.values(), [750.0, 375.0, 500.0], rtol=1e-14)


def test_set_price_validation() -> None:
    book = make_book(["A"], [10.0])
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="must be finite and >= 0"):
            book.set_price("A", bad, 1.0)
    with pytest.raises(KeyError, match="unknown asset 'B'"):
        book.set_price("B", 1.0, 1.0)
    with pytest.raises(KeyError, match="out of range"):
        book.set_price(3, 1.0, 1.0)
    assert book.prices[0] == 10.0


def test_stale_flags_but_keeps_last_price() -> None:
    book = make_book(["A", "B"], [10.0, 20.0])
    book.add_asset("C")
    book.set_price("A", 11.0, 100.0)
    book.set_price("B", 21.0, 190.0)
    assert book.stale(now=200.0, max_age=50.0).tolist() == [True, False, False]
    assert book.prices[0] == 11.0
    assert book.stale(now=200.0, max_age=5.0).tolist() == [True, True, False]
    book.rebalance("a", {"A": 1.0})  # stale prices are still used
    assert book.holdings[0, 0] == pytest.approx(1000.0 / 11.0)


def test_weights_of_all_cash_and_views_read_only() -> None:
    book = make_book(["A"], [10.0])
    assert book.weights("a") == {"A": 0.0, CASH: 1.0}
    for arr in (book.holdings, book.cash, book.prices, book.price_times, book.tradable):
        assert not arr.flags.writeable
    assert Book.CASH == CASH == "CASH"
    with pytest.raises(KeyError, match="unknown asset"):
        book.asset_index("Z")
    with pytest.raises(ValueError):
        book.add_asset(CASH)


def test_state_round_trip_exact() -> None:
    book = _poly_book()
    book.add_agent("late", cash=123.456)
    book.add_asset("S-YES", question="S")  # never priced
    book.set_price("R-YES", 0.61, 5.5)
    book.resolve("Q", {"Q-YES": 1.0, "Q-NO": 0.0}, ts=7.0)
    state = book.state()
    text = json.dumps(state, allow_nan=False)
    clone = Book.from_state(json.loads(text), cost=REALISTIC)
    assert clone.state() == state
    assert clone.cost == REALISTIC and clone.market == "polymarket"
    np.testing.assert_array_equal(clone.values(), book.mark())
    assert state["prices"][3] is None and state["price_times"][3] is None
    with pytest.raises(ValueError, match="already resolved"):
        clone.resolve("Q", {"Q-YES": 1.0, "Q-NO": 0.0}, ts=8.0)
    assert clone.questions() == book.questions()
    # Both continue identically.
    for b in (book, clone):
        b.set_price("R-YES", 0.7, 9.0)
    assert clone.rebalance("late", {"R-YES": 0.5, CASH: 0.5}).cost > 0.0
    book2 = Book.from_state(state, cost=REALISTIC)
    book2.set_price("R-YES", 0.7, 9.0)
    book2.rebalance("late", {"R-YES": 0.5, CASH: 0.5})
    assert book2.state() == clone.state()


def test_from_state_rejects_bad_shapes() -> None:
    state = make_book(["A"], [10.0]).state()
    with pytest.raises(ValueError):
        Book.from_state({**state, "cash": []}, cost=CostModel())
    with pytest.raises(ValueError):
        Book.from_state({**state, "prices": []}, cost=CostModel())
    with pytest.raises(ValueError):
        Book.from_state({**state, "holdings": [[-1.0]]}, cost=CostModel())


def test_growing_agents_and_assets_keeps_holdings() -> None:
    book = Book("grow", cost=REALISTIC)
    book.add_agent("a0")
    book.add_asset("X0")
    book.set_price("X0", 5.0, 0.0)
    book.rebalance("a0", {"X0": 0.7, CASH: 0.3})
    before_q = book.holdings[0, 0]
    before_v = book.value("a0")
    for j in range(1, 40):
        assert book.add_asset(f"X{j}") == j
        book.set_price(f"X{j}", 1.0 + j, 0.0)
    for i in range(1, 70):
        assert book.add_agent(f"a{i}") == i
    assert book.add_agent("a0", cash=5.0) == 0  # idempotent, cash untouched
    assert book.holdings.shape == (70, 40) and book.cash.shape == (70,)
    assert book.prices.shape == book.price_times.shape == book.tradable.shape == (40,)
    assert book.holdings[0, 0] == before_q and not book.holdings[0, 1:].any()
    assert book.value("a0") == before_v
    assert book.agents[:2] == ("a0", "a1") and book.assets[-1] == "X39"
    w = {f"X{j}": 1 / 40 for j in range(40)}
    book.rebalance("a69", w)
    book.set_price("X0", 6.0, 1.0)
    np.testing.assert_allclose(book.values(), book.mark(), rtol=1e-12)
    assert book.holdings[69].min() > 0.0
    assert book.value("a0") == pytest.approx(before_v + before_q, rel=1e-12)


def test_held_without_price_cannot_be_sold() -> None:
    book = make_book(["A"], [10.0])
    book.add_asset("U")  # never priced
    state = {**book.state(), "holdings": [[0.0, 3.0]]}
    odd = Book.from_state(state, cost=CostModel())
    assert odd.value("a") == 1000.0  # no price contributes 0
    with pytest.raises(RebalanceRejected, match="holds 'U' without a price: cannot sell"):
        odd.rebalance("a", {CASH: 1.0})
    odd.set_price("U", 2.0, 1.0)
    assert odd.value("a") == 1006.0
    odd.rebalance("a", {CASH: 1.0})
    assert odd.cash[0] == 1006.0 and not odd.holdings.any()


def test_lazy_mark_gives_the_same_values_as_incremental() -> None:
    """A lazily marked book reads exactly what an incrementally marked one holds."""
    import numpy as np

    rng = np.random.default_rng(3)
    books = [Book("equity", lazy_mark=lazy) for lazy in (False, True)]
    for b in books:
        for a in ("a", "b", "c"):
            b.add_agent(a)
        for x in ("X", "Y"):
            b.add_asset(x)
        b.set_price("X", 10.0, 0.0)
        b.set_price("Y", 20.0, 0.0)
        b.rebalance("a", {"X": 0.5, "Y": 0.3, "CASH": 0.2})
        b.rebalance("b", {"Y": 1.0})
    for t in range(1, 500):
        x, y = float(rng.uniform(5, 15)), float(rng.uniform(15, 25))
        for b in books:
            b.set_price("X", x, float(t))
            b.set_price("Y", y, float(t))
            if t % 97 == 0:
                b.rebalance("c", {"X": 0.25, "CASH": 0.75})
    eager, lazy = books
    np.testing.assert_allclose(lazy.values(), eager.values(), rtol=1e-12)
    assert lazy.value("b") == pytest.approx(eager.value("b"), rel=1e-12)
    np.testing.assert_allclose(lazy.values(), lazy.mark(), rtol=0)
