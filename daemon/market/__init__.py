"""The market as the rounds see it: latest prices, daily closes, news and questions of every market.

Owns the market state fed by the bus (:mod:`.state`), the bursts of prices waiting to be settled
into history (:mod:`.pending_lasts`), price coverage of a round (:mod:`.coverage`) and fills at
the session's opening prices (:mod:`.open_fill`).

May import: the ground, feeds, agents and scoring.
"""
