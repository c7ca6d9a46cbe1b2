"""Rebalance many agents of one book in one vectorised call (issue 16, point 5).

:func:`rebalance_many` applies what :meth:`Book.rebalance` does to each ``(agent, target)`` of
a decision round at once: the targets are parsed into one (agents x assets) matrix, checked
with whole-array tests, and the post-trade value of every agent solves LiveTradeBench Eq. 2
with costs by the same Newton iteration run over all agents together (each agent stops when it
has converged, as alone). Agents are independent (own row, same prices), so the result equals
one-by-one rebalancing up to rounding in the last bits; an agent that fails a check goes
through :meth:`Book.rebalance`, which raises its usual one-line rejection.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from itertools import chain

import numpy as np

from scoring.ledger.ledger import Book
from scoring.ledger.types import CASH, Fill, RebalanceRejected

__all__ = ["Rebalanced", "rebalance_many"]

_FMAX = sys.float_info.max
_SUM_TOL = 1e-9
_SOLVE_RTOL = 1e-13
_SOLVE_MAX_ITER = 100


def _one(book: Book, agent: str, target: Mapping[str, float]) -> Fill | RebalanceRejected:
    try:
        return book.rebalance(agent, target)
    except RebalanceRejected as exc:
        return exc


class _Pending:
    """A fill not yet materialised: its agent and row in the batch's arrays."""

    __slots__ = ("agent", "row")

    def __init__(self, agent: str, row: int) -> None:
        self.agent = agent
        self.row = row


class _Arrays:
    """The applied rebalances of one batch as arrays (one row per agent)."""

    __slots__ = ("assets", "cols", "prices", "trades", "wcash", "weights")

    def __init__(self, assets: tuple[str, ...], trades: np.ndarray, prices: np.ndarray,
                 cols: tuple[np.ndarray, ...], weights: np.ndarray, wcash: np.ndarray) -> None:
        self.assets = assets
        self.trades = trades
        self.prices = prices
        self.cols = cols
        self.weights = weights
        self.wcash = wcash

    def fill(self, agent: str, i: int) -> Fill:
        """Return row ``i`` as a :class:`Fill`."""
        traded, cost, v, cash_old, cash_new = (float(c[i]) for c in self.cols)
        weights = dict(zip(self.assets, self.weights[i].tolist(), strict=True))
        weights[CASH] = float(self.wcash[i])
        return Fill(agent, self.assets, self.trades[i], self.prices, traded, cost, v,
                    v - cost, cash_old, cash_new, weights)


class Rebalanced(Sequence[Fill | RebalanceRejected]):
    """Each agent's fill or rejection, in order; fills are built from the batch's arrays when
    first read (the book is already updated)."""

    def __init__(self, out: list[Fill | RebalanceRejected | _Pending | None]) -> None:
        self._out = out
        self.batch: _Arrays | None = None

    def __len__(self) -> int:
        return len(self._out)

    def __getitem__(self, i: int) -> Fill | RebalanceRejected:  # type: ignore[override]
        x = self._out[i]
        if isinstance(x, _Pending):
            assert self.batch is not None
            x = self._out[i] = self.batch.fill(x.agent, x.row)
        assert x is not None
        return x


def rebalance_many(book: Book, targets: Sequence[tuple[str, Mapping[str, float]]]
                   ) -> Rebalanced:
    """Rebalance each agent to its target (weights incl. ``CASH``); return each one's fill or
    rejection, in order. An agent may appear once; an unknown agent raises ``KeyError``."""
    n = len(targets)
    if n == 0:
        return Rebalanced([])
    agents = [a for a, _ in targets]
    if len(set(agents)) != n:
        raise ValueError("an agent appears more than once in one rebalance batch")
    rows = np.array([book.agent_index(a) for a in agents], dtype=np.intp)
    nx = len(book.assets)
    col = {**book.asset_columns, CASH: nx}
    dicts = [t for _, t in targets]
    lens = list(map(len, dicts))
    size = sum(lens)
    try:
        w = np.fromiter(chain.from_iterable(t.values() for t in dicts), np.float64, size)
    except (TypeError, ValueError):  # a weight that is not a number: say which, one by one
        return Rebalanced([_one(book, a, t) for a, t in targets])
    owner = np.repeat(np.arange(n), lens)
    bad = np.zeros(n, dtype=bool)
    try:
        j = np.fromiter(map(col.__getitem__, chain.from_iterable(dicts)), np.intp, size)
    except KeyError:  # an unknown asset: those agents get their rejection one by one
        js = [col.get(x, -1) for x in chain.from_iterable(dicts)]
        j = np.array(js, dtype=np.intp)
        bad[owner[j < 0]] = True
        j[j < 0] = nx
    bad[owner[~((w >= 0.0) & (w <= _FMAX))]] = True
    asset = j < nx
    jj = np.where(asset, j, 0)
    pos = (w > 0.0) & asset
    pz = book._pz[:nx]
    bad[owner[pos & (~book._trad[jj] | (pz[jj] <= 0.0))]] = True
    questions = book._questions
    if questions:
        qid = np.full(nx + 1, -1, dtype=np.intp)
        for q, members in enumerate(questions.values()):
            for m in members:
                qid[col[m]] = q
        qm = pos & (qid[j] >= 0)
        if qm.any():
            keys = owner[qm] * (len(questions) + 1) + qid[j[qm]]
            uniq, counts = np.unique(keys, return_counts=True)
            bad[uniq[counts > 1] // (len(questions) + 1)] = True
    big_a = np.zeros((n, nx + 1), dtype=np.float64)
    big_a[owner, j] = np.where(np.isfinite(w), w, 0.0)
    total = big_a.sum(axis=1)
    bad |= np.abs(total - 1.0) > _SUM_TOL
    q_old = book._h[rows, :nx]
    if book._unpriced:
        bad |= ((q_old > 0.0) & np.isnan(book._p[:nx])).any(axis=1)
    h = q_old * pz
    cash_old = book._cash[rows]
    v = cash_old + h.sum(axis=1)
    scale = np.where(total != 1.0, total, 1.0)
    big_a /= np.where(bad, 1.0, scale)[:, None]
    a, a_cash = big_a[:, :nx], big_a[:, nx]
    bad |= (v <= 0.0) & (a_cash != 1.0)

    out: list[Fill | RebalanceRejected | _Pending | None] = [None] * n
    res = Rebalanced(out)
    for r in np.flatnonzero(bad).tolist():  # the usual rejection (or, at the margin, a fill)
        out[r] = _one(book, agents[r], targets[r][1])
    ok = ~bad
    if ok.any():
        slots = np.flatnonzero(ok).tolist()
        _apply(book, [agents[r] for r in slots], rows[ok], a[ok], a_cash[ok], h[ok],
               q_old[ok], cash_old[ok], v[ok], slots, out, res)
    return res


def _apply(book: Book, agents: list[str], rows: np.ndarray, a: np.ndarray, a_cash: np.ndarray,
           h: np.ndarray, q_old: np.ndarray, cash_old: np.ndarray, v: np.ndarray,
           slots: list[int], out: list[Fill | RebalanceRejected | _Pending | None],
           res: Rebalanced) -> None:
    """Solve, apply and record the rebalances of checked agents (rows of the arrays)."""
    nx = a.shape[1]
    pz = book._pz[:nx]
    k = book.cost.rate
    big_v = v.copy()
    if k > 0.0:
        tol = _SOLVE_RTOL * v
        active = v > 0.0
        for _ in range(_SOLVE_MAX_ITER):
            s = np.sign(big_v[:, None] * a - h)
            sa = np.einsum("ij,ij->i", s, a)
            sh = np.einsum("ij,ij->i", s, h)
            nv = (v + k * sh) / (1.0 + k * sa)
            step = big_v - nv
            big_v = np.where(active, nv, big_v)
            active &= np.abs(step) > tol
            if not active.any():
                break
    q_new = np.zeros_like(a)
    np.divide(a, pz, out=q_new, where=a > 0.0)
    q_new *= big_v[:, None]
    np.maximum(q_new, 0.0, out=q_new)
    cash_new = np.maximum(big_v * a_cash, 0.0)
    dq = q_new - q_old
    traded = np.einsum("ij,j->i", np.abs(dq), pz)
    cost = k * traded
    held = q_new * pz
    v_new = cash_new + held.sum(axis=1)
    book._h[rows, :nx] = q_new
    book._held = None
    book._cash[rows] = cash_new
    book._vals[rows] = v_new
    dq.flags.writeable = False
    prices = book._p[:nx].copy()
    prices.flags.writeable = False
    assets = book.assets
    pos = v_new > 0.0
    held_w = np.divide(held, v_new[:, None], out=np.zeros_like(held), where=pos[:, None])
    wcash = np.divide(cash_new, v_new, out=np.ones_like(v_new), where=pos)
    cols = (traded, cost, v, cash_old, cash_new)
    for i, slot in enumerate(slots):
        out[slot] = _Pending(agents[i], i)
    res.batch = _Arrays(assets, dq, prices, cols, held_w, wcash)
