"""The report's JSON text: ``json.dumps(x, sort_keys=True, indent=2, allow_nan=False)``, faster.

With an indent, :mod:`json` encodes in Python through nested generators, one ``yield`` per
token at every level: most of the time of a 1,000-agent report's JSON. Without an indent it
encodes in C (``c_make_encoder``: the same key order, ``float.__repr__`` and ``int.__repr__`` of
numbers and the same string escaping). :func:`dumps_indented` writes that compact text and lets
``msgspec.json.format`` indent it: it copies every token's characters and writes the separators
and indentation ``json`` writes with ``indent=2`` (``"{}"`` and ``"[]"`` for empty containers).
Anything the compact pass refuses (a non-finite float, a cycle, another type, unsortable keys)
is left to ``json.dumps`` itself, so the error is :mod:`json`'s.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = ["dumps_indented"]

_compact = json.JSONEncoder(sort_keys=True, allow_nan=False, separators=(",", ":")).encode
_format = msgspec.json.format


def dumps_indented(obj: Any) -> str:
    """Return ``json.dumps(obj, sort_keys=True, indent=2, allow_nan=False)``."""
    try:
        text = _compact(obj)
        return _format(text, indent=2)
    except (ValueError, TypeError, RecursionError, msgspec.DecodeError):
        return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False)
