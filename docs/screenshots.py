"""Regenerate the live page's screenshots in docs/ from the shipped sample.

    .venv/bin/python docs/screenshots.py            # replays the sample into a temporary store
    .venv/bin/python docs/screenshots.py --db sample.db

Replays ``examples/sample.jsonl.gz`` (unless ``--db`` names a store), serves it read-only
(``paperarena serve``) on a free port, opens it in headless Chromium (Debian's chromium and
chromium-driver, selenium from the dev extra) and writes ``leaderboard-page.png`` and
``agent-page.png`` at 1,400 px, and ``leaderboard-page-390.png`` at a phone's 390 px.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: The agent whose page is shown.
AGENT = "momentum"
WAIT = 60.0


def _wait(drv: Any, script: str, what: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(drv, WAIT, poll_frequency=0.1).until(
            lambda d: d.execute_script(script), message=what)
    except Exception:
        state = drv.execute_script("return [location.href, document.body.dataset.loaded,"
                                   " (document.getElementById('error') || {}).textContent]")
        sys.stderr.write(f"screenshots: waiting for {what} gave up at {state}\n")
        raise


def shoot(url: str, out: Path, drv: Any) -> list[Path]:
    """Write the page's screenshots of the server at ``url`` into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    charts = ("return Number(document.body.dataset.loaded || 0) >= 1 &&"
              " document.querySelectorAll('section.market-chart canvas').length >= 1")
    drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    drv.set_window_size(1400, 1000)
    drv.get(url + "/")
    _wait(drv, charts, "the leaderboard page")
    written.append(_save(drv, out / "leaderboard-page.png"))
    drv.get(f"{url}/agent/{AGENT}")
    _wait(drv, "return Number(document.body.dataset.loaded || 0) >= 1 &&"
               " document.querySelectorAll('#trades tbody tr').length >= 1", "the agent page")
    written.append(_save(drv, out / "agent-page.png"))
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    drv.get(url + "/")
    _wait(drv, charts, "the leaderboard page at 390 px")
    written.append(_save(drv, out / "leaderboard-page-390.png"))
    drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return written


def _save(drv: Any, path: Path) -> Path:
    """Save the whole page (as tall as its content, at most 4,000 px) to ``path``."""
    height = int(drv.execute_script("return Math.min(4000, document.documentElement.scrollHeight)"))
    width = int(drv.execute_script("return window.innerWidth"))
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 500})
    drv.save_screenshot(str(path))
    return path


def chrome() -> Any:
    """Return a headless Chromium driven by Debian's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--window-size=1400,1000"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")
                                            or "/usr/bin/chromedriver"), options=opts)


def main(argv: list[str] | None = None) -> int:
    """Replay (or take) a store, serve it, write the screenshots."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", help="a store to show (default: replay the sample)")
    p.add_argument("--out", default=str(DOCS), help="directory to write into (default: docs/)")
    args = p.parse_args(argv)
    from daemon.web.readonly import serve

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "sample.db"
        if not args.db:
            subprocess.run([sys.executable, "-m", "daemon.app.cli", "replay",
                            "examples/sample.jsonl.gz", "--config",
                            "examples/sample-replay.toml", "--db", str(db), "--no-progress"],
                           check=True, capture_output=True, cwd=ROOT,
                           env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        bound: list[str] = []

        async def start() -> asyncio.Task[None]:
            up = asyncio.Event()
            task = asyncio.create_task(serve(db, port=0, ready=up, bound=bound))
            await up.wait()
            return task

        task = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
        drv = chrome()
        try:
            for path in shoot(bound[0], Path(args.out), drv):
                sys.stderr.write(f"wrote {path}\n")
        finally:
            drv.quit()
            loop.call_soon_threadsafe(task.cancel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
