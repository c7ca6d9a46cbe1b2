"""What a person or Prometheus reads from a running daemon: the HTTP API, the live page, metrics.

Owns the HTTP server (:mod:`.http`, its connection plumbing :mod:`.server`, the per-agent
routes :mod:`.agent_api`, JSON answers :mod:`.json`), the event loop's heartbeat behind
``/healthz`` (:mod:`.loop_lag`), the live page and its event stream (:mod:`.page`, static files
in ``static/``, its combined chart :mod:`.chart` drawn with the vendored uPlot), the cached
leaderboard (:mod:`.board_cache`), the Prometheus metrics (:mod:`.metrics`), the component that
serves them with the alerts (:mod:`.observability`), ``paperarena status`` (:mod:`.status`, a
client of the API) and ``paperarena serve`` (:mod:`.readonly`: the page over any store); the
page's routes beyond its own module: :mod:`.decisions`, :mod:`.positions` (rebuilt from the
fills), :mod:`.labels` (Polymarket tokens by question), over :mod:`.host`.

May import: everything but the roof.
"""
