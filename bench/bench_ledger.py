"""Benchmark scoring.ledger.ledger: incremental mark, rebalance, and a naive dict ledger on one
sequence.

Run ``python bench/bench_ledger.py`` for a table or ``--json`` for machine-readable output;
an aggregator can call :func:`run` directly. Per-op timings use ``time.perf_counter_ns`` around
each call (the timer's own overhead, reported as ``timer_floor``, is included in every figure).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scoring.ledger.batch import rebalance_many
from scoring.ledger.ledger import Book
from scoring.ledger.types import CASH, CostModel

SEED = 20251103
N_AGENTS = 1000
N_ASSETS = 16
TARGET_MARK_US = 20.0
TARGET_REBALANCE_US = 50.0
TARGET_ROUND_REBALANCE_RATIO = 0.5


def _stats(ns: list[int]) -> dict[str, float]:
    """Return median and p99 in microseconds of per-call timings ``ns``."""
    arr = np.asarray(ns, dtype=np.float64) / 1e3
    return {
        "n": len(ns),
        "median_us": float(np.median(arr)),
        "p99_us": float(np.percentile(arr, 99)),
    }


def _time_calls(fn: Callable[[int], object], n: int) -> list[int]:
    """Time ``fn(k)`` for k in range(n), one perf_counter_ns pair per call."""
    clock = time.perf_counter_ns
    out = [0] * n
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for k in range(n):
            t0 = clock()
            fn(k)
            out[k] = clock() - t0
    finally:
        if gc_was:
            gc.enable()
    return out


def _random_targets(
    rng: np.random.Generator, names: list[str], n: int, p_zero: float = 0.25
) -> list[dict[str, float]]:
    """Return ``n`` random long-only targets over ``names`` + CASH, some weights exactly zero."""
    out: list[dict[str, float]] = []
    for _ in range(n):
        w = rng.dirichlet(np.ones(len(names) + 1))
        w[:-1][rng.random(len(names)) < p_zero] = 0.0
        w /= w.sum()
        out.append(dict(zip([*names, CASH], w.tolist(), strict=True)))
    return out


def _loaded_book(
    rng: np.random.Generator, n_agents: int, n_assets: int, cost: CostModel
) -> tuple[Book, list[str]]:
    """Return a book with every agent rebalanced into random positions."""
    book = Book("bench", cost=cost)
    names = [f"S{j:02d}" for j in range(n_assets)]
    for j, name in enumerate(names):
        book.add_asset(name)
        book.set_price(name, float(rng.uniform(5.0, 500.0)), 0.0)
        assert book.asset_index(name) == j
    for i in range(n_agents):
        book.add_agent(f"agent{i:04d}")
    for i, tgt in enumerate(_random_targets(rng, names, n_agents)):
        book.rebalance(f"agent{i:04d}", tgt)
    return book, names


def bench_mark(n_agents: int = N_AGENTS, n_assets: int = N_ASSETS, n: int = 20000) -> dict:
    """Time Book.set_price on one asset and the bare numpy axpy floor on the same arrays."""
    rng = np.random.default_rng(SEED)
    book, names = _loaded_book(rng, n_agents, n_assets, CostModel.preset("realistic"))
    j = n_assets // 2
    base = float(book.prices[j])
    prices = (base * rng.lognormal(0.0, 1e-3, n)).tolist()
    set_price = book.set_price
    name = names[j]
    t_book = _time_calls(lambda k: set_price(name, prices[k], float(k)), n)
    t_book_idx = _time_calls(lambda k: set_price(j, prices[k], float(k)), n)

    h = book.holdings
    col = h[:, j]
    vals = book.values()
    deltas = (np.diff(prices, prepend=base)).tolist()

    def axpy(k: int) -> None:
        """Apply the bare incremental mark."""
        nonlocal vals
        vals += col * deltas[k]

    t_floor = _time_calls(axpy, n)
    t_timer = _time_calls(lambda k: None, n)
    drift = float(np.max(np.abs(book.values() - book.mark()) / book.mark()))
    return {
        "agents": n_agents,
        "assets": n_assets,
        "set_price_by_name": _stats(t_book),
        "set_price_by_index": _stats(t_book_idx),
        "numpy_floor": _stats(t_floor),
        "timer_floor": _stats(t_timer),
        "incremental_vs_full_rel": drift,
        "target_us": TARGET_MARK_US,
    }


def bench_rebalance(n_agents: int = N_AGENTS, n_assets: int = N_ASSETS, n: int = 5000) -> dict:
    """Time Book.rebalance of one agent over random targets, cost preset realistic."""
    rng = np.random.default_rng(SEED + 1)
    book, names = _loaded_book(rng, n_agents, n_assets, CostModel.preset("realistic"))
    targets = _random_targets(rng, names, n)
    agent = book.agents[0]
    rebalance = book.rebalance
    for t in targets[:50]:  # warm-up
        rebalance(agent, t)
    t_reb = _time_calls(lambda k: rebalance(agent, targets[k]), n)
    return {
        "agents": n_agents,
        "assets": n_assets,
        "cost_rate": book.cost.rate,
        "rebalance": _stats(t_reb),
        "target_us": TARGET_REBALANCE_US,
    }


class NaiveLedger:
    """Per-agent dict ledger: units per asset, liquidate to cash value then rebuild on rebalance."""

    def __init__(self, rate: float, initial_cash: float, live: bool) -> None:
        """Create an empty ledger; ``live`` re-marks holders on every tick like Book."""
        self.rate = rate
        self.initial_cash = initial_cash
        self.live = live
        self.prices: dict[str, float] = {}
        self.units: dict[str, dict[str, float]] = {}
        self.cash: dict[str, float] = {}
        self.vals: dict[str, float] = {}

    def add_agent(self, agent: str) -> None:
        """Add an all-cash agent."""
        self.units[agent] = {}
        self.cash[agent] = self.initial_cash
        self.vals[agent] = self.initial_cash

    def value_of(self, agent: str) -> float:
        """Return the agent's value from scratch."""
        p = self.prices
        return self.cash[agent] + sum(q * p[a] for a, q in self.units[agent].items())

    def set_price(self, asset: str, price: float) -> None:
        """Store the price and, when live, re-mark every agent holding it."""
        d = price - self.prices.get(asset, 0.0)
        self.prices[asset] = price
        if self.live and d:
            vals = self.vals
            for agent, u in self.units.items():
                q = u.get(asset)
                if q:
                    vals[agent] += q * d

    def rebalance(self, agent: str, target: dict[str, float]) -> float:
        """Liquidate to cash value, solve the cost fixed point, rebuild units; return cost."""
        p = self.prices
        units = self.units[agent]
        held = {a: q * p[a] for a, q in units.items()}
        v = self.cash[agent] + sum(held.values())
        names = set(held) | {a for a, w in target.items() if a != CASH and w > 0.0}
        k = self.rate
        big_v = v
        if k > 0.0:
            for _ in range(100):
                nv = v - k * sum(abs(big_v * target.get(a, 0.0) - held.get(a, 0.0)) for a in names)
                done = abs(nv - big_v) <= 1e-13 * v
                big_v = nv
                if done:
                    break
        new = {a: big_v * w / p[a] for a, w in target.items() if a != CASH and w > 0.0}
        traded = sum(abs(new.get(a, 0.0) - units.get(a, 0.0)) * p[a] for a in names)
        self.units[agent] = new
        self.cash[agent] = big_v * target.get(CASH, 0.0)
        self.vals[agent] = self.value_of(agent)
        return k * traded

    def values(self, agents: tuple[str, ...]) -> np.ndarray:
        """Return values in ``agents`` order (from scratch when not live)."""
        if self.live:
            return np.array([self.vals[a] for a in agents])
        return np.array([self.value_of(a) for a in agents])


def bench_round_rebalance(n_agents: int = N_AGENTS, n_assets: int = N_ASSETS,
                          rounds: int = 5) -> dict:
    """Per-agent cost of rebalancing a round's agents with fees in one vectorised call, beside
    one-by-one ``Book.rebalance`` and the reference fee-less rebalance, in the same run.

    The batch applies every rebalance and keeps the results as arrays; building each agent's
    :class:`Fill` object from them (done when a round reads it) is timed apart.

    The reference is LiveTradeBench's account rebalance (Eq. 2 without costs: value the
    holdings, buy ``V a / p``): its code is not part of this repository, so it stands in as
    :class:`NaiveLedger` at cost rate 0, a per-agent dict account doing exactly that.
    """
    rng = np.random.default_rng(SEED + 2)
    book, names = _loaded_book(rng, n_agents, n_assets, CostModel.preset("realistic"))
    single, _ = _loaded_book(np.random.default_rng(SEED + 2), n_agents, n_assets,
                             CostModel.preset("realistic"))
    targets = [_random_targets(rng, names, n_agents) for _ in range(rounds)]
    ref = NaiveLedger(0.0, 1000.0, live=False)
    for name, p in zip(book.assets, book.prices.tolist(), strict=True):
        ref.prices[name] = p
    for a in book.agents:
        ref.add_agent(a)
    agents = book.agents
    best = {"batch": math.inf, "fills": math.inf, "single": math.inf, "reference": math.inf}
    gc.collect()
    for r in range(rounds):
        pairs = list(zip(agents, targets[r], strict=True))
        t0 = time.perf_counter()
        fills = rebalance_many(book, pairs)
        best["batch"] = min(best["batch"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        made = list(fills)  # every Fill object built (the round stores each one)
        best["fills"] = min(best["fills"], time.perf_counter() - t0)
        assert not any(isinstance(f, Exception) for f in made)
        t0 = time.perf_counter()
        for a, t in pairs:
            single.rebalance(a, t)
        best["single"] = min(best["single"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        for a, t in pairs:
            ref.rebalance(a, t)
        best["reference"] = min(best["reference"], time.perf_counter() - t0)
    per = {k: v / n_agents * 1e6 for k, v in best.items()}
    ratio = per["batch"] / per["reference"]
    return {
        "agents": n_agents, "assets": n_assets, "cost_rate": book.cost.rate,
        "batch_us_per_agent": round(per["batch"], 2),
        "batch_fill_objects_us_per_agent": round(per["fills"], 2),
        "single_us_per_agent": round(per["single"], 2),
        "reference_feeless_us_per_agent": round(per["reference"], 2),
        "batch_vs_reference": round(ratio, 3),
        "single_vs_reference": round(per["single"] / per["reference"], 3),
        "target_ratio": TARGET_ROUND_REBALANCE_RATIO,
        "meets_target": ratio <= TARGET_ROUND_REBALANCE_RATIO,
        "values_match_single": bool(np.allclose(book.values(), single.values(), rtol=1e-9)),
    }


def bench_sequence(
    n_agents: int = N_AGENTS,
    n_assets: int = N_ASSETS,
    n_ticks: int = 200_000,
    n_rebalances: int = 2000,
    naive_lazy: bool = True,
) -> dict:
    """Replay one random sequence of ticks and rebalances through Book and the naive ledger."""
    rng = np.random.default_rng(SEED + 2)
    cost = CostModel.preset("realistic")
    names = [f"S{j:02d}" for j in range(n_assets)]
    agents = [f"agent{i:04d}" for i in range(n_agents)]
    p0 = rng.uniform(5.0, 500.0, n_assets)
    # Events: ticks (asset, price) with rebalances interleaved at random positions.
    tick_assets = rng.integers(0, n_assets, n_ticks)
    factors = rng.lognormal(0.0, 2e-3, n_ticks)
    cur = p0.copy()
    tick_prices = np.empty(n_ticks)
    for t, (j, f) in enumerate(zip(tick_assets.tolist(), factors.tolist(), strict=True)):
        cur[j] *= f
        tick_prices[t] = cur[j]
    reb_at = set(rng.choice(n_ticks, size=min(n_rebalances, n_ticks), replace=False).tolist())
    reb_agents = rng.integers(0, n_agents, len(reb_at)).tolist()
    reb_targets = _random_targets(rng, names, len(reb_at))
    init_targets = _random_targets(rng, names, n_agents)
    # Every agent first buys in, so holdings are dense; then the tick stream starts.
    events: list[tuple[str, str, Any]] = [
        ("r", a, tgt) for a, tgt in zip(agents, init_targets, strict=True)
    ]
    r = 0
    for t, (j, p) in enumerate(zip(tick_assets.tolist(), tick_prices.tolist(), strict=True)):
        events.append(("p", names[j], p))
        if t in reb_at:
            events.append(("r", agents[reb_agents[r]], reb_targets[r]))
            r += 1

    def setup_book() -> Book:
        """Return a fresh priced book."""
        book = Book("seq", cost=cost)
        for a in agents:
            book.add_agent(a)
        for name, p in zip(names, p0.tolist(), strict=True):
            book.add_asset(name)
            book.set_price(name, p, 0.0)
        return book

    def setup_naive(live: bool) -> NaiveLedger:
        """Return a fresh priced naive ledger."""
        led = NaiveLedger(cost.rate, 1000.0, live)
        for a in agents:
            led.add_agent(a)
        for name, p in zip(names, p0.tolist(), strict=True):
            led.set_price(name, p)
        return led

    def replay_book(book: Book) -> tuple[int, float]:
        """Replay events into ``book``; return elapsed ns and total cost."""
        set_price, rebalance = book.set_price, book.rebalance
        total_cost = 0.0
        t0 = time.perf_counter_ns()
        for t, (kind, key, x) in enumerate(events):
            if kind == "p":
                set_price(key, x, float(t))
            else:
                total_cost += rebalance(key, x).cost
        return time.perf_counter_ns() - t0, total_cost

    def replay_naive(led: NaiveLedger) -> tuple[int, float]:
        """Replay events into ``led``; return elapsed ns and total cost."""
        set_price, rebalance = led.set_price, led.rebalance
        total_cost = 0.0
        t0 = time.perf_counter_ns()
        for kind, key, x in events:
            if kind == "p":
                set_price(key, x)
            else:
                total_cost += rebalance(key, x)
        return time.perf_counter_ns() - t0, total_cost

    out: dict[str, Any] = {
        "agents": n_agents,
        "assets": n_assets,
        "ticks": n_ticks,
        "rebalances": len(reb_at),
        "initial_rebalances": n_agents,
        "events": len(events),
    }
    book = setup_book()
    ns_book, cost_book = replay_book(book)
    v_book = book.values()
    v_full = book.mark()
    out["book_s"] = ns_book / 1e9
    out["book_drift_rel"] = float(np.max(np.abs(v_book - v_full) / v_full))

    runs = [("naive_live", True)] + ([("naive_lazy", False)] if naive_lazy else [])
    for label, live in runs:
        led = setup_naive(live)
        t0 = time.perf_counter_ns()
        _, cost_naive = replay_naive(led)
        v_naive = led.values(book.agents)  # lazy variant pays its marking here
        ns_total = time.perf_counter_ns() - t0
        rel = float(np.max(np.abs(v_naive - v_book) / np.abs(v_book)))
        out[f"{label}_s"] = ns_total / 1e9
        out[f"{label}_ratio"] = ns_total / ns_book
        out[f"{label}_max_rel_diff"] = rel
        out[f"{label}_cost_rel_diff"] = abs(cost_naive - cost_book) / max(cost_book, 1e-300)
        out[f"{label}_match"] = bool(
            rel <= 1e-6 and math.isclose(cost_naive, cost_book, rel_tol=1e-6)
        )
    out["total_cost"] = cost_book
    return out


def run(*, quick: bool = False, ticks: int | None = None, rebalances: int = 2000) -> dict:
    """Run all benchmarks and return their results as a JSON-serialisable dict."""
    n_ticks = ticks if ticks is not None else (20_000 if quick else 200_000)
    return {
        "bench": "ledger",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "mark": bench_mark(n=5000 if quick else 20000),
        "rebalance": bench_rebalance(n=1000 if quick else 5000),
        "round_rebalance": bench_round_rebalance(rounds=3 if quick else 5),
        "sequence": bench_sequence(n_ticks=n_ticks, n_rebalances=rebalances),
    }


def _table(res: dict) -> str:
    """Format ``res`` as a small text table."""
    m, r, s = res["mark"], res["rebalance"], res["sequence"]
    rows = [
        (
            f"set_price by name ({m['agents']} agents x {m['assets']} assets)",
            m["set_price_by_name"],
            m["target_us"],
        ),
        ("set_price by index", m["set_price_by_index"], m["target_us"]),
        ("numpy floor: values += h[:, j] * d", m["numpy_floor"], None),
        ("timer floor (empty call)", m["timer_floor"], None),
        (
            f"rebalance 1 agent, {r['assets']} assets, rate {r['cost_rate']:g}",
            r["rebalance"],
            r["target_us"],
        ),
    ]
    lines = [f"{'op':<52} {'n':>6} {'median us':>10} {'p99 us':>9} {'target':>7}"]
    for label, st, target in rows:
        tgt = "" if target is None else f"<= {target:g}"
        ok = "" if target is None else (" ok" if st["median_us"] <= target else " SLOW")
        lines.append(
            f"{label:<52} {st['n']:>6} {st['median_us']:>10.2f} {st['p99_us']:>9.2f} {tgt:>7}{ok}"
        )
    lines.append(
        f"incremental vs full mark after bench: max rel diff {m['incremental_vs_full_rel']:.1e}"
    )
    lines.append("")
    lines.append(
        f"sequence: {s['agents']} agents x {s['assets']} assets, {s['ticks']} ticks, "
        f"{s['initial_rebalances']} + {s['rebalances']} rebalances (realistic costs)"
    )
    lines.append(f"  {'Book (numpy, live values)':<40} {s['book_s']:>8.2f} s")
    for label, desc in (
        ("naive_live", "naive dicts, live values per tick"),
        ("naive_lazy", "naive dicts, values only at end"),
    ):
        if f"{label}_s" in s:
            lines.append(
                f"  {desc:<40} {s[f'{label}_s']:>8.2f} s  ratio {s[f'{label}_ratio']:6.2f}x  "
                f"max rel diff {s[f'{label}_max_rel_diff']:.1e}  "
                f"{'match' if s[f'{label}_match'] else 'MISMATCH'}"
            )
    lines.append(f"  Book drift incremental vs full mark: {s['book_drift_rel']:.1e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmarks and print a table or JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print results as JSON")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (20k ticks)")
    ap.add_argument("--ticks", type=int, default=None, help="price ticks in the sequence bench")
    ap.add_argument("--rebalances", type=int, default=2000, help="rebalances in the sequence")
    args = ap.parse_args(argv)
    res = run(quick=args.quick, ticks=args.ticks, rebalances=args.rebalances)
    print(json.dumps(res, indent=2) if args.json else _table(res))
    ok = res["sequence"]["naive_live_match"] and res["sequence"].get("naive_lazy_match", True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
