"""Logging: JSON under systemd, console in a terminal, and secrets that never reach the output."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.config.settings import parse_config
from daemon.core import logs
from daemon.core.logs import (
    REDACTED,
    RedactingStream,
    redact_text,
    redact_value,
    register_config_secrets,
    register_secret,
    wants_json,
)
from tests.llm_server import Behaviour, FakeLlmServer
from tests.recordings import make_recording

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean_secrets() -> Iterator[None]:
    saved, pattern = set(logs._secrets), logs._pattern
    yield
    logs._secrets.clear()
    logs._secrets.update(saved)
    logs._pattern = pattern


def test_redact_text() -> None:
    register_secret("sk-abcdef123456")
    register_secret("abc")  # too short to register: it would redact ordinary words
    assert redact_text("key sk-abcdef123456 used") == f"key {REDACTED} used"
    assert redact_text("abc") == "abc"
    assert redact_text("https://h/x?token=zzz&a=1") == f"https://h/x?token={REDACTED}&a=1"
    assert redact_text("GET /q?apikey=AAA") == f"GET /q?apikey={REDACTED}"
    assert redact_text("Authorization: Bearer abcdefgh12345") == \
        f"Authorization: Bearer {REDACTED}"
    assert redact_text("monkey=3 tokens=5") == "monkey=3 tokens=5"


def test_redact_value_keeps_structure() -> None:
    register_secret("s3cr3t-value")
    event = {"event": "call", "api_key": "x", "api_key_env": "OPENAI_API_KEY",
             "tokens_in": 12, "max_tokens": 100, "authorization": "Bearer q",
             "nested": {"password": "p", "note": "has s3cr3t-value"},
             "items": ["s3cr3t-value", 3]}
    out = logs._redact(None, "info", dict(event))
    assert out["api_key"] == REDACTED and out["authorization"] == REDACTED
    assert out["api_key_env"] == "OPENAI_API_KEY" and out["tokens_in"] == 12
    assert out["max_tokens"] == 100
    assert out["nested"] == {"password": REDACTED, "note": f"has {REDACTED}"}
    assert out["items"] == [REDACTED, 3]
    assert redact_value(RuntimeError("boom s3cr3t-value")) == f"RuntimeError('boom {REDACTED}')"


def test_register_config_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"PA_T_LLM": "sk-llm-0123456789", "PA_T_FH": "fh-0123456789",
           "PA_T_HOOK": "hook-0123456789", "PA_T_SECRET": "alp-0123456789",
           "SOME_PROVIDER_API_KEY": "implicit-0123456789", "PA_T_UNUSED": "visible-0123456789"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = parse_config({
        "agents": [{"id": "l", "kind": "llm", "model": "openai/x", "api_key_env": "PA_T_LLM"}],
        "sources": {"equity": {"finnhub": {"key_env": "PA_T_FH"},
                               "alpaca": {"key_env": "PA_T_NOT_SET",
                                          "secret_env": "PA_T_SECRET"}}},
        "alerts": {"webhooks": [{"url": "https://hooks.example/T0/B0/literal-path-secret",
                                 "token_env": "PA_T_HOOK"}]},
    })
    assert register_config_secrets(cfg) >= 6
    text = " ".join(env.values()) + " https://hooks.example/T0/B0/literal-path-secret"
    out = redact_text(text)
    for name, value in env.items():
        assert (value in out) == (name == "PA_T_UNUSED"), name
    assert "literal-path-secret" not in out


def test_wants_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INVOCATION_ID", raising=False)
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    assert wants_json("json") and not wants_json("console")
    monkeypatch.setattr(sys, "stderr", _Tty())
    assert not wants_json("auto")  # a terminal: console
    monkeypatch.setenv("JOURNAL_STREAM", "8:12345")
    assert wants_json("auto")  # under systemd: JSON even on a tty


class _Tty:
    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        return len(s)


def test_redacting_stream() -> None:
    register_secret("stream-secret-1")
    seen: list[str] = []

    class Sink:
        def write(self, s: str) -> int:
            seen.append(s)
            return len(s)

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    stream = RedactingStream(Sink())  # type: ignore[arg-type]
    print("leak stream-secret-1 ?token=abc", file=stream)
    assert "".join(seen) == f"leak {REDACTED} ?token={REDACTED}\n"


SCRIPT = """
import asyncio, logging, os, sys, warnings
import structlog
from daemon.config.settings import load_config
from daemon.core.logs import configure_logging, register_config_secrets

cfg = load_config(sys.argv[1])
configure_logging("info", "json")
register_config_secrets(cfg)
log = structlog.get_logger("t")
llm, hook = os.environ["PA_T_LLM_KEY"], os.environ["PA_T_HOOK_TOKEN"]
url = cfg.alerts["webhooks"][0]["url"]
log.error("litellm.AuthenticationError: Incorrect API key provided: " + llm)
log.warning("alert delivery failed", url=url, headers={"Authorization": "Bearer " + hook})
try:
    raise ConnectionError(f"cannot connect to {url} with {llm}")
except ConnectionError:
    log.exception("notifier crashed")
logging.getLogger("aiohttp.client").warning("POST %s failed (%s)", url, hook)
logging.getLogger("LiteLLM").error("api_key=%s rejected", llm)
warnings.warn("deprecated call with " + hook)
print("stdout print", llm, url)
print("stderr print", hook, file=sys.stderr)
asyncio.run(asyncio.sleep(0))
raise SystemExit(f"fatal: {url} {hook} {llm}")
"""

SECRETS = {
    "PA_T_LLM_KEY": "sk-planted-llm-key-7f3a9c",
    "PA_T_HOOK_TOKEN": "planted-hook-token-51be2",
    "OPENAI_API_KEY": "sk-planted-implicit-0d1e",
}
URL_TOKEN = "planted-url-token-9c0ffee"


def _planted_env() -> dict[str, str]:
    return {**os.environ, **SECRETS, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _assert_clean(text: str) -> None:
    for value in (*SECRETS.values(), URL_TOKEN):
        assert value not in text, f"{value} leaked:\n{text}"


def test_secrets_never_reach_stdout_or_stderr(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(textwrap.dedent(f"""
        [[agents]]
        id = "llm"
        kind = "llm"
        model = "openai/test"
        api_key_env = "PA_T_LLM_KEY"

        [[alerts.webhooks]]
        url = "http://127.0.0.1:9/hook?token={URL_TOKEN}"
        token_env = "PA_T_HOOK_TOKEN"
    """))
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    res = subprocess.run([sys.executable, str(script), str(cfg)], cwd=ROOT, env=_planted_env(),
                         capture_output=True, text=True, timeout=60)
    _assert_clean(res.stdout + res.stderr)
    assert res.returncode == 1
    assert res.stderr.count(REDACTED) >= 8, res.stderr
    assert "stdout print" in res.stdout and "fatal: " in res.stderr  # print and traceback
    lines = [json.loads(line) for line in res.stderr.splitlines() if line.startswith("{")]
    events = {e["event"] for e in lines}
    assert {"notifier crashed", "alert delivery failed"} <= events
    assert any(e.get("logger") == "aiohttp.client" for e in lines)  # stdlib logs as JSON too


async def test_replay_with_failing_llm_and_webhook_leaks_no_secret(tmp_path: Path) -> None:
    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec, days=2)
    key = SECRETS["PA_T_LLM_KEY"]
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}. You can find "
                                            f"your API key at https://example/keys?key={key}",
                                 "type": "invalid_request_error", "code": "invalid_api_key"}})
    async with FakeLlmServer(default=Behaviour(status=401, body=body)) as server:
        cfg = tmp_path / "c.toml"
        cfg.write_text(textwrap.dedent(f"""
            [markets.equity]
            assets = ["AAPL", "MSFT", "NVDA", "JPM"]

            [[agents]]
            id = "llm"
            kind = "llm"
            model = "openai/test-model"
            api_base = "{server.api_base}"
            api_key_env = "PA_T_LLM_KEY"
            max_attempts = 1
            markets = ["equity"]

            [[agents]]
            id = "bh"
            kind = "buy_and_hold"
            max_drawdown = 0.001

            [alerts]
            check_interval = "1m"
            max_attempts = 2
            backoff_initial = "10ms"
            [[alerts.webhooks]]
            url = "http://127.0.0.1:9/hook?token={URL_TOKEN}"
            token_env = "PA_T_HOOK_TOKEN"
            timeout = "1s"
        """))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daemon.app.cli", "replay", str(rec), "--config", str(cfg),
            "--db", str(tmp_path / "r.db"), "--no-progress", cwd=ROOT, env=_planted_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 120)
        assert server.requests, "the LLM agent never called the server"
    out, err = out_b.decode(), err_b.decode()
    _assert_clean(out + err)
    assert proc.returncode == 0, err
    failed = [json.loads(line) for line in err.splitlines() if "llm.call_failed" in line]
    assert failed and all(REDACTED in e["error"] for e in failed), err
    assert "drawdown limit breached" in err
    assert "alert delivery" in err  # the webhook was tried (and failed)
