"""The engine: the paper books of every agent, the decision rounds, their commits and marks.

Owns :mod:`.engine` (``Engine``: agents, books, jobs, marks, restore and reload) and
:mod:`.rounds` (one market's decision round: observations, answers, validated rebalances and the
atomic commit), run without full garbage collections (:mod:`.round_gc`). Protocol-specific work
is called through the protocols' homes in ``agents/`` (CapitalBench's round runner, PortBench's
delayed stage scoring).

May import: the ground, feeds, agents, scoring, the store, the market state, MQTT and the config.
"""
