"""``GET /api/alphaforge``: per-version figures and the latest instability run over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

from tests.web.test_metrics_http import start_daemon, stop_daemon


async def test_api_serves_versions_and_instability(tmp_path: Path) -> None:
    d = await start_daemon(tmp_path)
    try:
        db = d.engine.store.db
        v1, v2 = "a" * 64, "b" * 64
        rows = [(100.0, v1, "ok", 1000.0), (200.0, v1, "invalid", 1010.0),
                (300.0, v2, "ok", 1020.0)]
        for ts, version, outcome, value in rows:
            summary = {"protocol": "alphaforgebench", "strategy_version": version,
                       "strategy_since": 100.0, "failed": {},
                       "exposure": {"AAA": 1.0, "BBB": 0.0}}
            await db.execute(
                "INSERT INTO decisions(agent, market, scheduled_ts, decided_ts, outcome,"
                " raw_output) VALUES('af', 'equity', ?, ?, ?, ?)",
                (ts, ts, outcome, json.dumps(summary, sort_keys=True)))
            await db.execute("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                             " VALUES('af', 'equity', ?, 'decision', ?, 0)", (ts, value))
        await db.execute("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                         " VALUES('af', 'equity', 400, 'daily', 1030, 0)")
        await db.execute(
            "INSERT INTO instability_runs(ts, input_sha256, prompt_sha256, repeats,"
            " result_json) VALUES(5, 'in', 'pr', 5, ?)",
            (json.dumps({"repeats": 5, "temperatures": {"0": {"snr": 2.5, "models": {}}}}),))
        await db.commit()
        status, body = await d.get("/api/alphaforge")
        assert status == 200
        first, second = body["versions"]
        assert first["version"] == v1[:12] and first["bars"] == 2 and first["failed"] == 1
        assert first["ret"] == 1020.0 / 1000.0 - 1  # to the start of the next version
        assert first["active"] == 0.5
        assert second["version"] == v2[:12] and second["ret"] == 1030.0 / 1020.0 - 1
        assert body["instability"]["temperatures"]["0"]["snr"] == 2.5
    finally:
        await stop_daemon(d)
