"""Issue 27, point 1: the report's JSON text equals ``json.dumps(sort_keys, indent=2)``."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

from scoring.board.json_text import dumps_indented


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
