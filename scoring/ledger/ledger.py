"""Pure-numpy accounting core: holdings, cash, prices and rebalancing for one market.

Conventions (see docs reference ``scoring.md``, "Portfolio mechanics", LiveTradeBench Eq. 2):

* Every agent holds fractional, long-only units of each asset plus ``CASH`` (price 1).
* Value ``v = cash + q . p``; an asset without a price yet contributes 0 (it cannot be held).
* A rebalance to target weights ``a`` (simplex, incl. ``CASH``) moves the agent to
  ``q' = V' a / p`` and ``cash' = V' a_CASH`` where the post-trade value ``V'`` solves
  ``V' = v - k * sum_i |V' a_i - h_i|`` with ``h_i = q_i p_i`` and ``k`` the cost rate
  (fee + slippage as a cost on traded value; prices are not moved). ``k = 0`` is Eq. 2 exactly.
* Polymarket binary markets are "questions" holding at most two assets (YES/NO tokens); at most one
  side of a question may carry a positive weight. Resolution pays the payout per token into cash.

No I/O happens here; the module depends on numpy and the standard library only.

Why one module over 500 lines: the :class:`Book` is the accounting core; its methods share the
(agents x assets) arrays' invariants and are checked together; value types are :mod:`.types`,
batched rebalances :mod:`.batch`, sparse marking :mod:`.held`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from scoring.ledger.held import HeldEntries, held_entries, use_held, value_change
from scoring.ledger.types import CASH, BookSnapshot, CostModel, Fill, RebalanceRejected

__all__ = ["Book"]


_FMAX = sys.float_info.max
_SUM_TOL = 1e-9
_SOLVE_RTOL = 1e-13
_SOLVE_MAX_ITER = 100
_MIN_CAPACITY = 8


_NO_COST = CostModel()


def _capacity(need: int, have: int) -> int:
    """Return the doubled capacity that fits ``need``."""
    cap = max(have, _MIN_CAPACITY)
    while cap < need:
        cap *= 2
    return cap


class Book:
    """One market's books for many agents: holdings (agents x assets), cash, price vector."""

    CASH = CASH

    def __init__(
        self,
        market: str,
        *,
        cost: CostModel = _NO_COST,
        initial_cash: float = 1000.0,
        lazy_mark: bool = False,
    ) -> None:
        """Create an empty book for ``market``; agents start with ``initial_cash`` unless told."""
        if not isinstance(cost, CostModel):
            raise TypeError(f"cost must be a CostModel, got {type(cost).__name__}")
        self.market: str = market
        self.cost: CostModel = cost
        self.initial_cash: float = self._check_cash(initial_cash, "initial_cash")
        self._agent_idx: dict[str, int] = {}
        self._asset_idx: dict[str, int] = {}
        self._agents: tuple[str, ...] = ()
        self._assets: tuple[str, ...] = ()
        self._qof: list[str | None] = []
        self._questions: dict[str, list[str]] = {}
        self._resolved: set[str] = set()
        self._na = 0
        self._nx = 0
        self._unpriced = 0  # number of assets without a price yet
        ca = cx = _MIN_CAPACITY
        # Column-major so the per-asset column used by set_price is contiguous.
        self._h = np.zeros((ca, cx), dtype=np.float64, order="F")
        self._cash = np.zeros(ca, dtype=np.float64)
        self._vals = np.zeros(ca, dtype=np.float64)
        self._peak = np.zeros(ca, dtype=np.float64)
        """Running peak of each agent's value (as marked by batches and full marks)."""
        self._p = np.full(cx, np.nan, dtype=np.float64)
        self._pz = np.zeros(cx, dtype=np.float64)
        self._pt = np.full(cx, np.nan, dtype=np.float64)
        self._trad = np.ones(cx, dtype=bool)
        self._vview = self._vals[:0]
        #: Lazy marking: ``set_price`` only records the price and the values are re-marked in
        #: full when next read. Cheaper when ticks outnumber reads (the daemon's case); the
        #: default incremental mark keeps values current on every tick.
        self.lazy_mark = lazy_mark
        self._dirty = False
        self._cols: list[np.ndarray] = []
        self._held: HeldEntries | None = None
        """The nonzero holdings for batch marks (``None``: rebuilt when next needed)."""

    # ------------------------------------------------------------------ universe

    @staticmethod
    def _check_cash(cash: float, what: str) -> float:
        """Return ``cash`` as float after checking it is finite and >= 0."""
        try:
            x = float(cash)
        except (TypeError, ValueError):
            raise ValueError(f"{what} must be a number, got {cash!r}") from None
        if not 0.0 <= x <= _FMAX:
            raise ValueError(f"{what} must be finite and >= 0, got {cash!r}")
        return x

    def _refresh_views(self) -> None:
        """Rebuild the cached trimmed views used by the hot paths."""
        na = self._na
        self._vview = self._vals[:na]
        self._cols = [self._h[:na, j] for j in range(self._nx)]

    def _ensure(self, na: int, nx: int) -> None:
        """Grow storage (amortised doubling) so that ``na`` agents and ``nx`` assets fit."""
        ca, cx = self._h.shape
        if na <= ca and nx <= cx:
            return
        nca, ncx = _capacity(na, ca), _capacity(nx, cx)
        h = np.zeros((nca, ncx), dtype=np.float64, order="F")
        h[: self._na, : self._nx] = self._h[: self._na, : self._nx]
        self._h = h
        self._held = None
        if nca != ca:
            for name in ("_cash", "_vals", "_peak"):
                old = getattr(self, name)
                new = np.zeros(nca, dtype=np.float64)
                new[:ca] = old
                setattr(self, name, new)
        if ncx != cx:
            for name, fill, dtype in (
                ("_p", np.nan, np.float64),
                ("_pz", 0.0, np.float64),
                ("_pt", np.nan, np.float64),
                ("_trad", True, bool),
            ):
                old = getattr(self, name)
                new = np.full(ncx, fill, dtype=dtype)
                new[:cx] = old
                setattr(self, name, new)

    def add_agent(self, agent: str, cash: float | None = None) -> int:
        """Add ``agent`` with ``cash`` (default ``initial_cash``); return its index (idempotent)."""
        i = self._agent_idx.get(agent)
        if i is not None:
            return i
        if not isinstance(agent, str) or not agent:
            raise ValueError(f"agent name must be a non-empty string, got {agent!r}")
        c = self.initial_cash if cash is None else self._check_cash(cash, "cash")
        i = self._na
        self._ensure(i + 1, self._nx)
        self._h[i, :] = 0.0
        self._held = None
        self._cash[i] = c
        self._vals[i] = c
        self._peak[i] = c
        self._na = i + 1
        self._agent_idx[agent] = i
        self._agents = (*self._agents, agent)
        self._refresh_views()
        return i

    def add_asset(self, asset: str, *, question: str | None = None) -> int:
        """Add ``asset`` (optionally one side of binary ``question``); return its index."""
        j = self._asset_idx.get(asset)
        if j is not None:
            if question is not None and self._qof[j] != question:
                raise ValueError(
                    f"asset {asset!r} already belongs to question {self._qof[j]!r}, "
                    f"not {question!r}"
                )
            return j
        if not isinstance(asset, str) or not asset:
            raise ValueError(f"asset name must be a non-empty string, got {asset!r}")
        if asset == CASH:
            raise ValueError(f"{CASH!r} is implicit and cannot be added as an asset")
        if question is not None:
            if not isinstance(question, str) or not question:
                raise ValueError(f"question must be a non-empty string, got {question!r}")
            if question in self._resolved:
                raise ValueError(f"question {question!r} already resolved: cannot add {asset!r}")
            members = self._questions.get(question, [])
            if len(members) >= 2:
                raise ValueError(
                    f"question {question!r} already has 2 assets {tuple(members)}: "
                    f"cannot add {asset!r}"
                )
        j = self._nx
        self._ensure(self._na, j + 1)
        self._h[:, j] = 0.0
        self._p[j] = np.nan
        self._pz[j] = 0.0
        self._pt[j] = np.nan
        self._trad[j] = True
        self._unpriced += 1
        self._nx = j + 1
        self._asset_idx[asset] = j
        self._assets = (*self._assets, asset)
        self._qof.append(question)
        if question is not None:
            self._questions.setdefault(question, []).append(asset)
        self._refresh_views()
        return j

    @property
    def agents(self) -> tuple[str, ...]:
        """Return agent names in row order."""
        return self._agents

    @property
    def assets(self) -> tuple[str, ...]:
        """Return asset names in column order."""
        return self._assets

    @property
    def asset_columns(self) -> Mapping[str, int]:
        """Return the live asset -> column mapping (read it, never change it)."""
        return self._asset_idx

    def has_asset(self, asset: str) -> bool:
        """Return whether ``asset`` is a column of this book."""
        return asset in self._asset_idx

    def agent_index(self, agent: str) -> int:
        """Return the row of ``agent``; raise KeyError if unknown."""
        try:
            return self._agent_idx[agent]
        except KeyError:
            raise KeyError(f"unknown agent {agent!r} in market {self.market!r}") from None

    def asset_index(self, asset: str) -> int:
        """Return the column of ``asset``; raise KeyError if unknown."""
        try:
            return self._asset_idx[asset]
        except KeyError:
            raise KeyError(f"unknown asset {asset!r} in market {self.market!r}") from None

    def questions(self) -> dict[str, tuple[str, ...]]:
        """Return each question with its assets."""
        return {q: tuple(a) for q, a in self._questions.items()}

    # ------------------------------------------------------------------ views

    @staticmethod
    def _ro(a: np.ndarray) -> np.ndarray:
        """Return a read-only view of ``a``."""
        v = a.view()
        v.flags.writeable = False
        return v

    @property
    def holdings(self) -> np.ndarray:
        """Return the (n_agents, n_assets) units held, as a read-only view."""
        return self._ro(self._h[: self._na, : self._nx])

    @property
    def cash(self) -> np.ndarray:
        """Return cash per agent, as a read-only view."""
        return self._ro(self._cash[: self._na])

    @property
    def prices(self) -> np.ndarray:
        """Return the last price per asset (NaN = no price yet), as a read-only view."""
        return self._ro(self._p[: self._nx])

    @property
    def price_times(self) -> np.ndarray:
        """Return the epoch seconds of each asset's last price (NaN = none), as a read-only view."""
        return self._ro(self._pt[: self._nx])

    @property
    def tradable(self) -> np.ndarray:
        """Return per-asset tradability (False once its question resolved), as a read-only view."""
        return self._ro(self._trad[: self._nx])

    # ------------------------------------------------------------------ prices and values

    def set_price(self, asset: str | int, price: float, ts: float) -> None:
        """Record ``price`` at ``ts`` for ``asset`` and mark all agents incrementally.

        Prices of resolved assets stay frozen at their payout; later ticks for them are ignored.
        """
        if isinstance(asset, str):
            try:
                j = self._asset_idx[asset]
            except KeyError:
                raise KeyError(f"unknown asset {asset!r} in market {self.market!r}") from None
        else:
            j = int(asset)
            if not 0 <= j < self._nx:
                raise KeyError(f"asset index {asset!r} out of range in market {self.market!r}")
        if not 0.0 <= price <= _FMAX:
            raise ValueError(f"price for asset {asset!r} must be finite and >= 0, got {price!r}")
        if not self._trad[j]:
            return
        pz = self._pz
        old = pz[j]
        p = self._p
        if old == 0.0 and p[j] != p[j]:
            self._unpriced -= 1
        d = price - old
        pz[j] = price
        p[j] = price
        self._pt[j] = ts
        if self.lazy_mark:
            self._dirty = True
            return
        if d:
            v = self._vview
            v += self._cols[j] * d

    def set_prices(self, cols: np.ndarray, prices: np.ndarray, ts: np.ndarray | float, *,
                   checked: bool = False) -> None:
        """Record a batch of prices (asset columns, each at most once) and mark every agent.

        The change in every agent's value is one product over the batch's columns and the
        peaks one ``maximum``, so values and peaks are current after each batch (a batch after
        lazy per-tick prices re-marks in full first). Resolved assets are skipped. ``checked``:
        the caller guarantees finite prices >= 0 (the bus's guard did), so they are not checked
        again.
        """
        if not len(cols):
            return
        if not checked:
            lo, hi = float(prices.min()), float(prices.max())
            if not (lo >= 0.0 and hi <= _FMAX):
                raise ValueError(
                    f"prices must be finite and >= 0, got {hi if lo >= 0.0 else lo!r}")
        if self._resolved:
            trad = self._trad[cols]
            if not trad.all():
                cols, prices = cols[trad], prices[trad]
                if not isinstance(ts, float):
                    ts = ts[trad]
        p, pz = self._p, self._pz
        if self._unpriced:
            self._unpriced -= int(np.isnan(p[cols]).sum())
        d = prices - pz[cols]
        pz[cols] = prices
        p[cols] = prices
        self._pt[cols] = ts
        na = self._na
        if self._dirty:
            self.mark()
            return
        v = self._vals[:na]
        held = self._held
        if held is None:
            held = self._held = held_entries(self._h[:na, : self._nx])
        if use_held(held, na, len(cols)):
            v += value_change(held, na, self._nx, cols, d)
        else:
            # Each agent's terms in rising column order, as value_change sums them (einsum
            # rounds each row on its own, whoever shares the book).
            order = np.argsort(cols)
            v += np.einsum("ij,j->i", self._h[:na, cols[order]], d[order])
        np.maximum(self._peak[:na], v, out=self._peak[:na])

    def peaks(self) -> np.ndarray:
        """Return a copy of every agent's running peak value."""
        if self._dirty:
            self.mark()
        return self._peak[: self._na].copy()

    def values(self) -> np.ndarray:
        """Return a copy of the incrementally maintained mark-to-market value per agent."""
        if self._dirty:
            self.mark()
        return self._vals[: self._na].copy()

    def mark(self) -> np.ndarray:
        """Re-mark every agent from scratch, reset the incremental values to it and return it."""
        na, nx = self._na, self._nx
        # einsum rounds each row on its own; a BLAS matvec's rounding depends on how many agents
        # share the book, and an agent's value must not depend on who else is evaluated.
        full = self._cash[:na] + np.einsum("ij,j->i", self._h[:na, :nx], self._pz[:nx])
        self._vals[:na] = full
        np.maximum(self._peak[:na], full, out=self._peak[:na])
        self._dirty = False
        return full

    def accrue(self, rate: float) -> None:
        """Grow every agent's cash by ``rate`` (the risk-free rate of one period) and re-mark.

        The engine calls it at each daily mark with ``risk_free_rate / periods_per_year``, the
        per-period rate the Sharpe ratio subtracts; 0 (the default rate) changes nothing.
        """
        x = float(rate)
        if not math.isfinite(x) or x <= -1.0:
            raise ValueError(f"rate must be finite and > -1, got {rate!r}")
        if x == 0.0:
            return
        self._cash[: self._na] *= 1.0 + x
        self.mark()

    def value(self, agent: str) -> float:
        """Return the current (incremental) value of ``agent``."""
        if self._dirty:
            self.mark()
        return float(self._vals[self.agent_index(agent)])

    def _row_value(self, i: int) -> float:
        """Return agent row ``i``'s value computed from scratch."""
        nx = self._nx
        return float(self._cash[i] + self._h[i, :nx] @ self._pz[:nx])

    def weights(self, agent: str) -> dict[str, float]:
        """Return the agent's current weights per asset incl. ``CASH`` (summing to 1)."""
        i = self.agent_index(agent)
        nx = self._nx
        held = self._h[i, :nx] * self._pz[:nx]
        cash = float(self._cash[i])
        v = cash + float(held.sum())
        return self._weights_dict(held, cash, v)

    def snapshot(self) -> BookSnapshot:
        """Return a copy of every agent's holdings, cash and value at the current prices."""
        na, nx = self._na, self._nx
        h = self._h[:na, :nx].copy()
        return BookSnapshot(self._assets, dict(self._agent_idx), h, self._cash[:na].copy(),
                            self.values(), h * self._pz[:nx])

    def _weights_dict(self, held: np.ndarray, cash: float, v: float) -> dict[str, float]:
        """Return the weights dict for value-held vector ``held`` and ``cash`` of total ``v``."""
        if v <= 0.0:
            out = dict.fromkeys(self._assets, 0.0)
            out[CASH] = 1.0
            return out
        out = dict(zip(self._assets, (held / v).tolist(), strict=True))
        out[CASH] = cash / v
        return out

    def stale(self, now: float, max_age: float) -> np.ndarray:
        """Return per asset whether it has a price older than ``max_age`` seconds at ``now``."""
        pt = self._pt[: self._nx]
        with np.errstate(invalid="ignore"):
            return ~np.isnan(pt) & (now - pt > max_age)

    # ------------------------------------------------------------------ trading

    def _reject(self, agent: str, reason: str) -> RebalanceRejected:
        """Build a one-line rejection for ``agent``."""
        return RebalanceRejected(f"{reason} (agent {agent!r}, market {self.market!r})")

    def rebalance(self, agent: str, target: Mapping[str, float]) -> Fill:
        """Move ``agent`` to ``target`` weights (incl. ``CASH``) at current prices, net of costs."""
        i = self.agent_index(agent)
        nx = self._nx
        a = np.zeros(nx, dtype=np.float64)
        a_cash = 0.0
        ws: list[float] = []
        idx = self._asset_idx
        trad, pz, qof = self._trad, self._pz, self._qof
        sides: dict[str, str] = {}
        for name, w_raw in target.items():
            if type(w_raw) is float:
                w = w_raw
            else:
                try:
                    w = float(w_raw)
                except (TypeError, ValueError):
                    raise self._reject(
                        agent, f"weight for {name!r} is not a number: {w_raw!r}"
                    ) from None
            if not 0.0 <= w <= _FMAX:
                raise self._reject(agent, f"weight for {name!r} must be finite and >= 0, got {w!r}")
            ws.append(w)
            if name == CASH:
                a_cash = w
                continue
            j = idx.get(name)
            if j is None:
                raise self._reject(agent, f"unknown asset {name!r}")
            if w > 0.0:
                if not trad[j]:
                    raise self._reject(agent, f"asset {name!r} is resolved: cannot buy")
                if pz[j] <= 0.0:
                    if math.isnan(self._p[j]):
                        raise self._reject(agent, f"no price for {name!r}: cannot buy")
                    raise self._reject(agent, f"price of {name!r} is 0: cannot buy")
                q = qof[j]
                if q is not None:
                    other = sides.get(q)
                    if other is not None:
                        raise self._reject(
                            agent,
                            f"at most one side per question: {other!r} and {name!r} "
                            f"both belong to {q!r}",
                        )
                    sides[q] = name
                a[j] = w
        total = math.fsum(ws)
        if abs(total - 1.0) > _SUM_TOL:
            raise self._reject(agent, f"weights sum to {total!r}, expected 1 (within 1e-9)")
        if total != 1.0:
            a /= total
            a_cash /= total

        q_old = self._h[i, :nx].copy()
        if self._unpriced:
            unpriced = (q_old > 0.0) & np.isnan(self._p[:nx])
            if unpriced.any():
                name = self._assets[int(np.argmax(unpriced))]
                raise self._reject(agent, f"holds {name!r} without a price: cannot sell")
        p = pz[:nx]
        cash_old = float(self._cash[i])
        h = q_old * p
        v = cash_old + math.fsum(h.tolist())
        if v <= 0.0 and a_cash != 1.0:
            raise self._reject(agent, f"value is {v!r}: only an all-cash target is accepted")

        k = self.cost.rate
        big_v = v
        if k > 0.0 and v > 0.0:
            # Solve V = v - k * sum_i |V a_i - h_i|. g(V) = V + k sum|V a - h| - v is convex and
            # increasing (slope >= 1 - k > 0) and piecewise linear. Newton from V = v (g >= 0)
            # descends monotonically to the root; on the linear piece with signs s it jumps to
            # V = (v + k s.h) / (1 + k s.a) exactly, so it typically stops after 2 steps.
            ah = np.empty((2, nx), dtype=np.float64)
            ah[0] = a
            ah[1] = h
            tol = _SOLVE_RTOL * v
            for _ in range(_SOLVE_MAX_ITER):
                d = big_v * a
                d -= h
                sa, sh = (ah @ np.sign(d)).tolist()
                nv = (v + k * sh) / (1.0 + k * sa)
                step = big_v - nv
                big_v = nv
                if abs(step) <= tol:
                    break

        q_new = np.zeros(nx, dtype=np.float64)
        np.divide(a, p, out=q_new, where=a > 0.0)
        q_new *= big_v
        np.maximum(q_new, 0.0, out=q_new)
        cash_new = max(big_v * a_cash, 0.0)
        dq = q_new - q_old
        traded_value = float(np.abs(dq) @ p)
        cost = k * traded_value
        held = (q_new * p).tolist()
        v_new = cash_new + math.fsum(held)

        self._h[i, :nx] = q_new
        self._held = None
        self._cash[i] = cash_new
        self._vals[i] = v_new

        if v_new > 0.0:
            weights = {n: x / v_new for n, x in zip(self._assets, held, strict=True)}
            weights[CASH] = cash_new / v_new
        else:
            weights = dict.fromkeys(self._assets, 0.0)
            weights[CASH] = 1.0
        dq.flags.writeable = False
        prices = self._p[:nx].copy()
        prices.flags.writeable = False
        return Fill(
            agent=agent,
            assets=self._assets,
            trades=dq,
            prices=prices,
            traded_value=traded_value,
            cost=cost,
            value_before=v,
            value_after=v - cost,
            cash_before=cash_old,
            cash_after=cash_new,
            weights_after=weights,
        )

    def resolve(self, question: str, payouts: Mapping[str, float], ts: float) -> np.ndarray:
        """Settle ``question``: pay ``payouts[asset]`` per token; return cash paid per agent."""
        members = self._questions.get(question)
        if members is None:
            raise ValueError(f"unknown question {question!r} in market {self.market!r}")
        if question in self._resolved:
            raise ValueError(f"question {question!r} already resolved")
        extra = sorted(set(payouts) - set(members))
        if extra:
            raise ValueError(f"payouts for assets not in question {question!r}: {extra}")
        missing = [m for m in members if m not in payouts]
        if missing:
            raise ValueError(f"missing payouts for question {question!r}: {missing}")
        pay: list[tuple[int, float]] = []
        for m in members:
            try:
                x = float(payouts[m])
            except (TypeError, ValueError):
                raise ValueError(f"payout for {m!r} is not a number: {payouts[m]!r}") from None
            if not 0.0 <= x <= _FMAX:
                raise ValueError(f"payout for {m!r} must be finite and >= 0, got {x!r}")
            pay.append((self._asset_idx[m], x))
        for j, _ in pay:
            if math.isnan(self._p[j]):
                self._unpriced -= 1
        na = self._na
        paid = np.zeros(na, dtype=np.float64)
        for j, x in pay:
            paid += self._h[:na, j] * x
            self._h[:na, j] = 0.0
            self._held = None
            self._p[j] = x
            self._pz[j] = x
            self._pt[j] = ts
            self._trad[j] = False
        self._cash[:na] += paid
        self._resolved.add(question)
        self.mark()
        return paid

    # ------------------------------------------------------------------ persistence

    def state(self) -> dict[str, Any]:
        """Return a plain JSON-serialisable snapshot of the book."""
        na, nx = self._na, self._nx

        def opt(xs: np.ndarray) -> list[float | None]:
            """Return ``xs`` as a list with NaN replaced by None."""
            return [None if math.isnan(x) else x for x in xs.tolist()]

        return {
            "market": self.market,
            "initial_cash": self.initial_cash,
            "agents": list(self._agents),
            "assets": list(self._assets),
            "questions": {q: list(m) for q, m in self._questions.items()},
            "resolved": sorted(self._resolved),
            "holdings": self._h[:na, :nx].tolist(),
            "cash": self._cash[:na].tolist(),
            "prices": opt(self._p[:nx]),
            "price_times": opt(self._pt[:nx]),
            "tradable": self._trad[:nx].tolist(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], *, cost: CostModel, lazy_mark: bool = False) -> Book:
        """Rebuild a book from :meth:`state` output (exact round trip)."""
        book = cls(
            state["market"], cost=cost, initial_cash=state["initial_cash"], lazy_mark=lazy_mark
        )
        qof: dict[str, str] = {}
        for q, members in state.get("questions", {}).items():
            for m in members:
                qof[m] = q
        agents, assets = list(state["agents"]), list(state["assets"])
        cash = state["cash"]
        if len(cash) != len(agents):
            raise ValueError(f"state has {len(agents)} agents but {len(cash)} cash entries")
        for name, c in zip(agents, cash, strict=True):
            book.add_agent(name, cash=c)
        for name in assets:
            book.add_asset(name, question=qof.get(name))
        na, nx = len(agents), len(assets)
        h = np.asarray(state["holdings"], dtype=np.float64).reshape(na, nx)
        if not np.all(np.isfinite(h)) or np.any(h < 0.0):
            raise ValueError("state holdings must be finite and >= 0")
        cols = {
            "prices": state["prices"],
            "price_times": state["price_times"],
            "tradable": state["tradable"],
        }
        for key, col in cols.items():
            if len(col) != nx:
                raise ValueError(f"state has {nx} assets but {len(col)} {key} entries")
        p = np.array([np.nan if x is None else x for x in state["prices"]], dtype=np.float64)
        pt = np.array([np.nan if x is None else x for x in state["price_times"]], dtype=np.float64)
        book._h[:na, :nx] = h
        book._held = None
        book._p[:nx] = p
        book._pz[:nx] = np.nan_to_num(p, nan=0.0)
        book._pt[:nx] = pt
        book._trad[:nx] = np.asarray(state["tradable"], dtype=bool)
        book._resolved = set(state.get("resolved", []))
        book._unpriced = int(np.isnan(p).sum())
        book.mark()
        return book
