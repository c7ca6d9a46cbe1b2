"""AlphaForgeBench's factor library equals, bit for bit, the same factors written as pandas
expressions one Series at a time (the library as ae4ca56 computed it), on frames built as the
sandboxed worker builds them from the sample recording's prices (issue 29)."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
from pandas.testing import assert_frame_equal  # type: ignore[import-untyped]

from agents.alphaforgebench.factor_library import COLUMNS, DEFAULTS, family_of, frame, requested

ROOT = Path(__file__).resolve().parents[2]
N = 300


def _windowed(x: Any, w: int, fn: Any) -> Any:
    a = x.to_numpy(dtype="float64")
    out = np.full(len(a), np.nan)
    if len(a) >= w:
        v = np.lib.stride_tricks.sliding_window_view(a, w)
        res = fn(v).astype("float64")
        res[np.isnan(v).any(axis=1)] = np.nan
        out[w - 1:] = res
    return pd.Series(out, index=x.index)


def _family(f: str, w: int, d: dict[str, Any]) -> dict[str, Any]:
    """Return the columns of family ``f`` at window ``w``, the pandas way."""
    h, lo, c, v, ret = d["high"], d["low"], d["close"], d["volume"], d["ret"]

    def roll(x: Any) -> Any:
        return x.rolling(w, min_periods=w)

    if f in ("sma", "ma"):
        sma = roll(c).mean()
        return {f"sma_{w}": sma, f"ma_{w}": sma / c}
    if f == "ema":
        return {f"ema_{w}": c.ewm(span=w, adjust=False, min_periods=w).mean()}
    if f in ("roc", "beta"):
        return {"roc_" + str(w): c.shift(w) / c} if f == "roc" else {
            f"beta_{w}": (c.shift(w) - c) / (w * c)}
    if f in ("std", "vstd"):
        x = c if f == "std" else v
        return {f"{f}_{w}": roll(x).std() / x}
    if f == "rsi":
        delta = c.diff()
        gain = delta.clip(lower=0).ewm(alpha=1 / w, adjust=False, min_periods=w).mean()
        loss = (-delta.clip(upper=0)).ewm(alpha=1 / w, adjust=False, min_periods=w).mean()
        return {f"rsi_{w}": 100 - 100 / (1 + gain / loss)}
    if f == "bb":
        mid, sd = roll(c).mean(), roll(c).std(ddof=0)
        return {f"bb_upper_{w}": mid + 2 * sd, f"bb_middle_{w}": mid,
                f"bb_lower_{w}": mid - 2 * sd}
    if f in ("stoch", "rsv"):
        k = (c - roll(lo).min()) / (roll(h).max() - roll(lo).min())
        if f == "rsv":
            return {f"rsv_{w}": k}
        return {f"stoch_k_{w}": k * 100,
                f"stoch_d_{w}": (k * 100).rolling(3, min_periods=3).mean()}
    if f == "atr":
        pc = c.shift(1)
        tr = np.maximum(np.maximum(h - lo, (h - pc).abs()), (lo - pc).abs())
        return {f"atr_{w}": roll(tr).mean()}
    if f in ("cci", "mfi"):
        tp = (h + lo + c) / 3
        if f == "cci":
            mad = _windowed(tp, w, lambda x: np.abs(x - x.mean(axis=1, keepdims=True)).mean(
                axis=1))
            return {f"cci_{w}": (tp - roll(tp).mean()) / (0.015 * mad)}
        flow, prev = tp * v, tp.shift(1)
        up = roll(flow.where(tp > prev, 0.0).where(prev.notna())).sum()
        down = roll(flow.where(tp < prev, 0.0).where(prev.notna())).sum()
        return {f"mfi_{w}": 100 - 100 / (1 + up / down)}
    if f in ("corr", "cord"):
        got = roll(c).corr(np.log(v)) if f == "corr" else roll(c.diff()).corr(v.diff())
        return {f"{f}_{w}": got}
    if f in ("max", "min"):
        return {f"max_{w}": roll(c).max() / c, f"min_{w}": roll(c).min() / c}
    if f == "rank":
        return {f"rank_{w}": _windowed(c, w, lambda x: (x[:, :-1] < x[:, -1:]).sum(axis=1) / w)}
    if f in ("imax", "imin", "imxd"):
        since_high = _windowed(h, w, lambda x: np.argmax(x[:, ::-1], axis=1) / w)
        since_low = _windowed(lo, w, lambda x: np.argmin(x[:, ::-1], axis=1) / w)
        return {f"imax_{w}": since_high, f"imin_{w}": since_low,
                f"imxd_{w}": since_low - since_high}
    if f in ("qtlu", "qtld"):
        return {f"qtlu_{w}": (c - roll(c).quantile(0.8)) / c,
                f"qtld_{w}": (c - roll(c).quantile(0.2)) / c}
    if f == "vma":
        return {f"vma_{w}": roll(v).mean() / v}
    if f == "wvma":
        x = ret.abs() * v
        return {f"wvma_{w}": roll(x).std() / roll(x).mean()}
    if f in ("cntp", "cntn", "cntd"):
        known = ret.notna()
        p = roll((ret > 0).astype(float).where(known)).mean()
        n = roll((ret < 0).astype(float).where(known)).mean()
        return {f"cntp_{w}": p, f"cntn_{w}": n, f"cntd_{w}": p - n}
    x, pre = (ret, "") if f in ("sump", "sumn", "sumd") else (v.diff(), "v")
    share = roll(x.clip(lower=0)).sum() / roll(x.abs()).sum()
    return {f"{pre}sump_{w}": share, f"{pre}sumn_{w}": 1 - share,
            f"{pre}sumd_{w}": 2 * share - 1}


def pandas_frame(close: Any, ohlv: Any = None, extra: tuple[str, ...] = ()) -> Any:
    """Return the frame the pandas way (the library's columns, in its order)."""
    c = close.astype("float64")
    if ohlv is None:
        nan = pd.Series(np.nan, index=c.index, dtype="float64")
        d = {"open": c, "high": c, "low": c, "close": c, "volume": nan}
    else:
        d = {"open": ohlv["open"], "high": ohlv["high"], "low": ohlv["low"], "close": c,
             "volume": ohlv["volume"]}
    base = pd.DataFrame(d, index=c.index)
    o, h, lo, v = d["open"], d["high"], d["low"], d["volume"]
    d["ret"] = ret = c.pct_change(fill_method=None)
    cols: dict[str, Any] = {"ret_1": ret}
    windows = {f: set(ws) for f, ws in DEFAULTS.items()}
    for name in extra:
        if (fam := family_of(name)) is not None:
            windows[fam[0]].add(fam[1])
    for f, ws in windows.items():
        for w in sorted(ws):
            if COLUMNS.get(f, (f + "_{w}",))[0].format(w=w) not in cols:
                cols.update(_family(f, w, d))
    macd = (c.ewm(span=12, adjust=False, min_periods=12).mean()
            - c.ewm(span=26, adjust=False, min_periods=26).mean())
    cols["macd"] = macd
    cols["macd_signal"] = macd.ewm(span=9, adjust=False, min_periods=9).mean()
    cols["macd_hist"] = macd - cols["macd_signal"]
    cols["obv"] = (np.sign(ret).fillna(0.0) * v).cumsum()
    cols["logvol"] = np.log(v + 1)
    top, bottom, rng = np.maximum(o, c), np.minimum(o, c), h - lo
    for name, num, den in (("klen", rng, o), ("kup", h - top, o), ("klow", bottom - lo, o),
                           ("kmid", c - o, c), ("ksft", 2 * c - h - lo, o)):
        cols[name] = num / den
        if name != "klen":
            cols[name + "2"] = num / rng
    out = pd.concat([base, pd.DataFrame(cols, index=c.index)], axis=1)
    return out.replace([np.inf, -np.inf], np.nan)


@pytest.fixture(scope="module")
def sample_bars() -> dict[str, dict[str, list[Any]]]:
    """Return 15 stocks' 300 five-minute bars from the sample recording's prices (volume: the
    bar's summed absolute price moves in cents, a stand-in the recording has no field for)."""
    prices: dict[str, list[tuple[float, float]]] = {}
    with gzip.open(ROOT / "examples" / "sample.jsonl.gz", "rt") as f:
        for line in f:
            if '"equity"' in line:
                e = json.loads(line)
                prices.setdefault(e["asset"], []).append((e["ts"], e["price"]))
                if sum(map(len, prices.values())) >= 15 * 5 * N:
                    break
    out = {}
    for asset, rows in prices.items():
        bar: dict[str, list[Any]] = {k: [] for k in ("ts", "open", "high", "low", "close",
                                                     "volume")}
        for i in range(0, 5 * N, 5):
            p = [x for _, x in rows[i:i + 5]]
            moves = sum(abs(b - a) for a, b in itertools.pairwise(p))
            bar["ts"].append(rows[i][0])
            for k, x in (("open", p[0]), ("high", max(p)), ("low", min(p)), ("close", p[-1]),
                         ("volume", round(moves * 100))):
                bar[k].append(x)
        out[asset] = bar
    assert len(out) == 15 and all(len(b["close"]) == N for b in out.values())
    return out


def _variant(bar: dict[str, list[Any]], kind: str) -> dict[str, list[Any]]:
    b = {k: list(v) for k, v in bar.items()}
    if kind == "missing":  # days without a recorded bar, a close unknown, a lone unknown field
        for i in range(3, N, 17):
            for k in ("open", "high", "low", "volume"):
                b[k][i] = None
        b["close"][40] = b["close"][41] = None
        b["high"][77] = b["volume"][150] = None
    elif kind == "flat":  # a flat stretch (every price equal) and its zero volumes
        for i in range(100, 170):
            for k in ("open", "high", "low", "close"):
                b[k][i] = 50.0
            b["volume"][i] = 0
    elif kind == "zero_volume":
        b["volume"] = [0 if i % 3 == 0 or i > 250 else x for i, x in enumerate(b["volume"])]
    elif kind == "closes":
        b = {"ts": b["ts"], "close": b["close"]}
    return b


def _worker_frame(fn: Any, bar: dict[str, list[Any]], extra: tuple[str, ...]) -> Any:
    """Return ``fn``'s frame of ``bar``, the series built as sandbox_worker.py builds them."""
    idx = pd.to_datetime(bar["ts"], unit="s", utc=True)
    ohlv = None
    if "high" in bar:
        ohlv = {k: pd.Series([math.nan if v is None else v for v in bar[k]], index=idx,
                             dtype="float64") for k in ("open", "high", "low", "volume")}
    close = pd.Series([math.nan if v is None else v for v in bar["close"]], index=idx,
                      dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) in the pandas expressions
        return fn(close, ohlv, extra)


STRATEGY = compile('def generate_signal(df):\n    k = ("rsi_7", "bb_lower_3", "stoch_d_9",'
                   ' "ma_7", "imin_15", "qtld_40", "corr_2", "cord_45", "mfi_1", "vsumd_250",'
                   ' "cntn_300", "atr_400", "sma_999", "ema_3", "rank_2", "wvma_8")\n'
                   '    return {"signal": 0, "position": 0.0}\n', "<strategy>", "exec")


@pytest.mark.parametrize("kind", ["as recorded", "missing", "flat", "zero_volume", "closes"])
@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("bars", [N, 30, 3, 1])
def test_frames_equal_the_pandas_expressions_bit_for_bit(
        sample_bars: dict[str, dict[str, list[Any]]], kind: str, named: bool, bars: int) -> None:
    extra = requested(STRATEGY) if named else ()
    assert len(extra) == (16 if named else 0)
    for asset in ("AAPL", "TSLA", "KO"):
        bar = {k: v[-bars:] for k, v in _variant(sample_bars[asset], kind).items()}
        want = _worker_frame(pandas_frame, bar, extra)
        got = _worker_frame(frame, bar, extra)
        assert_frame_equal(got, want, check_exact=True)
        assert list(got.columns) == list(want.columns) and len(got.columns) > 180
        g, w = got.to_numpy(), want.to_numpy()
        assert (np.isnan(g) == np.isnan(w)).all()
        same = (g.view("int64") == w.view("int64")) | np.isnan(w)
        assert same.all(), list(got.columns[~same.all(axis=0)])
        if bars == N:  # the variants reach what they are about
            _reached(got, kind)


def _reached(df: Any, kind: str) -> None:
    """Check a 300-bar frame of variant ``kind`` holds what the variant is about."""
    r = df.iloc
    if kind == "as recorded":
        assert np.isfinite(df.to_numpy()).sum() > 0.85 * df.size
    elif kind == "missing":  # closes 40 and 41 unknown: every 5-bar window over them too
        assert df["sma_5"].iloc[40:46].isna().all() and np.isfinite(r[46]["sma_5"])
        assert np.isnan(r[3]["klen"]) and np.isfinite(r[4]["klen"])
    elif kind == "flat":
        assert r[150]["std_20"] == 0 and np.isnan(r[150]["kup2"]) and r[150]["klen"] == 0
        assert np.isnan(r[150]["rsv_20"]) and np.isnan(r[150]["vsump_20"])
    elif kind == "zero_volume":  # log(0) is -inf: no correlation over a window holding it
        assert r[0]["logvol"] == 0 and df["corr_5"].iloc[200:].isna().all()
    else:
        assert df["volume"].isna().all() and (df["open"] == df["close"]).all()
