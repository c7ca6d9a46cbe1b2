"""Benchmark the equity stream decoders against the bare decoding floor.

Reports frames per second for:

- Yahoo ``pricing`` frames (JSON envelope + base64 + protobuf ``PricingData``):
  ``yahoo_floor`` = msgspec JSON decode of the envelope alone, ``yahoo_floor_b64`` = that plus
  base64 decoding, ``yahoo_full`` = :meth:`YahooStreamAdapter.decode` (envelope, base64,
  hand-written protobuf, float32 clean-up, PriceEvent);
- Alpaca trade arrays (``trades_per_frame`` trades per frame, RFC 3339 nanosecond times):
  ``alpaca_floor`` = msgspec JSON decode alone, ``alpaca_full`` =
  :meth:`AlpacaStreamAdapter.decode` (also reported as trades per second).

Run ``python -m bench.bench_equity_decode`` or call :func:`run`.
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable
from typing import Any

import msgspec

from feeds.alpaca import AlpacaSettings, AlpacaStreamAdapter
from feeds.yahoo import YahooSettings, YahooStreamAdapter
from feeds.yahoo_proto import PricingData, encode_pricing

__all__ = ["build_alpaca_frames", "build_yahoo_frames", "run"]

T0 = 1_788_377_229.0


def build_yahoo_frames(n_frames: int = 20_000, n_symbols: int = 100, seed: int = 7) -> list[str]:
    """Return realistic streamer frames (JSON text with a base64 PricingData)."""
    rng = random.Random(seed)
    symbols = [f"SYM{i:03d}" for i in range(n_symbols)]
    out = []
    for i in range(n_frames):
        price = round(rng.uniform(5, 900), 3)
        pd = PricingData(
            id=symbols[i % n_symbols],
            price=price,
            time=int((T0 + i * 0.01) * 1000),
            currency="USD",
            exchange="NMS",
            quote_type=8,
            market_hours=1,
            change_percent=rng.uniform(-5, 5),
            day_volume=rng.randrange(10**5, 10**8),
            day_high=price * 1.01,
            day_low=price * 0.99,
            change=rng.uniform(-3, 3),
            bid=price - 0.01,
            ask=price + 0.01,
            price_hint=2,
        )
        msg = base64.b64encode(encode_pricing(pd)).decode()
        out.append(json.dumps({"type": "pricing", "message": msg}))
    return out


def _rfc3339(t: float) -> str:
    whole = int(t)
    frac = min(round((t - whole) * 1e9), 999_999_999)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{frac:09d}Z"


def build_alpaca_frames(
    n_frames: int = 10_000, trades_per_frame: int = 5, n_symbols: int = 30, seed: int = 7
) -> list[bytes]:
    """Return JSON arrays of Alpaca trade messages."""
    rng = random.Random(seed)
    symbols = [f"SYM{i:02d}" for i in range(n_symbols)]
    out = []
    k = 0
    for _ in range(n_frames):
        batch = []
        for _ in range(trades_per_frame):
            k += 1
            batch.append(
                {
                    "T": "t",
                    "S": symbols[k % n_symbols],
                    "i": k,
                    "x": "V",
                    "p": round(rng.uniform(5, 900), 2),
                    "s": rng.randrange(1, 500),
                    "c": ["@"],
                    "z": "C",
                    "t": _rfc3339(T0 + k * 0.001),
                }
            )
        out.append(json.dumps(batch).encode())
    return out


def _rate(n: int, fn: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def run(
    *,
    yahoo_frames: int = 20_000,
    alpaca_frames: int = 10_000,
    trades_per_frame: int = 5,
    repeat: int = 3,
) -> dict[str, Any]:
    """Run the benchmark; return frames/s for each floor and full decoder."""
    yf = build_yahoo_frames(yahoo_frames)
    af = build_alpaca_frames(alpaca_frames, trades_per_frame)
    now = T0 + 60.0
    envelope = msgspec.json.Decoder()
    yahoo = YahooStreamAdapter(YahooSettings())
    alpaca = AlpacaStreamAdapter(AlpacaSettings(), "k", "s")
    events = [0, 0]

    def y_floor() -> None:
        dec = envelope.decode
        for f in yf:
            dec(f)

    def y_floor_b64() -> None:
        dec = envelope.decode
        b64 = base64.b64decode
        for f in yf:
            b64(dec(f)["message"])

    def y_full() -> None:
        dec = yahoo.decode
        n = 0
        for f in yf:
            n += len(dec(f, now).events)
        events[0] = n

    def a_floor() -> None:
        dec = envelope.decode
        for f in af:
            dec(f)

    def a_full() -> None:
        dec = alpaca.decode
        n = 0
        for f in af:
            n += len(dec(f, now).events)
        events[1] = n

    out: dict[str, Any] = {
        "yahoo_frames": yahoo_frames,
        "yahoo_bytes_per_frame": sum(map(len, yf)) // len(yf),
        "yahoo_floor_frames_per_s": _rate(yahoo_frames, y_floor, repeat),
        "yahoo_floor_b64_frames_per_s": _rate(yahoo_frames, y_floor_b64, repeat),
        "yahoo_full_frames_per_s": _rate(yahoo_frames, y_full, repeat),
        "alpaca_frames": alpaca_frames,
        "alpaca_trades_per_frame": trades_per_frame,
        "alpaca_bytes_per_frame": sum(map(len, af)) // len(af),
        "alpaca_floor_frames_per_s": _rate(alpaca_frames, a_floor, repeat),
        "alpaca_full_frames_per_s": _rate(alpaca_frames, a_full, repeat),
    }
    out["yahoo_events"] = events[0]
    out["alpaca_events"] = events[1]
    out["yahoo_full_vs_floor"] = out["yahoo_full_frames_per_s"] / out["yahoo_floor_frames_per_s"]
    out["alpaca_full_trades_per_s"] = out["alpaca_full_frames_per_s"] * trades_per_frame
    out["alpaca_full_vs_floor"] = out["alpaca_full_frames_per_s"] / out["alpaca_floor_frames_per_s"]
    return out


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:32s} {v:,.2f}" if isinstance(v, float) else f"{k:32s} {v}")
