"""The store's integrity: the hash chains of its rows and their check, and the frozen season.

Owns the chain every stored decision, model call, fill, market event, mark and resolution
carries (:mod:`.chain`: streams, canonical content, links), the walk that checks a store's
chains and names the first row edited, deleted or out of order (:mod:`.verify`), and the
season's frozen lineup and its amendments (:mod:`.season`).

May import: the ground (``daemon.core``) and the store's own file helpers (``daemon.store.dbfile``,
``daemon.store.read``); never the store class above it.
"""
