"""Sparse JSON for the weight maps of decision rows (issue 16, point 4: a compact store).

A decision's ``allocation_json`` is stored without its zero weights: a validated allocation
names every asset of the market (about 0.75 KB per decision on the sample, most of it
``0.0``), and readers treat a missing asset as weight 0. Rows written before this change keep
their zeros and read the same. Fill weights are not made sparse here: a decision's input
hash is rebuilt from them, and the zero-weight assets it lists are not recoverable from the
rest of the store (docs/operations.md).
"""

from __future__ import annotations

import json
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

