"""The accounting core: pure numpy over (agents x assets), no I/O.

Owns the book (:mod:`.ledger`), batched rebalances (:mod:`.batch`), value types (:mod:`.types`)
and sparse holdings for marking (:mod:`.held`).

May import: nothing of the project.
"""
