"""Polymarket: the CLOB market channel's prices, the Gamma markets and their resolutions.

Owns the source and its WebSocket adapter (:mod:`.source`), the order books and the marks decoded
from them (:mod:`.decode`; frames of price changes only take the typed fast path of
:mod:`.price_frames`), the Gamma markets and the REST endpoints (:mod:`.gamma`) and the
questions' resolutions, each paid once (:mod:`.resolution`).

May import: the ground (``daemon.core``, ``daemon.timing``) and the shared feed machinery.
"""
