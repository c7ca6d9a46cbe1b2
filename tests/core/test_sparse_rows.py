"""Allocations and fill weights are stored without zero weights and read the same (issue 16.4).

The same goes for fill weights, which name the list of the assets they had. The sample is
replayed three times: once writing dense rows as before v10 (the reference), once as v10 did
(sparse, keyed by asset id) and once as now (v11: fills and inputs keyed by asset index). The
sparse allocations and fill weights are the dense ones without their zeros, and the report, the
rebuilt inputs (hash for hash), exports and backups read the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import daemon.core.sparse_rows as sparse_rows
from agents.stored_input import load_input
from daemon.app.cli import main
from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.core.sparse_rows import DECISIONS as WITH_ASSETS
from daemon.core.sparse_rows import (
    dense_fill_weights,
    encode_allocation,
    fill_columns,
    fill_json,
    fill_map,
    sparse_weights,
)
from daemon.store.records import encode_json

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"
SAMPLE_CONFIG = ROOT / "examples" / "sample-replay.toml"


def test_zero_weights_are_left_out_and_nothing_else() -> None:
    assert sparse_weights({"A": 0.5, "B": 0.0, "C": -0.0, "CASH": 0.5}) == {"A": 0.5,
                                                                          "CASH": 0.5}
    assert encode_allocation({"B": 0.0, "A": 1e-300}) == '{"A":1e-300}'
    assert encode_allocation({"A": 0.0}) == "{}"
    assert encode_allocation(None) is None
    with pytest.raises(ValueError):
        encode_allocation({"A": float("nan")})


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The sample replayed into a dense, a sparse and a v10 store (sparse, keyed by asset id)."""
    d = tmp_path_factory.mktemp("sparse")
    dense, sparse, v10 = d / "dense.db", d / "sparse.db", d / "v10.db"
    sparse_rows.SPARSE = False
    try:
        asyncio.run(replay(str(SAMPLE), load_config(SAMPLE_CONFIG), str(dense), progress=False))
    finally:
        sparse_rows.SPARSE = True
    sparse_rows.ASSET_INDEX = False
    try:
        asyncio.run(replay(str(SAMPLE), load_config(SAMPLE_CONFIG), str(v10), progress=False))
    finally:
        sparse_rows.ASSET_INDEX = True
    asyncio.run(replay(str(SAMPLE), load_config(SAMPLE_CONFIG), str(sparse), progress=False))
    return dense, sparse, v10


def _rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


DECISIONS = ("SELECT d.agent, d.market, d.scheduled_ts, d.outcome, d.reason, d.input_json,"
             " d.input_sha256, d.raw_output, d.allocation_json, d.observation_sha256,"
             f" s.assets_json FROM {WITH_ASSETS} ORDER BY d.agent, d.market, d.scheduled_ts")


def test_sparse_allocations_are_the_dense_ones_without_zeros(dbs: tuple[Path, Path, Path]) -> None:
    dense, sparse = (_rows(db, DECISIONS) for db in dbs[:2])
    assert len(dense) == len(sparse) > 100
    zeros = 0
    for d, s in zip(dense, sparse, strict=True):
        assert d[:8] + d[9:] == s[:8] + s[9:]
        if d[8] is None:
            assert s[8] is None
            continue
        # Since v11 the allocation names assets by index into the round's asset list.
        assert s[8].startswith("[") and s[10] is not None
        full, kept = json.loads(d[8]), fill_map(s[8], s[10])
        assert 0.0 not in kept.values()
        zeros += sum(1 for v in full.values() if v == 0.0)
        # A reader that takes a missing asset as 0 gets every weight back.
        assert {a: kept.get(a, 0.0) for a in full} == full and kept.keys() <= full.keys()
    assert zeros > 100  # the sample's allocations do carry zero weights
    size = "SELECT SUM(LENGTH(allocation_json)) FROM decisions"
    assert _rows(dbs[1], size)[0][0] < 0.6 * _rows(dbs[0], size)[0][0]


FILLS = ("SELECT f.agent, f.market, f.scheduled_ts, f.ts, f.trades_json, f.traded_value, f.cost,"
         " f.value_before, f.value_after, f.weights_json, s.assets_json FROM fills f"
         " LEFT JOIN asset_sets s ON s.sha256 = f.assets_sha256"
         " ORDER BY f.agent, f.market, f.scheduled_ts")


def test_sparse_fill_weights_give_back_the_dense_ones(dbs: tuple[Path, Path, Path]) -> None:
    dense, sparse = (_rows(db, FILLS) for db in dbs[:2])
    assert len(dense) == len(sparse) > 100
    for d, s in zip(dense, sparse, strict=True):
        assert d[:4] + d[5:9] == s[:4] + s[5:9] and d[10] is None and s[10] is not None
        # Trades and weights name assets by index into the fill's asset list (v11).
        assert s[4].startswith("[") and s[9].startswith("[")
        assert fill_map(s[4], s[10]) == json.loads(d[4]) and fill_json(s[4], s[10]) == d[4]
        kept = fill_map(s[9], s[10])
        assert 0.0 not in kept.values() and len(kept) < len(json.loads(d[9]))
        assert encode_json(dense_fill_weights(s[9], s[10])) == d[9]  # key for key, same floats
    size = "SELECT SUM(LENGTH(weights_json)) FROM fills"
    assert _rows(dbs[1], size)[0][0] < 0.5 * _rows(dbs[0], size)[0][0]
    # One asset list per distinct set of assets, not per fill.
    assert _rows(dbs[1], "SELECT COUNT(*) FROM asset_sets")[0][0] < len(sparse) / 10


def test_negative_zero_weights_are_kept() -> None:
    w, sha, assets, trades = fill_columns({"B": 0.0, "A": -0.0, "CASH": 1.0}, {"B": -2.5})
    assert w == '[[0,-0.0],[2,1.0]]' and assets == '["A","B","CASH"]' and trades == '[[1,-2.5]]'
    assert sha == hashlib.sha256(assets.encode()).hexdigest()
    assert dense_fill_weights(w, assets) == {"A": -0.0, "B": 0.0, "CASH": 1.0}
    assert fill_json(w, assets) == '{"A":-0.0,"CASH":1.0}'  # the v10 row's text
    assert dense_fill_weights('{"A":0.0}', None) == {"A": 0.0}  # rows before v10: as stored
    assert dense_fill_weights('{"A":0.5}', '["A","B"]') == {"A": 0.5, "B": 0.0}  # v10 rows


def test_trades_outside_the_asset_list_stay_keyed_and_bad_indexes_are_refused() -> None:
    _, _, assets, trades = fill_columns({"A": 1.0}, {"A": 1.0, "Z": 2.0})
    assert trades == '[[0,1.0],["Z",2.0]]' and fill_map(trades, assets) == {"A": 1.0, "Z": 2.0}
    with pytest.raises(ValueError, match="asset index 1 of 1"):
        fill_map("[[1,2.0]]", assets)
    index = {"A": 0}
    assert encode_allocation({"A": 1e-7, "CASH": 0.0, "Z": 0.5}, index) == '[[0,1e-7],["Z",0.5]]'
    assert fill_map('[[0,1e-7],["Z",0.5]]', '["A"]') == {"A": 1e-7, "Z": 0.5}
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            encode_allocation({"A": bad}, index)
        with pytest.raises(ValueError):
            fill_columns({"A": 1.0}, {"A": bad})


def test_export_writes_fills_keyed_by_asset_id_as_v10_did(dbs: tuple[Path, Path, Path],
                                                          tmp_path: Path) -> None:
    """A v11 store (assets by index) exports the same fills, byte for byte, as a v10 one."""
    out = []
    for db in dbs[1:]:
        d = tmp_path / db.stem
        assert main(["export", "--db", str(db), "--out", str(d)]) == 0
        out.append({p.name: p.read_bytes() for p in sorted(d.iterdir())})
    assert out[0] == out[1] and out[0]["fills.csv"].count(b"\n") > 100
    size = "SELECT SUM(LENGTH(trades_json) + LENGTH(weights_json)) FROM fills"
    assert _rows(dbs[1], size)[0][0] < 0.6 * _rows(dbs[2], size)[0][0]
    size = "SELECT SUM(LENGTH(input_json)) FROM decisions"
    assert _rows(dbs[1], size)[0][0] < 0.8 * _rows(dbs[2], size)[0][0]


def test_report_and_inputs_read_the_same(dbs: tuple[Path, Path, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = []
    for db in dbs:
        assert main(["report", "--db", str(db), "--json"]) == 0
        out.append(json.loads(capsys.readouterr().out))
    assert out[0] == out[1] == out[2] and out[0]
    con = sqlite3.connect(dbs[1])
    try:
        rows = con.execute("SELECT agent, market, scheduled_ts, input_sha256 FROM decisions"
                           " WHERE input_sha256 IS NOT NULL").fetchall()
        assert len(rows) > 100
        ref, v10 = sqlite3.connect(dbs[0]), sqlite3.connect(dbs[2])
        for agent, market, ts, sha in rows:
            text = load_input(con, agent, market, ts)
            assert text is not None and hashlib.sha256(text.encode()).hexdigest() == sha
            assert text == load_input(ref, agent, market, ts) == load_input(v10, agent, market, ts)
        ref.close()
        v10.close()
        recent = [r for (r,) in con.execute("SELECT input_json FROM decisions")
                  if r and '"recent_fills":[' in r and '"recent_fills":[]' not in r]
        assert len(recent) > 50  # inputs do rebuild past allocations from sparse fills
    finally:
        con.close()


def test_backup_keeps_the_sparse_rows(dbs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "b.db"
    assert main(["backup", "--db", str(dbs[1]), "--out", str(out)]) == 0
    assert _rows(out, DECISIONS) == _rows(dbs[1], DECISIONS)


async def test_recent_allocations_read_back_dense(tmp_path: Path) -> None:
    """A round after a restart shows the agent the same past weights, zeros included."""
    from daemon.store.records import FillRecord, RoundCommit
    from daemon.store.store import Store

    weights = [{"A": 0.5, "B": 0.0, "CASH": 0.5}, {"A": 0.0, "B": 1.0, "C": 0.0, "CASH": 0.0}]
    store = await Store.open(tmp_path / "s.db")
    try:
        for i, w in enumerate(weights):
            rc = RoundCommit()
            rc.fills.append(FillRecord("a1", "equity", 10.0 + i, 11.0 + i, {}, 0.0, 0.0,
                                       500.0, 499.0 - i, w))
            await store.commit_round(rc)
        stored = await store.fetchall("SELECT weights_json FROM fills ORDER BY ts")
        assert stored == [('[[0,0.5],[2,0.5]]',), ('[[1,1.0]]',)]
        want = [(11.0, weights[0], 499.0), (12.0, weights[1], 498.0)]
        assert await store.recent_allocations("a1", "equity", 5) == want
        assert await store.recent_allocations_of("equity", ["a1", "a2"], 5) == {
            "a1": want, "a2": []}
        got = await store.recent_allocations("a1", "equity", 5)
        assert [list(w) for _, w, _ in got] == [["A", "B", "CASH"], ["A", "B", "C", "CASH"]]
    finally:
        await store.close()


def _outcome(text: str, assets: str | None) -> tuple[str, object]:
    """Return ("ok", fill_map's dict as its repr) or ("error", the exception's type and text)."""
    try:
        return "ok", repr(fill_map(text, assets))
    except Exception as exc:
        return "error", (type(exc), str(exc))


def test_fill_decoder_reads_what_fill_map_reads() -> None:
    # The report's decoder (index pairs read typed, mapped in one pass) against fill_map on
    # every kind of key: in and outside the list, negative, huge, a bool, a float, a string,
    # repeated; asset lists that are not lists; json's own literals.
    import random

    from scoring.board.load import _FillDecoder

    rng = random.Random(5)
    lists = ['["A","B","C"]', "[]", '["A"]', None, '{"0": "A"}', '"AB"']
    keys = ["0", "1", "2", "3", "-1", "-3", "true", "false", "1.0", '"Z"', '"A"',
            "123456789012345678901234567890"]
    values = ["0.5", "-0.0", "1e-320", "3", "123456789012345678901234567890", "NaN", "1e400",
              "null", '"x"']
    cases = [("[]", a) for a in lists] + [('{"A": 1.0, "B": -0.0}', a) for a in lists]
    for _ in range(3000):
        pairs = [f"[{rng.choice(keys[:4] if rng.random() < 0.7 else keys)},"
                 f" {rng.choice(values[:4] if rng.random() < 0.9 else values)}]"
                 for _ in range(rng.randrange(6))]
        cases.append(("[" + ", ".join(pairs) + "]", rng.choice(lists)))
    cases += [("[[0, 1, 2]]", lists[0]), ("[[0]]", lists[0]), ("[[0, 1]] x", lists[0])]
    decode = _FillDecoder()
    for text, assets in cases * 2:  # the second time with the lists parsed
        try:
            got: tuple[str, object] = "ok", repr(decode(text, assets))
        except Exception as exc:
            got = "error", (type(exc), str(exc))
        assert got == _outcome(text, assets), (text, assets)
    assert sum(_outcome(t, a)[0] == "ok" for t, a in cases) > 500


def test_latest_in_stored_order_equals_the_latest_by_id() -> None:
    from scoring.board.panels import _latest_by_mark, _latest_in_order

    rng = np.random.default_rng(3)
    for _ in range(40):
        marks = sorted({float(x) for x in rng.integers(0, 40, int(rng.integers(1, 6))) * 10.0})
        n = int(rng.integers(0, 200))
        ts = rng.choice([*marks, *(rng.integers(-10, int(marks[-1]) + 1, 8) * 1.0)], n)
        rows = [(str(rng.choice(["A", "B", "C"])), float(t),
                 None if rng.random() < 0.1 else float(rng.normal()), i)
                for i, t in enumerate(ts)]  # in stored (id) order, times not
        want = sorted((a, m, t, p) for a, m, t, p, _ in _latest_by_mark(rows, marks))
        got = _latest_in_order([r[:3] for r in rows], marks)
        assert sorted(got) == want and len(got) == len(want)


def test_the_store_read_at_once_equals_reading_it_row_by_row(
        dbs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The report's store (series, outcomes, fills; counts and rows read apart, in one read
    transaction) is what a row-by-row reading gives, and the connection is left as it was."""
    import shutil

    from scoring.board.load import _load_store

    for db in dbs:
        copy = tmp_path / db.name
        shutil.copy(db, copy)
        con = sqlite3.connect(copy)
        # outcomes that alternate within an agent's decisions, and an agent sorted first
        con.execute("UPDATE decisions SET outcome = CASE rowid % 5 WHEN 0 THEN 'hold'"
                    " WHEN 3 THEN 'error' ELSE outcome END WHERE market = 'equity'")
        con.execute("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                    " VALUES('!a', 'equity', 5.0, 'daily', 1.5, 0.25)")
        con.commit()
        series: dict[tuple[str, str], list[tuple]] = {}
        for a, m, t, v, c in con.execute("SELECT agent, market, ts, value, cash FROM equity"
                                         " WHERE kind='daily' ORDER BY agent, market, ts"):
            series.setdefault((a, m), []).append((t, v, c))
        outcomes: dict[tuple[str, str], dict[str, list[float]]] = {}
        for a, m, o, t in con.execute("SELECT agent, market, outcome, scheduled_ts FROM"
                                      " decisions ORDER BY agent, market, scheduled_ts"):
            outcomes.setdefault((a, m), {}).setdefault(o, []).append(t)
        fills: dict[tuple[str, str], list[tuple]] = {}
        for row in con.execute(FILLS):
            fills.setdefault((row[0], row[1]), []).append(
                (row[3], fill_map(row[4], row[10]), fill_map(row[9], row[10]), row[6],
                 float(row[5] or 0.0)))
        assert sum(len(o) > 1 for o in outcomes.values()) > 3 and len(fills) > 3
        mmap = con.execute("PRAGMA mmap_size").fetchone()
        store = _load_store(con, float("inf"))
        assert con.execute("PRAGMA mmap_size").fetchone() == mmap and not con.in_transaction
        assert repr(list(store.series.items())) == repr(list(series.items()))
        assert repr(list(store.outcomes.items())) == repr(list(outcomes.items()))
        got = {k: [(f.ts, f.trades, f.weights, f.cost, f.traded_value) for f in v]
               for k, v in store.fills.items()}
        assert repr(sorted(got.items())) == repr(sorted(fills.items()))  # decoded by market
        # inside the caller's transaction: its writes seen, the transaction left open
        con.execute("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                    " VALUES('!a', 'equity', 6.0, 'daily', 2.5, 0.5)")
        assert con.in_transaction
        assert _load_store(con, float("inf")).series[("!a", "equity")] == [
            (5.0, 1.5, 0.25), (6.0, 2.5, 0.5)]
        assert con.in_transaction
        con.rollback()
        con.execute("DROP TABLE books")  # a failed reading ends its transaction too
        con.commit()
        with pytest.raises(sqlite3.OperationalError, match="books"):
            _load_store(con, float("inf"))
        assert con.execute("PRAGMA mmap_size").fetchone() == mmap and not con.in_transaction
        con.close()
