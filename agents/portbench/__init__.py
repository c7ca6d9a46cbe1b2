"""PortBench: the five-stage pipeline, its stage scores S1..S5, CEPS and the stress gate.

Owns the agent (:mod:`.agent`), the stage scores (:mod:`.scores`), their delayed scoring after
each daily mark (:mod:`.stage_scoring`, handed the engine's store through :mod:`agents.host`)
and the stress gate (:mod:`.stress_gate`).

May import: the generic agents modules, the ground and scoring's ledger and statistics.
"""
