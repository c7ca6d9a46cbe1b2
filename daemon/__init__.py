"""The runtime: every package that turns feeds, agents and scoring into a running daemon.

Packages by concern, from the ground up (each may import only those below it; the contracts are
``[tool.importlinter]`` in pyproject.toml, checked by ``lint-imports`` in the test suite):

- :mod:`daemon.core`, :mod:`daemon.timing`: the ground: events, the bus, price columns, stored row
  formats, logging; the clock, the NYSE calendar and the schedulers. They import nothing of the
  project, and everything else stands on them.
- (``feeds``, ``agents``, ``scoring``: the source adapters, the agents and protocols, the ledger,
  statistics and the leaderboard; they import only the ground, never what is listed below.)
- :mod:`daemon.store`, :mod:`daemon.market`, :mod:`daemon.mqtt`: persistence (SQLite and
  PostgreSQL); the market state the rounds observe; the MQTT bridge of a split deployment.
- :mod:`daemon.config`: the validated config file (each package owns its section's types).
- :mod:`daemon.engine`: the books, the decision rounds and their commits.
- :mod:`daemon.alerts`: drawdown and health alerts and their delivery.
- :mod:`daemon.web`: the HTTP API, the live page and the Prometheus metrics.
- :mod:`daemon.app`: the roof: the command line, the live daemon, replay, recording and roles; it
  wires everything and nothing imports it.
"""
