"""Turn a model's raw text into a validated allocation, or say in one line why it cannot.

Pure functions, no I/O, work linear in the text's length. Tolerated around the JSON object:
leading or trailing prose, Markdown code fences, ``<think>...</think>`` blocks (an unclosed one is
searched when nothing outside it answers) and trailing commas. Several answer objects with
different allocations are ambiguous, never resolved by guessing. Nothing else is repaired:
weights must be JSON numbers (``"30%"`` is invalid, never coerced), keys must be presented asset
names or CASH, and the allocation must pass :func:`agents.validation.validate_allocation`
(finite, non-negative, sum within tolerance, one side per Polymarket question).
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
#: Times the object scan restarts after an unterminated string swallowed the rest of the text.
MAX_SCAN_RESTARTS = 8

_THINK_TAG = re.compile(r"<(/?)think(?:ing)?>", re.IGNORECASE)
#: The characters that matter to the object scan; a backslash takes the next character with it.
_STRUCTURE = re.compile(r'\\.|[{}\[\]"]', re.DOTALL)


class InvalidOutput(ValueError):
    """The model's output is unusable (unparsable, truncated or schema-invalid); one line."""


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A validated answer: normalised weights over every asset plus CASH, and the reasoning."""

    allocation: dict[str, float]
    reasoning: str


def split_think(text: str) -> tuple[str, str]:
    """Return (``text`` outside ``<think>`` blocks, the text of an unclosed last block).

    Closed blocks are removed; a closing tag without its opening one drops everything before it
    (the thinking came first); an unclosed block runs to the end. One pass over the tags.
    """
    kept: list[str] = []
    pos = 0
    open_at: int | None = None
    for m in _THINK_TAG.finditer(text):
        if m.group(1):  # </think>
            if open_at is None:
                kept.clear()
            open_at = None
            pos = m.end()
        elif open_at is None:
            kept.append(text[pos : m.start()])
            open_at = m.end()
    if open_at is None:
        kept.append(text[pos:])
        return " ".join(kept), ""
    return " ".join(kept), text[open_at:]


def strip_think(text: str) -> str:
    """Return ``text`` without ``<think>`` blocks (an unclosed one runs to the end)."""
    return split_think(text)[0]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidOutput(f"duplicate key {key!r} in JSON object")
        out[key] = value
    return out


_TRAILING_COMMA = re.compile(r'"(?:[^"\\]|\\.)*"|,(?=\s*[}\]])', re.DOTALL)


def _strip_trailing_commas(s: str) -> str:
    """Remove commas directly before ``}`` or ``]`` outside JSON strings."""
    return _TRAILING_COMMA.sub(lambda m: m.group() if m.group() != "," else "", s)


def object_spans(text: str) -> list[tuple[int, int]]:
    """Return the ``(start, end)`` of the outermost balanced ``{...}`` of ``text``, in order.

    One pass over the structural characters (braces, brackets, quotes), strings aware; the work
    is linear in the length of ``text``. Text outside objects is prose (its quotes and brackets
    do not count). An object left open does not hide the balanced objects inside it; a string
    left open restarts the scan just after its quote (at most :data:`MAX_SCAN_RESTARTS` times).
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for _ in range(MAX_SCAN_RESTARTS + 1):
        stack: list[tuple[int, str]] = []
        in_str = False
        str_at = -1
        for m in _STRUCTURE.finditer(text, start):
            tok = m.group()
            if not stack:
                if tok == "{":
                    stack.append((m.start(), tok))
            elif in_str:
                if tok == '"':
                    in_str = False
            elif tok == '"':
                in_str, str_at = True, m.start()
            elif tok in ("{", "["):
                stack.append((m.start(), tok))
            elif tok in ("}", "]"):
                opened_at, opener = stack.pop()
                if (opener == "{") != (tok == "}"):
                    stack.clear()  # mismatched brackets: nothing open here is an object
                elif opener == "{":
                    while spans and spans[-1][0] > opened_at:
                        spans.pop()  # nested in this one
                    spans.append((opened_at, m.end()))
        if not (in_str and stack):
            break
        start = str_at + 1
    return spans


def _loads(s: str) -> Any:
    return json.loads(s, object_pairs_hook=_no_duplicates)


@dataclass(slots=True)
class _Found:
    """What the objects of one stretch of text held."""

    answers: list[dict[str, Any]]
    first_error: str = ""
    other_object: bool = False


def _find_answers(text: str, key: str = "allocations") -> _Found:
    """Parse every outermost object of ``text``; keep those holding ``key``."""
    found = _Found(answers=[])
    for start, end in object_spans(text):
        cand = text[start:end]
        try:
            try:
                obj = _loads(cand)
            except json.JSONDecodeError:
                obj = _loads(_strip_trailing_commas(cand))
        except InvalidOutput as exc:
            found.first_error = found.first_error or str(exc)
            continue
        except (ValueError, RecursionError) as exc:
            found.first_error = found.first_error or f"malformed JSON: {_one_line(str(exc))}"
            continue
        if isinstance(obj, dict) and key in obj:
            found.answers.append(obj)
        else:
            found.other_object = True
    return found


def extract_json(text: str, key: str = "allocations") -> dict[str, Any]:
    """Return the answer object (the JSON object holding ``key``) found in ``text``.

    Objects inside closed ``<think>`` blocks are ignored; an unclosed ``<think>`` is searched
    only when the text outside it holds no answer. Several answer objects with different
    allocations are ambiguous; identical repeats are one answer (the last is returned).
    Raise :class:`InvalidOutput` when there is no single answer.
    """
    if not isinstance(text, str):
        raise InvalidOutput(f"response is not text: {type(text).__name__}")
    body, unclosed = split_think(text[:MAX_TEXT_CHARS])
    if not body.strip() and not unclosed.strip():
        raise InvalidOutput("empty response")
    found = _find_answers(body, key)
    if not found.answers and unclosed.strip():
        inner = _find_answers(unclosed, key)
        if inner.answers or not body.strip():
            found = inner
    answers = found.answers
    if answers:
        first = answers[0][key]
        if any(a[key] != first for a in answers[1:]):
            noun = "allocation" if key == "allocations" else repr(key)
            raise InvalidOutput(f"ambiguous: {len(answers)} {noun} objects")
        return answers[-1]
    if found.first_error:
        raise InvalidOutput(found.first_error)
    if found.other_object:
        raise InvalidOutput(f"JSON object has no {key!r} key")
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
