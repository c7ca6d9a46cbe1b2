"""Per-agent prompt files: two LLM agents on one model compared on prompts, through the real
LiteLLM path against the local fake server; files checked at load, hashed and versioned."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.prompting import load_prompt_file
from daemon.app.replay import replay
from daemon.config.settings import ConfigError, load_config
from tests.agents.test_llm_replay import SAMPLE, PromptReadingServer

TEMPLATE = """$marker
It is $now ($timezone).
$market
$news
$account

AVAILABLE ASSETS
$assets

OUTPUT
One JSON object: {"reasoning": "...", "allocations": {"<asset>": <weight>, "CASH": <weight>}}
with weights summing to 1 (between $sum_low and $sum_high).
"""


def write_template(path: Path, marker: str) -> str:
    """Write a valid own template starting with ``marker``; return its 8-hex SHA-256 prefix."""
    data = TEMPLATE.replace("$marker", marker).encode()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()[:8]


def config_text(api_base: str, a: str, b: str) -> str:
    """Return a config with two LLM agents on one model, with prompt files ``a`` and ``b``."""
    agent = (f'kind = "llm"\nmodel = "openai/test-model"\napi_base = "{api_base}"\n'
             'api_key_env = "FAKE_LLM_KEY"\ntimeout = 10\nmax_attempts = 2\nmarkets = ["equity"]\n')
    return (f'[http]\nenabled = false\n\n[[agents]]\nid = "prompt_a"\n{agent}'
            f'prompt_files = {{equity = "{a}"}}\n\n[[agents]]\nid = "prompt_b"\n{agent}'
            f'prompt_files = {{equity = "{b}"}}\n\n[[agents]]\nid = "ew"\nkind = "equal_weight"\n')


async def test_two_agents_on_one_model_compared_on_their_own_prompts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test-not-a-secret")
    (tmp_path / "prompts").mkdir()
    hash_a = write_template(tmp_path / "prompts" / "cautious.txt", "You are a cautious manager.")
    hash_b = write_template(tmp_path / "prompts" / "bold.txt", "You are a bold manager.")
    monkeypatch.chdir(tmp_path.parent)  # relative paths are from the config file's folder
    async with PromptReadingServer() as server:
        conf = tmp_path / "two.toml"
        conf.write_text(config_text(server.api_base, "prompts/cautious.txt", "prompts/bold.txt"))
        cfg = load_config(conf)
        end = datetime(2026, 10, 22, tzinfo=UTC).timestamp()  # the first 3 sessions
        await replay(SAMPLE, cfg, tmp_path / "p.db", progress=False, window=(None, end))
        prompts = [r["messages"][-1]["content"] for r in server.requests]
    assert any(p.startswith("You are a cautious manager.") for p in prompts)
    assert any(p.startswith("You are a bold manager.") for p in prompts)
    con = sqlite3.connect(tmp_path / "p.db")
    versions = dict(con.execute("SELECT agent, GROUP_CONCAT(DISTINCT template_version)"
                                " FROM decisions WHERE agent LIKE 'prompt_%' GROUP BY agent"))
    assert versions == {"prompt_a": f"equity-custom:cautious+{hash_a}",
                        "prompt_b": f"equity-custom:bold+{hash_b}"}
    ok = con.execute("SELECT COUNT(*) FROM decisions WHERE agent LIKE 'prompt_%'"
                     " AND outcome = 'ok'").fetchone()[0]
    assert ok >= 2


def test_an_edited_prompt_file_gets_a_new_version(tmp_path: Path) -> None:
    path = tmp_path / "mine.txt"
    first = write_template(path, "Version one.")
    text, version = load_prompt_file(str(path), "polymarket")
    assert text.startswith("Version one.") and version == f"polymarket-custom:mine+{first}"
    second = write_template(path, "Version two.")
    assert load_prompt_file(str(path), "polymarket")[1] == f"polymarket-custom:mine+{second}"
    assert first != second


@pytest.mark.parametrize(("content", "words"), [
    (None, "cannot read: No such file or directory"),
    (TEMPLATE.replace("$marker", "$portfolio").encode(),
     "unknown placeholder(s) $portfolio (known: $account, $assets"),
    (TEMPLATE.replace("$marker", "Hi").replace("$assets", "").encode(),
     "missing placeholder(s) $assets"),
    (TEMPLATE.replace("$marker", "costs 5$ each").encode(),
     "invalid placeholder syntax (write $$ for a dollar sign)"),
    (b"\xff\xfe" + TEMPLATE.replace("$marker", "x").encode(), "not UTF-8 (invalid byte at"),
    (TEMPLATE.replace("$marker", "x" * 300_000).encode(), "larger than 262144 bytes"),
])
def test_a_bad_prompt_file_is_one_line_at_load(
    tmp_path: Path, content: bytes | None, words: str,
) -> None:
    path = tmp_path / "bad.txt"
    if content is not None:
        path.write_bytes(content)
    conf = tmp_path / "c.toml"
    conf.write_text(config_text("http://127.0.0.1:9/v1", "bad.txt", "bad.txt"))
    with pytest.raises(ConfigError) as err:
        load_config(conf)
    assert len(err.value.problems) == 2  # one line per agent naming it
    line = err.value.problems[0]
    assert line.startswith(f"agents.0.prompt_files: {path}: ") and words in line, line
