"""A reference agent service for ``kind = "http"`` agents (docs/agents-http.md).

It holds an equal weight of every allowed asset (one side, YES, per Polymarket question) and 10%
CASH, and holds when nothing can be bought. A repeated decision id gets the first answer again
(idempotency). With ``AGENT_TOKEN`` set, requests must carry ``Authorization: Bearer <token>``.

    python examples/http_agent/service.py --port 8765
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from aiohttp import web

#: Every answer given, by decision id, and every request body received (in order).
ANSWERS = web.AppKey("answers", dict)
REQUESTS = web.AppKey("requests", list)


def decide(request: dict[str, Any]) -> dict[str, Any]:
    """Return the answer to one decision request."""
    no_sides = {no for _, no in request["constraints"]["one_side_per_question"]}
    picks = [a for a in request["allowed_assets"] if a != "CASH" and a not in no_sides]
    if not picks:
        return {"decision_id": request["decision_id"], "hold": True, "reasoning": "nothing to buy"}
    weights = {a: 0.9 / len(picks) for a in picks}
    weights["CASH"] = 0.1
    return {"decision_id": request["decision_id"], "allocations": weights,
            "reasoning": f"equal weight over {len(picks)} assets"}


def make_app(token: str | None = None) -> web.Application:
    """Return the service; ``token`` (default: ``$AGENT_TOKEN``) is the bearer token required."""
    token = token if token is not None else os.environ.get("AGENT_TOKEN") or None
    answers: dict[str, dict[str, Any]] = {}
    app = web.Application(client_max_size=64 << 20)
    app[ANSWERS] = answers
    app[REQUESTS] = []

    async def handle(req: web.Request) -> web.Response:
        if token and req.headers.get("Authorization") != f"Bearer {token}":
            return web.json_response({"error": "unauthorized"}, status=401)
        body = await req.json()
        app[REQUESTS].append(body)
        did = body["decision_id"]
        if did not in answers:  # idempotent: a repeat gets the first answer
            answers[did] = decide(body)
        return web.json_response(answers[did])

    app.router.add_post("/decide", handle)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    web.run_app(make_app(), host=args.host, port=args.port)
