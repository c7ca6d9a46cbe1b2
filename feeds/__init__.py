"""Source adapters: live and historical prices and news as typed events, and recordings.

Owns the streaming connection and its read loop (:mod:`.connection`, :mod:`.frame_batch`,
:mod:`.backoff`, :mod:`.health`, the contract every source follows :mod:`.source_contract`), the
Polymarket, Alpaca, Finnhub and Yahoo adapters, fundamentals and news, the ``[sources.*]``
settings (:mod:`.settings`) and recordings (:mod:`.recording`, :mod:`.history_recording`).

May import: the ground only (``daemon.core``, ``daemon.timing``).
"""
