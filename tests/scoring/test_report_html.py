"""The offline HTML report and the leaderboard of the shipped sample (incl. its stress window)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from daemon.app.cli import main
from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.store.reports import load_report
from scoring.board.report_html import CHART_KINDS, render_html
from scoring.board.text import to_json

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"
SAMPLE_CONFIG = ROOT / "examples" / "sample-replay.toml"
AGENTS = {"buy_and_hold", "equal_weight", "all_cash", "momentum"}
MARKETS = ("equity", "polymarket")
LINE_KINDS = ("equity", "drawdown", "cash", "rolling_k", "rolling_k_same_window")
STRESS = (datetime(2026, 11, 2, tzinfo=UTC).timestamp(),
          datetime(2026, 11, 6, tzinfo=UTC).timestamp())


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sample") / "sample.db"
    asyncio.run(replay(SAMPLE, load_config(SAMPLE_CONFIG), db, progress=False))
    return db


class SvgCollector(HTMLParser):
    """Collect every chart svg with its path elements."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, Any]] = []
        self.tags: set[str] = set()
        self._svg: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        if tag == "svg":
            self._svg = {**a, "paths": []}
            self.charts.append(self._svg)
        elif tag == "path" and self._svg is not None:
            self._svg["paths"].append(a)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg = None


def parse(html: str) -> SvgCollector:
    p = SvgCollector()
    p.feed(html)
    return p


def points(d: str) -> int:
    return len(re.findall(r"[ML]\s*-?\d", d))


def test_every_chart_has_data_for_every_agent(sample_db: Path) -> None:
    html = render_html(load_report(sample_db))
    doc = parse(html)
    kinds = {c["data-chart"] for c in doc.charts}
    assert kinds == set(CHART_KINDS)
    for market in MARKETS:
        for kind in LINE_KINDS:
            (svg,) = [c for c in doc.charts if c["data-chart"] == kind
                      and c["data-market"] == market]
            series = {p["data-agent"]: p for p in svg["paths"] if p.get("class") == "series"}
            assert set(series) == AGENTS, (market, kind)
            for agent, p in series.items():
                n = int(p["data-n"])
                assert n >= 2 and points(p["d"]) == n, (market, kind, agent)
        allocs = {c["data-agent"]: c for c in doc.charts
                  if c["data-chart"] == "allocation" and c["data-market"] == market}
        assert set(allocs) == AGENTS
        for agent, svg in allocs.items():
            areas = [p for p in svg["paths"] if p.get("class") == "area"]
            assert areas and all(points(p["d"]) >= 4 for p in areas), (market, agent)
        cash_areas = [p for p in allocs["all_cash"]["paths"] if p.get("class") == "area"]
        assert [p["data-asset"] for p in cash_areas] == ["CASH"]


def test_html_is_self_contained_and_deterministic(sample_db: Path, tmp_path: Path) -> None:
    html = render_html(load_report(sample_db))
    doc = parse(html)
    assert not {"script", "link", "img", "iframe"} & doc.tags
    urls = set(re.findall(r"https?://[^\s'\"<>]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert render_html(load_report(sample_db)) == html
    out = tmp_path / "report.html"
    assert main(["report", "--db", str(sample_db), "--html", str(out), "--json"]) == 0
    assert out.read_text(encoding="utf-8") == html
    # The leaderboard table names every agent in both markets with a rank.
    for market in MARKETS:
        assert f"<section data-market='{market}'>" in html


def test_stress_window_is_bear_or_crisis_and_shows_the_drawdowns(sample_db: Path) -> None:
    report = load_report(sample_db, window=STRESS)
    board = report.board
    assert board["regime"]["label"] in {"crisis", "bear"}
    assert board["regime"]["index_return"] < -0.05
    rows = {(r["agent"], r["market"]): r for r in board["rows"]}
    for agent in ("buy_and_hold", "equal_weight"):
        r = rows[(agent, "equity")]
        assert r["max_drawdown"] > 0.05
        assert r["cumulative_return"] < -0.05
        assert r["by_regime"]["bear"]["mean_daily_return"] < 0
    assert rows[("all_cash", "equity")]["max_drawdown"] == 0.0
    # The window bounds every figure.
    full = {(r["agent"], r["market"]): r for r in load_report(sample_db).board["rows"]}
    for key, r in rows.items():
        assert r["days"] < full[key]["days"]
        assert sum(r["decisions"].values()) <= r["days"] + 1
        assert sum(x["days"] for x in r["by_regime"].values()) == r["n_periods"]
        assert r["var_95"] is None  # fewer than 20 returns in the window
    eq = rows[("equal_weight", "equity")]
    assert eq["days"] == 4 and eq["rolling_k"]["delta"]["1"] is not None
    assert eq["rolling_k"]["delta"]["2"] is None
    assert board["markets"]["equity"]["capitalbench_start"] >= STRESS[0]
    assert board["markets"]["equity"]["best_asset"] == "CASH"  # every stock fell
    # The HTML of the window draws the drawdowns below zero.
    doc = parse(render_html(report))
    (dd,) = [c for c in doc.charts if c["data-chart"] == "drawdown"
             and c["data-market"] == "equity"]
    paths = {p["data-agent"]: p for p in dd["paths"] if p.get("class") == "series"}
    ys = [float(y) for y in re.findall(r"[ML][\d.]+ ([\d.]+)", paths["equal_weight"]["d"])]
    assert max(ys) - min(ys) > 50  # a deep fall drawn over a good part of the chart height
    # Buy-and-hold trades before the window: the allocation in force is still drawn.
    (bh,) = [c for c in doc.charts if c["data-chart"] == "allocation"
             and c["data-market"] == "equity" and c["data-agent"] == "buy_and_hold"]
    assert len([p for p in bh["paths"] if p.get("class") == "area"]) == 15


def test_sample_report_json_is_deterministic(sample_db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(sample_db, copy)
    assert to_json(load_report(sample_db).board) == to_json(load_report(copy).board)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_headless_chromium_renders_without_console_errors(sample_db: Path,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    html = render_html(load_report(sample_db))
    out.write_text(html, encoding="utf-8")
    proc = subprocess.run(
        ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--dump-dom", out.as_uri()],
        capture_output=True, text=True, timeout=90, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    assert proc.stdout.count("<svg") == html.count("<svg") > 0
