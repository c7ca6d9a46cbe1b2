"""CapitalBench: frozen, hashed rounds on a fixed schedule, scored against the best asset.

Owns the agent (:mod:`.agent`), the ``[capitalbench]`` section (:mod:`.config`), freezing and
verifying rounds (:mod:`.rounds`, which never follows a link in a round: :mod:`.nofollow`), the
round runner the engine drives (:mod:`.runner`, which sees the engine through :mod:`agents.host`)
and the scores (:mod:`.scores`).

May import: the generic agents modules, the ground and scoring's ledger and statistics.
"""
