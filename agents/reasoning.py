"""A decision's reasoning, per step, as the store keeps it (``decisions.reasoning``, issue 30).

:func:`reasoning_steps` returns ``[{"step", "text"}]``: for each model call the ``reasoning``
field of its parsed answer, else of its raw answer when that is JSON (every step of a multi-step
protocol, every retry that gave one); without any, the decision's own reasoning (a single-step
agent's) or the ``reasoning`` of its raw output. A decision without a model (a baseline) has
none: ``[]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["reasoning_json", "reasoning_steps"]


def _loads(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _field(value: Any) -> str | None:
    text = value.get("reasoning") if isinstance(value, dict) else None
    return text if isinstance(text, str) and text.strip() else None


def reasoning_steps(calls: Sequence[Mapping[str, Any]], raw_output: str | None,
                    reasoning: str = "") -> list[dict[str, str]]:
    """Return the reasoning per step of a decision from its calls and answer."""
    out = []
    for i, c in enumerate(calls):
        parsed = c.get("parsed")
        if isinstance(parsed, str):  # as stored: JSON text
            parsed = _loads(parsed)
        text = _field(parsed) or _field(_loads(c.get("raw_response")))
        if text is not None:
            out.append({"step": str(c.get("step") or f"call {i + 1}"), "text": text})
    if not out:
        text = reasoning if reasoning.strip() else _field(_loads(raw_output))
        if text:
            out.append({"step": "answer", "text": text})
    return out


def reasoning_json(calls: Sequence[Mapping[str, Any]], raw_output: str | None,
                   reasoning: str = "") -> str:
    """Return :func:`reasoning_steps` as the JSON text the ``reasoning`` column stores."""
    return json.dumps(reasoning_steps(calls, raw_output, reasoning), ensure_ascii=False,
                      separators=(",", ":"))
