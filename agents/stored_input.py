"""A decision's stored input: the agent's own part in its decision row, the market-wide part
once per round in the ``observations`` table (issue 16, point 4).

A decision row written since schema v6 keeps in ``input_json`` only the per-agent keys of its
observation (agent, holdings, cash, value, initial value, weights, recent allocations) and in
``observation_sha256`` the SHA-256 of the round's market-wide keys, stored once as canonical
JSON in ``observations.market_json``. ``input_sha256`` still hashes the whole observation the
agent saw; :func:`join_input` rebuilds it byte for byte. Older rows hold the whole observation
in ``input_json`` and no ``observation_sha256``: they are returned as stored.

Read a decision's input with ``SELECT ... INPUT_COLUMNS FROM decisions d INPUT_JOIN``.
"""

from __future__ import annotations

import msgspec

#: The two columns a decision's input is rebuilt from (decision alias ``d``).
INPUT_COLUMNS = "d.input_json, o.market_json"

#: The join that brings a decision's market-wide part (decision alias ``d``).
INPUT_JOIN = "LEFT JOIN observations o ON o.sha256 = d.observation_sha256"


def join_input(agent_part: str | bytes | None, market_part: str | bytes | None) -> str | None:
    """Return the canonical JSON of a stored decision input (``None`` if it has none).

    ``market_part`` is ``None`` for rows stored before schema v6 (``agent_part`` is then the
    whole observation). Raise ``ValueError`` when the parts are not two JSON objects with
    distinct keys.
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
    # Canonical JSON re-encodes a decoded value to the same bytes (shortest float repr).
    return msgspec.json.encode({**market, **agent}, order="sorted").decode()
