"""The report's JSON text: ``json.dumps(x, sort_keys=True, indent=2, allow_nan=False)``, faster.

With an indent, :mod:`json` encodes in Python through nested generators, one ``yield`` per
token at every level: most of the time of a 1,000-agent report's JSON. :func:`dumps_indented`
writes the same characters (the same separators, indentation, key order, ``float.__repr__`` and
``int.__repr__`` of numbers and :mod:`json`'s own string escaping) with one recursive call per
container and a joined run of numbers for a list of floats. Anything it does not handle as
:mod:`json` does (non-string keys, another type, a non-finite float, a cycle) is left to
``json.dumps`` itself, so the text or the error is :mod:`json`'s.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii
from typing import Any

__all__ = ["dumps_indented"]

_FLOAT = float.__repr__
_INT = int.__repr__
_finite = math.isfinite
_INDENT = "  "
_DEPTH = 200  # deeper than this: json.dumps (its own recursion checks)


class _Other(Exception):
    """Raised for anything left to ``json.dumps``."""


def _scalar(v: Any) -> str:
    """Return the JSON of a number, string, boolean or null as :mod:`json` writes it."""
    if isinstance(v, str):
        return encode_basestring_ascii(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return _INT(v)
    if isinstance(v, float):
        if not _finite(v):
            raise _Other
        return _FLOAT(v)
    raise _Other


def _encode(v: Any, level: int, out: list[str]) -> None:
    """Append the JSON of ``v`` at indentation ``level`` to ``out``."""
    t = type(v)
    if t is dict:
        if not v:
            out.append("{}")
            return
        if level > _DEPTH:
            raise _Other
        inner = "\n" + _INDENT * (level + 1)
        sep = "," + inner
        first = True
        keys = list(v)
        for k in keys:
            if type(k) is not str:
                raise _Other
        out.append("{")
        for k in sorted(keys):
            out.append(inner if first else sep)
            first = False
            out.append(encode_basestring_ascii(k))
            out.append(": ")
            x = v[k]
            tx = type(x)
            if tx is float:
                if not _finite(x):
                    raise _Other
                out.append(_FLOAT(x))
            elif tx is str:
                out.append(encode_basestring_ascii(x))
            elif tx is dict or tx is list or tx is tuple:
                _encode(x, level + 1, out)
            else:
                out.append(_scalar(x))
        out.append("\n" + _INDENT * level + "}")
        return
    if t is list or t is tuple:
        if not v:
            out.append("[]")
            return
        if level > _DEPTH:
            raise _Other
        inner = "\n" + _INDENT * (level + 1)
        sep = "," + inner
        if all(type(x) is float for x in v):
            text = sep.join(map(_FLOAT, v))
            if "n" in text:  # nan or inf: not allowed
                raise _Other
            out.append("[" + inner + text + "\n" + _INDENT * level + "]")
            return
        out.append("[")
        first = True
        for x in v:
            out.append(inner if first else sep)
            first = False
            tx = type(x)
            if tx is dict or tx is list or tx is tuple:
                _encode(x, level + 1, out)
            else:
                out.append(_scalar(x))
        out.append("\n" + _INDENT * level + "]")
        return
    if isinstance(v, dict | list | tuple):  # a subclass: json's own path
        raise _Other
    out.append(_scalar(v))


def dumps_indented(obj: Any) -> str:
    """Return ``json.dumps(obj, sort_keys=True, indent=2, allow_nan=False)``."""
    out: list[str] = []
    try:
        _encode(obj, 0, out)
    except _Other:
        return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False)
    return "".join(out)
