"""AlphaForgeBench in the report and the API: live figures per strategy version, instability.

Per version (from the decisions whose ``raw_output`` is an alphaforgebench summary, grouped by
``strategy_version`` in time order): the bars it ran, how many were applied (``ok``) or failed
as a whole (``invalid``: timeout, worker death, every stock failing), the stock-level failures,
the mean share of stocks held (active), and its return: the account value when its first bar
started trading (``value_before`` of that fill, else the equity row of that round) to the same
value of the next version's first bar (the last version: the agent's last equity row). Trading
costs count for the version that traded.

Instability: the latest ``instability_runs`` row (``paperarena alphaforge-instability``).
"""

from __future__ import annotations

import html
import json
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

MARKER = '"protocol": "alphaforgebench"'

DECISIONS_SQL = ("SELECT agent, scheduled_ts, decided_ts, outcome, raw_output FROM decisions"
                 " WHERE market='equity' AND raw_output LIKE ? ORDER BY agent, scheduled_ts")
FILLS_SQL = "SELECT agent, scheduled_ts, value_before FROM fills WHERE market='equity'"
EQUITY_SQL = ("SELECT agent, ts, kind, value FROM equity WHERE market='equity'"
              " ORDER BY agent, ts")
INSTABILITY_SQL = "SELECT ts, result_json FROM instability_runs ORDER BY id DESC LIMIT 1"


@dataclass(frozen=True, slots=True)
class VersionFigures:
    """The live figures of one strategy version of one agent."""

    agent: str
    version: str
    since: float
    until: float
    bars: int
    ok: int
    failed: int
    stock_failures: int
    active: float | None
    ret: float | None


def version_figures(decisions: Sequence[Sequence[Any]], fills: Sequence[Sequence[Any]],
                    equity: Sequence[Sequence[Any]]) -> list[VersionFigures]:
    """Return the figures of every version from the rows of :data:`DECISIONS_SQL`,
    :data:`FILLS_SQL` and :data:`EQUITY_SQL` (pure)."""
    before = {(a, float(ts)): float(v) for a, ts, v in fills}
    eq: dict[str, list[tuple[float, str, float]]] = {}
    for a, ts, kind, v in equity:
        eq.setdefault(a, []).append((float(ts), kind, float(v)))
    segments: list[tuple[str, str, list[tuple[float, float, str, dict[str, Any]]]]] = []
    for agent, sts, dts, outcome, raw in decisions:
        try:
            summary = json.loads(raw)
        except (TypeError, ValueError):
            continue
        version = summary.get("strategy_version")
        if not isinstance(version, str):
            continue
        if not segments or segments[-1][0] != agent or segments[-1][1] != version:
            segments.append((agent, version, []))
        segments[-1][2].append((float(sts), float(dts), outcome, summary))

    def start_value(agent: str, sts: float, dts: float) -> float | None:
        if (agent, sts) in before:
            return before[(agent, sts)]
        rows = [v for ts, kind, v in eq.get(agent, ()) if kind == "decision" and ts == dts]
        return rows[0] if rows else None

    out = []
    for i, (agent, version, rows) in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        v0 = start_value(agent, rows[0][0], rows[0][1])
        if nxt is not None and nxt[0] == agent:
            v1 = start_value(agent, nxt[2][0][0], nxt[2][0][1])
        else:
            tail = eq.get(agent, [])
            v1 = tail[-1][2] if tail else None
        shares = []
        for _, _, _, s in rows:
            exp = s.get("exposure")
            if isinstance(exp, dict) and exp:
                shares.append(sum(1 for x in exp.values() if x > 1e-9) / len(exp))
        out.append(VersionFigures(
            agent=agent, version=version[:12], since=rows[0][0], until=rows[-1][0],
            bars=len(rows), ok=sum(1 for r in rows if r[2] == "ok"),
            failed=sum(1 for r in rows if r[2] == "invalid"),
            stock_failures=sum(len(r[3].get("failed") or {}) for r in rows),
            active=sum(shares) / len(shares) if shares else None,
            ret=(v1 / v0 - 1.0) if v0 and v1 is not None else None,
        ))
    return out


def load(fetchall: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
         ) -> dict[str, Any]:
    """Return ``{"versions": [...], "instability": {...} | None}`` read with ``fetchall``."""
    decisions = fetchall(DECISIONS_SQL, (f"%{MARKER}%",))
    # a version's figures need its decisions: without any, no fill or mark is read (every
    # report pays this section; a 1,000-agent store's equity rows cost a tenth of a second)
    fills, equity = ((fetchall(FILLS_SQL, ()), fetchall(EQUITY_SQL, ())) if decisions
                     else ([], []))
    try:
        latest = fetchall(INSTABILITY_SQL, ())
    except sqlite3.OperationalError:  # a database from before schema v6
        latest = []
    return assemble(decisions, fills, equity, latest)


async def load_async(fetchall: Callable[[str, Sequence[Any]],
                                        Awaitable[list[tuple[Any, ...]]]]) -> dict[str, Any]:
    """Return :func:`load` read with an async ``fetchall`` (the daemon's store, for the API)."""
    decisions = await fetchall(DECISIONS_SQL, (f"%{MARKER}%",))
    fills, equity = ((await fetchall(FILLS_SQL, ()), await fetchall(EQUITY_SQL, ()))
                     if decisions else ([], []))
    try:
        latest = await fetchall(INSTABILITY_SQL, ())
    except sqlite3.OperationalError:
        latest = []
    return assemble(decisions, fills, equity, latest)


def assemble(decisions: Sequence[Sequence[Any]], fills: Sequence[Sequence[Any]],
             equity: Sequence[Sequence[Any]], latest: Sequence[Sequence[Any]]
             ) -> dict[str, Any]:
    """Return the section's data from the rows of the four queries."""
    versions = version_figures(decisions, fills, equity)
    instab = None
    if latest:
        instab = {"ts": latest[0][0], **json.loads(latest[0][1])}
    return {"versions": [asdict(v) for v in versions], "instability": instab}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.2f}%"


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else (x if isinstance(x, str) else fmt.format(x))


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def text_section(data: dict[str, Any]) -> str:
    """Return the report's AlphaForgeBench section from :func:`load` of a store ("" when it has
    none)."""
    lines: list[str] = []
    if data["versions"]:
        lines += ["", "AlphaForgeBench strategy versions (live results per version)",
                  f"{'agent':<16} {'version':<12} {'from':<10} {'to':<10} {'bars':>4} "
                  f"{'ok':>4} {'fail':>4} {'stock-fail':>10} {'active':>7} {'return':>9}"]
        for v in data["versions"]:
            lines.append(
                f"{v['agent'][:16]:<16} {v['version']:<12} {_day(v['since']):<10} "
                f"{_day(v['until']):<10} {v['bars']:>4} {v['ok']:>4} {v['failed']:>4} "
                f"{v['stock_failures']:>10} {_num(v['active'], '{:.0%}'):>7} "
                f"{_pct(v['ret']):>9}")
    ins = data["instability"]
    if ins:
        lines += ["", f"AlphaForgeBench instability ({ins['repeats']} generations per model,"
                  f" {ins['bars']} bars x {len(ins['assets'])} stocks, input"
                  f" {ins['input_sha256'][:12]})",
                  f"{'T':<5} {'agent':<16} {'valid':>5} {'agree':>6} {'disagr':>6} "
                  f"{'jaccard':>7} {'return':>9} {'std':>7} {'versions':>8}"]
        for temp, block in ins["temperatures"].items():
            for agent, m in block["models"].items():
                lines.append(
                    f"{temp:<5} {agent[:16]:<16} {m['valid']:>2}/{m['asked']:<2} "
                    f"{_num(m.get('pairwise_agreement')):>6} "
                    f"{_num(m.get('disagreement_steps')):>6} "
                    f"{_num(m.get('active_jaccard')):>7} {_pct(m.get('mean_return')):>9} "
                    f"{_num(m.get('std_return'), '{:.2%}'):>7} "
                    f"{m.get('distinct_versions', 0):>8}")
            lines.append(f"{temp:<5} SNR (spread between models / within-model std):"
                         f" {_num(block.get('snr'))}")
        for agent, pairs in (ins.get("temperature_agreement") or {}).items():
            for pair, x in pairs.items():
                lines.append(f"temperature agreement {agent} (T {pair}): {_num(x)}")
    return "\n".join(lines) + ("\n" if lines else "")


#: Per-run audit data of an instability run: kept in the database and ``/api/alphaforge``,
#: left out of the board (``report --json``, ``/api/leaderboard``) to keep it small.
AUDIT_KEYS = ("run_signals", "run_active", "codes")


def board_section(fetchall: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
                  ) -> dict[str, Any] | None:
    """Return the board's ``alphaforge`` key: :func:`load` without the per-run audit data,
    or ``None`` when the store has neither versions nor an instability run."""
    data = load(fetchall)
    if not data["versions"] and not data["instability"]:
        return None
    ins = data["instability"]
    for block in (ins or {}).get("temperatures", {}).values():
        for m in block.get("models", {}).values():
            for key in AUDIT_KEYS:
                m.pop(key, None)
    return data


def html_section(data: dict[str, Any] | None) -> str:
    """Return the HTML of the board's ``alphaforge`` key (``""`` without one)."""
    if not data:
        return ""
    esc = html.escape
    out: list[str] = []
    if data.get("versions"):
        out.append("<section class='alphaforge'><h2>AlphaForgeBench strategy versions</h2>"
                   "<p class='note'>Live results per strategy version (SHA-256 prefix): bars "
                   "run, applied (ok), failed as a whole, stock-level failures, mean share of "
                   "stocks held, and the version's return.</p><table><tr>"
                   + "".join(f"<th{' class=l' if h in ('agent', 'version', 'from', 'to') else ''}"
                             f">{h}</th>" for h in ("agent", "version", "from", "to", "bars",
                                                    "ok", "fail", "stock-fail", "active",
                                                    "return"))
                   + "</tr>")
        for v in data["versions"]:
            out.append(
                f"<tr><td class='l'>{esc(v['agent'])}</td><td class='l'><code>"
                f"{esc(v['version'])}</code></td><td class='l'>{_day(v['since'])}</td>"
                f"<td class='l'>{_day(v['until'])}</td><td>{v['bars']}</td><td>{v['ok']}</td>"
                f"<td>{v['failed']}</td><td>{v['stock_failures']}</td>"
                f"<td>{esc(_num(v['active'], '{:.0%}'))}</td><td>{esc(_pct(v['ret']))}</td>"
                "</tr>")
        out.append("</table></section>")
    ins = data.get("instability")
    if ins:
        out.append(
            f"<section class='alphaforge-instability'><h2>AlphaForgeBench instability</h2>"
            f"<p class='note'>{esc(str(ins.get('repeats')))} generations per model on the "
            f"frozen input <code>{esc(str(ins.get('input_sha256', ''))[:12])}</code> "
            f"({esc(str(ins.get('bars')))} bars x {len(ins.get('assets') or [])} stocks): "
            "pairwise agreement of signals, share of disagreement steps, Jaccard of active "
            "steps, mean and std of the runs' returns; SNR = spread between models / mean "
            "within-model std.</p><table><tr><th class='l'>T</th><th class='l'>agent</th>"
            "<th>valid</th><th>agree</th><th>disagree</th><th>Jaccard</th><th>return</th>"
            "<th>std</th><th>versions</th></tr>")
        for temp, block in (ins.get("temperatures") or {}).items():
            for agent, m in (block.get("models") or {}).items():
                out.append(
                    f"<tr><td class='l'>{esc(temp)}</td><td class='l'>{esc(agent)}</td>"
                    f"<td>{m.get('valid')}/{m.get('asked')}</td>"
                    f"<td>{esc(_num(m.get('pairwise_agreement')))}</td>"
                    f"<td>{esc(_num(m.get('disagreement_steps')))}</td>"
                    f"<td>{esc(_num(m.get('active_jaccard')))}</td>"
                    f"<td>{esc(_pct(m.get('mean_return')))}</td>"
                    f"<td>{esc(_num(m.get('std_return'), '{:.2%}'))}</td>"
                    f"<td>{m.get('distinct_versions', 0)}</td></tr>")
            out.append(f"<tr><td class='l'>{esc(temp)}</td><td class='l' colspan='8'>SNR: "
                       f"{esc(_num(block.get('snr')))}</td></tr>")
        for agent, pairs in (ins.get("temperature_agreement") or {}).items():
            for pair, x in pairs.items():
                out.append(f"<tr><td class='l'>{esc(pair)}</td><td class='l' colspan='8'>"
                           f"temperature agreement {esc(agent)}: {esc(_num(x))}</td></tr>")
        out.append("</table></section>")
    return "".join(out)
