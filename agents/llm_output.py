"""Turn a model's raw text into a validated allocation, or say in one line why it cannot.

Pure functions, no I/O. Tolerated around the JSON object: leading or trailing prose, Markdown code
fences, ``<think>...</think>`` blocks and trailing commas. Nothing else is repaired: weights must be
JSON numbers (``"30%"`` is invalid, never coerced), keys must be presented asset names or CASH, and
the allocation must pass :func:`agents.validation.validate_allocation` (finite, non-negative, sum
within tolerance, one side per Polymarket question).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.base import CASH, Observation
from agents.validation import SUM_TOLERANCE, InvalidAllocation, validate_allocation

#: Longest text searched for a JSON object (characters); longer answers are cut.
MAX_TEXT_CHARS = 200_000
#: At most this many '{' positions are tried as the start of an object.
MAX_OBJECT_STARTS = 256

_THINK_BLOCK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)


class InvalidOutput(ValueError):
    """The model's output is unusable (unparsable, truncated or schema-invalid); one line."""


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A validated answer: normalised weights over every asset plus CASH, and the reasoning."""

    allocation: dict[str, float]
    reasoning: str


def strip_think(text: str) -> str:
    """Return ``text`` without ``<think>`` blocks (an unclosed one runs to the end)."""
    text = _THINK_BLOCK.sub(" ", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # a closing tag without its opening one: the thinking came first
        text = text[closes[-1].end() :]
    m = _THINK_OPEN.search(text)
    if m:
        text = text[: m.start()]
    return text


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidOutput(f"duplicate key {key!r} in JSON object")
        out[key] = value
    return out


def _strip_trailing_commas(s: str) -> str:
    """Remove commas directly before ``}`` or ``]`` outside JSON strings."""
    out: list[str] = []
    in_str = False
    escaped = False
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if in_str:
            out.append(c)
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == ",":
            j = i + 1
            while j < n and s[j] in " \t\r\n":
                j += 1
            if j >= n or s[j] not in "}]":
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _object_end(s: str, start: int) -> int | None:
    """Return the index of the ``}`` closing the object opened at ``start`` (strings aware)."""
    depth = 0
    in_str = False
    escaped = False
    for i in range(start, len(s)):
        c = s[i]
        if in_str:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i if c == "}" else None
            if depth < 0:
                return None
    return None


def _candidates(text: str) -> list[str]:
    """Return the balanced top-level ``{...}`` substrings of ``text``, in order."""
    out: list[str] = []
    pos = 0
    tries = 0
    while tries < MAX_OBJECT_STARTS:
        start = text.find("{", pos)
        if start < 0:
            break
        tries += 1
        end = _object_end(text, start)
        if end is None:
            pos = start + 1
        else:
            out.append(text[start : end + 1])
            pos = end + 1
    return out


def _loads(s: str) -> Any:
    return json.loads(s, object_pairs_hook=_no_duplicates)


def extract_json(text: str) -> dict[str, Any]:
    """Return the answer object (the last JSON object holding ``allocations``) found in ``text``.

    Raise :class:`InvalidOutput` when there is none.
    """
    if not isinstance(text, str):
        raise InvalidOutput(f"response is not text: {type(text).__name__}")
    body = strip_think(text[:MAX_TEXT_CHARS])
    if not body.strip():
        raise InvalidOutput("empty response")
    found: dict[str, Any] | None = None
    other_object = False
    first_error = ""
    for cand in _candidates(body):
        try:
            try:
                obj = _loads(cand)
            except json.JSONDecodeError:
                obj = _loads(_strip_trailing_commas(cand))
        except InvalidOutput as exc:
            first_error = first_error or str(exc)
            continue
        except (ValueError, RecursionError) as exc:
            first_error = first_error or f"malformed JSON: {_one_line(str(exc))}"
            continue
        if isinstance(obj, dict) and "allocations" in obj:
            found = obj
        else:
            other_object = True
    if found is not None:
        return found
    if first_error:
        raise InvalidOutput(first_error)
    if other_object:
        raise InvalidOutput("JSON object has no 'allocations' key")
    raise InvalidOutput("no JSON object found in response")


def map_keys(raw: Any, key_map: Mapping[str, str] | None) -> Any:
    """Return ``raw`` with presented asset names replaced by asset ids via ``key_map``.

    With ``key_map`` ``None`` the names are the asset ids and ``raw`` is returned unchanged; with a
    mapping, a name that is neither in it nor CASH is invalid. Non-mappings pass through (the
    validator rejects them).
    """
    if key_map is None or not isinstance(raw, Mapping):
        return raw
    out: dict[Any, Any] = {}
    for key, value in raw.items():
        if key == CASH:
            out[CASH] = value
        elif isinstance(key, str) and key in key_map:
            out[key_map[key]] = value
        else:
            raise InvalidOutput(f"unknown asset {key!r}")
    return out


def parse_output(
    text: str,
    obs: Observation,
    *,
    key_map: Mapping[str, str] | None = None,
    tolerance: float = SUM_TOLERANCE,
) -> ParsedOutput:
    """Return the validated allocation in ``text`` for ``obs`` or raise :class:`InvalidOutput`."""
    obj = extract_json(text)
    reasoning = obj.get("reasoning", "")
    if not isinstance(reasoning, str):
        reasoning = json.dumps(reasoning, ensure_ascii=False, default=str)
    try:
        allocation = validate_allocation(
            map_keys(obj["allocations"], key_map), obs, tolerance=tolerance
        )
    except InvalidAllocation as exc:
        raise InvalidOutput(_one_line(str(exc))) from exc
    except OverflowError as exc:  # e.g. a 400-digit integer or weights summing past 1e308
        raise InvalidOutput(f"weights out of range: {_one_line(str(exc))}") from exc
    return ParsedOutput(allocation=allocation, reasoning=reasoning)


def check_response(
    content: str | None,
    finish_reason: str | None,
    obs: Observation,
    *,
    key_map: Mapping[str, str] | None = None,
    tolerance: float = SUM_TOLERANCE,
) -> ParsedOutput:
    """Return the validated answer of one model response or raise :class:`InvalidOutput`.

    A truncated response (``finish_reason == "length"``) is invalid whatever it contains.
    """
    if finish_reason == "length":
        raise InvalidOutput("truncated output (finish_reason=length)")
    if content is None:
        raise InvalidOutput("empty response")
    return parse_output(content, obs, key_map=key_map, tolerance=tolerance)


def _one_line(s: str, limit: int = 300) -> str:
    flat = " ".join(s.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
