"""Sparse JSON for the weight maps of decision rows (issue 16, point 4: a compact store).

A decision's ``allocation_json`` is stored without its zero weights: a validated allocation
names every asset of the market (about 0.75 KB per decision on the sample, most of it
``0.0``), and readers treat a missing asset as weight 0. Rows written before this change keep
their zeros and read the same. Fill weights are stored the same way, with the list of
the assets they had stored once (schema v10, below), since a decision's input hash is rebuilt
from them zeros included (docs/operations.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence

import msgspec

#: Store allocations without zero weights (off only to write the dense reference in tests).
SPARSE = True


def sparse_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Return ``weights`` without its zero entries (missing means 0)."""
    return {k: v for k, v in weights.items() if v != 0.0} if SPARSE else dict(weights)


def encode_allocation(allocation: Mapping[str, float] | None,
                      index: Mapping[str, int] | None = None) -> str | None:
    """Return the ``allocation_json`` of a decision row (``None``: no allocation).

    With ``index`` (asset -> its index in the round's asset list, :func:`asset_list`) the
    weights are ``[index, weight]`` pairs (schema v11).
    """
    if allocation is None:
        return None
    if index is not None and SPARSE and ASSET_INDEX:
        return _pairs(sparse_weights(allocation), index)
    # The store's JSON encoding (daemon.store.records.encode_json), not imported: the
    # store's records use this module.
    return json.dumps(sparse_weights(allocation), sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def asset_list(assets: Sequence[str]) -> tuple[str, str, dict[str, int]]:
    """Return (``asset_sets`` key, JSON, index) of a round's asset list, in its order."""
    text = _encode(list(assets))
    return (hashlib.sha256(text.encode()).hexdigest(), text,
            {a: i for i, a in enumerate(assets)})



# ---- fill weights -------------------------------------------------------------------------------
# A fill's weights are stored without their (positive) zero entries, and the fill names the
# sorted list of every asset its weights had (``fills.assets_sha256``, a key of ``asset_sets``:
# a round's fills share one). :func:`dense_fill_weights` gives back the dict as it was, zeros
# included, key for key (the recent allocations shown to agents, and so input hashes, list
# them). ``-0.0`` is kept: it encodes differently from ``0.0``.
#
# Since schema v11 a fill's weights and trades are JSON lists of ``[index, value]`` pairs, the
# index into that asset list (a Polymarket asset id is a 77-digit token id); a key not in the
# list stays a string. :func:`fill_map` reads either form: a JSON object is keyed by asset id.

#: Fills with the asset list their trades and weights index (``s.assets_json``; SQL).
FILLS = "fills f LEFT JOIN asset_sets s ON s.sha256 = f.assets_sha256"

#: Decisions (``d``) with their round's asset list (``s.assets_json``; SQL, schema v11).
DECISIONS = ("decisions d LEFT JOIN observations o ON o.sha256 = d.observation_sha256"
             " LEFT JOIN asset_sets s ON s.sha256 = o.assets_sha256")

#: Key fill weights and trades by asset index (off only to write v10 rows in tests).
ASSET_INDEX = True

_SETS: dict[tuple[str, ...], tuple[str, str, dict[str, int]]] = {}


def _encode(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _pairs(mapping: Mapping[str, float], index: Mapping[str, int]) -> str:
    """Return ``mapping`` as ``[asset index or key, value]`` pairs, in key order.

    msgspec writes the shortest round-trip floats (read back identically, about 5x faster than
    ``json`` here: rounds encode one per agent); it writes a non-finite number as ``null``,
    which is refused like ``json``'s ``allow_nan=False`` does.
    """
    out = msgspec.json.encode([[index.get(k, k), mapping[k]] for k in sorted(mapping)])
    if b",null]" in out:
        raise ValueError("Out of range float values are not JSON compliant")
    return out.decode()


def fill_columns(weights: Mapping[str, float], trades: Mapping[str, float] | None = None
                 ) -> tuple[str, str | None, str | None, str | None]:
    """Return (``weights_json``, ``assets_sha256``, ``assets_json``, ``trades_json``) of a fill.

    ``trades_json`` is ``None`` without ``trades``.
    """
    if not SPARSE:
        return _encode(weights), None, None, None if trades is None else _encode(trades)
    keys = tuple(sorted(weights))
    got = _SETS.get(keys)
    if got is None:
        text = _encode(list(keys))
        got = (hashlib.sha256(text.encode()).hexdigest(), text,
               {k: i for i, k in enumerate(keys)})
        if len(_SETS) >= 256:
            _SETS.clear()
        _SETS[keys] = got
    kept = {k: v for k, v in weights.items() if v != 0.0 or math.copysign(1.0, v) < 0.0}
    if not ASSET_INDEX:
        return _encode(kept), got[0], got[1], None if trades is None else _encode(trades)
    return (_pairs(kept, got[2]), got[0], got[1],
            None if trades is None else _pairs(trades, got[2]))


def fill_map(text: str, assets_json: str | None) -> dict[str, float]:
    """Return a stored fill's weights or trades, or a decision's allocation, keyed by asset id
    (as stored, zeros left out; ``assets_json``: the list the indexes point into).

    Raise ``ValueError`` for pairs that name an asset index outside ``assets_json``.
    """
    value = json.loads(text)
    if not isinstance(value, list):
        return dict(value)
    assets = json.loads(assets_json) if assets_json is not None else []
    out: dict[str, float] = {}
    for key, v in value:
        if isinstance(key, int):
            if not 0 <= key < len(assets):
                raise ValueError(f"stored fill names asset index {key} of {len(assets)}")
            key = assets[key]
        out[key] = v
    return out


def fill_json(text: str, assets_json: str | None) -> str:
    """Return :func:`fill_map` as JSON keyed by asset id (the text a v10 row has)."""
    return text if not text.startswith("[") else _encode(fill_map(text, assets_json))


def dense_fill_weights(weights_json: str, assets_json: str | None) -> dict[str, float]:
    """Return a stored fill's weights with every asset it had (dense rows: as stored)."""
    weights = fill_map(weights_json, assets_json)
    if assets_json is None:
        return weights
    out = dict.fromkeys(json.loads(assets_json), 0.0)
    out.update(weights)
    return dict(sorted(out.items()))
