"""The scale table: ingest, round cost, price latency and memory per agent, by agents and tokens.

    python3 dev.py bench scale
    python bench/bench_scale.py [--agents 10,100,1000,5000,20000] [--tokens 500,5000]
                                [--frames 20000] [--rounds 3] [--markdown]

Each cell runs in a fresh process (memory and the collector's state are its own):

- ingest: ``bench/bench_ingest.py`` once per (agents, tokens): the daemon as ``paperarena run``
  wires it against the fake Polymarket in another process, beside the raw msgspec decode and
  the decoder alone of the same frames; RSS after the ingest;
- rounds: ``bench/bench_rounds.py`` once per agent count (its 16 equities; a round's cost does
  not depend on the Polymarket tokens): round time and the p99 price latency it adds;
- RSS per agent: the ingest's RSS beyond the same token count's smallest agent count, per agent.

The 1-minute load average is recorded beside every cell.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

AGENTS = (10, 100, 1000, 5000, 20_000)
TOKENS = (500, 5000)


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one cell in a fresh interpreter; return its JSON."""
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail}
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    if spec["what"] == "ingest":
        from bench_ingest import run as ingest

        out = ingest(spec["agents"], spec["tokens"], spec["frames"], repeats=1)
    else:
        from bench_rounds import run as rounds

        out = rounds((spec["agents"],), rounds=spec["rounds"])[f"agents_{spec['agents']}"]
    out["load_average_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    return out


def _say(msg: str) -> None:
    print(f"[scale] {msg}", file=sys.stderr, flush=True)


def run(agents: tuple[int, ...] = AGENTS, tokens: tuple[int, ...] = TOKENS,
        frames: int = 20_000, rounds: int = 3) -> dict[str, Any]:
    """Measure every cell; return the rows (and the markdown table)."""
    round_rows: dict[int, dict[str, Any]] = {}
    for n in agents:
        _say(f"rounds, {n} agents")
        round_rows[n] = _child({"what": "rounds", "agents": n, "rounds": rounds})
    rows = []
    for t in tokens:
        base: tuple[int, float] | None = None
        for n in agents:
            _say(f"ingest, {n} agents x {t} tokens")
            ing = _child({"what": "ingest", "agents": n, "tokens": t, "frames": frames})
            rnd = round_rows[n]
            rss = ing.get("rss_mb_after_ingest")
            per_agent = None
            if rss is not None and base is not None and n > base[0]:
                per_agent = round((rss - base[1]) * 1024 / (n - base[0]), 1)
            if rss is not None and base is None:
                base = (n, rss)
            rows.append({
                "agents": n, "tokens": t,
                "ingest_events_per_s": ing.get("real_path_events_per_s"),
                "real_vs_raw": ing.get("real_vs_raw"),
                "real_vs_raw_cpu": ing.get("real_vs_raw_in_cpu_time"),
                "decoder_vs_raw": ing.get("decoder_vs_raw"),
                "real_vs_decoder": ing.get("real_vs_decoder"),
                "round_ms_median": rnd.get("round_ms_median"),
                "added_p99_ms": rnd.get("added_p99_ms"),
                "rss_mb": rss, "rss_kb_per_agent": per_agent,
                "load_ingest": ing.get("load_average_1m"),
                "load_rounds": rnd.get("load_average_1m"),
                "errors": [x["error"] for x in (ing, rnd) if "error" in x],
            })
    return {"frames": frames, "rounds": rounds, "rows": rows, "markdown": markdown(rows)}


def markdown(rows: list[dict[str, Any]]) -> str:
    """Return the rows as the markdown table of docs/benchmarks.md."""
    def cell(v: Any) -> str:
        if v is None:
            return "—"
        if isinstance(v, list):
            return "-".join(str(x) for x in v)
        return f"{v:,}" if isinstance(v, int) else str(v)

    head = ("| agents | tokens | ingest events/s | real / raw decode | the same in CPU time | "
            "decoder / raw | real / decoder | round ms (median) | p99 added by a round, ms | "
            "RSS MB | RSS KB per agent | load (ingest; rounds) |")
    out = [head, "|" + "---|" * 12]
    for r in rows:
        out.append("| " + " | ".join(cell(r[k]) for k in (
            "agents", "tokens", "ingest_events_per_s", "real_vs_raw", "real_vs_raw_cpu",
            "decoder_vs_raw",
            "real_vs_decoder", "round_ms_median", "added_p99_ms", "rss_mb",
            "rss_kb_per_agent")) + f" | {cell(r['load_ingest'])}; {cell(r['load_rounds'])} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print the scale table as JSON (or markdown)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--agents", default=",".join(map(str, AGENTS)))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown", action="store_true", help="print the table only")
    a = ap.parse_args(argv)
    if a.child:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            out = _run_child(json.loads(a.child))
        print(json.dumps(out))
        return 0
    res = run(tuple(int(x) for x in a.agents.split(",")),
              tuple(int(x) for x in a.tokens.split(",")), a.frames, a.rounds)
    print(res["markdown"] if a.markdown else json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
