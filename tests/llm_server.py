"""A scripted OpenAI-compatible chat-completions server for LLM agent tests.

Each request to ``POST /v1/chat/completions`` takes the next :class:`Behaviour` from the queue
(or the default one when the queue is empty) and answers with it; every request body is kept.
Reach it through LiteLLM with ``model="openai/test-model"`` and ``api_base=server.api_base``.

Multi-step protocols: a prompt names its step on a line ``Step: <name>`` (the last such line
counts); behaviours queued with :meth:`FakeLlmServer.push_step` answer only that step, before
the shared queue. :attr:`FakeLlmServer.steps` lists the step of every request.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

_STEP = re.compile(r"^Step: (\w+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How to answer one request."""

    content: str | None = ""
    finish_reason: str = "stop"
    status: int = 200
    delay: float = 0.0
    body: str | None = None
    """Raw HTTP body to send instead of a chat completion (e.g. ``""`` or an error object)."""
    prompt_tokens: int = 100
    completion_tokens: int = 20
    headers: tuple[tuple[str, str], ...] = ()
    """Extra HTTP response headers (e.g. ``(("Retry-After", "7"),)`` on a 429)."""
    tool_calls: tuple[tuple[str, str], ...] = ()
    """``(function name, arguments text)`` of each tool call in the message."""
    refusal: str | None = None
    """The message's ``refusal`` text (OpenAI structured refusals)."""


def ok(content: str, **kw: Any) -> Behaviour:
    """Return a 200 answer with ``content``."""
    return Behaviour(content=content, **kw)


def answer(allocations: dict[str, Any], reasoning: str = "test", **kw: Any) -> Behaviour:
    """Return a 200 answer holding the JSON ``{"reasoning", "allocations"}``."""
    return Behaviour(content=json.dumps({"reasoning": reasoning, "allocations": allocations}), **kw)


class FakeLlmServer:
    """An aiohttp server answering chat completions from a queue of behaviours."""

    def __init__(self, default: Behaviour | None = None) -> None:
        """Create the server; ``default`` answers when the queue is empty (else HTTP 500)."""
        self.default = default
        self.queue: deque[Behaviour] = deque()
        self.step_queues: dict[str, deque[Behaviour]] = {}
        self.steps: list[str | None] = []
        """The step each request named (``None`` when its prompt named none), in order."""
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str] = []
        """The bearer key of every request, in order (what a real provider would see)."""
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def api_base(self) -> str:
        """Return the ``api_base`` for LiteLLM."""
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next requests, in order."""
        self.queue.extend(behaviours)

    def push_step(self, step: str, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next requests whose prompt names ``step``."""
        self.step_queues.setdefault(step, deque()).extend(behaviours)

    @staticmethod
    def step_of(body: dict[str, Any]) -> str | None:
        """Return the step a request's last message names (its last ``Step:`` line)."""
        found = _STEP.findall(str(body["messages"][-1]["content"]))
        return found[-1] if found else None

    def prompts(self) -> list[str]:
        """Return the last user message of every request received, in order."""
        return [r["messages"][-1]["content"] for r in self.requests]

    async def start(self) -> FakeLlmServer:
        """Listen on 127.0.0.1 with a random port."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        """Stop the server."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLlmServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.steps.append(self.step_of(body))
        self.keys.append(request.headers.get("Authorization", "").removeprefix("Bearer "))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._respond(body)
        finally:
            self.in_flight -= 1

    async def _respond(self, body: dict[str, Any]) -> web.StreamResponse:
        step_queue = self.step_queues.get(self.step_of(body) or "")
        if step_queue:
            b = step_queue.popleft()
        elif self.queue:
            b = self.queue.popleft()
        elif self.default is not None:
            b = self.default
        else:
            return web.json_response({"error": {"message": "no scripted response"}}, status=500)
        if b.delay:
            await asyncio.sleep(b.delay)
        headers = dict(b.headers)
        if b.body is not None:
            return web.Response(
                status=b.status, text=b.body, content_type="application/json", headers=headers
            )
        if b.status != 200:
            return web.json_response(
                {"error": {"message": f"scripted HTTP {b.status}", "type": "server_error"}},
                status=b.status,
                headers=headers,
            )
        message: dict[str, Any] = {"role": "assistant", "content": b.content}
        if b.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": name, "arguments": args}}
                for i, (name, args) in enumerate(b.tool_calls)
            ]
        if b.refusal is not None:
            message["refusal"] = b.refusal
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "test-model"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": b.finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": b.prompt_tokens,
                    "completion_tokens": b.completion_tokens,
                    "total_tokens": b.prompt_tokens + b.completion_tokens,
                },
            },
            headers=headers,
        )


def random_output(rng: random.Random, names: list[str]) -> str:
    """Return a random, often malformed, model answer over the asset ``names`` (plus junk)."""
    keys = [*names, "CASH", "UNKNOWN", "cash", f"{names[0]} "]
    alloc: dict[str, Any] = {}
    for _ in range(rng.randint(0, 4)):
        k = rng.choice(keys)
        v: Any = rng.choice(
            [
                rng.random(),
                -rng.random(),
                f"{rng.randint(0, 100)}%",
                float("nan"),
                float("inf"),
                True,
                None,
                rng.randint(0, 2),
                1.0,
                0.5,
            ]
        )
        alloc[k] = v
    if rng.random() < 0.4:  # a plausible, possibly valid, answer
        picked = rng.sample(names, k=min(len(names), rng.randint(1, 3)))
        raw = [rng.random() for _ in picked]
        total = sum(raw) * rng.choice([1.0, 1.0, 1.01, 0.985, 0.7, 1.3])
        alloc = {k: x / total for k, x in zip(picked, raw, strict=True)}
        alloc["CASH"] = 0.0
    text = json.dumps({"reasoning": "r", "allocations": alloc}, indent=rng.choice([None, 2]))
    style = rng.randrange(8)
    if style == 1:
        text = f"Here is my answer:\n```json\n{text}\n```"
    elif style == 2:
        text = '<think>maybe {"allocations": {"CASH": 1.0}}</think>\n' + text
    elif style == 3:
        text = text.replace("}", ",}", 1)
    elif style == 4:
        text = text[: rng.randrange(len(text) + 1)]
    elif style == 5:
        text = text.replace('"allocations"', '"allocation"')
    elif style == 6:
        text = "I cannot answer that."
    return text
