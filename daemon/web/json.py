"""JSON answers of the HTTP API: finite numbers only, sorted keys, and the one-line bad request."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

__all__ = ["BadRequest", "clean", "dumps", "json_response"]


def clean(x: Any) -> Any:
    """Return ``x`` with non-finite floats as None and keys as strings (JSON has no NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    return x


def dumps(data: Any) -> str:
    """Return the API's JSON text of ``data``."""
    return json.dumps(clean(data), sort_keys=True, separators=(",", ":"), allow_nan=False)


def json_response(data: Any, status: int = 200) -> web.Response:
    """Return ``data`` as an ``application/json`` response."""
    return web.Response(text=dumps(data), status=status, content_type="application/json")


class BadRequest(Exception):
    """A malformed request: answered with its status and one-line reason."""

    def __init__(self, reason: str, status: int = 400) -> None:
        """Keep the one-line ``reason`` and the HTTP ``status``."""
        super().__init__(reason)
        self.reason = reason
        self.status = status
