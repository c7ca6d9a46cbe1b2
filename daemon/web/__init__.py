"""What a person or Prometheus reads from a running daemon: the HTTP API, the live page, metrics.

Owns the HTTP server (:mod:`.http`, JSON answers :mod:`.json`), the live page and its event
stream (:mod:`.page`, static files in ``static/``), the cached leaderboard (:mod:`.board_cache`),
the Prometheus metrics (:mod:`.metrics`), the component that serves them with the alerts
(:mod:`.observability`) and ``paperarena status`` (:mod:`.status`, a client of the API).

May import: everything but the roof.
"""
