"""AlphaForgeBench's factor library against an independent computation (plain Python over the
bars, no pandas), the paper's families at default and requested windows (issue 29)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from agents.alphaforgebench.factor_library import DEFAULTS, FACTORS, family_of, frame, requested

N = 90


def _bars(seed: int = 7) -> dict[str, list[float]]:
    rnd = random.Random(seed)
    c, o, h, lo, v = [], [], [], [], []
    price = 100.0
    for i in range(N):
        op = price * (1 + rnd.gauss(0, 0.004))
        price = price * math.exp(rnd.gauss(0, 0.015))
        if i % 11 == 5:
            price = c[-1] if c else price  # an unchanged close now and then (ret = 0)
        o.append(op)
        c.append(price)
        h.append(max(op, price) * (1 + abs(rnd.gauss(0, 0.006))))
        lo.append(min(op, price) * (1 - abs(rnd.gauss(0, 0.006))))
        v.append(float(rnd.randint(100_000, 900_000)))
    return {"open": o, "high": h, "low": lo, "close": c, "volume": v}


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    k = int(pos)
    return s[k] + (s[min(k + 1, len(s) - 1)] - s[k]) * (pos - k)


def _ema(xs: Sequence[float], alpha: float) -> list[float]:
    out = [xs[0]]
    for x in xs[1:]:
        out.append(alpha * x + (1 - alpha) * out[-1])
    return out


def _pearson(a: Sequence[float], b: Sequence[float]) -> float:
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


def reference(b: dict[str, list[float]], t: int, w: int) -> dict[str, float]:
    """Return every periodic factor at row ``t`` and window ``w`` (needs t >= w + 1), and the
    fixed ones, from the definitions of the paper's factor library."""
    o, h, lo, c, v = (b[k] for k in ("open", "high", "low", "close", "volume"))
    win = range(t - w + 1, t + 1)
    r = [math.nan] + [c[i] / c[i - 1] - 1 for i in range(1, N)]
    cw, hw, lw, vw = ([x[i] for i in win] for x in (c, h, lo, v))
    out: dict[str, float] = {}
    sma = statistics.fmean(cw)
    out[f"sma_{w}"], out[f"ma_{w}"] = sma, sma / c[t]
    out[f"ema_{w}"] = _ema(c, 2 / (w + 1))[t]
    out[f"roc_{w}"], out[f"beta_{w}"] = c[t - w] / c[t], (c[t - w] - c[t]) / (w * c[t])
    out[f"std_{w}"] = statistics.stdev(cw) / c[t]
    d = [c[i] - c[i - 1] for i in range(1, t + 1)]
    gain = _ema([max(x, 0.0) for x in d], 1 / w)[-1]
    loss = _ema([max(-x, 0.0) for x in d], 1 / w)[-1]
    out[f"rsi_{w}"] = 100 - 100 / (1 + gain / loss)
    sd = statistics.pstdev(cw)
    out[f"bb_upper_{w}"], out[f"bb_middle_{w}"], out[f"bb_lower_{w}"] = (sma + 2 * sd, sma,
                                                                         sma - 2 * sd)

    def k_at(s: int) -> float:
        ll, hh = min(lo[s - w + 1:s + 1]), max(h[s - w + 1:s + 1])
        return (c[s] - ll) / (hh - ll)
    out[f"rsv_{w}"], out[f"stoch_k_{w}"] = k_at(t), 100 * k_at(t)
    out[f"stoch_d_{w}"] = 100 * statistics.fmean(k_at(s) for s in (t - 2, t - 1, t))
    tr = [max(h[i] - lo[i], abs(h[i] - c[i - 1]), abs(lo[i] - c[i - 1])) for i in win]
    out[f"atr_{w}"] = statistics.fmean(tr)
    tp = [(h[i] + lo[i] + c[i]) / 3 for i in range(N)]
    tpw = [tp[i] for i in win]
    mad = statistics.fmean(abs(x - statistics.fmean(tpw)) for x in tpw)
    out[f"cci_{w}"] = (tp[t] - statistics.fmean(tpw)) / (0.015 * mad)
    up = sum(tp[i] * v[i] for i in win if tp[i] > tp[i - 1])
    down = sum(tp[i] * v[i] for i in win if tp[i] < tp[i - 1])
    out[f"mfi_{w}"] = 100 - 100 / (1 + up / down)
    out[f"corr_{w}"] = _pearson(cw, [math.log(x) for x in vw])
    out[f"cord_{w}"] = _pearson([c[i] - c[i - 1] for i in win], [v[i] - v[i - 1] for i in win])
    out[f"vstd_{w}"] = statistics.stdev(vw) / v[t]
    out[f"max_{w}"], out[f"min_{w}"] = max(cw) / c[t], min(cw) / c[t]
    out[f"rank_{w}"] = sum(1 for x in cw[:-1] if x < c[t]) / w
    out[f"imax_{w}"] = (t - max(i for i in win if h[i] == max(hw))) / w
    out[f"imin_{w}"] = (t - max(i for i in win if lo[i] == min(lw))) / w
    out[f"imxd_{w}"] = out[f"imin_{w}"] - out[f"imax_{w}"]
    out[f"qtlu_{w}"] = (c[t] - _quantile(cw, 0.8)) / c[t]
    out[f"qtld_{w}"] = (c[t] - _quantile(cw, 0.2)) / c[t]
    out[f"vma_{w}"] = statistics.fmean(vw) / v[t]
    x = [abs(r[i]) * v[i] for i in win]
    out[f"wvma_{w}"] = statistics.stdev(x) / statistics.fmean(x)
    out[f"cntp_{w}"] = sum(1 for i in win if r[i] > 0) / w
    out[f"cntn_{w}"] = sum(1 for i in win if r[i] < 0) / w
    out[f"cntd_{w}"] = out[f"cntp_{w}"] - out[f"cntn_{w}"]
    for pre, xs in (("", r), ("v", [math.nan] + [v[i] - v[i - 1] for i in range(1, N)])):
        share = sum(max(xs[i], 0.0) for i in win) / sum(abs(xs[i]) for i in win)
        out[f"{pre}sump_{w}"], out[f"{pre}sumn_{w}"] = share, 1 - share
        out[f"{pre}sumd_{w}"] = 2 * share - 1
    out["ret_1"] = r[t]
    macd = [a - b for a, b in zip(_ema(c, 2 / 13), _ema(c, 2 / 27), strict=True)]
    out["macd"] = macd[t]
    out["macd_signal"] = _ema(macd[25:], 2 / 10)[t - 25]
    out["macd_hist"] = out["macd"] - out["macd_signal"]
    out["obv"] = sum(math.copysign(1, r[i]) * v[i] if r[i] else 0.0 for i in range(1, t + 1))
    out["logvol"] = math.log(v[t] + 1)
    top, bottom, rng = max(o[t], c[t]), min(o[t], c[t]), h[t] - lo[t]
    for name, num, den in (("klen", rng, o[t]), ("kup", h[t] - top, o[t]),
                           ("klow", bottom - lo[t], o[t]), ("kmid", c[t] - o[t], c[t]),
                           ("ksft", 2 * c[t] - h[t] - lo[t], o[t])):
        out[name] = num / den
        if name != "klen":
            out[name + "2"] = num / rng
    return out


#: Families computed together (one window of one brings the others).
GROUPS = ({"sma", "ma"}, {"max", "min"}, {"imax", "imin", "imxd"}, {"qtlu", "qtld"},
          {"cntp", "cntn", "cntd"}, {"sump", "sumn", "sumd"}, {"vsump", "vsumn", "vsumd"})


def _siblings(family: str) -> set[str]:
    return next((g for g in GROUPS if family in g), {family})


def _frame(b: dict[str, list[float]], extra: tuple[str, ...] = ()) -> Any:
    import pandas as pd  # type: ignore[import-untyped]

    s: Callable[[str], Any] = lambda k: pd.Series(b[k], dtype="float64")  # noqa: E731
    return frame(s("close"), {k: s(k) for k in ("open", "high", "low", "volume")}, extra)


@pytest.mark.parametrize(("t", "w"), [(N - 1, 5), (N - 1, 20), (60, 14), (N - 1, 7)])
def test_every_factor_matches_the_independent_computation(t: int, w: int) -> None:
    """Each column at a default window equals the reference; w = 7 is no default window: the
    families the code names get it (all their columns), the others do not."""
    b = _bars()
    named = ("rsi_7", "bb_upper_7", "imxd_7", "vsumd_7", "stoch_d_7", "sma_7")
    df = _frame(b, named if w == 7 else ())
    want = reference(b, t, w)
    got = ({f for k in named if (fam := family_of(k)) for f in _siblings(fam[0])} if w == 7
           else set())
    checked = 0
    for k, x in want.items():
        fam = family_of(k)
        present = fam is None or w in DEFAULTS[fam[0]] or fam[0] in got
        assert (k in df.columns) == present, k
        if present:
            assert df[k].iloc[t] == pytest.approx(x, rel=1e-9, abs=1e-12), k
            checked += 1
    assert checked >= 20


def test_every_listed_family_is_checked_and_nan_until_its_window_is_full() -> None:
    b = _bars()
    df = _frame(b)
    want = reference(b, N - 1, 20)
    listed = {n.strip().replace("{w}", "20") for names, _ in FACTORS
              for n in names.partition(", w in ")[0].split(",")}
    assert listed <= set(want) | {"ret_1"}  # the reference covers every column the prompt lists
    assert math.isnan(df["sma_20"].iloc[18]) and not math.isnan(df["sma_20"].iloc[19])
    assert math.isnan(df["atr_14"].iloc[13]) and not math.isnan(df["atr_14"].iloc[14])


def test_closes_only_frames_have_no_volume_factors() -> None:
    import pandas as pd

    c = pd.Series(_bars()["close"])
    df = frame(c)
    assert (df["open"] == df["close"]).all() and (df["high"] == df["low"]).all()
    assert df["vma_20"].isna().all() and df["mfi_14"].isna().all() and df["logvol"].isna().all()
    assert df["klen"].iloc[-1] == 0 and math.isnan(df["kup2"].iloc[-1])  # 0 / 0: NaN, not inf
    assert df["sma_20"].iloc[-1] == pytest.approx(statistics.fmean(c.iloc[-20:]))


def test_the_windows_a_strategy_names_are_requested() -> None:
    code = compile('def generate_signal(df):\n    x = df["rsi_7"].iloc[-1] + df["rsi_14"].iloc[-1]'
                   '\n    y = [df[k] for k in ("vma_15", "bb_lower_3", "bb_9", "foo_3",'
                   ' "sma_1001")]\n    return {"signal": 0, "position": 0.0}\n',
                   "<s>", "exec")
    assert requested(code) == ("bb_lower_3", "rsi_7", "vma_15")  # defaults and unknowns left out


def _imxd(b: dict[str, list[float]], t: int, w: int) -> float:
    """Return (bars since the window's latest lowest low - since its latest highest high) / w."""
    win = range(t - w + 1, t + 1)
    hi, lo = max(b["high"][i] for i in win), min(b["low"][i] for i in win)
    since_high = t - max(i for i in win if b["high"][i] == hi)
    return (t - max(i for i in win if b["low"][i] == lo) - since_high) / w


TIMED = """
def generate_signal(df):
    x = df["imxd_7"].iloc[-1]
    if x != x:
        return {"signal": 0, "position": 0.0}
    return {"signal": 1 if x > 0 else -1, "position": 1.0 if x > 0 else 0.0}
"""


async def test_a_strategy_gets_a_window_it_names_in_the_sandbox() -> None:
    """End to end through the sandboxed worker: ``imxd_7`` (no default window) per bar."""
    from agents.alphaforgebench.instability import execute
    from agents.alphaforgebench.sandbox import SandboxLimits

    b = _bars()
    bars = {"X": {"ts": [1_600_000_000.0 + 86400 * i for i in range(40)],
                  **{k: b[k][:40] for k in ("open", "high", "low", "close", "volume")}}}
    got = (await execute(TIMED, bars, 300, SandboxLimits(cpu_s=30, timeout_s=20)))["signals"]
    want = [0 if t < 6 else (1 if _imxd(b, t, 7) > 0 else -1) for t in range(40)]
    assert got == {"X": want} and 1 in want and -1 in want
