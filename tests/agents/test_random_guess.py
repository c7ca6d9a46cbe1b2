"""The seeded random-guess baseline (issue 29, point 4)."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.base import CASH
from agents.baselines import RandomGuess
from agents.config import AgentConfig
from agents.factory import build_agent
from agents.validation import validate_allocation
from tests.agents.test_llm_agent import equity_obs, poly_obs

ROOT = Path(__file__).resolve().parents[2]


async def test_a_decision_is_a_function_of_seed_id_and_time() -> None:
    obs = equity_obs()
    a = await RandomGuess("rg", seed=7).decide(obs)
    assert a.allocation == (await RandomGuess("rg", seed=7).decide(obs)).allocation
    assert a.allocation != (await RandomGuess("rg", seed=8).decide(obs)).allocation
    assert a.allocation != (await RandomGuess("rg2", seed=7).decide(obs)).allocation
    later = dataclasses.replace(obs, decision_ts=obs.decision_ts + 60)
    assert a.allocation != (await RandomGuess("rg", seed=7).decide(later)).allocation
    assert a.allocation is not None
    assert set(a.allocation) == {*[x for x in obs.assets if x in obs.prices], CASH}
    assert sum(a.allocation.values()) == pytest.approx(1.0, abs=1e-12)
    valid = validate_allocation(a.allocation, obs)
    assert {k: valid[k] for k in a.allocation} == pytest.approx(a.allocation)
    assert a.reasoning == "random guess (seed 7)"


async def test_weights_are_uniform_over_the_simplex() -> None:
    # A flat Dirichlet over K parts: each part is Beta(1, K - 1), P(w > x) = (1 - x)^(K - 1).
    obs = equity_obs()
    k = len([x for x in obs.assets if x in obs.prices]) + 1
    agent = RandomGuess("rg", seed=1)
    draws = []
    for i in range(3000):
        d = await agent.decide(dataclasses.replace(obs, decision_ts=obs.decision_ts + i))
        assert d.allocation is not None
        draws.append(d.allocation[CASH])
    n = len(draws)
    for x in (0.05, 0.2, 0.4):
        want = (1.0 - x) ** (k - 1)
        got = sum(1 for w in draws if w > x) / n
        assert abs(got - want) < 4.0 * (want * (1.0 - want) / n) ** 0.5 + 1e-3, (x, got, want)
    assert sum(draws) / n == pytest.approx(1.0 / k, abs=4.0 * (1.0 / k) / n ** 0.5)


async def test_on_polymarket_one_side_per_question() -> None:
    obs = poly_obs()
    sides = set()
    for i in range(40):
        d = await RandomGuess("rg").decide(dataclasses.replace(obs, decision_ts=obs.decision_ts
                                                               + i))
        assert d.allocation is not None
        for q in obs.questions:
            held = [t for t in (q.yes, q.no) if t in d.allocation]
            assert len(held) == 1
            sides.add(held[0])
        validate_allocation(d.allocation, obs)
    assert sides == set(obs.assets)  # both sides of both questions come up


def test_config() -> None:
    cfg = AgentConfig(id="rg", kind="random_guess", seed=3)
    agent = build_agent(cfg)
    assert isinstance(agent, RandomGuess) and agent.seed == 3
    with pytest.raises(ValidationError, match="seed"):
        AgentConfig(id="rg", kind="random_guess", seed=-1)


async def test_a_replay_repeats_every_guess(tmp_path: Path) -> None:
    from daemon.app.replay import replay
    from daemon.config.settings import parse_config

    cfg = parse_config({"markets": {"polymarket": {"enabled": False}},
                        "agents": [{"id": "rg", "kind": "random_guess", "seed": 5}]})
    rows = []
    for name in ("a.db", "b.db"):
        await replay(ROOT / "examples" / "sample.jsonl.gz", cfg, tmp_path / name, progress=False)
        con = sqlite3.connect(tmp_path / name)
        rows.append(con.execute("SELECT scheduled_ts, outcome, allocation_json FROM decisions"
                                " ORDER BY scheduled_ts").fetchall())
        con.close()
    assert rows[0] == rows[1] and len(rows[0]) >= 2
    assert {r[1] for r in rows[0]} == {"ok"}
    assert len({r[2] for r in rows[0]}) == len(rows[0])  # a new guess each time
