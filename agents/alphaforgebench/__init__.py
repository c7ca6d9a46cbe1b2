"""AlphaForgeBench: LLM-written strategy code run in a sandbox, and its stability measures.

Owns the agent (:mod:`.agent`), the sandbox and its worker (:mod:`.sandbox`,
:mod:`.sandbox_worker`), the repeated-generation instability run (:mod:`.instability`) and its
statistics (:mod:`.instability_stats`), and the per-version report (:mod:`.report`).

May import: the generic agents modules, the ground, feeds and scoring's ledger and statistics.
"""
