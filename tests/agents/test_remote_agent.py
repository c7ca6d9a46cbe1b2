"""Remote agents (kind = "http") against real local servers: the reference aiohttp service in
examples/http_agent/ and a scripted raw-socket server for every way an answer can go wrong.

The documented JSON Schemas in docs/ are checked against what the agent really sends and against
what it accepts. Backoff sleeps are recorded, not slept.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web

from agents.base import CASH, Observation, PricePoint, Question
from agents.config import AgentConfig
from agents.factory import build_agent
from agents.remote import HttpAgent, build_request, check_answer, decision_id
from daemon.app.replay import replay
from daemon.config.settings import parse_config

ROOT = Path(__file__).resolve().parents[2]
T = 1_714_600_000.0
TOKEN_ENV = "PAPERARENA_TEST_AGENT_TOKEN"


def load_schema(name: str) -> dict[str, Any]:
    """Return the JSON Schema ``docs/agents-http.<name>.schema.json``."""
    schema: dict[str, Any] = json.loads(
        (ROOT / "docs" / f"agents-http.{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def load_service() -> Any:
    """Import examples/http_agent/service.py (the reference agent service)."""
    spec = importlib.util.spec_from_file_location(
        "paperarena_reference_service", ROOT / "examples" / "http_agent" / "service.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SERVICE = load_service()


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Run ``app`` on an ephemeral loopback port; yield its /decide URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/decide"
    finally:
        await runner.cleanup()


def equity_obs() -> Observation:
    """Return an equity observation over AAPL, MSFT and NVDA (NVDA has no price)."""
    return Observation(
        agent="remote1", market="equity", decision_ts=T, assets=("AAPL", "MSFT", "NVDA"),
        prices={"AAPL": PricePoint(T - 60, 190.0), "MSFT": PricePoint(T - 60, 410.0)},
        history={"AAPL": (PricePoint(T - 86400, 188.0),)}, holdings={}, cash=1000.0,
        value=1000.0, initial_value=1000.0, weights={CASH: 1.0},
    )


def poly_obs() -> Observation:
    """Return a Polymarket observation with one question."""
    q = Question("0xabc", "Will it rain?", "tokYES", "tokNO")
    return Observation(
        agent="remote1", market="polymarket", decision_ts=T, assets=("tokYES", "tokNO"),
        prices={"tokYES": PricePoint(T - 5, 0.4), "tokNO": PricePoint(T - 5, 0.6)},
        history={}, holdings={}, cash=500.0, value=500.0, initial_value=500.0,
        weights={CASH: 1.0}, questions=(q,),
    )


async def test_recorded_fundamentals_and_bars_reach_a_remote_agent_as_the_schema_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from agents.base import DailyBar, Fundamentals

    monkeypatch.setenv(TOKEN_ENV, "s3cret-token-value")
    app = SERVICE.make_app(token="s3cret-token-value")
    obs = replace(
        equity_obs(),
        fundamentals={"AAPL": Fundamentals(T - 3600, {"pe_ratio": 31.5}, "finnhub")},
        bars={"AAPL": (DailyBar(T - 86400, "2026-11-24", 187.0, 189.5, 186.2, 188.0, 5.1e7),
                       DailyBar(T - 60, "2026-11-25", None, 191.0, 188.1, 190.0, None))})
    async with serve(app) as url:
        agent = build_agent(http_cfg(url, token_env=TOKEN_ENV))
        assert (await agent.decide(obs)).outcome == "ok"
    body = app[SERVICE.REQUESTS][0]
    schema = load_schema("request")
    jsonschema.validate(body, schema)
    assert body["observation"]["bars"]["AAPL"][1] == [T - 60, "2026-11-25", None, 191.0, 188.1,
                                                      190.0, None]
    assert body["observation"]["fundamentals"]["AAPL"] == [T - 3600, {"pe_ratio": 31.5},
                                                           "finnhub"]
    body["observation"]["bars"]["AAPL"][0] = body["observation"]["bars"]["AAPL"][0][:6]
    with pytest.raises(jsonschema.ValidationError):  # the schema checks a bar's shape
        jsonschema.validate(body, schema)


def http_cfg(url: str, **http: Any) -> AgentConfig:
    """Return the config of an http agent calling ``url``."""
    return AgentConfig.model_validate(
        {"id": "remote1", "kind": "http", "http": {"url": url, "timeout": 5, **http}})


class Sleeps:
    """Record backoff waits instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# -- the reference service, the request schema, the bearer token --------------------------------


async def test_reference_service_decides_and_the_request_matches_its_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "s3cret-token-value")
    app = SERVICE.make_app(token="s3cret-token-value")
    request_schema = load_schema("request")
    answer_schema = load_schema("answer")
    async with serve(app) as url:
        agent = build_agent(http_cfg(url, token_env=TOKEN_ENV))
        assert isinstance(agent, HttpAgent)
        eq = await agent.decide(equity_obs())
        pm = await agent.decide(poly_obs())
    assert eq.outcome == "ok" and eq.allocation is not None
    assert eq.allocation["AAPL"] == pytest.approx(0.45) and eq.allocation["NVDA"] == 0.0
    assert pm.outcome == "ok" and pm.allocation is not None
    assert pm.allocation["tokYES"] == pytest.approx(0.9) and pm.allocation["tokNO"] == 0.0
    sent = app[SERVICE.REQUESTS]
    assert len(sent) == 2
    for body in sent:
        jsonschema.validate(body, request_schema)
    assert sent[0]["observation"] == equity_obs().to_dict()  # exactly as the store keeps it
    assert sent[0]["allowed_assets"] == ["AAPL", "MSFT", "CASH"]
    assert sent[1]["constraints"]["one_side_per_question"] == [["tokYES", "tokNO"]]
    # The raw answer is kept, matches the answer schema and carries the decision id.
    raw = json.loads(eq.raw_output)
    jsonschema.validate(raw, answer_schema)
    assert raw["decision_id"] == decision_id(equity_obs()) == sent[0]["decision_id"]
    assert eq.calls[0]["raw_response"] == eq.raw_output and eq.calls[0]["error"] is None
    assert eq.reasoning.startswith("equal weight")


async def test_bearer_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    app = SERVICE.make_app(token="right-token")
    async with serve(app) as url:
        monkeypatch.setenv(TOKEN_ENV, "wrong-token")
        refused = await HttpAgent(http_cfg(url, token_env=TOKEN_ENV)).decide(equity_obs())
        monkeypatch.delenv(TOKEN_ENV)
        unset = await HttpAgent(http_cfg(url, token_env=TOKEN_ENV)).decide(equity_obs())
    assert refused.outcome == "error" and refused.reason.startswith("HTTP 401")
    assert refused.attempts == 1  # an answer, even a refusal, is never retried
    assert unset.outcome == "error" and unset.attempts == 0
    assert unset.reason == f"environment variable {TOKEN_ENV} (http.token_env) is not set"
    assert len(app[SERVICE.REQUESTS]) == 0


async def test_reference_service_is_idempotent_on_the_decision_id() -> None:
    app = SERVICE.make_app(token="")
    async with serve(app) as url:
        agent = HttpAgent(http_cfg(url))
        first = await agent.decide(equity_obs())
        again = await agent.decide(equity_obs())
    assert first.raw_output == again.raw_output
    assert len(app[SERVICE.ANSWERS]) == 1 and len(app[SERVICE.REQUESTS]) == 2


# -- the answer schema and the agent's validation agree -----------------------------------------

ANSWERS: list[tuple[Any, bool]] = [
    ({"allocations": {"AAPL": 0.5, "CASH": 0.5}}, True),
    ({"allocations": {"AAPL": 0.5, "CASH": 0.5}, "reasoning": "why", "decision_id": None}, True),
    ({"hold": True, "reasoning": "wait"}, True),
    ({"hold": True}, True),
    ({"hold": False}, False),
    ({"hold": True, "allocations": {"CASH": 1.0}}, False),
    ({"allocations": {"AAPL": 0.5, "CASH": 0.5}, "hold": False}, False),
    ({}, False),
    ({"reasoning": "no answer"}, False),
    ({"allocations": {}}, False),
    ({"allocations": {"AAPL": -0.5, "CASH": 1.5}}, False),
    ({"allocations": {"AAPL": "50%", "CASH": 0.5}}, False),
    ({"allocations": {"AAPL": 0.5, "CASH": 0.5}, "extra": 1}, False),
    ({"allocations": {"AAPL": 0.5, "CASH": 0.5}, "reasoning": 3}, False),
    ([{"allocations": {"CASH": 1.0}}], False),
    ("allocations", False),
]


@pytest.mark.parametrize(("answer", "valid"), ANSWERS)
def test_answer_schema_and_validation_agree(answer: Any, valid: bool) -> None:
    obs = equity_obs()
    if isinstance(answer, dict) and answer.get("decision_id", 0) is None:
        answer = {**answer, "decision_id": decision_id(obs)}
    schema_ok = jsonschema.Draft202012Validator(load_schema("answer")).is_valid(answer)
    try:
        check_answer(json.dumps(answer), "application/json", obs)
        accepted = True
    except ValueError:
        accepted = False
    assert (schema_ok, accepted) == (valid, valid)


def test_answers_are_validated_like_an_llms() -> None:
    obs = equity_obs()
    for alloc, why in (({"NVDA": 0.5, "CASH": 0.5}, "no price for NVDA"),
                       ({"TSLA": 1.0}, "unknown asset 'TSLA'"),
                       ({"AAPL": 0.5, "CASH": 0.2}, "weights sum to 0.7")):
        with pytest.raises(ValueError, match=why):
            check_answer(json.dumps({"allocations": alloc}), "application/json", obs)
    with pytest.raises(ValueError, match="both YES and NO"):
        check_answer(json.dumps({"allocations": {"tokYES": 0.5, "tokNO": 0.5}}),
                     "application/json", poly_obs())
    with pytest.raises(ValueError, match="decision_id is not this decision's"):
        check_answer(json.dumps({"hold": True, "decision_id": "0" * 32}), "application/json", obs)
    assert build_request(obs)["decision_id"] == decision_id(obs)


# -- bad answers: one line, nothing applied, retries only on transport failure ------------------


class ScriptedServer:
    """A raw HTTP/1.1 server on 127.0.0.1 answering each connection from a script.

    Script steps: ``("close",)`` drops the connection after reading the request (a transport
    failure); ``("answer", status, content_type, body, delay, with_length)`` answers.
    """

    def __init__(self, *steps: tuple[Any, ...]) -> None:
        self.steps = list(steps)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/decide"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[1:]
            headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append((headers, body))
            step = self.steps.pop(0) if self.steps else ("close",)
            if step[0] == "answer":
                _, status, ctype, payload, delay, with_length = step
                await asyncio.sleep(delay)
                head_out = f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nConnection: close\r\n"
                if with_length:
                    head_out += f"Content-Length: {len(payload)}\r\n"
                writer.write(head_out.encode() + b"\r\n")
                for i in range(0, len(payload), 1 << 16):
                    writer.write(payload[i:i + (1 << 16)])
                    await writer.drain()
            writer.close()
            await writer.wait_closed()
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()


GOOD = json.dumps({"allocations": {"AAPL": 0.6, "CASH": 0.4}, "reasoning": "ok"}).encode()


def answer(status: int = 200, body: bytes = GOOD, ctype: str = "application/json",
           delay: float = 0.0, with_length: bool = True) -> tuple[Any, ...]:
    """Return a script step answering with ``status`` and ``body``."""
    return ("answer", status, ctype, body, delay, with_length)


async def test_transport_failures_are_retried_with_the_same_decision_id() -> None:
    sleeps = Sleeps()
    async with ScriptedServer(("close",), ("close",), answer()) as url:
        dec = await HttpAgent(http_cfg(url, max_attempts=3), sleep=sleeps).decide(equity_obs())
    assert dec.outcome == "ok" and dec.attempts == 3
    assert dec.allocation is not None and dec.allocation["AAPL"] == pytest.approx(0.6)
    assert [c["error"] is not None for c in dec.calls] == [True, True, False]
    assert dec.calls[0]["error"].startswith("transport failure")
    assert sleeps.waits == [0.5, 1.0]


async def test_every_request_of_a_decision_carries_the_same_id() -> None:
    server = ScriptedServer(("close",), answer())
    async with server as url:
        await HttpAgent(http_cfg(url), sleep=Sleeps()).decide(equity_obs())
    (h1, b1), (h2, b2) = server.requests
    assert b1 == b2 and h1["idempotency-key"] == h2["idempotency-key"] == decision_id(equity_obs())


async def test_connection_refused_ends_after_max_attempts() -> None:
    server = ScriptedServer()
    async with server as url:
        pass  # closed: nothing listens on the port any more
    dec = await HttpAgent(http_cfg(url, max_attempts=2), sleep=Sleeps()).decide(equity_obs())
    assert dec.outcome == "error" and dec.attempts == 2 and dec.allocation is None
    assert dec.reason.startswith("transport failure") and dec.reason.endswith("(attempt 2 of 2)")
    assert "\n" not in dec.reason


BAD: list[tuple[str, tuple[Any, ...], dict[str, Any], str, str]] = [
    ("http 500", answer(500, b"Internal Server Error: boom"), {}, "error",
     "HTTP 500 from the agent service: Internal Server Error: boom"),
    ("html", answer(200, b"<html><body><h1>Welcome to nginx!</h1></body></html>",
                    "text/html"), {}, "invalid",
     "invalid answer: content type is text/html, not application/json"),
    ("not json", answer(200, b"{allocations: maybe"), {}, "invalid", "invalid answer: not JSON"),
    ("huge with length", answer(200, b"[" + b"0," * 600_000 + b"0]"), {"max_body": 1 << 20},
     "invalid", "answer larger than 1048576 bytes (http.max_body)"),
    ("huge streamed", answer(200, b"[" + b"0," * 3_000_000 + b"0]", with_length=False),
     {"max_body": 1 << 20}, "invalid", "answer larger than 1048576 bytes (http.max_body)"),
    ("late", answer(delay=3.0), {"timeout": 0.5}, "error", "no answer within 0.5s (http.timeout)"),
    ("bad allocation", answer(body=b'{"allocations": {"NVDA": 1.0}}'), {}, "invalid",
     "invalid answer: no price for NVDA: cannot buy it"),
]


@pytest.mark.parametrize(("name", "step", "http", "outcome", "reason"), BAD,
                         ids=[b[0] for b in BAD])
async def test_bad_answers_give_one_line_and_no_allocation(
    name: str, step: tuple[Any, ...], http: dict[str, Any], outcome: str, reason: str,
) -> None:
    server = ScriptedServer(step, answer())  # a retry would get a good answer: there is none
    async with server as url:
        dec = await HttpAgent(http_cfg(url, **http), sleep=Sleeps()).decide(equity_obs())
    assert dec.allocation is None and dec.outcome == outcome, dec.reason
    assert dec.reason.startswith(reason) and "\n" not in dec.reason
    assert dec.attempts == 1 and len(server.requests) == 1
    assert dec.calls[0]["error"] == dec.reason
    assert len(dec.raw_output) <= 100_100  # bounded: the stored raw answer is cut
    if name == "http 500":
        assert dec.raw_output == "Internal Server Error: boom"


async def test_a_hold_answer_keeps_the_portfolio() -> None:
    async with ScriptedServer(answer(body=b'{"hold": true, "reasoning": "no edge"}')) as url:
        dec = await HttpAgent(http_cfg(url)).decide(equity_obs())
    assert dec.outcome == "hold" and dec.allocation is None and dec.reasoning == "no edge"


async def test_a_failing_agent_service_holds_the_portfolio_in_a_replay(tmp_path: Path) -> None:
    async def broken(req: web.Request) -> web.Response:
        return web.Response(status=500, text="<html><body>Traceback (most recent call last):\n"
                                             "  boom</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_post("/decide", broken)
    async with serve(app) as url:
        cfg = parse_config({"http": {"enabled": False}, "agents": [
            {"id": "remote", "kind": "http", "http": {"url": url, "timeout": 5}},
            {"id": "ew", "kind": "equal_weight"}]})
        end = datetime(2026, 10, 21, tzinfo=UTC).timestamp()  # the first 2 sessions
        await replay(ROOT / "examples" / "sample.jsonl.gz", cfg, tmp_path / "r.db",
                     progress=False, window=(None, end))
    con = sqlite3.connect(tmp_path / "r.db")
    rows = con.execute("SELECT outcome, reason, raw_output FROM decisions"
                       " WHERE agent='remote' AND outcome != 'skipped'").fetchall()
    assert rows and {r[0] for r in rows} == {"error"}  # rounds without prices ask nobody
    assert all(r[1] == "HTTP 500 from the agent service: <html><body>Traceback (most recent call"
               " last): boom</body></html>" for r in rows)
    assert all(r[2].startswith("<html>") for r in rows)  # the raw answer is kept
    assert con.execute("SELECT COUNT(*) FROM fills WHERE agent='remote'").fetchone()[0] == 0
    assert con.execute("SELECT COUNT(*) FROM fills WHERE agent='ew'").fetchone()[0] > 0
