"""Decision allocations are stored without zero weights and read the same (issue 16, point 4).

The sample is replayed twice: once writing dense allocations as main did (the reference) and
once sparse. Everything but ``allocation_json`` is identical, the sparse allocations are the
dense ones without their zeros, and the report, inputs and backups read the same figures.
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
from daemon.sparse_rows import encode_allocation, sparse_weights

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
    fills = "SELECT * FROM fills ORDER BY agent, market, scheduled_ts"
    assert _rows(dbs[0], fills) == _rows(dbs[1], fills)


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
        for agent, market, ts, sha in rows:
            text = load_input(con, agent, market, ts)
            assert text is not None and hashlib.sha256(text.encode()).hexdigest() == sha
    finally:
        con.close()


def test_backup_keeps_the_sparse_rows(dbs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "b.db"
    assert main(["backup", "--db", str(dbs[1]), "--out", str(out)]) == 0
    assert _rows(out, DECISIONS) == _rows(dbs[1], DECISIONS)
