"""Persistence: every row the daemon writes and every read of it, on SQLite or a shared PostgreSQL.

Owns the store (:mod:`.store`: ``Store``, atomic round commits, write faults and the spill
:mod:`.spill`), its schema and migrations (:mod:`.schema`), row types and queries (:mod:`.records`,
:mod:`.events`, :mod:`.queries`), file checks and the single-writer lock (:mod:`.dbfile`,
:mod:`.dblock`), online backup (:mod:`.backup`), the PostgreSQL backend, its scopes, merged
snapshot and migration (:mod:`.pg`, :mod:`.pg_owners`, :mod:`.pg_snapshot`, :mod:`.pg_migrate`),
opening a store for reading (:mod:`.read`), the reports of a store named by path or URL
(:mod:`.reports`: scoring computes from the read connection it is handed) and appending rows
to one from a command outside the daemon (:mod:`.append`).

May import: the ground, feeds, agents and scoring.
"""
