"""Issue 27, point 1: the report's JSON text equals ``json.dumps(sort_keys, indent=2)``."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scoring.board.json_text import EncodedDict, EncodedList, compact, dumps_indented


def _reference(x: Any) -> str:
    """Return the text :mod:`json` writes (the reference)."""
    return json.dumps(x, sort_keys=True, indent=2, allow_nan=False)


def _random(rng: np.random.Generator, depth: int) -> Any:
    """Return a random nest of dicts, lists and tuples of JSON scalars."""
    kind = int(rng.integers(0, 10 if depth < 4 else 6))
    if kind == 0:
        return float(rng.normal() * 10.0 ** int(rng.integers(-8, 9)))
    if kind == 1:
        return int(rng.integers(-10**6, 10**6))
    if kind == 2:
        return [None, True, False][int(rng.integers(0, 3))]
    if kind == 3:
        return "".join(rng.choice(list('ab"\\\n\té€ x/\x01'), int(rng.integers(0, 6))))
    if kind == 4:
        return [float(v) for v in rng.normal(size=int(rng.integers(0, 5)))]
    if kind == 5:
        return []
    if kind in (6, 7):
        return {"".join(rng.choice(list("kz_é\"19"), 3)): _random(rng, depth + 1)
                for _ in range(int(rng.integers(0, 6)))}
    items = [_random(rng, depth + 1) for _ in range(int(rng.integers(0, 5)))]
    return tuple(items) if kind == 8 else items


@pytest.mark.parametrize("seed", range(30))
def test_random_nests_give_json_text(seed: int) -> None:
    x = {"board": _random(np.random.default_rng(seed), 0), "n": seed}
    assert dumps_indented(x) == _reference(x)


def test_scalars_subclasses_and_odd_keys_give_json_text() -> None:
    cases: list[Any] = [1.5, -0.0, 1e-300, 2**70, "é", None, True, [], {}, (), [[]], [{}],
                        {"a": np.float64(0.1), "b": [np.float64(2.5), 1.0]},
                        {"x": OrderedDict(b=1, a=2)}, {"k": [1.0, 2]}, {1: "int key"},
                        {2.5: 1, "a": {"b": {"c": [1e20, 1e-5, 123456789.123]}}}]
    for x in cases:
        try:
            want = _reference(x)
        except TypeError:  # mixed key types cannot be sorted: the same error
            with pytest.raises(TypeError):
                dumps_indented(x)
            continue
        assert dumps_indented(x) == want


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_raise_as_json_does(bad: float) -> None:
    for x in ({"a": bad}, [1.0, bad], {"a": [bad]}, [{"b": 1, "c": bad}]):
        with pytest.raises(ValueError):
            dumps_indented(x)


def _clean_reference(x: Any) -> Any:
    """Return the cleaned value as the report always cleaned it (one isinstance chain)."""
    if isinstance(x, bool | None):
        return x
    if isinstance(x, float | np.floating):
        return float(f"{float(x):.12g}") if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, dict):
        return {k: _clean_reference(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean_reference(v) for v in x]
    return x


@pytest.mark.parametrize("seed", range(10))
def test_clean_equals_the_reference(seed: int) -> None:
    from scoring.board.text import _clean

    rng = np.random.default_rng(seed)
    x = {"nest": _random(rng, 0), "np": [np.float64(1 / 3), np.int64(7), np.float32(0.1),
                                         np.bool_(True), math.nan, -math.inf, (1.0, math.inf)],
         "od": OrderedDict(z=[0.1 + 0.2, 2 / 3], a=np.float64(math.nan)),
         "floats": [float(v) for v in rng.normal(size=50) * 1e-3] + [math.nan]}
    got, want = _clean(x), _clean_reference(x)
    assert repr(got) == repr(want)
    assert got["floats"][0] == float(f"{x['floats'][0]:.12g}") and got["floats"][-1] is None
    assert type(got["np"][1]) is int and type(got["od"]) is dict


@pytest.mark.parametrize("seed", range(5))
def test_clean_points_equal_clean_of_the_series(seed: int) -> None:
    from scoring.board.text import _clean, _clean_points

    rng = np.random.default_rng(seed)
    ts = [float(t) for t in 1.7e9 + np.cumsum(rng.integers(1, 90_000, 40))]
    odd = [0.0, -0.0, math.nan, math.inf, -math.inf, 1 / 3, 5e-324, 1e300]
    series: dict[Any, Any] = {
        f"a{i}": [[t, float(v)] for t, v in zip(ts, rng.normal(1e4, 3e3, 40), strict=True)]
        for i in range(6)}
    series["odd"] = [[t, v] for t in odd for v in odd]  # times and values of every kind
    series["mixed"] = [[ts[0], 1], (ts[1], 2.5), [np.float64(ts[2]), 0.1], [ts[3]], 0.25,
                       [ts[4], 0.1, 0.2], [ts[5], None], "x"]
    series["not a list"] = (1.5, math.nan)
    series[7] = 0.1 + 0.2
    got, want = _clean_points(series), _clean(series)
    assert repr(got) == repr(want)  # the same values, -0.0 and None included
    assert got["odd"][8][0] == -0.0 and math.copysign(1.0, got["odd"][8][0]) == -1.0


@pytest.mark.parametrize("seed", range(20))
def test_encoded_parts_are_spliced_as_json_writes_them(seed: int) -> None:
    # A board whose rows and per-market series arrive as compact text made elsewhere: the
    # text is the one json writes for the plain board.
    rng = np.random.default_rng(seed)
    rows = [{"a": _random(rng, 2), "b": i} for i in range(int(rng.integers(0, 4)))]
    series = {m: {"x": _random(rng, 2)} for m in ("equity", "polymarket")[: seed % 3]}
    plain = {"rows": rows, "series": series, "head": _random(rng, 1), "z": [1.5]}
    encoded = {**plain, "rows": EncodedList(rows, compact(rows)),
               "series": {m: EncodedDict(s, compact(s)) for m, s in series.items()}}
    assert compact(rows) == json.dumps(rows, sort_keys=True, separators=(",", ":"))
    assert dumps_indented(encoded) == _reference(plain)


def test_the_encoded_text_is_what_is_written_and_a_bad_board_still_fails() -> None:
    # The carried text is trusted (made where the items were): it, not the items, is written.
    board = {"rows": EncodedList([{"a": 1}], '[{"a":2}]'), "k": 1}
    assert json.loads(dumps_indented(board)) == {"rows": [{"a": 2}], "k": 1}
    # Beside an unsortable key, or a non-finite number elsewhere: json's own error.
    with pytest.raises(TypeError):
        dumps_indented({"rows": EncodedList([], "[]"), 1: 2})
    with pytest.raises(ValueError):
        dumps_indented({"rows": EncodedList([], "[]"), "x": math.nan})


def test_a_report_with_its_rows_encoded_where_computed_writes_json_text(tmp_path: Path) -> None:
    # ``load_report(json_wanted=True)`` (``report --json``): each market's rows and series
    # carry their text; the report's JSON is the text json writes for the same board.
    from daemon.store.reports import load_report
    from scoring.board.text import to_json
    from tests.scoring.test_leaderboard import AGENTS_CFG, PLANS, PRICES, build_store

    db = tmp_path / "s.db"
    build_store(db, PRICES, PLANS, agents_cfg=AGENTS_CFG)
    plain, encoded = load_report(db).board, load_report(db, json_wanted=True).board
    assert type(plain["rows"]) is list and isinstance(encoded["rows"], EncodedList)
    assert all(isinstance(s, EncodedDict) for s in encoded["series"].values())
    assert encoded == plain and len(plain["rows"]) == len(PLANS)
    assert to_json(encoded) == to_json(plain) == _reference(plain) + "\n"
