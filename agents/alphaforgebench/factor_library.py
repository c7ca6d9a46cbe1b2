"""AlphaForgeBench's factor library: the columns of a strategy's frame, from its OHLCV bars.

The families and formulas are those the paper's code-generation prompt lists (technical,
statistical, time-series, candlestick, volume, counting and volume-counting factors). A family
with a period is computed for its default windows (:data:`DEFAULTS`) and for every other window a
strategy writes out literally in its code (``df["rsi_7"]``: :func:`requested`), as the paper's
"any period" rule; :data:`FACTORS` is what the prompt lists.

The sandboxed worker imports this module as ``factor_library`` (bound next to it, imported before
any strategy code), so it imports numpy and pandas only (inside the functions: the daemon imports
the lists without them), never anything of paperarena.

Conventions where the paper leaves a choice: ``ret`` is the close-to-close percentage change;
standard deviations are sample ones (ddof 1) except the Bollinger bands' (ddof 0); ``imax_w`` and
``imin_w`` count the bars since the window's latest high (low) (0: the current bar), so that
``imxd_w = (imin_w - imax_w)`` is positive when the high came after the low, as the paper
describes both; ``rank_w`` is the share of the window's other closes below the current close;
a window with an unknown value (a day without a recorded bar) gives NaN, and so does a division
by zero.
"""

from __future__ import annotations

import re
from typing import Any

#: The longest window a strategy may ask for, and how many extra windows one code may add.
MAX_WINDOW = 1000
MAX_EXTRA = 64
_W = (5, 10, 20, 30, 60)
_LONG = (5, 10, 20, 50, 100, 200)
#: Each periodic family's default windows.
DEFAULTS: dict[str, tuple[int, ...]] = {
    "sma": _LONG, "ema": (5, 10, 12, 20, 26, 50, 100, 200), "ma": _LONG, "roc": _LONG,
    "std": _LONG, "rsi": (6, 14, 24), "bb": (10, 20), "stoch": (14, 20), "atr": (14, 20),
    "cci": (14, 20), "mfi": (14, 20),
    **{f: _W for f in ("beta", "corr", "cord", "vstd", "max", "min", "rank", "imax", "imin",
                       "imxd", "rsv", "qtlu", "qtld", "vma", "wvma", "cntp", "cntn", "cntd",
                       "sump", "sumn", "sumd", "vsump", "vsumn", "vsumd")},
}
#: The columns of a family, ``{w}`` standing for the window.
COLUMNS: dict[str, tuple[str, ...]] = {
    "bb": ("bb_upper_{w}", "bb_middle_{w}", "bb_lower_{w}"),
    "stoch": ("stoch_k_{w}", "stoch_d_{w}"),
}
#: The columns without a period.
FIXED = ("ret_1", "macd", "macd_signal", "macd_hist", "obv", "logvol", "klen", "kup", "kup2",
         "klow", "klow2", "kmid", "kmid2", "ksft", "ksft2")
_NAME = re.compile(r"^(bb_upper|bb_middle|bb_lower|stoch_k|stoch_d|[a-z]+)_([1-9][0-9]{0,3})$")
_PREFIX = {"bb_upper": "bb", "bb_middle": "bb", "bb_lower": "bb", "stoch_k": "stoch",
           "stoch_d": "stoch"}


def _ws(family: str) -> str:
    return " ".join(str(w) for w in DEFAULTS[family])


#: What the prompt lists: (columns, definition).
FACTORS: tuple[tuple[str, str], ...] = (
    ("ret_1", "close / previous close - 1 (ret below)"),
    (f"sma_{{w}}, w in {_ws('sma')}", "simple moving average of the close"),
    (f"ema_{{w}}, w in {_ws('ema')}", "exponential moving average of the close (span w)"),
    (f"ma_{{w}}, w in {_ws('ma')}", "sma_w / close (around 1.0)"),
    (f"roc_{{w}}, w in {_ws('roc')}", "close w bars ago / close (around 1.0)"),
    (f"std_{{w}}, w in {_ws('std')}", "standard deviation of the close over w bars / close"),
    (f"rsi_{{w}}, w in {_ws('rsi')}", "relative strength index (Wilder's averages), 0-100"),
    ("macd, macd_signal, macd_hist", "ema_12 - ema_26, its 9-bar EMA, their difference"),
    (f"bb_upper_{{w}}, bb_middle_{{w}}, bb_lower_{{w}}, w in {_ws('bb')}",
     "Bollinger bands: sma_w +- 2 standard deviations of the close"),
    (f"stoch_k_{{w}}, stoch_d_{{w}}, w in {_ws('stoch')}",
     "(close - lowest low) / (highest high - lowest low) * 100 over w bars; d: 3-bar mean of k"),
    (f"atr_{{w}}, w in {_ws('atr')}",
     "mean true range: max(high - low, |high - prev close|, |low - prev close|)"),
    (f"cci_{{w}}, w in {_ws('cci')}",
     "(tp - mean tp) / (0.015 * mean absolute deviation of tp), tp = (high + low + close) / 3"),
    (f"mfi_{{w}}, w in {_ws('mfi')}",
     "money flow index: 100 - 100 / (1 + up flow / down flow), flow = tp * volume, 0-100"),
    ("obv", "on-balance volume: running sum of sign(ret) * volume"),
    (f"beta_{{w}}, w in {_ws('beta')}", "(close w bars ago - close) / (w * close)"),
    (f"corr_{{w}}, w in {_ws('corr')}", "correlation of close and log(volume) over w bars"),
    (f"cord_{{w}}, w in {_ws('cord')}",
     "correlation of the close's and the volume's daily changes over w bars"),
    (f"vstd_{{w}}, w in {_ws('vstd')}", "standard deviation of volume over w bars / volume"),
    (f"max_{{w}}, min_{{w}}, w in {_ws('max')}", "highest (lowest) close over w bars / close"),
    (f"rank_{{w}}, w in {_ws('rank')}",
     "share of the window's other closes below the close, 0 to (w-1)/w"),
    (f"imax_{{w}}, imin_{{w}}, w in {_ws('imax')}",
     "bars since the window's highest high (lowest low) / w, 0 = the current bar"),
    (f"imxd_{{w}}, w in {_ws('imxd')}", "imin_w - imax_w: > 0 when the high came after the low"),
    (f"rsv_{{w}}, w in {_ws('rsv')}",
     "(close - lowest low) / (highest high - lowest low) over w bars, 0-1"),
    (f"qtlu_{{w}}, qtld_{{w}}, w in {_ws('qtlu')}",
     "(close - 80th (20th) percentile of the close over w bars) / close"),
    ("klen, kup, klow", "(high - low), (high - max(open, close)), (min(open, close) - low) / open"),
    ("kmid, ksft", "(close - open) / close, (2 * close - high - low) / open"),
    ("kup2, klow2, kmid2, ksft2", "the same shapes divided by (high - low)"),
    (f"vma_{{w}}, w in {_ws('vma')}", "mean volume over w bars / volume"),
    ("logvol", "log(volume + 1)"),
    (f"wvma_{{w}}, w in {_ws('wvma')}",
     "standard deviation / mean of |ret| * volume over w bars"),
    (f"cntp_{{w}}, cntn_{{w}}, cntd_{{w}}, w in {_ws('cntp')}",
     "share of up (down) days over w bars; cntd = cntp - cntn"),
    (f"sump_{{w}}, sumn_{{w}}, sumd_{{w}}, w in {_ws('sump')}",
     "sum of positive ret / sum of |ret| over w bars; sumn = 1 - sump; sumd = 2 * sump - 1"),
    (f"vsump_{{w}}, vsumn_{{w}}, vsumd_{{w}}, w in {_ws('vsump')}",
     "the same of the volume's daily changes"),
)


def family_of(name: str) -> tuple[str, int] | None:
    """Return (family, window) of a periodic column name, or None."""
    m = _NAME.match(name)
    if m is None:
        return None
    family = _PREFIX.get(m.group(1), m.group(1))
    if family not in DEFAULTS or (m.group(1) in ("bb", "stoch")):
        return None
    w = int(m.group(2))
    return (family, w) if 1 <= w <= MAX_WINDOW else None


def requested(code: Any) -> tuple[str, ...]:
    """Return the periodic columns outside the defaults a compiled strategy names literally
    (string constants anywhere in its code objects, tuples of them included), at most
    :data:`MAX_EXTRA`, sorted."""
    found: set[str] = set()
    stack: list[Any] = [code]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            fam = family_of(item)
            if fam is not None and fam[1] not in DEFAULTS[fam[0]]:
                found.add(item)
        elif isinstance(item, (tuple, frozenset)):
            stack.extend(item)
        elif hasattr(item, "co_consts"):
            stack.extend(item.co_consts)
    return tuple(sorted(found))[:MAX_EXTRA]


def _windowed(x: Any, w: int, fn: Any) -> Any:
    """Return ``fn`` of every full window of ``x`` (rows: windows; NaN where one is unknown)."""
    import numpy as np
    import pandas as pd  # type: ignore[import-untyped]

    a = x.to_numpy(dtype="float64")
    out = np.full(len(a), np.nan)
    if len(a) >= w:
        v = np.lib.stride_tricks.sliding_window_view(a, w)
        res = fn(v).astype("float64")
        res[np.isnan(v).any(axis=1)] = np.nan
        out[w - 1:] = res
    return pd.Series(out, index=x.index)


def _family(f: str, w: int, d: dict[str, Any]) -> dict[str, Any]:
    """Return the columns of family ``f`` at window ``w``."""
    import numpy as np

    h, lo, c, v, ret = d["high"], d["low"], d["close"], d["volume"], d["ret"]

    def roll(x: Any) -> Any:
        return x.rolling(w, min_periods=w)

    if f in ("sma", "ma"):
        sma = roll(c).mean()
        return {f"sma_{w}": sma, f"ma_{w}": sma / c}
    if f == "ema":
        return {f"ema_{w}": c.ewm(span=w, adjust=False, min_periods=w).mean()}
    if f == "roc":
        return {f"roc_{w}": c.shift(w) / c}
    if f == "std":
        return {f"std_{w}": roll(c).std() / c}
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
        low_w, high_w = roll(lo).min(), roll(h).max()
        k = (c - low_w) / (high_w - low_w)
        if f == "rsv":
            return {f"rsv_{w}": k}
        return {f"stoch_k_{w}": k * 100,
                f"stoch_d_{w}": (k * 100).rolling(3, min_periods=3).mean()}
    if f == "atr":
        pc = c.shift(1)
        tr = np.maximum(np.maximum(h - lo, (h - pc).abs()), (lo - pc).abs())  # NaN: unknown
        return {f"atr_{w}": roll(tr).mean()}
    if f == "cci":
        tp = (h + lo + c) / 3
        mad = _windowed(tp, w, lambda x: np.abs(x - x.mean(axis=1, keepdims=True)).mean(axis=1))
        return {f"cci_{w}": (tp - roll(tp).mean()) / (0.015 * mad)}
    if f == "mfi":
        tp = (h + lo + c) / 3
        flow, prev = tp * v, tp.shift(1)
        up = roll(flow.where(tp > prev, 0.0).where(prev.notna())).sum()
        down = roll(flow.where(tp < prev, 0.0).where(prev.notna())).sum()
        return {f"mfi_{w}": 100 - 100 / (1 + up / down)}
    if f == "beta":
        return {f"beta_{w}": (c.shift(w) - c) / (w * c)}
    if f == "corr":
        return {f"corr_{w}": roll(c).corr(np.log(v))}
    if f == "cord":
        return {f"cord_{w}": roll(c.diff()).corr(v.diff())}
    if f == "vstd":
        return {f"vstd_{w}": roll(v).std() / v}
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
        p, n = roll((ret > 0).astype(float).where(known)).mean(), roll(
            (ret < 0).astype(float).where(known)).mean()
        return {f"cntp_{w}": p, f"cntn_{w}": n, f"cntd_{w}": p - n}
    x, pre = (ret, "") if f in ("sump", "sumn", "sumd") else (v.diff(), "v")
    share = roll(x.clip(lower=0)).sum() / roll(x.abs()).sum()
    return {f"{pre}sump_{w}": share, f"{pre}sumn_{w}": 1 - share,
            f"{pre}sumd_{w}": 2 * share - 1}


def frame(close: Any, ohlv: Any = None, extra: tuple[str, ...] = ()) -> Any:
    """Return one asset's frame: OHLCV and every factor column (the defaults and ``extra``).

    ``ohlv``: the recorded ``open``/``high``/``low``/``volume`` series (NaN: unknown); without
    it open = high = low = close and volume is NaN (closes only: volume factors are NaN).
    """
    import numpy as np
    import pandas as pd

    c = close.astype("float64")
    if ohlv is None:
        nan = pd.Series(np.nan, index=c.index, dtype="float64")
        d = {"open": c, "high": c, "low": c, "close": c, "volume": nan}
    else:
        d = {"open": ohlv["open"], "high": ohlv["high"], "low": ohlv["low"], "close": c,
             "volume": ohlv["volume"]}
    base = pd.DataFrame(d, index=c.index)
    o, h, lo, v = d["open"], d["high"], d["low"], d["volume"]
    ret = c.pct_change(fill_method=None)
    d["ret"] = ret
    cols: dict[str, Any] = {"ret_1": ret}
    windows = {f: set(ws) for f, ws in DEFAULTS.items()}
    for name in extra:
        fam = family_of(name)
        if fam is not None:
            windows[fam[0]].add(fam[1])
    for f, ws in windows.items():
        for w in sorted(ws):
            if COLUMNS.get(f, (f + "_{w}",))[0].format(w=w) not in cols:
                cols.update(_family(f, w, d))  # a family's siblings come with it
    ema12 = c.ewm(span=12, adjust=False, min_periods=12).mean()
    macd = ema12 - c.ewm(span=26, adjust=False, min_periods=26).mean()
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
