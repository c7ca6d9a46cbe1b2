"""AlphaForgeBench's factor library: the columns of a strategy's frame, from its OHLCV bars.

The families and formulas are those the paper's code-generation prompt lists (technical,
statistical, time-series, candlestick, volume, counting and volume-counting factors). A family
with a period is computed for its default windows (:data:`DEFAULTS`) and for every other window a
strategy writes out literally in its code (``df["rsi_7"]``: :func:`requested`), as the paper's
"any period" rule; :data:`FACTORS` is what the prompt lists.

The sandboxed worker imports this module as ``factor_library`` (bound next to it, imported before
any strategy code), so it imports numpy and pandas only (inside the functions: the daemon imports
the lists without them), never anything of paperarena.

A frame is built as numpy arrays, each intermediate (a rolling mean, a true range) computed once
for every family and window that uses it, rolling and exponential statistics by pandas' own
window kernels (``pandas._libs.window.aggregations``, given the bounds and inputs pandas' rolling
and ``ewm`` would give them), and the DataFrame made once: the same values bit for bit as the
pandas expressions one Series at a time (tests/protocols/test_alphaforge_factors_exact.py holds
them), about a fifth of the time (bench/bench_factor_library.py).

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


class _Frame:
    """One asset's arrays and the windowed results shared across families and windows.

    Every value is the same, bit for bit, as the pandas expression the comment beside it names:
    elementwise steps are the numpy operations pandas performs, rolling and exponential ones
    call pandas' own window kernels with the bounds and the input pandas would pass them.
    """

    def __init__(self, a: dict[str, Any]) -> None:
        import numpy as np
        from pandas._libs.window import aggregations  # type: ignore[import-untyped]

        self.np, self.agg, self.a = np, aggregations, a
        self.n = len(a["c"])
        self._prepped: dict[str, Any] = {}
        self._bounds: dict[int, tuple[Any, Any]] = {}
        self._memo: dict[tuple[Any, ...], Any] = {}

    def prep(self, key: str) -> Any:
        """Return input ``key`` as pandas' window functions see it (inf: NaN)."""
        x = self._prepped.get(key)
        if x is None:
            x = self.a[key]
            inf = self.np.isinf(x)
            if inf.any():
                x = self.np.where(inf, self.np.nan, x)
            self._prepped[key] = x
        return x

    def bounds(self, w: int) -> tuple[Any, Any]:
        """Return the start and end of every trailing window of ``w`` bars (pandas' fixed)."""
        b = self._bounds.get(w)
        if b is None:
            np = self.np
            end = np.arange(1, self.n + 1, dtype="int64")
            b = self._bounds[w] = (np.clip(end - w, 0, self.n), np.clip(end, 0, self.n))
        return b

    def roll(self, op: str, key: str, w: int, arg: Any = None) -> Any:
        """Return ``Series(a[key]).rolling(w, min_periods=w).<op>()`` as an array.

        ``op``: mean, sum, max, min, std (``arg``: ddof) or quantile (``arg``: q, linear).
        """
        memo = (op, key, w, arg)
        out = self._memo.get(memo)
        if out is not None:
            return out
        x = self.prep(key)
        if self.n == 0:
            out = x.copy()
        else:
            start, end = self.bounds(w)
            if op == "std":
                var = self.agg.roll_var(x, start, end, w, ddof=arg)
                with self.np.errstate(all="ignore"):
                    out = self.np.sqrt(var)
                    neg = var < 0
                if neg.any():
                    out[neg] = 0
            elif op == "quantile":
                out = self.agg.roll_quantile(x, start, end, w, arg, "linear")
            else:
                out = getattr(self.agg, "roll_" + op)(x, start, end, w)
        self._memo[memo] = out
        return out

    def corr(self, kx: str, ky: str, w: int) -> Any:
        """Return ``Series(a[kx]).rolling(w, min_periods=w).corr(Series(a[ky]))``."""
        x, y = self.a[kx], self.a[ky]
        self.a[kx + "|" + ky], self.a[ky + "|" + kx] = x + 0 * y, y + 0 * x  # prep_binary
        if self.n == 0:
            return self.a[kx].copy()
        start, end = self.bounds(w)
        return self.agg.roll_corr(self.prep(kx + "|" + ky), self.prep(ky + "|" + kx), start,
                                  end, w)

    def ewm(self, key: str, com: float, w: int) -> Any:
        """Return ``Series(a[key]).ewm(com=com, adjust=False, min_periods=w).mean()``."""
        x = self.prep(key)
        if self.n == 0:
            return x.copy()
        np = self.np
        return self.agg.ewm(x, np.array([0], dtype="int64"),
                            np.array([self.n], dtype="int64"), max(w, 1), com, False, False,
                            None, True)

    def windowed(self, key: str, w: int, fn: Any) -> Any:
        """Return ``fn`` of every full window of ``a[key]`` (rows: windows; NaN where one is
        unknown)."""
        np = self.np
        a = self.a[key]
        out = np.full(self.n, np.nan)
        if self.n >= w:
            v = np.lib.stride_tricks.sliding_window_view(a, w)
            res = fn(v).astype("float64")
            res[np.isnan(v).any(axis=1)] = np.nan
            out[w - 1:] = res
        return out


def _shift(x: Any, w: int) -> Any:
    """Return ``Series(x).shift(w)`` as an array (w >= 1)."""
    import numpy as np

    out = np.full(len(x), np.nan)
    if w < len(x):
        out[w:] = x[:len(x) - w]
    return out


def _family(f: str, w: int, fr: _Frame) -> dict[str, Any]:
    """Return the columns of family ``f`` at window ``w``."""
    np, a = fr.np, fr.a
    c, v = a["c"], a["v"]
    if f in ("sma", "ma"):
        sma = fr.roll("mean", "c", w)
        return {f"sma_{w}": sma, f"ma_{w}": sma / c}
    if f == "ema":
        return {f"ema_{w}": fr.ewm("c", float((w - 1) / 2), w)}
    if f == "roc":
        return {f"roc_{w}": _shift(c, w) / c}
    if f == "std":
        return {f"std_{w}": fr.roll("std", "c", w, 1) / c}
    if f == "rsi":
        com = float((1 - 1 / w) / (1 / w))
        gain, loss = fr.ewm("gain", com, w), fr.ewm("loss", com, w)
        return {f"rsi_{w}": 100 - 100 / (1 + gain / loss)}
    if f == "bb":
        mid, sd = fr.roll("mean", "c", w), fr.roll("std", "c", w, 0)
        return {f"bb_upper_{w}": mid + 2 * sd, f"bb_middle_{w}": mid,
                f"bb_lower_{w}": mid - 2 * sd}
    if f in ("stoch", "rsv"):
        low_w, high_w = fr.roll("min", "lo", w), fr.roll("max", "h", w)
        k = (c - low_w) / (high_w - low_w)
        if f == "rsv":
            return {f"rsv_{w}": k}
        a[f"k100_{w}"] = k100 = k * 100
        return {f"stoch_k_{w}": k100, f"stoch_d_{w}": fr.roll("mean", f"k100_{w}", 3)}
    if f == "atr":
        return {f"atr_{w}": fr.roll("mean", "tr", w)}
    if f == "cci":
        mad = fr.windowed("tp", w, lambda x: np.abs(x - x.mean(axis=1, keepdims=True)).mean(
            axis=1))
        return {f"cci_{w}": (a["tp"] - fr.roll("mean", "tp", w)) / (0.015 * mad)}
    if f == "mfi":
        up, down = fr.roll("sum", "flow_up", w), fr.roll("sum", "flow_down", w)
        return {f"mfi_{w}": 100 - 100 / (1 + up / down)}
    if f == "beta":
        return {f"beta_{w}": (_shift(c, w) - c) / (w * c)}
    if f == "corr":
        return {f"corr_{w}": fr.corr("c", "logv", w)}
    if f == "cord":
        return {f"cord_{w}": fr.corr("dc", "dv", w)}
    if f == "vstd":
        return {f"vstd_{w}": fr.roll("std", "v", w, 1) / v}
    if f in ("max", "min"):
        return {f"max_{w}": fr.roll("max", "c", w) / c, f"min_{w}": fr.roll("min", "c", w) / c}
    if f == "rank":
        return {f"rank_{w}": fr.windowed(
            "c", w, lambda x: (x[:, :-1] < x[:, -1:]).sum(axis=1) / w)}
    if f in ("imax", "imin", "imxd"):
        since_high = fr.windowed("h", w, lambda x: np.argmax(x[:, ::-1], axis=1) / w)
        since_low = fr.windowed("lo", w, lambda x: np.argmin(x[:, ::-1], axis=1) / w)
        return {f"imax_{w}": since_high, f"imin_{w}": since_low,
                f"imxd_{w}": since_low - since_high}
    if f in ("qtlu", "qtld"):
        return {f"qtlu_{w}": (c - fr.roll("quantile", "c", w, 0.8)) / c,
                f"qtld_{w}": (c - fr.roll("quantile", "c", w, 0.2)) / c}
    if f == "vma":
        return {f"vma_{w}": fr.roll("mean", "v", w) / v}
    if f == "wvma":
        return {f"wvma_{w}": fr.roll("std", "wv", w, 1) / fr.roll("mean", "wv", w)}
    if f in ("cntp", "cntn", "cntd"):
        p, n = fr.roll("mean", "up", w), fr.roll("mean", "down", w)
        return {f"cntp_{w}": p, f"cntn_{w}": n, f"cntd_{w}": p - n}
    x, pre = ("ret", "") if f in ("sump", "sumn", "sumd") else ("dv", "v")
    share = fr.roll("sum", x + "+", w) / fr.roll("sum", x + "||", w)
    return {f"{pre}sump_{w}": share, f"{pre}sumn_{w}": 1 - share,
            f"{pre}sumd_{w}": 2 * share - 1}


def _clip_lower(x: Any) -> Any:
    """Return ``Series(x).clip(lower=0)`` as an array."""
    import numpy as np

    return np.where(x < 0, 0.0, x)


def _inputs(o: Any, h: Any, lo: Any, c: Any, v: Any) -> dict[str, Any]:
    """Return the arrays the families are computed from (the pandas steps in comments)."""
    import numpy as np

    nan = np.isnan
    prev = _shift(c, 1)
    ret = c / prev - 1  # c.pct_change(fill_method=None)
    delta = c - prev  # c.diff()
    known = ~nan(ret)
    tp = (h + lo + c) / 3
    tp_prev = _shift(tp, 1)
    flow = tp * v
    dv = v - _shift(v, 1)  # v.diff()
    wv = np.abs(ret) * v
    return {
        "o": o, "h": h, "lo": lo, "c": c, "v": v, "ret": ret, "dc": delta, "dv": dv,
        "gain": _clip_lower(delta), "loss": -np.where(delta > 0, 0.0, delta),
        # max(high - low, |high - prev close|, |low - prev close|)
        "tr": np.maximum(np.maximum(h - lo, np.abs(h - prev)), np.abs(lo - prev)),
        "tp": tp, "logv": np.log(v), "wv": wv,
        # flow.where(tp > prev, 0.0).where(prev.notna()), and < for the down flow
        "flow_up": np.where(nan(tp_prev), np.nan, np.where(tp > tp_prev, flow, 0.0)),
        "flow_down": np.where(nan(tp_prev), np.nan, np.where(tp < tp_prev, flow, 0.0)),
        # (ret > 0).astype(float).where(ret.notna())
        "up": np.where(known, (ret > 0).astype("float64"), np.nan),
        "down": np.where(known, (ret < 0).astype("float64"), np.nan),
        "ret+": _clip_lower(ret), "ret||": np.abs(ret), "dv+": _clip_lower(dv),
        "dv||": np.abs(dv),
    }


def frame(close: Any, ohlv: Any = None, extra: tuple[str, ...] = ()) -> Any:
    """Return one asset's frame: OHLCV and every factor column (the defaults and ``extra``).

    ``ohlv``: the recorded ``open``/``high``/``low``/``volume`` series on the close's index
    (NaN: unknown); without it open = high = low = close and volume is NaN (closes only: volume
    factors are NaN).
    """
    import numpy as np
    import pandas as pd

    c = close.to_numpy(dtype="float64")
    if ohlv is None:
        o = h = lo = c
        v = np.full(len(c), np.nan)
    else:
        o, h, lo, v = (ohlv[k].to_numpy(dtype="float64") for k in ("open", "high", "low",
                                                                    "volume"))
    with np.errstate(all="ignore"):
        fr = _Frame(_inputs(o, h, lo, c, v))
        cols: dict[str, Any] = {"open": o, "high": h, "low": lo, "close": c, "volume": v,
                                "ret_1": fr.a["ret"]}
        windows = {f: set(ws) for f, ws in DEFAULTS.items()}
        for name in extra:
            fam = family_of(name)
            if fam is not None:
                windows[fam[0]].add(fam[1])
        for f, ws in windows.items():
            for w in sorted(ws):
                if COLUMNS.get(f, (f + "_{w}",))[0].format(w=w) not in cols:
                    cols.update(_family(f, w, fr))  # a family's siblings come with it
        macd = fr.ewm("c", 5.5, 12) - fr.ewm("c", 12.5, 26)  # spans 12 and 26
        fr.a["macd"] = macd
        signal = fr.ewm("macd", 4.0, 9)  # span 9
        ret = fr.a["ret"]
        step = np.sign(ret)
        step[np.isnan(step)] = 0.0  # np.sign(ret).fillna(0.0)
        obv = step * v
        unknown = np.isnan(obv)
        obv = np.cumsum(np.where(unknown, 0.0, obv))  # Series.cumsum (NaN skipped and kept)
        obv[unknown] = np.nan
        cols.update({"macd": macd, "macd_signal": signal, "macd_hist": macd - signal,
                     "obv": obv, "logvol": np.log(v + 1)})
        top, bottom, rng = np.maximum(o, c), np.minimum(o, c), h - lo
        for name, num, den in (("klen", rng, o), ("kup", h - top, o), ("klow", bottom - lo, o),
                               ("kmid", c - o, c), ("ksft", 2 * c - h - lo, o)):
            cols[name] = num / den
            if name != "klen":
                cols[name + "2"] = num / rng
        table = np.empty((len(c), len(cols)))
        for j, col in enumerate(cols.values()):
            table[:, j] = col
        table[np.isinf(table)] = np.nan
    return pd.DataFrame(table, index=close.index, columns=list(cols))
