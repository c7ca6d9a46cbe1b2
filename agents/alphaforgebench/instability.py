"""Repeated AlphaForgeBench strategy generations on one frozen input (issue 14, point 7).

``paperarena alphaforge-instability --config F --recording R --db D`` asks every ``protocol =
"alphaforgebench"`` agent of the config for ``--repeats`` strategies (5, as in the paper) at each
temperature (0 and 0.7), each from the identical prompt, runs every strategy in the sandbox over the
same frozen daily bars (the daily closes of the recording's equities: the last price of each asset
per UTC day, with the recorded open, high, low and volume when the recording has OHLCV bars),
and measures how the runs of one model agree
(:mod:`agents.alphaforgebench.instability_stats`): pairwise agreement of signals, the share of
disagreement steps, the step-wise agreement (the Jaccard similarity of the runs' actions at each
bar), the Jaccard index of the active steps, the agreement of the majority signals between two
temperatures, and, across models, the SNR of the runs' Sharpe ratios. The result is printed as
JSON and stored in ``instability_runs`` (schema v6); the report and ``/api/alphaforge`` show the
latest.

A generation that fails (no valid code after ``max_attempts``) is counted and left out of the
figures; a step where the strategy failed counts as signal 0 (the position is held).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

import structlog

from agents.alphaforgebench import instability_stats as ins
from agents.alphaforgebench.agent import AlphaForgeAgent, StrategyCode, check_strategy
from agents.alphaforgebench.sandbox import SandboxError, SandboxLimits, StrategyWorker, check_result
from agents.base import Observation
from agents.config import AgentConfig
from agents.llm import DecisionRun
from feeds.daily_bars import Bar, bar_problem

log = structlog.get_logger(__name__)

DEFAULT_TEMPERATURES = (0.0, 0.7)
#: One-way cost per unit traded of the frozen backtest: 0, frictionless, as the paper's
#: instability study ("transaction costs are set to zero", Sec. C) and backtest (Table 9).
COST = 0.0


#: The recorded bar columns beside the closes (history recordings with OHLCV).
OHLV = ("open", "high", "low", "volume")


class InstabilityError(ValueError):
    """The run cannot start (one line)."""


def frozen_bars(recording: str | Path, assets: Sequence[str], sessions: int | None = None
                ) -> dict[str, dict[str, list[Any]]]:
    """Return ``{asset: {"ts": [...], "close": [...]}}``: the last equity price per UTC day.

    When the recording has daily OHLCV bars (``BarEvent``, a history recording), each asset
    also gets ``open``/``high``/``low``/``volume`` lists, the day's recorded bar (``None``
    where it has none); without bars the frames are the closes only, as before.
    """
    from daemon.core.events import BarEvent, PriceEvent
    from feeds.recording import iter_events

    wanted = set(assets)
    last: dict[str, dict[str, tuple[float, float]]] = {}
    recorded: dict[str, dict[str, BarEvent]] = {}
    for _, ev in iter_events(recording):
        if (type(ev) is PriceEvent and ev.market == "equity" and ev.asset in wanted
                and math.isfinite(ev.price) and ev.price > 0):
            day = datetime.fromtimestamp(ev.ts, UTC).strftime("%Y-%m-%d")
            per = last.setdefault(ev.asset, {})
            if day not in per or ev.ts >= per[day][0]:
                per[day] = (ev.ts, ev.price)
        elif isinstance(ev, BarEvent) and ev.asset in wanted and bar_problem(
                Bar(ev.ts, ev.open, ev.close, ev.high, ev.low, ev.volume)) is None:
            recorded.setdefault(ev.asset, {})[
                datetime.fromtimestamp(ev.ts, UTC).strftime("%Y-%m-%d")] = ev
    days = sorted({d for per in last.values() for d in per})
    full = [a for a in sorted(last) if len(last[a]) == len(days)]  # the same steps for all
    if sessions is not None:
        days = days[-sessions:]
    out: dict[str, dict[str, list[Any]]] = {
        a: {"ts": [last[a][d][0] for d in days], "close": [last[a][d][1] for d in days]}
        for a in full}
    if not out or len(days) < 2:
        raise InstabilityError(f"{recording}: fewer than two daily bars of a configured equity")
    if recorded:
        for a, frame in out.items():
            got = [recorded.get(a, {}).get(d) for d in days]
            for k in OHLV:
                frame[k] = [None if b is None else getattr(b, k) for b in got]
    return out


def input_sha256(bars: dict[str, dict[str, list[float]]]) -> str:
    """Return the SHA-256 of the frozen bars' canonical JSON."""
    return hashlib.sha256(json.dumps(bars, sort_keys=True, separators=(",", ":")).encode()
                          ).hexdigest()


async def execute(code: str, bars: dict[str, dict[str, list[float]]], lookback: int,
                  limits: SandboxLimits) -> dict[str, Any]:
    """Run ``code`` over every bar; return per-asset signals, positions and failures."""
    assets = sorted(bars)
    n = len(bars[assets[0]]["ts"])
    sig = {a: [0] * n for a in assets}
    pos = {a: [0.0] * n for a in assets}
    bad = {a: [False] * n for a in assets}
    failures = 0
    worker = StrategyWorker(code, limits)
    try:
        for t in range(n):
            lo = max(0, t + 1 - lookback)
            req = {a: {k: v[lo:t + 1] for k, v in bars[a].items()} for a in assets}
            try:
                raw = await worker.run_bar(req)
            except SandboxError:
                raw = {}
            for a in assets:
                try:
                    sig[a][t], pos[a][t] = check_result(raw.get(a))
                except ValueError:
                    bad[a][t] = True
                    failures += 1
    finally:
        await worker.close()
    return {"signals": sig, "positions": pos, "failed": bad, "failed_steps": failures}


def run_figures(bars: dict[str, dict[str, list[float]]], run: dict[str, Any]
                ) -> tuple[list[int], list[bool], float, float]:
    """Return (signals over all steps, active over all steps, backtest return, Sharpe ratio of
    the backtest's bar-to-bar returns) of one run."""
    assets = sorted(bars)
    signals: list[int] = []
    active: list[bool] = []
    held: list[list[float]] = []
    for a in assets:
        e = ins.exposures(run["signals"][a], run["positions"][a], run["failed"][a])
        held.append(e)
        signals.extend(0 if f else s for s, f in zip(run["signals"][a], run["failed"][a],
                                                      strict=True))
        active.extend(x > 0 for x in e)
    values = ins.backtest_values([bars[a]["close"] for a in assets], held, COST)
    return signals, active, values[-1] - 1.0, ins.run_sharpe(values)


def per_bar(series: Sequence[float], bars: int) -> list[float]:
    """Return the mean over the assets of an asset-major step series, per bar."""
    assets = len(series) // bars
    return [fmean(series[k * bars + t] for k in range(assets)) for t in range(bars)]


def summarise(runs: list[tuple[list[int], list[bool], float, float]], generated: int,
              asked: int, bars: int | None = None) -> dict[str, Any]:
    """Return one model's figures at one temperature (``bars``: steps per asset, for the
    step-wise agreement per bar; default: every step is one bar)."""
    out: dict[str, Any] = {"asked": asked, "valid": generated, "runs": len(runs)}
    if runs:
        returns = [r[2] for r in runs]
        out["returns"] = returns
        out["mean_return"] = fmean(returns)
        out["std_return"] = stdev(returns) if len(returns) > 1 else None
        sharpes = [r[3] for r in runs]
        out["sharpes"] = sharpes
        out["mean_sharpe"] = fmean(sharpes)
        out["std_sharpe"] = stdev(sharpes) if len(sharpes) > 1 else None
    if len(runs) >= 2:
        signals = [r[0] for r in runs]
        out["pairwise_agreement"] = ins.pairwise_agreement(signals)
        out["disagreement_steps"] = ins.disagreement_step_fraction(signals)
        steps = ins.stepwise_agreement(signals)
        out["stepwise_agreement"] = per_bar(steps, bars or len(steps))
        out["mean_stepwise_agreement"] = fmean(steps)
        out["active_jaccard"] = ins.active_jaccard([r[1] for r in runs])
    return out


async def generate(cfg: AgentConfig, temperature: float, obs: Observation, ohlcv: bool = False
                   ) -> tuple[StrategyCode | None, str, list[dict[str, Any]]]:
    """Ask ``cfg``'s model for one strategy at ``temperature``; return (code, prompt, calls)
    (``ohlcv``: the frames carry recorded bars, the prompt says so)."""
    agent = AlphaForgeAgent(cfg.model_copy(update={"temperature": temperature}))
    text, version = agent.render_strategy_prompt(ohlcv=ohlcv)
    run = agent.start(obs, version)
    if not isinstance(run, DecisionRun):
        return None, text, []
    step = await agent.run_step(run, "strategy", text, check_strategy,
                                dump=StrategyCode.to_json)
    calls = [dict(a.record) for a in run.attempts]
    return (step.parsed if step.ok else None), text, calls


async def run_instability(configs: Sequence[AgentConfig], assets: Sequence[str],
                          recording: str | Path, *, repeats: int = 5,
                          temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
                          sessions: int | None = None) -> dict[str, Any]:
    """Run the repeated generations of the ``alphaforgebench`` agents among ``configs`` over
    the daily bars of ``assets`` and return the result (see the module doc)."""
    agents = [a for a in configs if a.protocol == "alphaforgebench"]
    if not agents:
        raise InstabilityError("the config has no agent with protocol = 'alphaforgebench'")
    if repeats < 2:
        raise InstabilityError("--repeats must be at least 2")
    bars = frozen_bars(recording, assets, sessions)
    first = next(iter(bars.values()))
    last_ts = first["ts"][-1]
    obs = Observation(agent="instability", market="equity", decision_ts=last_ts,
                      assets=tuple(sorted(bars)), prices={}, history={}, holdings={},
                      cash=0.0, value=0.0, initial_value=0.0, weights={})
    result: dict[str, Any] = {
        "input_sha256": input_sha256(bars), "assets": sorted(bars), "bars": len(first["ts"]),
        "first_bar": first["ts"][0], "last_bar": last_ts, "repeats": repeats,
        "cost": COST, "temperatures": {},
    }
    prompts: set[str] = set()
    signals: dict[tuple[str, str], list[list[int]]] = {}
    for temp in temperatures:
        models: dict[str, Any] = {}
        for cfg in agents:
            s = cfg.strategy
            limits = SandboxLimits(memory_mb=s.memory_mb, cpu_s=s.cpu_seconds,
                                   timeout_s=s.timeout)
            runs = []
            versions = []
            codes: dict[str, str] = {}
            for k in range(repeats):
                code, prompt, _ = await generate(cfg, temp, obs, "high" in first)
                prompts.add(hashlib.sha256(prompt.encode()).hexdigest())
                if code is None:
                    log.info("instability.generation_failed", agent=cfg.id, temperature=temp,
                             run=k + 1)
                    continue
                versions.append(code.sha256)
                codes[code.sha256] = code.code
                executed = await execute(code.code, bars, s.lookback, limits)
                runs.append(run_figures(bars, executed))
            signals[(cfg.id, f"{temp:g}")] = [r[0] for r in runs]
            models[cfg.id] = {"model": cfg.model,
                              **summarise(runs, len(versions), repeats, len(first["ts"])),
                              "versions": versions,
                              "distinct_versions": len(set(versions)),
                              # kept for audit: each run's steps, and each version's code
                              "run_signals": [r[0] for r in runs],
                              "run_active": [[int(x) for x in r[1]] for r in runs],
                              "codes": codes}
        figures = {m: v["sharpes"] for m, v in models.items() if len(v.get("sharpes", [])) >= 2}
        snr = ins.snr(figures)
        result["temperatures"][f"{temp:g}"] = {
            "models": models, "snr": None if snr is None else (
                snr if math.isfinite(snr) else "inf")}
    result["temperature_agreement"] = temperature_agreements(agents, temperatures, signals)
    result["prompt_sha256"] = sorted(prompts)[0] if len(prompts) == 1 else sorted(prompts)
    return result


def temperature_agreements(agents: Sequence[AgentConfig], temperatures: Sequence[float],
                           signals: dict[tuple[str, str], list[list[int]]]
                           ) -> dict[str, dict[str, float]]:
    """Return ``{agent: {"T1/T2": agreement}}`` for every pair of temperatures with runs."""
    out: dict[str, dict[str, float]] = {}
    temps = [f"{t:g}" for t in temperatures]
    for cfg in agents:
        for i, t1 in enumerate(temps):
            for t2 in temps[i + 1:]:
                a, b = signals.get((cfg.id, t1)), signals.get((cfg.id, t2))
                if a and b:
                    out.setdefault(cfg.id, {})[f"{t1}/{t2}"] = ins.temperature_agreement(a, b)
    return out


#: The scope of a shared store that ``alphaforge-instability`` results go into.
INSTABILITY_SCOPE = "alphaforge-instability"

INSERT_SQL = ("INSERT INTO instability_runs(ts, input_sha256, prompt_sha256, repeats, result_json)"
              " VALUES(?,?,?,?,?)")


def instability_row(result: dict[str, Any], ts: float) -> tuple[str, tuple[Any, ...]]:
    """Return the statement storing ``result`` (made at ``ts``) in ``instability_runs``."""
    prompt = result.get("prompt_sha256")
    return INSERT_SQL, (ts, result["input_sha256"],
                        prompt if isinstance(prompt, str) else json.dumps(prompt),
                        result["repeats"], json.dumps(result, sort_keys=True))
