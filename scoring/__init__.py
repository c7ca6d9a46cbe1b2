"""Scoring: the accounting core, the statistics and the leaderboard.

- :mod:`.ledger`: the pure numpy book over (agents x assets): rebalances, costs, marks.
- :mod:`.stats`: performance metrics, benchmarks and the significance tests.
- :mod:`.board`: the leaderboard and the reports, computed from a read connection to a store
  (opened by :mod:`daemon.store.reports`), with each protocol's section from its home.

May import: the ground; :mod:`.board` also the agents' protocol homes. Never the engine, store,
web, alerts, MQTT, config or roof.
"""
