"""The ``[season]`` section, and a config's *lineup*: what a season freezes before its first round.

A season is a named run of the arena whose method is fixed before its results: the agents, their
models and every setting (protocol included), the hashes of the prompt templates they render
(the built-in ones and each agent's own files), the markets with their universes and cost
models, the schedules, the scoring conventions (``[leaderboard]``) and the config fingerprint a
replay checks (the same sections, hashed). The store keeps the lineup
(:mod:`daemon.store.integrity.season`); a start or reload with another lineup is refused, or,
with ``amendments = "allow"``, recorded as a dated amendment that the report and
``/api/status`` show.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from daemon.core.fields import _Frozen

__all__ = ["LINEUP_SECTIONS", "SeasonConfig", "lineup"]

#: The config sections a lineup holds whole (the replay fingerprint's and the scoring's).
LINEUP_SECTIONS = ("agents", "markets", "scheduler", "leaderboard")
#: The sections of the replay fingerprint (``daemon.app.replay.FINGERPRINT_SECTIONS``).
_FINGERPRINT_SECTIONS = ("markets", "agents", "scheduler", "alerts")


class SeasonConfig(_Frozen):
    """``[season]``: the season this run belongs to (none: no lineup is frozen)."""

    name: Annotated[str, Field(min_length=1, max_length=80)] | None = Field(
        default=None, description="the season's name; its lineup is frozen in the store before "
        "the first round, and a store holding another season is refused")
    signing_key: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="PEM file of the Ed25519 private key that signs the "
        "season's bundle (paperarena export --bundle); the path only, never the key")
    amendments: Literal["refuse", "allow"] = Field(
        default="refuse", description="a changed lineup at a later start or reload: refused, "
        "or recorded as a dated amendment the report and /api/status show")

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        if v is not None and (not v.isprintable() or v != v.strip()):
            raise ValueError("season.name must be printable text without surrounding spaces")
        return v


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _template_files(root: Traversable, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for item in sorted(root.iterdir(), key=lambda t: t.name):
        if item.is_dir() and item.name != "__pycache__":
            out |= _template_files(item, f"{prefix}{item.name}/")
        elif item.is_file() and not item.name.endswith((".py", ".pyc")):
            out[f"{prefix}{item.name}"] = _sha256(item.read_bytes())
    return out


def _own_prompts(agents: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for agent in agents:
        files = agent.get("prompt_files") or {}
        hashes = {}
        for market, path in sorted(files.items()):
            if path is None:
                continue
            try:
                hashes[market] = _sha256(Path(path).read_bytes())
            except OSError:
                hashes[market] = "unreadable"
        if hashes:
            out[str(agent["id"])] = hashes
    return out


def lineup(config: Any) -> dict[str, Any]:
    """Return the lineup of ``config`` (a :class:`daemon.config.settings.Config`) as JSON data."""
    data = config.model_dump(mode="json")
    fingerprint = {k: data.get(k) for k in _FINGERPRINT_SECTIONS}
    out = {k: data.get(k) for k in LINEUP_SECTIONS}
    out["agents"] = {str(a["id"]): a for a in data.get("agents") or ()}  # changes name the agent
    return {
        **out,
        "prompt_templates": _template_files(resources.files("agents.prompts")),
        "own_prompts": _own_prompts(data.get("agents") or ()),
        "config_sha256": _sha256(json.dumps(fingerprint, sort_keys=True).encode()),
    }
