"""A decision's stored input: the agent's own part in its decision row, the market-wide part
once per round in the ``observations`` table (issue 16, point 4).

A decision row written since schema v8 keeps in ``input_json`` only the per-agent keys of its
observation (agent, holdings, cash, value, initial value, weights) and, instead of the recent
allocations, ``recent_fills``: the times of the fills they are (each past allocation is a stored
fill's time, weights and value after, the return taken against the initial value). Its
``observation_sha256`` names the round's market-wide keys, stored once as canonical JSON in
``observations.market_json``. ``input_sha256`` still hashes the whole observation the agent saw;
:func:`join_input` / :func:`load_input` rebuild it byte for byte (probes check the hash).
Older rows hold the whole observation in ``input_json`` and no ``observation_sha256``: they are
returned as stored.

Since schema v11 the per-agent part keeps ``holdings`` and ``weights`` as ``holdings_ix`` and
``weights_ix``: lists of ``[key, value]`` pairs whose key is the asset's index in the market
part's ``assets`` (a string for any other key, such as ``CASH``). A Polymarket asset id is a
77-digit token id, so this is most of a row; rows from v8 to v10 keep the mappings by id and read
as before.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from agents.base import Observation, join_encoded
from daemon.core import sparse_rows
from daemon.core.sparse_rows import dense_fill_weights

#: The two columns a decision's input is rebuilt from (decision alias ``d``).
INPUT_COLUMNS = "d.input_json, o.market_json"

#: The join that brings a decision's market-wide part (decision alias ``d``).
INPUT_JOIN = "LEFT JOIN observations o ON o.sha256 = d.observation_sha256"

#: The key that replaces ``recent_allocations`` in a stored per-agent part.
RECENT_FILLS = "recent_fills"

#: Per-agent mappings keyed by asset, and the keys that store them by asset index instead.
BY_INDEX = {"holdings": "holdings_ix", "weights": "weights_ix"}

_index: tuple[Sequence[str], dict[str, int]] = ((), {})
"""The last asset list seen by :func:`agent_row` and its index (a round's agents share it)."""

FillRow = tuple[float, Any, float]
"""(ts, weights (JSON text or mapping), value after) of one stored fill."""


def agent_row(own: Mapping[str, bytes], obs: Observation) -> bytes:
    """Return the per-agent part a decision row stores (``own``: encoded per-agent keys)."""
    global _index
    parts = {k: v for k, v in own.items() if k != "recent_allocations"}
    parts[RECENT_FILLS] = msgspec.json.encode([p.ts for p in obs.recent_allocations])
    if not sparse_rows.ASSET_INDEX:  # v10 rows, written only as a reference in tests
        return join_encoded(parts)
    if _index[0] is not obs.assets:
        _index = (obs.assets, {a: i for i, a in enumerate(obs.assets)})
    index = _index[1]
    # The same value objects the hashed input encoded: the same text (join_input re-encodes).
    for key, mapping in (("holdings", obs.holdings), ("weights", obs.weights)):
        if parts.pop(key, None) is not None:
            parts[BY_INDEX[key]] = msgspec.json.encode(
                [[index.get(k, k), mapping[k]] for k in sorted(mapping)])
    return join_encoded(parts)


def fill_times(agent_part: str | bytes | None) -> list[float]:
    """Return the fill times a stored per-agent part refers to (none for whole inputs)."""
    if not agent_part:
        return []
    d = msgspec.json.decode(agent_part)
    return list(d.get(RECENT_FILLS, [])) if isinstance(d, dict) else []


def join_input(agent_part: str | bytes | None, market_part: str | bytes | None,
               fills: Sequence[FillRow] = ()) -> str | None:
    """Return the canonical JSON of a stored decision input (``None`` if it has none).

    ``market_part`` is ``None`` for rows stored before schema v8 (``agent_part`` is then the
    whole observation). ``fills`` are the agent's fills in the market whose times the part
    names (any order; more are ignored). Raise ``ValueError`` when the parts are not two JSON
    objects with distinct keys or a named fill is missing.
    """
    if agent_part is None or agent_part in ("", b""):
        return None if agent_part is None else ""
    if market_part is None:
        return agent_part.decode() if isinstance(agent_part, bytes) else agent_part
    try:
        agent = msgspec.json.decode(agent_part)
        market = msgspec.json.decode(market_part)
    except msgspec.DecodeError as exc:
        raise ValueError(f"stored input is not JSON: {exc}") from None
    if not isinstance(agent, dict) or not isinstance(market, dict):
        raise ValueError("stored input parts are not JSON objects")
    if agent.keys() & market.keys():
        raise ValueError(f"stored input parts share keys {sorted(agent.keys() & market.keys())}")
    for key, stored in BY_INDEX.items():
        if stored in agent:
            agent[key] = _by_id(agent.pop(stored), market.get("assets"))
    if RECENT_FILLS in agent:
        by_ts = {float(ts): (w, v) for ts, w, v in fills}
        init = float(agent["initial_value"])
        past = []
        for ts in agent.pop(RECENT_FILLS):
            if float(ts) not in by_ts:
                raise ValueError(f"stored input names a fill at {ts} that is not stored")
            w, v = by_ts[float(ts)]
            weights = json.loads(w) if isinstance(w, str) else dict(w)
            past.append([ts, dict(sorted(weights.items())), float(v) / init - 1.0])
        agent["recent_allocations"] = past
    # Canonical JSON re-encodes a decoded value to the same bytes (shortest float repr).
    return msgspec.json.encode({**market, **agent}, order="sorted").decode()


def _by_id(pairs: Any, assets: Any) -> dict[str, Any]:
    """Return a mapping stored as ``[asset index or key, value]`` pairs keyed by asset id."""
    if not isinstance(pairs, list) or not isinstance(assets, list):
        raise ValueError("stored input names an asset index without an asset list")
    out: dict[str, Any] = {}
    for pair in pairs:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"stored input has a malformed asset entry {pair!r}")
        k, v = pair
        if isinstance(k, int):
            if not 0 <= k < len(assets):
                raise ValueError(f"stored input names asset index {k} of {len(assets)}")
            k = assets[k]
        out[str(k)] = v
    return out


def load_input(con: sqlite3.Connection, agent: str, market: str, scheduled_ts: float
               ) -> str | None:
    """Return the rebuilt input of one stored decision (``None``: no such decision or input)."""
    split = con.execute("SELECT 1 FROM sqlite_master WHERE type='table'"
                        " AND name='observations'").fetchone() is not None
    row = con.execute(
        f"SELECT {INPUT_COLUMNS if split else 'd.input_json, NULL'} FROM decisions d"
        f" {INPUT_JOIN if split else ''} WHERE d.agent=? AND d.market=? AND d.scheduled_ts=?",
        (agent, market, scheduled_ts)).fetchone()
    if row is None:
        return None
    own, market_json = row
    times = fill_times(own) if market_json is not None else []
    sparse = times and con.execute("SELECT 1 FROM sqlite_master WHERE type='table'"
                                   " AND name='asset_sets'").fetchone() is not None
    assets = ("s.assets_json FROM fills f LEFT JOIN asset_sets s ON s.sha256 = f.assets_sha256"
              if sparse else "NULL FROM fills f")
    fills: list[FillRow] = []
    for k in range(0, len(times), 500):
        chunk = times[k:k + 500]
        for ts, w, v, a in con.execute(
            f"SELECT f.ts, f.weights_json, f.value_after, {assets} WHERE f.agent=? AND"
            f" f.market=? AND f.ts IN ({','.join('?' * len(chunk))}) ORDER BY f.scheduled_ts",
            (agent, market, *chunk)
        ).fetchall():
            fills.append((ts, w if a is None else dense_fill_weights(w, a), v))
    return join_input(own, market_json, fills)
