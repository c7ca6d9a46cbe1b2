"""CapitalBench rounds in the daemon: freeze, collect one call per model, store the prices.

The engine runs one scheduler job per configured track (``capital:weekly``, ``capital:monthly``;
:class:`agents.capitalbench.rounds.TrackTrigger`: the first NYSE session of each week or month at
the track's time) and calls :meth:`CapitalRunner.on_mark` after each equity daily mark. A round:

1. is planned and frozen (:mod:`agents.capitalbench.rounds`) before any model is called; the round
   row is stored with the SHA-256 of its ``hashes.json``, and the briefing's text, once per
   content, in ``capital_briefings`` (named by its SHA-256 in the round's manifest,
   ``briefing_sha256``: a bundle replays the round without the file);
2. asks every ``protocol = "capitalbench"`` agent once (the official run ``official``) and, when
   the track asks for it, ``consistency_repeats`` more times (run ``consistency``, never
   official); every submission, valid or not, is stored with every raw answer and written to
   ``runs/<run_id>/<agent>[-<replicate>].json``. A submission finishing after the deadline is
   stored as ``late`` and never scored;
3. stores the options' and the benchmark's closes of the start session once it has closed, and
   of the end session after the end rule; the round is then ``resolved`` and scored from these
   stored prices (:mod:`agents.capitalbench.scores`), its results written to
   ``runs/official/results.json``.

A round whose fire time was missed (daemon down) is not run late. The closes come from the
engine's daily closes (:class:`daemon.market.state.MarketState`): an option must be in the equity
universe to have prices. With ``[capitalbench] adjusted_closes`` (live only; a replay uses the
recording's closes) they are Yahoo's dividend-adjusted closes instead
(:meth:`CapitalRunner.adjusted`): the trailing table's are fetched at the freeze (a failed fetch:
the round is not frozen) and stored with the round (``trailing_json``: a replay freezes it again
from them), and the start and end closes are fetched together once the end
session has closed, on one post-window basis (a failed fetch: the round stays unresolved and
the next daily mark tries again).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import structlog

from agents.capitalbench.agent import CapitalBenchAgent, Rules, SubmissionResult
from agents.capitalbench.config import CapitalBenchConfig
from agents.capitalbench.rounds import (
    HASHES,
    NY,
    RUNS,
    WINDOWS,
    RoundConflict,
    RoundPlan,
    TrackTrigger,
    freeze_round,
    load_manifest,
    plan_round,
    round_files,
    sha256,
    write_round_file,
)
from agents.config import AgentConfig
from agents.host import Now, PriceHistory, StoreAccess
from agents.stepwise import load_prompt_set
from feeds.daily_bars import HistoryError, HistoryWindow
from feeds.history_recording import fetch_daily_bars
from feeds.yahoo import YahooSettings

log = structlog.get_logger(__name__)

OFFICIAL, CONSISTENCY = "official", "consistency"
#: Calendar days of daily closes the runner keeps (the trailing table's 1 y window and margin).
KEEP_DAYS = 400


class CapitalConfig(Protocol):
    """The parts of the daemon's config the runner reads."""

    @property
    def capitalbench(self) -> CapitalBenchConfig | None:
        """Return the ``[capitalbench]`` section."""
        ...

    @property
    def agents(self) -> Sequence[AgentConfig]:
        """Return every configured agent."""
        ...

    @property
    def sources(self) -> _Sources:
        """Return the sources (``adjusted_closes`` reads Yahoo's chart history settings)."""
        ...


class CapitalHost(Protocol):
    """What the runner needs from its engine (:class:`daemon.engine.engine.Engine` is one)."""

    @property
    def config(self) -> CapitalConfig:
        """Return the daemon's config."""
        ...

    @property
    def clock(self) -> Now:
        """Return the daemon's clock."""
        ...

    @property
    def store(self) -> StoreAccess:
        """Return the daemon's store."""
        ...

    @property
    def state(self) -> PriceHistory:
        """Return the market state (its daily closes)."""
        ...


class _Equity(Protocol):
    @property
    def yahoo(self) -> YahooSettings:
        """Return the Yahoo settings (the chart history's URL and limits)."""
        ...


class _Sources(Protocol):
    @property
    def equity(self) -> _Equity:
        """Return the equity sources."""
        ...


#: Build an agent from its config (the engine passes :func:`agents.factory.build_agent` bound
#: to its clock; the runner does not import the factory, which knows every protocol).
BuildAgent = Callable[[AgentConfig], Any]


def capital_agent_configs(config: CapitalConfig) -> list[AgentConfig]:
    """Return the configured agents following the ``capitalbench`` protocol."""
    return [a for a in config.agents if a.protocol == "capitalbench"]


def _day(ts: float) -> date:
    return datetime.fromtimestamp(ts, NY).date()


class CapitalRunner:
    """Run the CapitalBench tracks of one engine (see the module doc)."""

    def __init__(self, host: CapitalHost, build: BuildAgent | None = None, *,
                 retrospective: bool = False) -> None:
        """Attach to ``host``; the agents are built with ``build`` on first use.

        ``retrospective``: the host replays history (a simulated clock), so every round it
        freezes is built from history and marked so in its manifest.
        """
        assert host.config.capitalbench is not None
        self.host = host
        self.retrospective = retrospective
        self._build = build
        self.cap: CapitalBenchConfig = host.config.capitalbench
        self._agents: dict[str, CapitalBenchAgent] | None = None
        self._daily: dict[str, dict[str, float]] = {}
        """Option / benchmark -> NY day (ISO) -> close: a year of them (the trailing table)."""
        self.name_briefing = True
        """Whether a new round's manifest names its briefing's SHA-256 (a bundle replay of a
        round stored before schema v17 freezes it without, as it was)."""

    @property
    def agents(self) -> dict[str, CapitalBenchAgent]:
        """Return agent id -> agent (built once)."""
        if self._agents is None:
            if self._build is None:
                raise RuntimeError("CapitalRunner was given no agent builder")
            built = {}
            own = getattr(self.host, "agent_ids", None)  # split roles: this evaluator's only
            for acfg in capital_agent_configs(self.host.config):
                if own is not None and acfg.id not in own:
                    continue
                agent = self._build(acfg)
                assert isinstance(agent, CapitalBenchAgent)
                built[acfg.id] = agent
            self._agents = built
        return self._agents

    def reload(self) -> None:
        """Rebuild the agents from the host's (reloaded) config on next use."""
        self._agents = None

    def triggers(self) -> list[tuple[str, TrackTrigger]]:
        """Return (job id, trigger) of every track."""
        return [(f"capital:{t.kind}", TrackTrigger(t.kind, t.at)) for t in self.cap.tracks]

    # -- rounds ---------------------------------------------------------------------------------
    async def on_job(self, track: str, fire_ts: float, missed: bool) -> str | None:
        """Freeze and collect the round of ``track`` fired at ``fire_ts``; return its id."""
        if missed:
            log.warning("capitalbench round missed (not run late)", track=track, fire_ts=fire_ts)
            return None
        plan = plan_round(track, fire_ts, self.cap.collect_window)
        store = self.host.store
        done = await store.fetchall("SELECT status, manifest_json FROM capital_rounds WHERE"
                                    " round_id=?", (plan.round_id,))
        if done and done[0][0] != "frozen":
            return plan.round_id  # collected before a restart
        # a round stored before v17 (frozen again at a restart) is frozen as it was
        named = self.name_briefing if not done else "briefing_sha256" in json.loads(done[0][1])
        try:
            trailing = await self.trailing_closes(plan)
            name, briefing = self.read_briefing()
            rdir = self.freeze(plan, trailing, briefing=briefing, name_briefing=named)
        except (OSError, UnicodeDecodeError, RoundConflict, KeyError, ValueError,
                HistoryError) as exc:
            log.error("capitalbench round not frozen; no model called", round=plan.round_id,
                      error=str(exc))
            return None
        manifest = json.dumps(load_manifest(rdir), sort_keys=True)  # the store keeps JSON
        if not done:
            # the briefing's text once per content (a bundle replays without the file), then
            # the round, chained as frozen; the status (and later the prices) as its first state
            await store.execute_atomic([], appends=[
                ("capital_briefings", [(sha256(briefing), name, briefing.decode("utf-8"))]),
                ("capital_rounds", [(
                    plan.round_id, track, plan.freeze_ts, plan.deadline_ts,
                    plan.start_day.isoformat(), plan.start_ts, plan.end_day.isoformat(),
                    plan.end_ts, str(rdir), manifest, sha256((rdir / HASHES).read_bytes()),
                    None if trailing is None else trailing_json(trailing))])],
                states=[plan.round_id])
        log.info("capitalbench round frozen", round=plan.round_id, dir=str(rdir))
        await self.collect(plan, rdir)
        return plan.round_id

    def read_briefing(self) -> tuple[str, bytes]:
        """Return the briefing file's name and bytes (``UnicodeDecodeError``: not text)."""
        path = Path(self.cap.briefing)
        data = path.read_bytes()
        data.decode("utf-8")  # a briefing must be text
        return path.name, data

    def freeze(self, plan: RoundPlan,
               closes: Mapping[str, Sequence[tuple[date, float]]] | None = None, *,
               briefing: bytes | None = None, name_briefing: bool = False) -> Path:
        """Write the round package and its hashes (or re-use an identical one); ``closes``:
        the trailing table's (default: the kept daily closes); ``briefing``: its bytes (default:
        read from the file); ``name_briefing``: the manifest names the briefing's SHA-256."""
        cap = self.cap
        if briefing is None:
            briefing = self.read_briefing()[1]
        templates, version = load_prompt_set("capitalbench")
        if closes is None:
            closes = self.closes(plan.freeze_ts, cap.tickers)
        files = round_files(plan, cap, briefing, closes, templates["round"], version,
                            retrospective=self.retrospective,
                            adjusted=self.live_adjusted, name_briefing=name_briefing)
        return freeze_round(Path(cap.rounds_dir), files, plan.round_id)

    @property
    def live_adjusted(self) -> bool:
        """Return whether prices are fetched dividend-adjusted (the setting, never in a replay)."""
        return self.cap.adjusted_closes and not self.retrospective

    async def adjusted(self, first: date, last: date, assets: Sequence[str]
                       ) -> dict[str, dict[date, float]]:
        """Return Yahoo's dividend-adjusted closes (``adjclose``) of ``assets`` by session day in
        ``[first, last]``; raise :class:`HistoryError` (one line) when they cannot be had."""
        bars = await fetch_daily_bars(self.host.config.sources.equity.yahoo, list(assets),
                                      HistoryWindow.of(first, last), dividends=True)
        return {a: {d: b.close for d, b in days.items()} for a, days in bars.items()}

    async def trailing_closes(self, plan: RoundPlan
                              ) -> dict[str, list[tuple[date, float]]] | None:
        """Return the adjusted closes of the trailing table (a year and a week before the
        freeze's eve), or None when prices are not fetched adjusted."""
        if not self.live_adjusted:
            return None
        asof = _day(plan.freeze_ts) - timedelta(days=1)
        got = await self.adjusted(asof - timedelta(days=WINDOWS[-1][1] + 7), asof,
                                  self.cap.tickers)
        return {a: sorted(days.items()) for a, days in got.items()}

    def closes(self, before: float, assets: Sequence[str]) -> dict[str, list[tuple[date, float]]]:
        """Return each asset's daily closes of sessions completed before ``before``'s day: the
        runner's own year of them (:meth:`on_daily_closes`) updated from the market state."""
        self.on_daily_closes(before)
        today = _day(before).isoformat()
        return {a: [(date.fromisoformat(d), p) for d, p in sorted(self._daily[a].items())
                    if d < today]
                for a in assets if a in self._daily}

    def on_daily_closes(self, ts: float) -> None:
        """Keep the closes of sessions completed before ``ts``'s day of every option and the
        benchmark: the market state holds about 30 sessions, the trailing table needs a year
        (``KEEP_DAYS``); called at every daily mark and before a freeze."""
        today = _day(ts)
        hist = self.host.state.history.get("equity", {})
        for a in (*self.cap.tickers, self.cap.benchmark):
            h = hist.get(a)
            if h is None:
                continue
            points = [(p.ts, p.price) for p in h.closes] + ([h.last] if h.last else [])
            known = self._daily.setdefault(a, {})
            for t, price in sorted(points):
                if _day(t) < today:
                    known[_day(t).isoformat()] = price
            oldest = (today - timedelta(days=KEEP_DAYS)).isoformat()
            for d in [d for d in known if d < oldest]:
                del known[d]

    def state(self) -> dict[str, Any]:
        """Return the kept closes (JSON-ready, for the engine's checkpoint)."""
        return {a: dict(sorted(days.items())) for a, days in sorted(self._daily.items())}

    def restore(self, st: Mapping[str, Any]) -> None:
        """Load closes kept by :meth:`state` (a restart, a resumed replay)."""
        for a, days in st.items():
            self._daily.setdefault(str(a), {}).update(
                {str(d): float(p) for d, p in dict(days).items()})

    def close_on(self, day: date, assets: Sequence[str]) -> dict[str, float]:
        """Return the close of every asset that traded on ``day`` (last regular price)."""
        hist = self.host.state.history.get("equity", {})
        out = {}
        for a in assets:
            h = hist.get(a)
            if h is None:
                continue
            for ts, price in [(p.ts, p.price) for p in h.closes] + ([h.last] if h.last else []):
                if _day(ts) == day:
                    out[a] = price
        return out

    async def collect(self, plan: RoundPlan, rdir: Path) -> None:
        """Ask every agent (official run, then the track's consistency repeats); store all."""
        await self.restore_usage(self.host.clock.now())
        prompt = (rdir / "prompt.md").read_text("utf-8")
        manifest = load_manifest(rdir)
        rules = Rules(self.cap.option_ids, manifest["submission_format"],
                      int(manifest["max_holdings"]), int(manifest["increment_pct"]))
        version = str(manifest["prompt_version"])
        track = next(t for t in self.cap.tracks if t.kind == plan.track)
        agents = self.agents
        runs = [(OFFICIAL, 1)] + [(CONSISTENCY, k) for k in
                                  range(1, track.consistency_repeats + 1)]
        rows: list[tuple[Any, ...]] = []
        for run_id, rep in runs:
            now = self.host.clock.now()
            results = await asyncio.gather(*(
                a.submit(prompt, rules, now, version) for a in agents.values()))
            done_ts = self.host.clock.now()
            for (agent_id, agent), res in zip(agents.items(), results, strict=True):
                if res.outcome == "ok" and done_ts > plan.deadline_ts:
                    res = SubmissionResult("late", "answered after the round's deadline",
                                           res.submission, res.calls, res.raw_responses,
                                           res.usage, res.template_version)
                rows.append(self._row(plan, run_id, rep, agent_id, agent.cfg.model or "",
                                      done_ts, res))
                count = track.consistency_repeats if run_id == CONSISTENCY else 1
                self._write_run_file(rdir, plan.round_id, run_id, (rep, count), agent_id,
                                     agent.cfg.model or "", res)
        await self.host.store.execute_atomic(
            [("UPDATE capital_rounds SET status='collected' WHERE round_id=?", (plan.round_id,))],
            appends=[("capital_submissions", rows)], states=[plan.round_id])
        log.info("capitalbench round collected", round=plan.round_id, agents=len(agents),
                 runs=len(runs))

    async def restore_usage(self, now: float) -> None:
        """Set each agent's spend of ``now``'s UTC day from its stored submissions (after a
        restart the daily budget counts what was spent before it)."""
        from agents.llm import utc_day

        day = utc_day(now)
        lo = datetime.fromisoformat(day + "T00:00:00+00:00").timestamp()
        rows = await self.host.store.fetchall(
            "SELECT agent, SUM(tokens_in + tokens_out), SUM(cost_usd) FROM capital_submissions"
            " WHERE ts >= ? AND ts < ? GROUP BY agent", (lo, lo + 86_400.0))
        spent = {a: (int(t or 0), float(c or 0.0)) for a, t, c in rows}
        for agent_id, agent in self.agents.items():
            agent.restore_usage(day, *spent.get(agent_id, (0, 0.0)))

    @staticmethod
    def _row(plan: RoundPlan, run_id: str, rep: int, agent_id: str, model: str, ts: float,
             res: SubmissionResult) -> tuple[Any, ...]:
        sub = res.submission
        usage = res.usage
        # capital_submissions' columns, in chain order (daemon.store.integrity.chain.STREAMS)
        return (plan.round_id, run_id, agent_id, rep, int(run_id == OFFICIAL), ts, model,
                res.outcome, res.reason,
                None if sub is None or res.outcome != "ok" else _dumps(dict(sub.holdings)),
                None if sub is None else _dumps(sub.to_json()),
                _dumps(list(res.raw_responses)), _dumps([dict(c) for c in res.calls]),
                int(usage.get("tokens_in", 0)), int(usage.get("tokens_out", 0)),
                float(usage.get("cost_usd", 0.0)), res.template_version)

    @staticmethod
    def _write_run_file(rdir: Path, round_id: str, run_id: str, replicate: tuple[int, int],
                        agent_id: str, model: str, res: SubmissionResult) -> None:
        rep, count = replicate
        name = agent_id if run_id == OFFICIAL else f"{agent_id}-{rep}"
        data = _dumps({
            "round_id": round_id, "agent": agent_id, "model": model, "run_id": run_id,
            "run_type": run_id, "mode": "closed_capability", "replicate_index": rep,
            "replicate_count": count, "is_official_score": run_id == OFFICIAL,
            "outcome": res.outcome,
            "reason": res.reason,
            "submission": None if res.submission is None else res.submission.to_json(),
            "raw_responses": list(res.raw_responses), "calls": [dict(c) for c in res.calls],
        }, indent=2) + "\n"
        try:  # never through a link planted in the round (the store holds the record)
            write_round_file(rdir, f"{RUNS}/{run_id}/{name}.json", data.encode("utf-8"))
        except (OSError, RoundConflict) as exc:
            log.warning("capitalbench run file not written", round=round_id, agent=agent_id,
                        error=str(exc))

    # -- prices ---------------------------------------------------------------------------------
    async def on_mark(self, ts: float) -> None:
        """Store the start and end closes of every round whose session has closed by ``ts``."""
        self.on_daily_closes(ts)
        store = self.host.store
        rows = await store.fetchall(
            "SELECT round_id, start_day, start_ts, end_day, end_ts, dir, start_prices_json,"
            " end_prices_json FROM capital_rounds WHERE status != 'resolved' ORDER BY round_id")
        assets = [*self.cap.tickers, self.cap.benchmark]
        writes: list[tuple[str, Sequence[Any]]] = []
        resolved = []
        for rid, sday, sts, eday, ets, rdir, sp, ep in rows:
            if sp is None and ts >= sts:
                prices = self.close_on(date.fromisoformat(sday), assets)
                writes.append(("UPDATE capital_rounds SET start_prices_json=?, status='started'"
                               " WHERE round_id=?", (_dumps(prices), rid)))
            if ep is None and ts >= ets and self.live_adjusted:
                first, last = date.fromisoformat(sday), date.fromisoformat(eday)
                try:  # both closes together, after the window (the paper's refresh)
                    got = await self.adjusted(first, last, assets)
                except HistoryError as exc:
                    log.warning("capitalbench adjusted closes not fetched; the round stays"
                                " unresolved until the next daily mark", round=rid,
                                error=str(exc))
                    continue
                start = {a: days[first] for a, days in got.items() if first in days}
                end = {a: days[last] for a, days in got.items() if last in days}
                lacking = sorted(a for a in assets if a not in start or a not in end)
                if lacking:  # the paper's rule: rows matching both dates, or no scoring
                    log.warning("capitalbench adjusted closes lack the start or end session;"
                                " the round stays unresolved until the next daily mark",
                                round=rid, assets=",".join(lacking)[:200])
                    continue
                writes.append(("UPDATE capital_rounds SET start_prices_json=?,"
                               " end_prices_json=?, status='resolved' WHERE round_id=?",
                               (_dumps(start), _dumps(end), rid)))
                resolved.append((rid, rdir))
            elif ep is None and ts >= ets:
                prices = self.close_on(date.fromisoformat(eday), assets)
                writes.append(("UPDATE capital_rounds SET end_prices_json=?, status='resolved'"
                               " WHERE round_id=?", (_dumps(prices), rid)))
                resolved.append((rid, rdir))
        if not writes:
            return
        # each changed round's status and prices, appended to its chained states
        await store.execute_atomic(writes, states=[p[-1] for _, p in writes])
        for rid, rdir in resolved:
            log.info("capitalbench round resolved", round=rid)
            self._write_results(rid, Path(rdir))

    def _write_results(self, round_id: str, rdir: Path) -> None:
        """Write the scored official results of a resolved round next to its run files."""
        from agents.capitalbench.scores import score_round_db

        try:
            results = score_round_db(self.host.store.path, round_id)
            write_round_file(rdir, f"{RUNS}/{OFFICIAL}/results.json",
                             (_dumps(results, indent=2) + "\n").encode("utf-8"))
        except Exception as exc:  # the stored prices are the record; the file is a copy
            log.warning("capitalbench results file not written", round=round_id,
                        error=str(exc))


def trailing_json(closes: Mapping[str, Sequence[tuple[date, float]]]) -> str:
    """Return the trailing table's closes as stored with their round (``trailing_json``)."""
    return json.dumps({a: [[d.isoformat(), p] for d, p in days] for a, days in closes.items()},
                      ensure_ascii=False)  # in the fetched order


def trailing_from_json(text: str) -> dict[str, list[tuple[date, float]]]:
    """Return the closes :func:`trailing_json` stored."""
    return {str(a): [(date.fromisoformat(d), float(p)) for d, p in days]
            for a, days in json.loads(text).items()}


def _dumps(obj: Any, indent: int | None = None) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=indent)
