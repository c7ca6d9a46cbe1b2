"""The report's JSON text: ``json.dumps(x, sort_keys=True, indent=2, allow_nan=False)``, faster.

With an indent, :mod:`json` encodes in Python through nested generators, one ``yield`` per
token at every level: most of the time of a 1,000-agent report's JSON. Without an indent it
encodes in C (``c_make_encoder``: the same key order, ``float.__repr__`` and ``int.__repr__`` of
numbers and the same string escaping). :func:`dumps_indented` writes that compact text and lets
``msgspec.json.format`` indent it: it copies every token's characters and writes the separators
and indentation ``json`` writes with ``indent=2`` (``"{}"`` and ``"[]"`` for empty containers).
Anything the compact pass refuses (a non-finite float, a cycle, another type, unsortable keys)
is left to ``json.dumps`` itself, so the error is :mod:`json`'s.

A large part may arrive already encoded: an :class:`EncodedList` or :class:`EncodedDict` is a
list or dict that also carries its compact text (:func:`compact`), made where its items were
computed (a report's market rows, in the process that scored them); the text is spliced in
where the container stands, up to :data:`_SPLICE_DEPTH` levels of plain dicts down (the board's
``rows`` and each market's ``series``), in the key order ``sort_keys`` gives.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = ["EncodedDict", "EncodedList", "compact", "dumps_indented"]

_compact = json.JSONEncoder(sort_keys=True, allow_nan=False, separators=(",", ":")).encode
_format = msgspec.json.format
_SPLICE_DEPTH = 2  # plain dicts searched for encoded parts: the board and its "series"


def compact(obj: Any) -> str:
    """Return ``json.dumps(obj, sort_keys=True, allow_nan=False, separators=(",", ":"))``."""
    return _compact(obj)


class EncodedList(list[Any]):
    """A list with its compact JSON text (:func:`compact` of the same items), kept for
    :func:`dumps_indented`; whoever makes one vouches that the two agree and changes neither."""

    def __init__(self, items: list[Any], text: str) -> None:
        super().__init__(items)
        self.text = text


class EncodedDict(dict[str, Any]):
    """A dict with its compact JSON text (as :class:`EncodedList`)."""

    def __init__(self, items: dict[str, Any], text: str) -> None:
        super().__init__(items)
        self.text = text


def _holds_encoded(obj: Any, depth: int) -> bool:
    """Tell whether ``obj`` is, or holds within ``depth`` levels of plain dicts, an encoded
    container."""
    if isinstance(obj, EncodedList | EncodedDict):
        return True
    return depth > 0 and type(obj) is dict and any(_holds_encoded(v, depth - 1)
                                                   for v in obj.values())


def _spliced(obj: Any, depth: int) -> str:
    """Return :func:`compact` of ``obj``, the encoded containers' texts spliced in."""
    if isinstance(obj, EncodedList | EncodedDict):
        return obj.text
    if depth > 0 and type(obj) is dict and _holds_encoded(obj, depth):
        if not all(type(k) is str for k in obj):
            raise TypeError("encoded parts are spliced under string keys only")
        return "{" + ",".join(f"{_compact(k)}:{_spliced(v, depth - 1)}"
                              for k, v in sorted(obj.items())) + "}"
    return _compact(obj)


def dumps_indented(obj: Any) -> str:
    """Return ``json.dumps(obj, sort_keys=True, indent=2, allow_nan=False)``."""
    try:
        text = _spliced(obj, _SPLICE_DEPTH)
        return _format(text, indent=2)
    except (ValueError, TypeError, RecursionError, msgspec.DecodeError):
        return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False)
