"""The store's integrity: the hash chains of its rows and their check, and the frozen season.

Owns the chain every stored decision, model call, fill, market event, mark and resolution
carries (:mod:`.chain`: streams, canonical content, links), the walk that checks a store's
chains and names the first row edited, deleted or out of order (:mod:`.verify`), the
season's frozen lineup and its amendments (:mod:`.season`), and the season's bundle that anyone
can check offline, its manifest signed with Ed25519 (:mod:`.bundle`).

May import: the ground (``daemon.core``) and the store's own helpers (``daemon.store.dbfile``,
``daemon.store.read``, ``daemon.store.backup``, ``daemon.store.pg``); never the store class.
"""
