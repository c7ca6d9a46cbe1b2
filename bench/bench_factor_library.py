"""Benchmark an AlphaForgeBench frame: the factor library beside the raw OHLCV frame alone.

Each bar the sandboxed worker turns every stock's bar lists (``ts``, ``open``, ``high``,
``low``, ``close``, ``volume``; ``None``: unknown) into a frame. This times, per 300-bar frame:

- ``raw_ms``: the worker's conversion (the timestamps, the five series) and a DataFrame of
  the OHLCV alone: the floor every frame pays;
- ``frame_ms``: the same conversion and ``factor_library.frame`` (OHLCV and every factor column
  at the default windows);
- ``frame_extra_ms``: the same with the extra windows of :data:`EXTRA` (a strategy naming them).

The bars are a seeded random walk with a few unknown days and zero-volume days. Each round times
the three cases in turn (the order rotating from round to round) over ``frames`` frames; the
figures are the medians over rounds. ``--library PATH`` times another ``factor_library.py`` (an
older checkout's, for an A/B in fresh processes).

Run ``python -m bench.bench_factor_library`` or call :func:`run`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["EXTRA", "build_bars", "run"]

#: Windows beyond the defaults, as a strategy could name them.
EXTRA = ("rsi_7", "bb_upper_15", "stoch_k_9", "imxd_15", "qtlu_40", "corr_15", "sump_15",
         "ema_30")
LIBRARY = Path(__file__).resolve().parents[1] / "agents" / "alphaforgebench" / "factor_library.py"


def build_bars(n: int = 300, assets: int = 15, seed: int = 7) -> list[dict[str, list[Any]]]:
    """Return ``assets`` stocks' bar lists as the worker receives them (daily, ``n`` bars)."""
    rng = random.Random(seed)
    out = []
    for _ in range(assets):
        price = rng.uniform(20, 500)
        bars: dict[str, list[Any]] = {k: [] for k in ("ts", "open", "high", "low", "close",
                                                      "volume")}
        for i in range(n):
            op = price * (1 + rng.gauss(0, 0.004))
            price *= math.exp(rng.gauss(0, 0.015))
            row = (op, max(op, price) * (1 + abs(rng.gauss(0, 0.006))),
                   min(op, price) * (1 - abs(rng.gauss(0, 0.006))), price,
                   0.0 if i % 37 == 5 else float(rng.randint(100_000, 9_000_000)))
            unknown = i % 53 == 7
            bars["ts"].append(1_700_000_000.0 + 86_400 * i)
            for k, x in zip(("open", "high", "low", "close", "volume"), row, strict=True):
                bars[k].append(None if unknown and k != "close" else x)
        out.append(bars)
    return out


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("factor_library", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cases(lib: ModuleType) -> dict[str, Callable[[dict[str, list[Any]]], Any]]:
    import pandas as pd  # type: ignore[import-untyped]

    def series(bar: dict[str, list[Any]]) -> tuple[Any, dict[str, Any]]:
        idx = pd.to_datetime(bar["ts"], unit="s", utc=True)  # as the worker does
        ohlv = {k: pd.Series([math.nan if v is None else v for v in bar[k]], index=idx,
                             dtype="float64") for k in ("open", "high", "low", "volume")}
        return pd.Series(bar["close"], index=idx, dtype="float64"), ohlv

    def raw(bar: dict[str, list[Any]]) -> Any:
        close, ohlv = series(bar)
        return pd.DataFrame({**ohlv, "close": close})

    def frame(bar: dict[str, list[Any]]) -> Any:
        return lib.frame(*series(bar))

    def frame_extra(bar: dict[str, list[Any]]) -> Any:
        return lib.frame(*series(bar), EXTRA)

    return {"raw_ms": raw, "frame_ms": frame, "frame_extra_ms": frame_extra}


def run(rounds: int = 15, frames: int = 15, bars: int = 300,
        library: Path = LIBRARY) -> dict[str, Any]:
    """Return the medians (ms per frame) of the raw frame and the factor library's."""
    lib = _load(library)
    data = build_bars(bars, frames)
    cases = _cases(lib)
    for fn in cases.values():  # warm every path
        fn(data[0])
    times: dict[str, list[float]] = {k: [] for k in cases}
    names = list(cases)
    for r in range(rounds):
        for name in names[r % 3:] + names[:r % 3]:
            fn = cases[name]
            t0 = time.perf_counter()
            for bar in data:
                fn(bar)
            times[name].append((time.perf_counter() - t0) * 1000 / len(data))
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    columns = len(cases["frame_ms"](data[0]).columns)
    return {"library": str(library), "bars": bars, "frames_per_round": frames, "rounds": rounds,
            "columns": columns, **med,
            "frame_over_raw": round(med["frame_ms"] / med["raw_ms"], 2),
            "per_bar_15_stocks_ms": round(15 * med["frame_ms"], 1)}


def main(argv: list[str] | None = None) -> int:
    """Print the factor library benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--library", type=Path, default=LIBRARY)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(rounds=a.rounds, library=a.library)
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"{r['bars']}-bar frame, {r['columns']} columns: factor library {r['frame_ms']} ms"
              f" (with {len(EXTRA)} extra windows {r['frame_extra_ms']} ms), raw OHLCV frame"
              f" alone {r['raw_ms']} ms ({r['frame_over_raw']}x); 15 stocks per bar"
              f" {r['per_bar_15_stocks_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
