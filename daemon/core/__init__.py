"""The ground: the immutable events, the bus that carries them, and the formats every layer shares.

Owns the event types (:mod:`.events`), the in-process bus with its taps and backpressure
(:mod:`.bus`, :mod:`.price_routes`), a burst of prices as typed columns (:mod:`.price_columns`),
the stored row formats that the store writes and scoring reads (:mod:`.price_bursts`,
:mod:`.sparse_rows`), durations, the shared config field validators (:mod:`.fields`), the default
equity universe (:mod:`.universe`), logging with secret redaction (:mod:`.logs`) and the tally of
survived faults, each one log line (:mod:`.faults`).

May import: nothing of the project (the standard library and third-party packages only).
"""
