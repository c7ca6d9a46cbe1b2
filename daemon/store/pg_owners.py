"""Agent ownership enforced by PostgreSQL: the rows of an agent go into its owner's scope only.

Shared objects in the ``public`` schema (created once, under an advisory lock, by whichever
process comes first):

- ``paperarena_scopes(scope, schema_name, commits)``: every process scope that ever wrote
  (readers merge them, :mod:`daemon.store.pg_snapshot`) and how many of its transactions changed the
  leaderboard's tables (the readers' cache stamp, :func:`daemon.store.pg_snapshot.stamp`);
- ``paperarena_owners(agent PRIMARY KEY, scope, schema_name, since)``: who owns each agent;
- ``paperarena_owner_check()``: a trigger function refusing a row whose ``agent`` is not owned by
  the schema the row goes into (``TG_TABLE_SCHEMA``).

After its migrations, a scope puts that trigger on each of its tables with an ``agent`` column
(tables added by later migrations included). :func:`claim_agents` takes ownership in one
transaction holding ``paperarena_owners`` exclusively, so concurrent claimers are serialised;
an agent owned by another scope is taken over only if that scope's process is gone (its
session advisory lock is free), else the claim fails with one line and claims nothing.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from daemon.store.dbfile import StoreOpenError

#: Advisory lock serialising the creation of the shared objects.
SHARED_LOCK = 0x70617065  # "pape"

SHARED_DDL = """
CREATE TABLE IF NOT EXISTS public.paperarena_scopes(
  scope TEXT PRIMARY KEY, schema_name TEXT NOT NULL UNIQUE,
  commits BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS public.paperarena_owners(
  agent TEXT PRIMARY KEY, scope TEXT NOT NULL, schema_name TEXT NOT NULL,
  since TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE OR REPLACE FUNCTION public.paperarena_owner_check() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.agent IS NULL OR NEW.agent = '' THEN
    RETURN NEW;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM public.paperarena_owners o
                 WHERE o.agent = NEW.agent AND o.schema_name = TG_TABLE_SCHEMA) THEN
    RAISE EXCEPTION 'agent % is not owned by scope % (table %): paperarena ownership',
      NEW.agent, TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
"""


def lock_key(name: str) -> int:
    """Return the advisory-lock key of ``name`` (a signed 64-bit integer)."""
    return int.from_bytes(zlib.crc32(name.encode()).to_bytes(4, "big") * 2, "big", signed=True)


class StoreOwnershipError(StoreOpenError):
    """Another live process owns some of the agents (one line)."""


async def install_shared(con: Any) -> None:
    """Create the shared tables and the trigger function once (concurrent openers wait)."""
    async with con.transaction():
        await con.execute(f"SELECT pg_advisory_xact_lock({SHARED_LOCK})")
        exists = await con.fetchval(
            "SELECT to_regprocedure('public.paperarena_owner_check()') IS NOT NULL"
            " AND to_regclass('public.paperarena_owners') IS NOT NULL")
        if not exists:
            await con.execute(SHARED_DDL)


async def install_triggers(con: Any, schema: str) -> list[str]:
    """Put the ownership trigger on every table of ``schema`` with an ``agent`` column."""
    tables = [r[0] for r in await con.fetch(
        "SELECT table_name FROM information_schema.columns WHERE table_schema=$1"
        " AND column_name='agent' ORDER BY table_name", schema)]
    for t in tables:
        await con.execute(
            "CREATE OR REPLACE TRIGGER paperarena_owner BEFORE INSERT OR UPDATE ON"
            f' "{schema}"."{t}" FOR EACH ROW'
            " EXECUTE FUNCTION public.paperarena_owner_check()")
    return tables


async def claim_agents(con: Any, url: str, scope: str, schema: str,
                       agents: Iterable[str]) -> None:
    """Own ``agents`` for ``scope``, or raise :class:`StoreOwnershipError` claiming nothing."""
    wanted = sorted(set(agents))
    if not wanted:
        return
    async with con.transaction():
        await con.execute("LOCK TABLE public.paperarena_owners IN EXCLUSIVE MODE")
        rows = await con.fetch(
            "SELECT agent, scope, schema_name FROM public.paperarena_owners"
            " WHERE agent = ANY($1::text[]) AND schema_name <> $2", wanted, schema)
        alive: dict[str, bool] = {}
        for _, _, other_schema in rows:
            if other_schema not in alive:
                free = await con.fetchval("SELECT pg_try_advisory_lock($1)",
                                          lock_key(other_schema))
                if free:
                    await con.execute("SELECT pg_advisory_unlock($1)", lock_key(other_schema))
                alive[other_schema] = not free
        taken = sorted(f"{a} owned by {s}" for a, s, sch in rows if alive[sch])
        if taken:
            raise StoreOwnershipError(
                f"{url}: agent(s) already owned by a live process ({', '.join(taken)}); "
                "give each evaluator a disjoint --agents set")
        await con.executemany(
            "INSERT INTO public.paperarena_owners(agent, scope, schema_name) VALUES($1,$2,$3)"
            " ON CONFLICT(agent) DO UPDATE SET scope=excluded.scope,"
            " schema_name=excluded.schema_name, since=now()",
            [(a, scope, schema) for a in wanted])
