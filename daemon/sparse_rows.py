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
from collections.abc import Mapping

#: Store allocations without zero weights (off only to write the dense reference in tests).
SPARSE = True


def sparse_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Return ``weights`` without its zero entries (missing means 0)."""
    return {k: v for k, v in weights.items() if v != 0.0} if SPARSE else dict(weights)


def encode_allocation(allocation: Mapping[str, float] | None) -> str | None:
    """Return the ``allocation_json`` of a decision row (``None``: no allocation)."""
    if allocation is None:
        return None
    # The store's JSON encoding (daemon.store.encode_json), not imported: the store uses this.
    return json.dumps(sparse_weights(allocation), sort_keys=True, separators=(",", ":"),
                      allow_nan=False)



# ---- fill weights -------------------------------------------------------------------------------
# A fill's weights are stored without their (positive) zero entries, and the fill names the
# sorted list of every asset its weights had (``fills.assets_sha256``, a key of ``asset_sets``:
# a round's fills share one). :func:`dense_fill_weights` gives back the dict as it was, zeros
# included, key for key (the recent allocations shown to agents, and so input hashes, list
# them). ``-0.0`` is kept: it encodes differently from ``0.0``.

_SETS: dict[tuple[str, ...], tuple[str, str]] = {}


def _encode(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def fill_columns(weights: Mapping[str, float]) -> tuple[str, str | None, str | None]:
    """Return (sparse ``weights_json``, ``assets_sha256``, ``assets_json``) of a fill."""
    if not SPARSE:
        return _encode(weights), None, None
    keys = tuple(sorted(weights))
    got = _SETS.get(keys)
    if got is None:
        text = _encode(list(keys))
        got = (hashlib.sha256(text.encode()).hexdigest(), text)
        if len(_SETS) >= 256:
            _SETS.clear()
        _SETS[keys] = got
    kept = {k: v for k, v in weights.items() if v != 0.0 or math.copysign(1.0, v) < 0.0}
    return _encode(kept), got[0], got[1]


def dense_fill_weights(weights_json: str, assets_json: str | None) -> dict[str, float]:
    """Return a stored fill's weights with every asset it had (dense rows: as stored)."""
    weights: dict[str, float] = json.loads(weights_json)
    if assets_json is None:
        return weights
    out = dict.fromkeys(json.loads(assets_json), 0.0)
    out.update(weights)
    return dict(sorted(out.items()))
