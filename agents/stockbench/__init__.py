"""StockBench: the multi-step stock-trading workflow (overview, decision, revision).

Owns the agent and its workflow (:mod:`.agent`).

May import: the generic agents modules, the ground and scoring's ledger and statistics.
"""
