"""check-config rejects everything run would reject, naming the key, in one line per problem."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.app.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: (TOML text, the key the error line must name)
BAD_CONFIGS: list[tuple[str, str]] = [
    ("[markets.equity]\ninitial_cash = inf\n", "markets.equity.initial_cash"),
    ("[markets.equity]\ninitial_cash = 1e309\n", "markets.equity.initial_cash"),
    ("[markets.equity]\ninitial_cash = \"1000\"\n", "markets.equity.initial_cash"),
    ("[markets.equity]\ninitial_cash = nan\n", "markets.equity.initial_cash"),
    ("[markets.polymarket]\ninitial_cash = -inf\n", "markets.polymarket.initial_cash"),
    ("[markets.equity]\nrisk_free_rate = nan\n", "markets.equity.risk_free_rate"),
    ("[markets.equity]\nenabled = \"yes\"\n", "markets.equity.enabled"),
    ("[markets.polymarket]\nenabled = 1\n", "markets.polymarket.enabled"),
    ("[http]\nenabled = \"false\"\n", "http.enabled"),
    ("[sources]\nenabled = \"true\"\n", "sources.enabled"),
    ("[markets.equity.cost]\nfee_bps = \"5\"\n", "markets.equity.cost.fee_bps"),
    ("[markets.equity.schedule]\nkind = \"nyse\"\ntimes = [\"25:99\"]\n",
     "markets.equity.schedule.times"),
    ("[markets.equity.schedule]\nkind = \"nyse\"\ntimes = [\"12:60\"]\n",
     "markets.equity.schedule.times"),
    ("[markets.polymarket.schedule]\nkind = \"interval\"\nevery = 1e300\n",
     "markets.polymarket.schedule.every"),
    ("[markets.polymarket.schedule]\nkind = \"interval\"\nevery = \"100000d\"\n",
     "markets.polymarket.schedule.every"),
    ("[markets.polymarket.schedule]\nkind = \"daily\"\nat = \"noon\"\n",
     "markets.polymarket.schedule.at"),
    ("[markets.polymarket.schedule]\nkind = \"daily\"\nat = \"24:00\"\n",
     "markets.polymarket.schedule.at"),
    ("[markets.equity]\nstale_after = 0\n", "markets.equity.stale_after"),
    ("[scheduler]\nmisfire_grace = 0\n", "scheduler.misfire_grace"),
    ("[scheduler]\nmisfire_grace = \"0s\"\n", "scheduler.misfire_grace"),
    ("[store]\nflush_interval = 0\n", "store.flush_interval"),
    ("[store]\nflush_interval = \"0ms\"\n", "store.flush_interval"),
    ("[store]\nbatch_size = \"5000\"\n", "store.batch_size"),
    ("[store]\nbatch_size = 10.5\n", "store.batch_size"),
    ("[store]\npath = \"\"\n", "store.path"),
    ("[store]\nurl = \"postgresql://u:s3cr3t@db/x\"\n", "store.url"),  # password: env only
    ("[store]\nurl = \"mysql://db/x\"\n", "store.url"),
    ("[http]\nhost = \"!!garbage host!!\"\n", "http.host"),
    ("[http]\nhost = \"\"\n", "http.host"),
    ("[http]\nhost = \"999.1.1.1\"\n", "http.host"),
    ("[http]\nport = \"9464\"\n", "http.port"),
    ("[[agents]]\nid = \"a\"\nkind = \"llm\"\nmodel = \"openai/x\"\napi_base = \"not a url\"\n",
     "agents.0.api_base"),
    ("[[agents]]\nid = \"a\"\nkind = \"llm\"\nmodel = \"openai/x\"\napi_base = \"ftp://h/v1\"\n",
     "agents.0.api_base"),
    ("[[agents]]\nid = \"a\"\nkind = \"llm\"\nmodel = \"openai/x\"\napi_base = \"http://\"\n",
     "agents.0.api_base"),
    ("[[agents]]\nid = \"a\"\nkind = \"llm\"\nmodel = \"openai/x\"\ntemperature = \"0.3\"\n",
     "agents.0.temperature"),
    ("[[agents]]\nid = \"a\"\nkind = \"llm\"\nmodel = \"openai/x\"\ntimeout = 0\n",
     "agents.0.timeout"),
    ("[[agents]]\nid = \"a\"\nkind = \"cash\"\nhalt_on_breach = \"no\"\n",
     "agents.0.halt_on_breach"),
    ("[[agents]]\nid = \"a\"\nkind = \"momentum\"\ntop_k = 2.5\n", "agents.0.top_k"),
    ("[sources.polymarket]\nws_url = \"not a url\"\n", "sources.polymarket.ws_url"),
    ("[sources.polymarket]\nws_url = \"https://example.com/ws\"\n", "sources.polymarket.ws_url"),
    ("[sources.polymarket]\ngamma_url = \"gamma-api\"\n", "sources.polymarket.gamma_url"),
    ("[sources.polymarket]\nclob_url = \"http://bad host/\"\n", "sources.polymarket.clob_url"),
    ("[sources.news]\ngoogle_url = \"\"\n", "sources.news.google_url"),
    ("[sources.equity.yahoo]\nws_url = \"yahoo\"\n", "sources.equity.yahoo.ws_url"),
    ("[sources.equity.yahoo]\nchart_url = \"https://h:99999/x\"\n",
     "sources.equity.yahoo.chart_url"),
    ("[logging]\nlevel = \"verbose\"\n", "logging.level"),
]


@pytest.mark.parametrize(("text", "key"), BAD_CONFIGS, ids=[k + ":" + t.splitlines()[-1]
                                                            for t, k in BAD_CONFIGS])
def test_bad_config_is_refused_naming_the_key(tmp_path: Path, text: str, key: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    assert main(["check-config", str(f)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{f}: {key}:"), err


def _one_line_exit_2(args: list[str]) -> str:
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)  # a hang guard
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize(("name", "content", "expect"), [
    ("binary", bytes(range(256)) * 4, "not UTF-8 text"),
    ("invalid-utf8", b'[store]\npath = "caf\xe9.db"\n', "not UTF-8 text"),
    ("nul", b'[store]\npath = "a\x00b"\n', "invalid TOML"),
    ("deep-array", b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    ("deep-table", b"a = " + b"{b = " * 5_000 + b"1" + b"}" * 5_000 + b"\n", "nested too deeply"),
    ("date", b"[store]\npath = 2026-01-01\n", "store.path"),
])
def test_unreadable_config_file_is_one_line(tmp_path: Path, name: str, content: bytes,
                                            expect: str) -> None:
    f = tmp_path / f"{name}.toml"
    f.write_bytes(content)
    line = _one_line_exit_2(["check-config", str(f)])
    assert line.startswith(str(f)) and expect in line


def test_config_that_is_a_directory_is_one_line(tmp_path: Path) -> None:
    line = _one_line_exit_2(["check-config", str(tmp_path)])
    assert str(tmp_path) in line and "directory" in line


@pytest.mark.parametrize("text", [
    "[markets.equity]\ninitial_cash = inf\n",
    "[store]\nflush_interval = 0\n",
    "[http]\nhost = \"!!garbage host!!\"\n",
])
def test_run_refuses_what_check_config_refuses(tmp_path: Path, text: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text + "[sources]\nenabled = false\n")
    line = _one_line_exit_2(["run", "--config", str(f), "--db", str(tmp_path / "x.db")])
    assert line.startswith(str(f))
    assert not (tmp_path / "x.db").exists()


GOOD_VARIANTS = [
    "[markets.equity]\ninitial_cash = 1000\n",            # an integer where a float is expected
    "[markets.equity.schedule]\nkind = \"nyse\"\ntimes = [\"09:45\", \"close\", \"open+30m\"]\n",
    "[markets.polymarket.schedule]\nkind = \"daily\"\nat = \"23:59\"\ntimezone = \"UTC\"\n",
    "[http]\nhost = \"0.0.0.0\"\n",
    "[http]\nhost = \"::1\"\n",
    "[http]\nhost = \"my-host.example.org\"\n",
    "[[agents]]\nid = \"q\"\nkind = \"llm\"\nmodel = \"openai/q\"\n"
    "api_base = \"http://127.0.0.1:8000/v1\"\n",
    "[sources.polymarket]\nws_url = \"ws://127.0.0.1:9000/ws\"\n",
    "[store]\nflush_interval = \"250ms\"\n",
]


@pytest.mark.parametrize("text", GOOD_VARIANTS)
def test_valid_variants_still_pass(tmp_path: Path, text: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "good.toml"
    f.write_text(text)
    assert main(["check-config", str(f)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.toml")))
def test_examples_pass_check_config(example: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "check-config", str(example)],
                       capture_output=True, text=True, cwd=ROOT, timeout=20, env=env)
    assert r.returncode == 0, r.stderr
