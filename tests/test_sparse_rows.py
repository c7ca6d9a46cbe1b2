"""Allocations and fill weights are stored without zero weights and read the same (issue 16.4).

The same goes for fill weights, which name the list of the assets they had. The sample is
replayed twice: once writing dense rows as main did (the reference) and once sparse. The sparse
allocations and fill weights are the dense ones without their zeros, and the report, the
rebuilt inputs (hash for hash) and backups read the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

import daemon.sparse_rows as sparse_rows
from agents.stored_input import load_input
from daemon.cli import main
from daemon.config import load_config
from daemon.replay import replay
from daemon.sparse_rows import (
    dense_fill_weights,
    encode_allocation,
    fill_columns,
    sparse_weights,
)
from daemon.store import encode_json

ROOT = Path(__file__).resolve().parents[1]
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
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sparse")
    dense, sparse = d / "dense.db", d / "sparse.db"
    sparse_rows.SPARSE = False
    try:
        asyncio.run(replay(str(SAMPLE), load_config(SAMPLE_CONFIG), str(dense), progress=False))
    finally:
        sparse_rows.SPARSE = True
    asyncio.run(replay(str(SAMPLE), load_config(SAMPLE_CONFIG), str(sparse), progress=False))
    return dense, sparse


def _rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


DECISIONS = ("SELECT agent, market, scheduled_ts, outcome, reason, input_json, input_sha256,"
             " raw_output, allocation_json, observation_sha256 FROM decisions"
             " ORDER BY agent, market, scheduled_ts")


def test_sparse_allocations_are_the_dense_ones_without_zeros(dbs: tuple[Path, Path]) -> None:
    dense, sparse = (_rows(db, DECISIONS) for db in dbs)
    assert len(dense) == len(sparse) > 100
    zeros = 0
    for d, s in zip(dense, sparse, strict=True):
        assert d[:8] + d[9:] == s[:8] + s[9:]
        if d[8] is None:
            assert s[8] is None
            continue
        full, kept = json.loads(d[8]), json.loads(s[8])
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


def test_sparse_fill_weights_give_back_the_dense_ones(dbs: tuple[Path, Path]) -> None:
    dense, sparse = (_rows(db, FILLS) for db in dbs)
    assert len(dense) == len(sparse) > 100
    for d, s in zip(dense, sparse, strict=True):
        assert d[:9] == s[:9] and d[10] is None and s[10] is not None
        kept = json.loads(s[9])
        assert 0.0 not in kept.values() and len(kept) < len(json.loads(d[9]))
        assert encode_json(dense_fill_weights(s[9], s[10])) == d[9]  # key for key, same floats
    size = "SELECT SUM(LENGTH(weights_json)) FROM fills"
    assert _rows(dbs[1], size)[0][0] < 0.5 * _rows(dbs[0], size)[0][0]
    # One asset list per distinct set of assets, not per fill.
    assert _rows(dbs[1], "SELECT COUNT(*) FROM asset_sets")[0][0] < len(sparse) / 10


def test_negative_zero_weights_are_kept() -> None:
    w, sha, assets = fill_columns({"B": 0.0, "A": -0.0, "CASH": 1.0})
    assert w == '{"A":-0.0,"CASH":1.0}' and assets == '["A","B","CASH"]'
    assert sha == hashlib.sha256(assets.encode()).hexdigest()
    assert dense_fill_weights(w, assets) == {"A": -0.0, "B": 0.0, "CASH": 1.0}
    assert dense_fill_weights('{"A":0.0}', None) == {"A": 0.0}  # rows before v10: as stored


def test_report_and_inputs_read_the_same(dbs: tuple[Path, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = []
    for db in dbs:
        assert main(["report", "--db", str(db), "--json"]) == 0
        out.append(json.loads(capsys.readouterr().out))
    assert out[0] == out[1] and out[0]
    con = sqlite3.connect(dbs[1])
    try:
        rows = con.execute("SELECT agent, market, scheduled_ts, input_sha256 FROM decisions"
                           " WHERE input_sha256 IS NOT NULL").fetchall()
        assert len(rows) > 100
        ref = sqlite3.connect(dbs[0])
        for agent, market, ts, sha in rows:
            text = load_input(con, agent, market, ts)
            assert text is not None and hashlib.sha256(text.encode()).hexdigest() == sha
            assert text == load_input(ref, agent, market, ts)
        ref.close()
        recent = [r for (r,) in con.execute("SELECT input_json FROM decisions")
                  if r and '"recent_fills":[' in r and '"recent_fills":[]' not in r]
        assert len(recent) > 50  # inputs do rebuild past allocations from sparse fills
    finally:
        con.close()


def test_backup_keeps_the_sparse_rows(dbs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "b.db"
    assert main(["backup", "--db", str(dbs[1]), "--out", str(out)]) == 0
    assert _rows(out, DECISIONS) == _rows(dbs[1], DECISIONS)


async def test_recent_allocations_read_back_dense(tmp_path: Path) -> None:
    """A round after a restart shows the agent the same past weights, zeros included."""
    from daemon.store import FillRecord, RoundCommit, Store

    weights = [{"A": 0.5, "B": 0.0, "CASH": 0.5}, {"A": 0.0, "B": 1.0, "C": 0.0, "CASH": 0.0}]
    store = await Store.open(tmp_path / "s.db")
    try:
        for i, w in enumerate(weights):
            rc = RoundCommit()
            rc.fills.append(FillRecord("a1", "equity", 10.0 + i, 11.0 + i, {}, 0.0, 0.0,
                                       500.0, 499.0 - i, w))
            await store.commit_round(rc)
        stored = await store.fetchall("SELECT weights_json FROM fills ORDER BY ts")
        assert stored == [('{"A":0.5,"CASH":0.5}',), ('{"B":1.0}',)]
        want = [(11.0, weights[0], 499.0), (12.0, weights[1], 498.0)]
        assert await store.recent_allocations("a1", "equity", 5) == want
        assert await store.recent_allocations_of("equity", ["a1", "a2"], 5) == {
            "a1": want, "a2": []}
        got = await store.recent_allocations("a1", "equity", 5)
        assert [list(w) for _, w, _ in got] == [["A", "B", "CASH"], ["A", "B", "C", "CASH"]]
    finally:
        await store.close()
