"""Render the leaderboard as one self-contained, offline HTML file with inline SVG charts.

No script and no external asset: styles are inline, charts are SVG built as strings here. The output
depends only on the :class:`~scoring.board.leaderboard.Report` (no clock, no paths), so the same
database and window give byte-identical HTML.

Every chart is an ``<svg class="chart" data-chart=KIND data-market=MARKET>``; each agent's series
is a ``<path class="series" data-agent=AGENT data-n=POINTS>`` (allocation charts: one
``<svg data-chart="allocation" data-agent=AGENT>`` per agent with one ``<path class="area"
data-asset=ASSET>`` per asset held). Chart kinds: ``equity``, ``drawdown``, ``cash``,
``rolling_k`` (Eq. 6 deltas) and ``rolling_k_same_window``, ``allocation``.

Why one module over 500 lines: one self-contained HTML document (markup, inline SVG charts and their
scales) rendered from one :class:`~scoring.board.load.Report`; split, its helpers would only be used
here.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from scoring.board.extras import extras_html
from scoring.board.load import AgentCurves, Report
from scoring.board.significance_html import mcs_band, p_text, significance_cells
from scoring.board.text import LEGEND
from scoring.stats.benchmarks import CASH, ROLLING_KS

__all__ = ["CHART_KINDS", "render_html"]

CHART_KINDS: tuple[str, ...] = (
    "equity", "drawdown", "cash", "rolling_k", "rolling_k_same_window", "allocation",
)  # fmt: skip

AGENT_COLOURS: tuple[str, ...] = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f",
)  # fmt: skip
ASSET_COLOURS: tuple[str, ...] = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#86bcb6", "#8cd17d", "#b6992d", "#499894", "#d37295", "#fabfd2", "#79706e",
    "#d4a6c8", "#a0cbe8", "#ffbe7d", "#f1ce63",
)  # fmt: skip
CASH_COLOUR = "#d9d9d9"

WIDTH = 600
HEIGHT = 250
MARGIN_L = 62
MARGIN_R = 14
MARGIN_T = 26
MARGIN_B = 34

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;
max-width:1240px}
.scroll{overflow-x:auto;max-width:100%}
table.leaderboard td:nth-child(2),table.leaderboard tr+tr th:nth-child(2){position:sticky;left:0;
background:#fff;z-index:1}
table.leaderboard tr+tr th:nth-child(2){background:#f4f4f4}
th.group{background:#e8e8e8;text-align:center}
details.columns dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;
font-size:12px}details.columns dd{margin:0}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap}
td .ci{display:block}tr+tr th{white-space:normal;min-width:4em}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.note{font-size:12px;color:#555}.tie{color:#b35900;font-weight:bold}
.mcs{background:#eef5ff;border-left:4px solid #3b78c2;padding:4px 8px}
tr.provisional td{color:#777;background:#fafafa}td.provisional{font-style:italic}
.charts{display:flex;flex-wrap:wrap;gap:8px}
svg.chart{background:#fff;border:1px solid #e3e3e3}
svg text{font-size:10px;fill:#444}svg .title{font-size:12px;font-weight:bold;fill:#222}
.legend{font-size:12px;margin:4px 0}.legend span{margin-right:12px;white-space:nowrap}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
"""


# ----------------------------------------------------------------------------- formatting


def _esc(x: Any) -> str:
    """Escape ``x`` for HTML text and attributes."""
    return html.escape(str(x), quote=True)


def _f(x: float) -> str:
    """Format an SVG coordinate (fixed one decimal, no negative zero)."""
    s = f"{x:.1f}"
    return "0.0" if s == "-0.0" else s


def _pct(x: float | None, digits: int = 2) -> str:
    """Format a fraction as a signed percentage ('–' for None)."""
    return "–" if x is None else f"{100 * x:+.{digits}f}%"


def _secs(x: float | None) -> str:
    """Format seconds ('–' for None)."""
    return "–" if x is None else f"{x:.1f} s"


def _usd(x: float | None) -> str:
    """Format a USD amount ('–' for None)."""
    return "–" if x is None else f"${x:.4f}"


def _share(x: float | None, digits: int = 2) -> str:
    """Format a figure that is never negative (a loss, a share) as an unsigned percentage."""
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def _num(x: float | None, digits: int = 2) -> str:
    """Format a number ('–' for None)."""
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(x: Sequence[float | None] | None, fmt: Callable[[float | None], str]) -> str:
    if not x or x[0] is None or x[1] is None:
        return ""
    return f" <span class='note ci'>[{fmt(x[0])}, {fmt(x[1])}]</span>"


def _date(ts: float) -> str:
    """Format a UTC date."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Return round tick values covering ``[lo, hi]``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5 * (abs(lo) or 1.0) * 0.1, hi + 0.5 * (abs(hi) or 1.0) * 0.1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 12))
        t += step
    return ticks


class _Frame:
    """Map data coordinates to SVG pixels for one chart."""

    def __init__(self, x0: float, x1: float, y0: float, y1: float) -> None:
        """Set the data ranges (widened when empty) and the plot area."""
        if x1 <= x0:
            x0, x1 = x0 - 0.5, x1 + 0.5
        if y1 - y0 < 1e-12:
            pad = max(abs(y0) * 0.05, 1e-6)
            y0, y1 = y0 - pad, y1 + pad
        self.x0, self.x1, self.y0, self.y1 = x0, x1, y0, y1
        self.w = WIDTH - MARGIN_L - MARGIN_R
        self.h = HEIGHT - MARGIN_T - MARGIN_B

    def x(self, v: float) -> float:
        """Return the pixel x of data value ``v``."""
        return MARGIN_L + (v - self.x0) / (self.x1 - self.x0) * self.w

    def y(self, v: float) -> float:
        """Return the pixel y of data value ``v``."""
        return MARGIN_T + (self.y1 - v) / (self.y1 - self.y0) * self.h


def _tick_label(v: float, step: float, unit: str) -> str:
    """Format a y tick with just enough decimals for ``step`` (unit '%', '+%' or '')."""
    scale = 100.0 if unit.endswith("%") else 1.0
    decimals = next((d for d in range(7) if abs(round(step * scale, d) - step * scale)
                     <= 1e-9 * step * scale), 6) if step > 0 else 0
    x = round(v * scale, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    sign = "+" if unit.startswith("+") and x > 0 else ""
    return f"{sign}{x:,.{decimals}f}{'%' if unit.endswith('%') else ''}"


def _axes(fr: _Frame, title: str, unit: str, x_ticks: Sequence[tuple[float, str]]
          ) -> list[str]:
    """Draw the title, y grid with labels, x ticks and the plot frame."""
    out = [f"<text class='title' x='{MARGIN_L}' y='16'>{_esc(title)}</text>"]
    bottom = MARGIN_T + fr.h
    ticks = _nice_ticks(fr.y0, fr.y1)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 0.0
    for v in ticks:
        y = fr.y(v)
        out.append(f"<line x1='{MARGIN_L}' x2='{_f(MARGIN_L + fr.w)}' y1='{_f(y)}' y2='{_f(y)}'"
                   " stroke='#eee'/>")
        out.append(f"<text x='{MARGIN_L - 4}' y='{_f(y + 3)}' text-anchor='end'>"
                   f"{_esc(_tick_label(v, step, unit))}</text>")
    for v, label in x_ticks:
        x = fr.x(v)
        anchor = ("start" if x - MARGIN_L < 30 else "end" if MARGIN_L + fr.w - x < 30
                  else "middle")
        out.append(f"<line x1='{_f(x)}' x2='{_f(x)}' y1='{_f(bottom)}' y2='{_f(bottom + 4)}'"
                   " stroke='#999'/>")
        out.append(f"<text x='{_f(x)}' y='{_f(bottom + 16)}' text-anchor='{anchor}'>"
                   f"{_esc(label)}</text>")
    out.append(f"<rect x='{MARGIN_L}' y='{MARGIN_T}' width='{_f(fr.w)}' height='{_f(fr.h)}'"
               " fill='none' stroke='#bbb'/>")
    return out


def _time_ticks(x0: float, x1: float, n: int = 6) -> list[tuple[float, str]]:
    """Return about ``n`` ticks at 00:00 UTC day boundaries in ``[x0, x1]`` (else the ends)."""
    day = 86400.0
    step = max(1, math.ceil((x1 - x0) / day / n)) * day
    t = math.ceil(x0 / day) * day
    ticks = []
    while t <= x1:
        ticks.append((t, _date(t)))
        t += step
    if len(ticks) < 2:
        fmt = "%Y-%m-%d %H:%M"
        ticks = [(x, datetime.fromtimestamp(x, UTC).strftime(fmt)) for x in sorted({x0, x1})]
    return ticks


def _path(points: Sequence[tuple[float, float]], fr: _Frame) -> tuple[str, int]:
    """Return an SVG path through the finite points (gaps start a new subpath) and their count."""
    parts: list[str] = []
    pen_up = True
    n = 0
    for x, y in points:
        if not (math.isfinite(x) and math.isfinite(y)):
            pen_up = True
            continue
        parts.append(f"{'M' if pen_up else 'L'}{_f(fr.x(x))} {_f(fr.y(y))}")
        pen_up = False
        n += 1
    return "".join(parts), n


def _svg(kind: str, market: str, body: Sequence[str], agent: str | None = None) -> str:
    """Wrap chart elements in a tagged ``<svg>``."""
    extra = f" data-agent='{_esc(agent)}'" if agent is not None else ""
    return (f"<svg class='chart' data-chart='{kind}' data-market='{_esc(market)}'{extra} "
            f"xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' "
            f"viewBox='0 0 {WIDTH} {HEIGHT}' role='img'>" + "".join(body) + "</svg>")


# ----------------------------------------------------------------------------- charts


def _line_chart(kind: str, market: str, title: str,
                series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
                unit: str, *, x_ticks: Sequence[tuple[float, str]] | None,
                markers: bool = False) -> str:
    """Draw one line per ``(agent, colour, points)``; time x axis unless ``x_ticks`` given."""
    xs = [x for _, _, pts in series for x, y in pts if math.isfinite(x) and math.isfinite(y)]
    ys = [y for _, _, pts in series for x, y in pts if math.isfinite(x) and math.isfinite(y)]
    if not xs:
        return _svg(kind, market, [f"<text class='title' x='{MARGIN_L}' y='16'>"
                                   f"{_esc(title)} (no data)</text>"])
    fr = _Frame(min(xs), max(xs), min(ys), max(ys))
    ticks = _time_ticks(fr.x0, fr.x1) if x_ticks is None else x_ticks
    body = _axes(fr, title, unit, ticks)
    for agent, colour, pts in series:
        d, n = _path(pts, fr)
        body.append(f"<path class='series' data-agent='{_esc(agent)}' data-n='{n}' d='{d}' "
                    f"fill='none' stroke='{colour}' stroke-width='1.6'><title>{_esc(agent)}"
                    "</title></path>")
        if markers:
            for x, y in pts:
                if math.isfinite(x) and math.isfinite(y):
                    body.append(f"<circle cx='{_f(fr.x(x))}' cy='{_f(fr.y(y))}' r='2.5' "
                                f"fill='{colour}'/>")
    return _svg(kind, market, body)


def _allocation_chart(market: str, curve: AgentCurves, end_ts: float,
                      colours: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """Draw a stacked step-area chart of the weights set by each fill (held until the next)."""
    title = f"{curve.agent}: allocation set by each fill"
    fills = list(curve.allocations)
    if not fills:
        return _svg("allocation", market, [f"<text class='title' x='{MARGIN_L}' y='16'>"
                                           f"{_esc(title)} (no fills)</text>"], curve.agent)
    xs = [t for t, _ in fills]
    x_end = max(end_ts, xs[-1])
    fr = _Frame(xs[0], x_end, 0.0, 1.0)
    edges = [*xs, fr.x1]
    body = _axes(fr, title, "%", _time_ticks(fr.x0, fr.x1))
    held = [a for a in colours if any(w.get(a, 0.0) > 1e-9 for _, w in fills)]
    base = [0.0] * len(fills)
    for a in held:
        top = [b + max(float(w.get(a, 0.0)), 0.0) for b, (_, w) in zip(base, fills, strict=True)]
        upper = [f"{_f(fr.x(edges[i + e]))} {_f(fr.y(top[i]))}"
                 for i in range(len(fills)) for e in (0, 1)]
        lower = [f"{_f(fr.x(edges[i + e]))} {_f(fr.y(base[i]))}"
                 for i in reversed(range(len(fills))) for e in (1, 0)]
        d = "M" + " L".join(upper + lower) + "Z"
        name = labels.get(a, a)
        ws = [max(float(w.get(a, 0.0)), 0.0) for _, w in fills]
        tip = (f"{name}: weight {100 * ws[-1]:.1f}% after the last fill, "
               f"{100 * max(ws):.1f}% at most")
        body.append(f"<path class='area' data-asset='{_esc(a)}' d='{d}' fill='{colours[a]}' "
                    f"stroke='none'><title>{_esc(tip)}</title></path>")
        base = top
    return _svg("allocation", market, body, curve.agent)


def _asset_colours(curves: Sequence[AgentCurves], labels: Mapping[str, str]) -> dict[str, str]:
    """Give every asset its own colour, in the order of its display name; CASH is grey.

    The 20-colour palette while it suffices; beyond it evenly spread hues, so no two assets of
    one report share a colour (a Polymarket universe has two tokens per question).
    """
    assets = sorted({a for c in curves for _, w in c.allocations for a in w if a != CASH},
                    key=lambda a: (labels.get(a, a), a))
    if len(assets) <= len(ASSET_COLOURS):
        out = {a: ASSET_COLOURS[i] for i, a in enumerate(assets)}
    else:  # more assets than the palette: golden-angle hues, alternating lightness, all distinct
        out = {a: f"hsl({(i * 137.508) % 360:.1f},60%,{(42, 58, 72)[i % 3]}%)"
               for i, a in enumerate(assets)}
    out[CASH] = CASH_COLOUR
    return out


# ----------------------------------------------------------------------------- tables

_LEGEND = dict(LEGEND)
#: The report's columns: (header, group, explanation); the groups head the table.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("#", "", _LEGEND["#"]),
    ("agent", "", "agent id (colour of its curves)"),
    ("kind", "", "agent kind from the config (llm, baselines...)"),
    ("return [95% CI]", "performance",
     f"{_LEGEND['return']}; [{_LEGEND['return 95% CI']}]"),
    ("Sharpe [95% CI]", "performance", f"{_LEGEND['sharpe']}; [its 95% bootstrap interval]"),
    ("mean daily [95% CI]", "performance", "mean daily return [its 95% bootstrap interval]"),
    ("Sortino", "performance", _LEGEND["sortino"]),
    ("max DD", "risk", _LEGEND["max dd"]),
    ("now DD", "risk", "drawdown at the last mark (a loss, unsigned)"),
    ("vol", "risk", _LEGEND["vol"]),
    ("VaR95", "risk", _LEGEND["VaR95"]),
    ("composite (rank)", "benchmarks", f"{_LEGEND['comp']} (its rank)"),
    ("CapitalBench", "benchmarks", _LEGEND["capb"]),
    ("regret", "benchmarks", "CapitalBench regret: best asset's window return - own return"),
    ("s_corr", "benchmarks", _LEGEND["s_corr"]),
    ("Brier", "benchmarks", "Polymarket calibration: mean (p - outcome)^2 over resolved "
     "questions, p(YES) = (1 + w_YES - w_NO) / 2 (lower is better; 0.25 = no view)"),
    ("turnover", "behaviour", _LEGEND["turnover"]),
    ("target turnover", "behaviour",
     "mean sum |w_new - w_old| between consecutive target allocations"),
    ("flip rate", "behaviour", "share of weight changes reversing the asset's previous change"),
    ("profile (alignment)", "behaviour", f"configured risk profile ({_LEGEND['align']})"),
    ("consistency L1", "behaviour", _LEGEND["consist"]),
    ("days", "standing", _LEGEND["days"]),
    ("valid", "standing", _LEGEND["valid"]),
    ("excess vs EW", "relative", "cumulative return minus the market's equal-weight index's "
     "over the same days"),
    ("beta / IR vs EW", "relative", "beta to the equal-weight index / information ratio "
     "(mean active return / tracking error, annualised)"),
    ("model cost", "cost of intelligence",
     "USD spent on model calls in the window; tokens in / out"),
    ("mean latency", "cost of intelligence", "mean latency of a model call"),
    ("cost % / net", "cost of intelligence", f"{_LEGEND['cost %']} / {_LEGEND['net']}"),
    ("PSR / DSR", "significance", f"{_LEGEND['PSR']} / {_LEGEND['DSR']}"),
    ("minTRL", "significance", _LEGEND["minTRL"]),
    ("#1 / top3", "significance", f"{_LEGEND['#1']} / {_LEGEND['top3']}"),
    ("p to best", "significance", "one-sided block-bootstrap p-value of the best agent's lead "
     "(raw; Holm-adjusted in --json)"),
    ("MCS", "significance", _LEGEND["MCS"]),
    ("vs next p (Holm)", "significance", "paired block-bootstrap p-value of the return "
     "difference with the next agent, raw (Holm-adjusted); Sharpe difference the same"),
)
_LEFT = {"agent", "kind", "profile (alignment)"}


def _table_head(columns: Sequence[tuple[str, str, str]]) -> str:
    """Return the two header rows: column groups, then the columns with their explanation."""
    groups: list[tuple[str, int]] = []
    for _, group, _ in columns:
        if groups and groups[-1][0] == group:
            groups[-1] = (group, groups[-1][1] + 1)
        else:
            groups.append((group, 1))
    top = "".join(f"<th colspan='{n}' class='group'>{_esc(g)}</th>" for g, n in groups)
    left = " class='l'"
    cols = "".join(
        f"<th{left if name in _LEFT else ''} title='{_esc(text)}'>{_esc(name)}</th>"
        for name, _, text in columns)
    return f"<thead><tr>{top}</tr><tr>{cols}</tr></thead>"


def _columns_legend() -> str:
    """Return the column legend of the report."""
    items = "".join(f"<dt>{_esc(name)}</dt><dd>{_esc(text)}</dd>" for name, _, text in COLUMNS)
    return f"<details class='columns'><summary>Columns</summary><dl>{items}</dl></details>"


#: The leaderboard's column groups, as the tables of a market (each fits 1,400 px): every
#: table starts with the rank and the agent, the first with its kind.
BANDS: tuple[tuple[str, ...], ...] = (
    ("", "performance", "risk"),
    ("benchmarks", "behaviour", "standing"),
    ("relative", "cost of intelligence", "significance"),
)
_KEYS = ("#", "agent")


def _band_columns(band: Sequence[str]) -> list[tuple[str, str, str]]:
    """Return the columns of one table: the rank and agent, then the band's groups."""
    keys = [c for c in COLUMNS if c[0] in _KEYS]
    return keys + [c for c in COLUMNS if c[1] in band and c[0] not in _KEYS]


def _row_cells(r: Mapping[str, Any], colours: Mapping[str, str]) -> dict[str, str]:
    """Return column name -> the ``<td>`` of one leaderboard row."""
    vs = r.get("vs_next") or {}
    p = vs.get("p_value_holm")
    detail = (f" (Holm-adjusted p = {p_text(p)}, {vs.get('days')} days)" if p is not None
              else "")
    tie = (f" <span class='tie' title='not significantly ahead of the next rank{detail}'>"
           "≈</span>") if r.get("tied_with_next") else ""
    probe = r.get("consistency") or {}
    consist = "–" if not probe else (f"{_num(probe.get('mean_l1'), 3)} ± "
                                     f"{_num(probe.get('std_l1'), 3)} "
                                     f"<span class='note'>(K={probe.get('repeats')})</span>")
    comp = _num(r.get("composite_score"))
    if r.get("composite_rank") is not None:
        comp += f" ({r['composite_rank']})"
    colour = colours.get(r["agent"], "#000")
    rank = (f"<td class='provisional' title='{_esc(r.get('provisional_reason') or '')}'>"
            "provisional</td>") if r.get("provisional") else f"<td>{r['rank']}{tie}</td>"
    ew = (r.get("relative") or {}).get("equal_weight") or {}
    rate = r.get("valid_decision_rate")
    valid = "–" if rate is None else (f"{100 * rate:.0f}% <span class='note'>("
                                      f"{r.get('valid_decisions')}/"
                                      f"{r.get('counted_decisions')})</span>")
    sig = re.findall(r"<td>.*?</td>", significance_cells(r))
    td = "<td>{}</td>".format
    cells = {
        "#": rank,
        "agent": f"<td class='l'><span class='sw' style='background:{colour}'></span>"
                 f"{_esc(r['agent'])}</td>",
        "kind": f"<td class='l'>{_esc(r.get('kind') or '')}</td>",
        "return [95% CI]": td(f"{_pct(r.get('cumulative_return'))}"
                              f"{_ci(r.get('cumulative_return_ci'), _pct)}"),
        "Sharpe [95% CI]": td(f"{_num(r.get('sharpe'))}{_ci(r.get('sharpe_ci'), _num)}"),
        "mean daily [95% CI]": td(f"{_pct(r.get('mean_daily_return'), 3)}"
                                  f"{_ci(r.get('mean_daily_return_ci'), lambda x: _pct(x, 3))}"),
        "Sortino": td(_num(r.get("sortino"))),
        "max DD": td(_share(r.get("max_drawdown"))),
        "now DD": td(_share(r.get("current_drawdown"))),
        "vol": td(_share(r.get("volatility"))),
        "VaR95": td(_pct(r.get("var_95"))),
        "composite (rank)": td(comp),
        "CapitalBench": td(_num(r.get("capitalbench_score"), 1)),
        "regret": td(_pct(r.get("regret"))),
        "s_corr": td(_num(r.get("s_corr"), 3)),
        "Brier": td(_num(r.get("brier"), 3)),
        "turnover": td(_num(r.get("mean_turnover"), 3)),
        "target turnover": td(_num(r.get("target_turnover"))),
        "flip rate": td(_num(r.get("flip_rate"))),
        "profile (alignment)": f"<td class='l'>{_esc(r.get('risk_profile') or '')} "
                               f"({_num(r.get('profile_alignment'))})</td>",
        "consistency L1": td(consist),
        "days": td(r.get("days")),
        "valid": td(valid),
        "excess vs EW": td(_pct(ew.get("excess_return"))),
        "beta / IR vs EW": td(f"{_num(ew.get('beta'))} / {_num(ew.get('information_ratio'))}"),
        "model cost": td(f"{_usd(r.get('llm_cost_usd'))} <span class='note'>("
                         f"{r.get('llm_tokens_in', 0)} / {r.get('llm_tokens_out', 0)} tok)"
                         "</span>"),
        "mean latency": td(_secs(r.get("llm_latency_mean_s"))),
        "cost % / net": td(f"{_share(r.get('llm_cost_share'), 3)} / "
                           f"{_pct(r.get('net_return'))}"),
    }
    sig_names = [c[0] for c in COLUMNS if c[1] == "significance"]
    cells.update(zip(sig_names, sig, strict=True))
    return cells


def _leaderboard_table(rows: Sequence[Mapping[str, Any]], colours: Mapping[str, str]) -> str:
    """Render one market's leaderboard rows as one table per band of column groups."""
    cells = [_row_cells(r, colours) for r in rows]
    out: list[str] = []
    for band in BANDS:
        cols = _band_columns(band)
        out += ["<div class='scroll'><table class='leaderboard'>", _table_head(cols)]
        for r, c in zip(rows, cells, strict=True):
            out.append(("<tr class='provisional'>" if r.get("provisional") else "<tr>")
                       + "".join(c[name] for name, _, _ in cols) + "</tr>")
        out.append("</table></div>")
    provisional = [r for r in rows if r.get("provisional")]
    if provisional:
        out.append("<p class='note'>Provisional (not ranked): " + "; ".join(
            f"{_esc(r['agent'])}: {_esc(r.get('provisional_reason') or '')}"
            for r in provisional) + ".</p>")
    return "".join(out)


def _regime_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Render the per-regime mean daily returns as an HTML table."""
    labels = sorted({lab for r in rows for lab in (r.get("by_regime") or {})})
    if not labels:
        return ""
    out = ["<table class='regimes'><tr><th class='l'>agent</th>"]
    out += [f"<th>{_esc(lab)}</th>" for lab in labels]
    out.append("</tr>")
    for r in rows:
        cells = []
        for lab in labels:
            x = (r.get("by_regime") or {}).get(lab)
            cells.append("<td>–</td>" if not x else
                         f"<td>{_pct(x['mean_daily_return'], 3)} "
                         f"<span class='note'>({x['days']} d)</span></td>")
        out.append(f"<tr><td class='l'>{_esc(r['agent'])}</td>{''.join(cells)}</tr>")
    out.append("</table>")
    return "".join(out)


def _legend(items: Sequence[tuple[str, str]]) -> str:
    """Render a colour legend."""
    return ("<div class='legend'>" + "".join(
        f"<span><span class='sw' style='background:{c}'></span>{_esc(n)}</span>"
        for n, c in items) + "</div>")


# ----------------------------------------------------------------------------- page


def _market_section(report: Report, market: str, colours: Mapping[str, str]) -> str:
    """Render one market: table, line charts, allocations and regime split."""
    board = report.board
    rows = [r for r in board["rows"] if r["market"] == market]
    curves = [report.curves[(r["agent"], market)] for r in rows
              if (r["agent"], market) in report.curves]
    labels = report.labels.get(market, {})
    info = board.get("markets", {}).get(market, {})
    best = info.get("best_asset")
    out = [f"<section data-market='{_esc(market)}'><h2>{_esc(market)}</h2>",
           mcs_band(info), _leaderboard_table(rows, colours)]
    if best is not None:
        out.append(f"<p class='note'>Best asset over the window: {_esc(labels.get(best, best))}"
                   f" ({_pct(info.get('best_asset_return'))}); CapitalBench score = 100 × "
                   "window return / best return, regret = best − window return.</p>")
    out.append(_legend([(r["agent"], colours[r["agent"]]) for r in rows]))
    out.append("<div class='charts'>")
    line_sets: list[tuple[str, str, Callable[[AgentCurves], list[float]], str]] = [
        ("equity", "Equity (daily marks)", lambda c: list(c.values), ""),
        ("drawdown", "Drawdown from peak (a loss, unsigned)", lambda c: list(c.drawdowns()),
         "%"),
        ("cash", "Cash share of value", lambda c: c.cash_ratios(), "%"),
    ]
    for kind, title, getter, unit in line_sets:
        series = [(c.agent, colours[c.agent], list(zip(c.ts, getter(c), strict=True)))
                  for c in curves]
        out.append(_line_chart(kind, market, title, series, unit, x_ticks=None))
    k_ticks = [(math.log2(k), f"k={k}") for k in ROLLING_KS]
    for kind, field, title in (
        ("rolling_k", "delta", "Rolling-k Δk = CR(k) − CR(0) (LiveTradeBench Eq. 6)"),
        ("rolling_k_same_window", "delta_same_window", "Rolling-k Δk, CR(0) on the same window"),
    ):
        series = []
        for r in rows:
            d = ((r.get("rolling_k") or {}).get(field) or {})
            pts = [(math.log2(k), d[str(k)] if d.get(str(k)) is not None else math.nan)
                   for k in ROLLING_KS]
            series.append((r["agent"], colours[r["agent"]], pts))
        out.append(_line_chart(kind, market, title, series, "+%", x_ticks=k_ticks,
                               markers=True))
    out.append("</div><h3>Allocations (weights set at each fill)</h3>")
    acol = _asset_colours(curves, labels)
    out.append(_legend([(labels.get(a, a), c) for a, c in acol.items()]))
    out.append("<div class='charts'>")
    end_ts = max((c.ts[-1] for c in curves if c.ts), default=0.0)
    out += [_allocation_chart(market, c, end_ts, acol, labels) for c in curves]
    out.append("</div>")
    regimes = _regime_table(rows)
    if regimes:
        out.append("<h3>Mean daily return by market regime</h3>" + regimes)
    out.append("</section>")
    return "".join(out)


def render_html(report: Report) -> str:
    """Return the report as one self-contained HTML document."""
    board = report.board
    agents = sorted({r["agent"] for r in board["rows"]})
    colours = {a: AGENT_COLOURS[i % len(AGENT_COLOURS)] for i, a in enumerate(agents)}
    win = board.get("window", {})
    dates = board.get("window_dates") or {}
    start = dates.get("first_date") or ("start of the store" if win.get("start") is None
                                        else _date(win["start"]))
    end = dates.get("last_date") or ("end of the store" if win.get("end") is None
                                     else _date(win["end"]))
    reg = board.get("regime") or {}
    conv = board.get("conventions", {})
    markets = sorted({r["market"] for r in board["rows"]})
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<title>paperarena report</title><style>", _CSS, "</style></head><body>",
        "<h1>paperarena report</h1>",
        f"<p>Window: {_esc(start)} → {_esc(end)} (first and last daily mark, UTC). "
        "Regime of the window: "
        f"<b>{_esc(reg.get('label', 'unknown'))}</b> (equal-weight equity index "
        f"{_pct(reg.get('index_return'))} over {reg.get('index_days', 0)} days).</p>",
        "<p class='note'>Returns are daily from the daily marks; volatility, Sharpe, "
        "Sortino and the annualised return annualise with "
        + (", ".join(f"{n} periods a year ({_esc(m)})" for m, n in
                     sorted(conv.get("periods_per_year", {}).items())) or "-")
        + "; risk-free rate a year " + (", ".join(
            f"{100 * x:.2f}% ({_esc(m)})" for m, x in sorted(conv.get("risk_free_rate", {})
                                                           .items())) or "-")
        + " (cash accrues it; Sharpe, Sortino, ranks and tests use excess returns)."
        " Intervals are 95% percentile stationary block bootstraps "
        f"({conv.get('bootstrap', {}).get('n')} resamples of the daily returns, seed "
        f"{conv.get('bootstrap', {}).get('seed')}, block length by Politis-White). ≈ after a "
        "rank: the paired block bootstrap of the excess-return difference with the next "
        "agent is not significant once Holm-adjusted over the market's comparisons (p ≥ "
        f"{conv.get('significance', {}).get('level', 0.05)}), or the two share fewer than "
        f"{conv.get('significance', {}).get('min_days')} days. Composite: StockBench "
        "Eq. 4 across the market's agents. Consistency: mean pairwise L1 distance of "
        "repeated answers to one frozen prompt (lower is more consistent). Valid: share of "
        "the rounds the agent was asked that it answered with an applied allocation or a "
        "deliberate hold; an agent under "
        f"{100 * conv.get('provisional', {}).get('min_valid_rate', 0.8):.0f}% or with fewer "
        f"than {conv.get('provisional', {}).get('min_days', 5)} scored days is listed as "
        "provisional, without a rank.</p>",
        _columns_legend(),
    ]
    if not markets:
        parts.append("<p>No agent has data in this window.</p>")
    parts += [_market_section(report, m, colours) for m in markets]
    parts.append(extras_html(board))  # issue 13: run groups, PortBench scores, stress gate
    parts.append("</body></html>\n")
    return "".join(parts)
