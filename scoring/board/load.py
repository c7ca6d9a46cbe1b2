"""Read a store into the leaderboard's in-memory structure, price panels included.

One pass over the store per report: run configs, daily equity marks, fills, decision outcomes,
resolutions, Polymarket questions, probes, model calls, and per market the last price of every
asset at each daily mark (the panel the benchmark figures are computed on,
:mod:`scoring.board.panels`). A market's fills are decoded from their JSON when the market is
first scored (``_Fills``); a report computing its markets in forked processes leaves the first
market's agents' rows to :func:`read_later`, read by the process that computes that market
while the children compute theirs (in the same read transaction, :func:`one_snapshot`). The
data classes the board is built from and returned in (``AgentCurves``, ``Report``) live here
too.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import msgspec

from daemon.core.run_configs import run_configs
from daemon.core.sparse_rows import FILLS
from scoring.board.panels import _load_panel, _Panel
from scoring.stats.metrics import drawdown_series

_NAN = float("nan")
_MMAP = 1 << 30  # bytes of a store file read memory-mapped
_first, _second = itemgetter(0), itemgetter(1)

Key = tuple[str, str]


# ----------------------------------------------------------------------------- data classes


@dataclass(frozen=True)
class AgentCurves:
    """Hold one agent's time series in one market for the charts (window applied)."""

    agent: str
    market: str
    ts: tuple[float, ...]
    values: tuple[float, ...]
    cash: tuple[float, ...]
    allocations: tuple[tuple[float, dict[str, float]], ...]  # (fill ts, weights set)

    def drawdowns(self) -> list[float]:
        """Return the drawdown (positive fraction) at every point of ``values``."""
        return [float(x) for x in drawdown_series(self.values)]

    def cash_ratios(self) -> list[float]:
        """Return cash / value at every point (NaN where the value is not positive)."""
        return [c / v if v > 0 else _NAN for c, v in zip(self.cash, self.values, strict=True)]


@dataclass(frozen=True)
class Report:
    """Hold the leaderboard with the series the HTML report draws."""

    board: dict[str, Any]
    curves: dict[Key, AgentCurves]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class _Fill:
    ts: float
    trades: dict[str, float]
    weights: dict[str, float]
    cost: float
    traded_value: float = 0.0


@dataclass
class _Store:
    """Everything the leaderboard reads, loaded once."""

    markets_cfg: dict[str, Any]
    agents_cfg: dict[str, dict[str, Any]]
    series: dict[Key, list[tuple[float, float, float]]]
    fills: dict[Key, list[_Fill]]
    outcomes: dict[Key, dict[str, list[float]]]
    resolutions: dict[str, list[tuple[float, dict[str, float]]]]
    questions: dict[str, dict[str, list[str]]]
    question_text: dict[str, str]
    probes: dict[Key, dict[str, Any]]
    panels: dict[str, _Panel]
    board_cfg: dict[str, Any] = field(default_factory=dict)
    """The ``[leaderboard]`` section of the latest run's config."""
    bench: dict[str, dict[str, dict[float, float]]] = field(default_factory=dict)
    """Per market: benchmark name -> daily return keyed by the mark it ends at."""
    llm: dict[Key, list[tuple[float, Any, Any, Any, Any]]] = field(default_factory=dict)
    """Model calls per (agent, market): (scheduled_ts, tokens_in, tokens_out, latency_s,
    cost_usd)."""
    corr_cache: dict[Any, Any] = field(default_factory=dict)
    """What the rows of one set of marks share, computed once per report: a window's prices,
    returns and class correlations (:mod:`scoring.board.market_window`), regime labels and
    benchmark sides (:mod:`scoring.board.benchmark_figures`)."""
    later: str | None = None
    """The market whose agents' rows :func:`read_later` still has to read (None: all read)."""
    div_jobs: list[list[Any]] | None = None
    """With a list: the rows' diversification scores wait there, scored together
    (:mod:`scoring.board.batched_rows`)."""


# ----------------------------------------------------------------------------- loading


def _table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    """Return the column names of ``table`` (empty if it does not exist)."""
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


_json_decode = msgspec.json.decode
_pairs_decode = msgspec.json.Decoder(list[tuple[int, Any]]).decode


class _FillDecoder:
    """:func:`daemon.core.sparse_rows.fill_map` with each distinct asset list parsed once.

    Every fill of a market names its assets by index into one of a few stored lists, which
    ``fill_map`` parses again for each field of each fill; the same dicts (keys in the same
    order, the same values) and the same error for an index outside the list. Pairs keyed by
    JSON integers are read typed (``_pairs_decode`` refuses any other key, a float, a string
    or a ``true``: those rows, and an index outside the list, go ``fill_map``'s way).
    """

    def __init__(self) -> None:
        self._sets: dict[str | None, tuple[Any, dict[int, str] | None]] = {}

    def _set(self, assets_json: str | None) -> tuple[Any, dict[int, str] | None]:
        """Return the parsed list of ``assets_json`` and its names by index (a list only)."""
        got = self._sets.get(assets_json)
        if got is None:
            assets = json.loads(assets_json) if assets_json is not None else []
            got = self._sets[assets_json] = (
                assets, dict(enumerate(assets)) if type(assets) is list else None)
        return got

    def __call__(self, text: str, assets_json: str | None) -> dict[str, float]:
        try:
            pairs = _pairs_decode(text)
            names = self._set(assets_json)[1]
            if names is not None:
                return {names[k]: v for k, v in pairs}
        except (msgspec.DecodeError, KeyError):  # not index pairs, or outside: fill_map's way
            pass
        return self._read(text, assets_json)

    def _read(self, text: str, assets_json: str | None) -> dict[str, float]:
        """Return ``fill_map(text, assets_json)``, the asset list parsed once."""
        try:  # msgspec: the same values as json.loads, about 5x faster (issue 27, point 1)
            value = _json_decode(text)
        except msgspec.DecodeError:  # NaN, Infinity, 1e400, ...: json's reading (or error)
            value = json.loads(text)
        if not isinstance(value, list):
            return dict(value)
        assets = self._set(assets_json)[0]
        n = len(assets)
        out: dict[str, float] = {}
        for key, v in value:
            if isinstance(key, int):
                if not 0 <= key < n:
                    raise ValueError(f"stored fill names asset index {key} of {n}")
                key = assets[key]
            out[key] = v
        return out


class _Fills(dict[Key, list[_Fill]]):
    """The fills per (agent, market), a market's decoded when one of its keys is first read.

    The stored rows are read with the rest of the store; their JSON fields are decoded into
    dicts (most of the reading's time) only when the market is scored, so a report's markets
    computed in forked processes (:mod:`scoring.board.forked`) each decode their own. The same
    ``_Fill`` values in the same order as decoding them all at once; a missing key reads as an
    empty list, inserted (``defaultdict(list)``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, list[tuple[Any, ...]]] = {}  # per market, in the query's order
        self.asset_sets: dict[int, str] = {}
        """The asset lists a stored row names by row id (a row may hold the list itself)."""
        self._decode = _FillDecoder()

    def _market(self, market: str) -> None:
        """Decode the stored rows of ``market`` (once)."""
        rows = self.stored.pop(market, None)
        if rows is None:
            return
        decode, sets = self._decode, self.asset_sets
        for agent, mkt, ts, trades, w, cost, traded, assets in rows:
            assets = sets.get(assets, assets)  # a row id, or the list (or None) itself
            dict.setdefault(self, (agent, mkt), []).append(
                _Fill(ts, decode(trades, assets), decode(w, assets), cost,
                      float(traded or 0.0)))

    def _all(self) -> None:
        for market in sorted(self.stored):
            self._market(market)

    def __missing__(self, key: Key) -> list[_Fill]:
        if key[1] in self.stored:
            self._market(key[1])
            if dict.__contains__(self, key):
                return dict.__getitem__(self, key)  # type: ignore[no-any-return]
        value: list[_Fill] = []
        dict.__setitem__(self, key, value)
        return value

    def get(self, key: Key, default: Any = None) -> Any:  # type: ignore[override]
        """Return the fills of ``key`` (``default`` when it has none)."""
        self._market(key[1])
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, tuple) and len(key) == 2:
            self._market(key[1])
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[Key]:
        self._all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._all()
        return dict.__len__(self)

    def keys(self) -> Any:
        """Return the keys (every market decoded)."""
        self._all()
        return dict.keys(self)

    def values(self) -> Any:
        """Return the fill lists (every market decoded)."""
        self._all()
        return dict.values(self)

    def items(self) -> Any:
        """Return the (key, fills) pairs (every market decoded)."""
        self._all()
        return dict.items(self)


@contextmanager
def one_snapshot(con: sqlite3.Connection) -> Iterator[None]:
    """Read in one read transaction (the group counts and the rows read apart agree), the file
    memory-mapped (no copy of each page read); the connection left as it was."""
    was = con.execute("PRAGMA mmap_size").fetchone()  # None: not a file
    mapped, own = was is not None and was[0] < _MMAP, not con.in_transaction
    if mapped:
        con.execute(f"PRAGMA mmap_size={_MMAP}")
    if own:
        con.execute("BEGIN")
    try:
        yield
    finally:
        if own and con.in_transaction:  # (an error may have ended it)
            con.execute("COMMIT")
        if mapped:
            con.execute(f"PRAGMA mmap_size={int(was[0])}")


def _grouped(con: sqlite3.Connection, table: str, where: str, columns: str, order: str,
             params: tuple[Any, ...] = ()) -> Iterator[tuple[Key, list[tuple[Any, ...]]]]:
    """Yield ((agent, market), rows of ``columns``) of ``table`` per (agent, market), in order:
    slices of rows read without their keys (about half the values made into Python objects)."""
    rows = con.execute(f"SELECT {columns} FROM {table} {where}"
                       f" ORDER BY agent, market, {order}", params).fetchall()
    at = 0
    for agent, market, n in con.execute(f"SELECT agent, market, count(*) FROM {table} {where}"
                                        " GROUP BY agent, market ORDER BY agent, market",
                                        params):
        yield (agent, market), rows[at:at + n]
        at += n


def _market_filter(market: str | None, keep: bool, column: str = "market"
                   ) -> tuple[str, tuple[Any, ...]]:
    """Return the SQL condition (`` AND ...``) and its parameters that keep only ``market``'s
    rows (``keep``) or all but its rows; no condition without a market."""
    if market is None:
        return "", ()
    return (f" AND {column} IS ?" if keep else f" AND {column} IS NOT ?"), (market,)


def _series_rows(con: sqlite3.Connection, market: str | None, keep: bool
                 ) -> Iterator[tuple[Key, list[tuple[float, float, float]]]]:
    """Yield the daily marks (ts, value, cash) per (agent, market) (:func:`_market_filter`)."""
    cond, params = _market_filter(market, keep)
    yield from _grouped(con, "equity", "WHERE kind='daily'" + cond, "ts, value, cash", "ts",
                        params)


def _fill_rows(con: sqlite3.Connection, market: str | None, keep: bool) -> list[tuple[Any, ...]]:
    """Return the stored fills (:class:`_Fills`'s rows) in order (:func:`_market_filter`)."""
    # Since v11 a fill's trades and weights name assets by index into its asset list (read
    # once per list: the rows name it by its row id).
    v11 = "assets_sha256" in _table_columns(con, "fills")
    sets = f"s.rowid FROM {FILLS}" if v11 else "NULL FROM fills f"
    cond, params = _market_filter(market, keep, "f.market")
    return con.execute(
        "SELECT f.agent, f.market, f.ts, f.trades_json, f.weights_json, f.cost,"
        f" f.traded_value, {sets} WHERE 1{cond} ORDER BY f.agent, f.market, f.scheduled_ts",
        params).fetchall()


def _load_store(con: sqlite3.Connection, hi: float, *, first_later: bool = False) -> _Store:
    """Read configs, series, fills, resolutions, books, probes and price panels.

    With ``first_later`` the first configured market's (in sorted order) agents' series,
    fills and decisions are left for :func:`read_later` (``_Store.later`` names it; its price
    panel is read now): a caller that computes that market itself reads them while forked
    children compute the others. It must then hold one read transaction
    (:func:`one_snapshot`) until :func:`read_later` has read them.
    """
    with one_snapshot(con):
        return _read_store(con, hi, first_later)


def read_later(con: sqlite3.Connection, store: _Store) -> None:
    """Read the series, fills and decisions :func:`_load_store` left for later into ``store``
    (nothing when it left none); ``store.later`` is then None."""
    market, store.later = store.later, None
    if market is None:
        return
    store.series.update(_series_rows(con, market, True))
    rows = _fill_rows(con, market, True)
    if rows and isinstance(store.fills, _Fills):  # (a store read by _read_store: always)
        store.fills.stored[market] = rows
    store.outcomes.update(_load_outcomes(con, market, True))


def _read_store(con: sqlite3.Connection, hi: float, first_later: bool) -> _Store:
    runs = [json.loads(text) for text in run_configs(con)]  # every run's and reload's
    markets_cfg = runs[0].get("markets", {}) if runs else {}
    agents_cfg: dict[str, dict[str, Any]] = {}
    for cfg in runs:  # later configs (reloads, restarts) override earlier ones
        for a in cfg.get("agents", []):
            agents_cfg[str(a.get("id"))] = a
    later = min(markets_cfg) if first_later and markets_cfg else None
    series: dict[Key, list[tuple[float, float, float]]] = defaultdict(list)
    series.update(_series_rows(con, later, False))
    fills = _Fills()
    if "assets_sha256" in _table_columns(con, "fills"):
        fills.asset_sets = dict(con.execute("SELECT rowid, assets_json FROM asset_sets"))
    for row in _fill_rows(con, later, False):
        fills.stored.setdefault(row[1], []).append(row)
    resolutions: dict[str, list[tuple[float, dict[str, float]]]] = defaultdict(list)
    for market, ts, payouts in con.execute(
        "SELECT market, ts, payouts_json FROM resolutions ORDER BY ts, question_id"
    ):
        resolutions[market].append((ts, {k: float(v) for k, v in json.loads(payouts).items()}))
    questions: dict[str, dict[str, list[str]]] = {}
    for market, state in con.execute("SELECT market, state_json FROM books ORDER BY market"):
        questions[market] = {q: list(m) for q, m in json.loads(state).get("questions", {}).items()}
    question_text = {
        str(q.get("id")): str(q.get("question", ""))
        for q in markets_cfg.get("polymarket", {}).get("questions", [])
    }
    for (payload,) in con.execute(
        "SELECT payload FROM market_events WHERE kind='MarketListed' ORDER BY id"
    ):
        ev = json.loads(payload or "{}")
        if ev.get("question_id") and ev.get("question"):
            question_text.setdefault(str(ev["question_id"]), str(ev["question"]))
    marks: dict[str, set[float]] = defaultdict(set)
    for (_, market), pts in series.items():
        marks[market].update(map(_first, pts))
    if later is not None:  # its marks without its rows
        ts = [t for (t,) in con.execute("SELECT DISTINCT ts FROM equity WHERE kind='daily'"
                                        " AND market IS ?", (later,))]
        if ts:
            marks[later].update(ts)
    panels = {m: _load_panel(con, m, sorted(ts), resolutions.get(m, []))
              for m, ts in sorted(marks.items())}
    board_cfg = dict(runs[-1].get("leaderboard") or {}) if runs else {}
    return _Store(markets_cfg, agents_cfg, series, fills, _load_outcomes(con, later, False),
                  resolutions, questions, question_text, _load_probes(con, hi), panels,
                  board_cfg, llm=_load_llm_calls(con), later=later)


def _load_llm_calls(con: sqlite3.Connection) -> dict[Key, list[tuple[float, Any, Any, Any, Any]]]:
    """Return the stored model calls per (agent, market) (empty without the table)."""
    need = {"agent", "market", "scheduled_ts", "tokens_in", "tokens_out", "latency_s",
            "cost_usd"}
    if not need <= set(_table_columns(con, "llm_calls")):
        return {}
    out: dict[Key, list[tuple[float, Any, Any, Any, Any]]] = defaultdict(list)
    for agent, market, ts, tin, tout, lat, cost in con.execute(
        "SELECT agent, market, scheduled_ts, tokens_in, tokens_out, latency_s, cost_usd"
        " FROM llm_calls ORDER BY agent, market, scheduled_ts, id"
    ):
        out[(agent, market)].append((ts, tin, tout, lat, cost))
    return dict(out)


def _load_outcomes(con: sqlite3.Connection, market: str | None = None, keep: bool = False
                   ) -> dict[Key, dict[str, list[float]]]:
    """Return the scheduled times of every decision per (agent, market) and outcome
    (:func:`_market_filter`)."""
    cond, params = _market_filter(market, keep)
    out: dict[Key, dict[str, list[float]]] = {}
    for key, rows in _grouped(con, "decisions", "WHERE 1" + cond, "outcome, scheduled_ts",
                              "scheduled_ts", params):
        if len(set(map(_first, rows))) == 1:  # one outcome throughout
            out[key] = {rows[0][0]: list(map(_second, rows))}
        else:
            by = out.setdefault(key, {})
            for outcome, ts in rows:
                by.setdefault(outcome, []).append(ts)
    return out


def _load_probes(con: sqlite3.Connection, hi: float) -> dict[Key, dict[str, Any]]:
    """Return the latest probe result (ts <= ``hi``) per (agent, market or '')."""
    cols = _table_columns(con, "probes")
    need = {"agent", "ts", "repeats", "mean_l1", "std_l1"}
    if not need <= set(cols):
        return {}
    market = "market" if "market" in cols else "''"
    out: dict[Key, dict[str, Any]] = {}
    for agent, mkt, ts, repeats, mean_l1, std_l1 in con.execute(
        f"SELECT agent, {market}, ts, repeats, mean_l1, std_l1 FROM probes WHERE ts <= ?"
        " ORDER BY agent, ts",
        (min(hi, 1e18),),
    ):
        out[(agent, mkt or "")] = {"ts": ts, "repeats": repeats, "mean_l1": mean_l1,
                                   "std_l1": std_l1}
    return out
