"""``paperarena status`` and ``resume``: the commands that ask a running daemon over its HTTP
API (its address from the config or ``--url``); ``serve``: the page and the API over any store,
read-only (:mod:`daemon.web.readonly`).
"""

from __future__ import annotations

import argparse
import sys

from daemon.app.cli_common import _fail, _load


def _status(args: argparse.Namespace) -> int:
    import json

    from daemon.web.status import StatusError, fetch_status, render_status

    if args.url:
        base = args.url
    else:
        cfg = _load(args.config)
        host = "127.0.0.1" if cfg.http.host in ("0.0.0.0", "::") else cfg.http.host
        base = f"http://{host}:{cfg.http.port}"
    try:
        st = fetch_status(base)
    except StatusError as exc:
        sys.stderr.write(f"paperarena status: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(st, sort_keys=True) + "\n" if args.json
                     else render_status(st, base))
    return 0


def _resume(args: argparse.Namespace) -> int:
    import json
    import urllib.error
    import urllib.request

    cfg = _load(args.config)
    host = "127.0.0.1" if cfg.http.host in ("0.0.0.0", "::") else cfg.http.host
    url = f"http://{host}:{cfg.http.port}/api/agents/{args.agent}/resume"
    body = {"by": "cli"} | ({"market": args.market} if args.market else {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            sys.stdout.write(resp.read().decode() + "\n")
    except urllib.error.HTTPError as exc:
        return _fail(f"resume refused ({exc.code}): {exc.read().decode(errors='replace')[:200]}")
    except OSError as exc:
        return _fail(f"no daemon answering at {url}: {exc}")
    return 0


def serve_db(db: str, host: str, port: int) -> int:
    """Serve the page and the API over the store ``db`` read-only until Ctrl-C or SIGTERM."""
    import asyncio
    import sqlite3

    from daemon.app.signals import Stopped, run_stoppable
    from daemon.store.pg import redact
    from daemon.web.readonly import NotAStore, serve

    async def main() -> None:
        ready = asyncio.Event()
        bound: list[str] = []
        task = asyncio.create_task(serve(db, host, port, ready=ready, bound=bound))
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiter.cancel()
            task.result()
            return
        sys.stderr.write(f"paperarena serve: {redact(db)} read-only at {bound[0]}/ "
                         "(Ctrl-C to stop)\n")
        await task

    try:
        run_stoppable(main())
    except FileNotFoundError:
        return _fail(f"--db {db}: no such database")
    except NotAStore as exc:
        return _fail(f"--db {redact(db)}: {exc}")
    except sqlite3.Error as exc:
        return _fail(f"--db {redact(db)}: not a paperarena store ({str(exc).splitlines()[0]})")
    except (KeyboardInterrupt, Stopped):
        return 0
    return 0


def _serve(args: argparse.Namespace) -> int:
    return serve_db(args.db, args.host, args.port)
