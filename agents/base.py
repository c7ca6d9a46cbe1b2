"""The Agent protocol, the observation an agent sees, and the decision it returns.

An observation holds nothing timestamped after its decision time: :func:`assert_no_lookahead`
checks it and the decision round calls it before every agent call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import msgspec

CASH = "CASH"


@dataclass(frozen=True, slots=True)
class PricePoint:
    """A price with the time it was observed at the source."""

    ts: float
    price: float


@dataclass(frozen=True, slots=True)
class NewsItem:
    """A news item as an agent sees it."""

    ts: float
    headline: str
    source: str = ""
    summary: str = ""
    url: str = ""


@dataclass(frozen=True, slots=True)
class Fundamentals:
    """A stock's fundamentals as observed at ``ts`` (normalised names, see feeds.fundamentals)."""

    ts: float
    metrics: Mapping[str, float]
    source: str = ""


@dataclass(frozen=True, slots=True)
class DailyBar:
    """One session's OHLCV bar as recorded (``ts``: the session's close, when it was complete).

    ``open`` and ``volume`` are ``None`` when the source did not report them.
    """

    ts: float
    day: str
    open: float | None
    high: float
    low: float
    close: float
    volume: float | None = None

    def to_list(self) -> list[Any]:
        """Return the compact JSON form ``[ts, day, open, high, low, close, volume]``."""
        return [self.ts, self.day, self.open, self.high, self.low, self.close, self.volume]

    @classmethod
    def from_list(cls, it: Any) -> DailyBar:
        """Inverse of :meth:`to_list`."""
        ts, day, o, h, lo, c, v = it
        return cls(float(ts), str(day), None if o is None else float(o), float(h), float(lo),
                   float(c), None if v is None else float(v))


@dataclass(frozen=True, slots=True)
class PastAllocation:
    """A past applied allocation with the cumulative return the account had reached then."""

    ts: float
    weights: Mapping[str, float]
    cumulative_return: float


@dataclass(frozen=True, slots=True)
class Question:
    """A Polymarket binary question with its two tradable tokens."""

    id: str
    question: str
    yes: str
    no: str


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything an agent may know at ``decision_ts`` for one market."""

    agent: str
    market: str
    decision_ts: float
    assets: tuple[str, ...]
    prices: Mapping[str, PricePoint]
    history: Mapping[str, tuple[PricePoint, ...]]
    """Daily closing prices per asset, oldest first (the current day is not included)."""
    holdings: Mapping[str, float]
    cash: float
    value: float
    initial_value: float
    weights: Mapping[str, float]
    recent_allocations: tuple[PastAllocation, ...] = ()
    news: Mapping[str, tuple[NewsItem, ...]] = field(default_factory=dict)
    questions: tuple[Question, ...] = ()
    fundamentals: Mapping[str, Fundamentals] = field(default_factory=dict)
    """The latest fundamentals snapshot per stock observed by the decision time (if any)."""
    bars: Mapping[str, tuple[DailyBar, ...]] = field(default_factory=dict)
    """Recorded daily OHLCV bars per asset, oldest first, complete by the decision time (only
    when the recording has them: a history recording's ``BarEvent``)."""

    @property
    def tradable(self) -> tuple[str, ...]:
        """Return the assets that currently have a price (and so can be bought)."""
        return tuple(a for a in self.assets if a in self.prices)

    def to_dict(self) -> dict[str, Any]:
        """Return a plain JSON-ready mapping of this observation (exact round trip)."""
        m, a = self.market_dict(), self.agent_dict()
        out = {"agent": a["agent"], "market": m["market"], "decision_ts": m["decision_ts"],
               "assets": m["assets"], "prices": m["prices"], "history": m["history"]}
        for k in ("holdings", "cash", "value", "initial_value", "weights",
                  "recent_allocations"):
            out[k] = a[k]
        out["news"], out["questions"] = m["news"], m["questions"]
        for k in ("fundamentals", "bars"):
            if k in m:
                out[k] = m[k]
        return out

    def market_dict(self) -> dict[str, Any]:
        """Return the market-wide keys of :meth:`to_dict` (the same for every agent)."""
        return {
            "market": self.market,
            "decision_ts": self.decision_ts,
            "assets": list(self.assets),
            "prices": {a: [p.ts, p.price] for a, p in sorted(self.prices.items())},
            "history": {
                a: [[p.ts, p.price] for p in h] for a, h in sorted(self.history.items())
            },
            "news": {
                k: [[n.ts, n.headline, n.source, n.summary, n.url] for n in items]
                for k, items in sorted(self.news.items())
            },
            "questions": [[q.id, q.question, q.yes, q.no] for q in self.questions],
            # Only when present, so that the hash of an observation without them is unchanged.
            **({"fundamentals": {
                a: [f.ts, dict(sorted(f.metrics.items())), f.source]
                for a, f in sorted(self.fundamentals.items())
            }} if self.fundamentals else {}),
            **({"bars": {
                a: [b.to_list() for b in bars] for a, bars in sorted(self.bars.items())
            }} if self.bars else {}),
        }

    def agent_dict(self) -> dict[str, Any]:
        """Return the per-agent keys of :meth:`to_dict`."""
        return {
            "agent": self.agent,
            "holdings": dict(sorted(self.holdings.items())),
            "cash": self.cash,
            "value": self.value,
            "initial_value": self.initial_value,
            "weights": dict(sorted(self.weights.items())),
            "recent_allocations": [
                [p.ts, dict(sorted(p.weights.items())), p.cumulative_return]
                for p in self.recent_allocations
            ],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Observation:
        """Rebuild an observation from :meth:`to_dict` output."""
        return cls(
            agent=d["agent"],
            market=d["market"],
            decision_ts=float(d["decision_ts"]),
            assets=tuple(d["assets"]),
            prices={a: PricePoint(float(t), float(p)) for a, (t, p) in d["prices"].items()},
            history={
                a: tuple(PricePoint(float(t), float(p)) for t, p in h)
                for a, h in d["history"].items()
            },
            holdings=dict(d["holdings"]),
            cash=float(d["cash"]),
            value=float(d["value"]),
            initial_value=float(d["initial_value"]),
            weights=dict(d["weights"]),
            recent_allocations=tuple(
                PastAllocation(float(t), dict(w), float(cr)) for t, w, cr in d["recent_allocations"]
            ),
            news={
                k: tuple(NewsItem(float(t), h, s, su, u) for t, h, s, su, u in items)
                for k, items in d["news"].items()
            },
            questions=tuple(Question(*q) for q in d["questions"]),
            fundamentals={
                a: Fundamentals(float(t), dict(m), str(src))
                for a, (t, m, src) in d.get("fundamentals", {}).items()
            },
            bars={a: tuple(DailyBar.from_list(b) for b in bars)
                  for a, bars in d.get("bars", {}).items()},
        )

    def canonical_json(self) -> bytes:
        """Return the canonical JSON bytes of this observation (sorted keys, compact)."""
        return msgspec.json.encode(self.to_dict(), order="sorted")

    def sha256(self) -> str:
        """Return the SHA-256 hex digest of :meth:`canonical_json` (hashed before any call)."""
        return hashlib.sha256(self.canonical_json()).hexdigest()


@dataclass(frozen=True, slots=True)
class MarketView:
    """The market-wide part of a round's observations, built once per round.

    Its mappings are read-only: every agent of the round shares them. :meth:`observation` adds
    one agent's part; :meth:`encode` returns that observation's canonical JSON spliced from the
    market-wide values encoded once (equal to :meth:`Observation.canonical_json` byte for byte).
    """

    market: str
    decision_ts: float
    assets: tuple[str, ...]
    prices: Mapping[str, PricePoint]
    history: Mapping[str, tuple[PricePoint, ...]]
    news: Mapping[str, tuple[NewsItem, ...]]
    questions: tuple[Question, ...]
    fundamentals: Mapping[str, Fundamentals]
    bars: Mapping[str, tuple[DailyBar, ...]] = field(default_factory=dict)
    encoded: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    """Canonical JSON of each market-wide key of :meth:`Observation.to_dict` (on first use)."""

    @classmethod
    def build(cls, market: str, decision_ts: float, assets: tuple[str, ...],
              prices: dict[str, PricePoint], history: dict[str, tuple[PricePoint, ...]],
              news: dict[str, tuple[NewsItem, ...]], questions: tuple[Question, ...],
              fundamentals: dict[str, Fundamentals],
              bars: dict[str, tuple[DailyBar, ...]] | None = None) -> MarketView:
        """Freeze the market-wide values of a round."""
        ro = MappingProxyType
        return cls(market, decision_ts, assets, ro(prices), ro(history), ro(news), questions,
                   ro(fundamentals), ro(bars or {}))

    def observation(self, agent: str, *, holdings: Mapping[str, float], cash: float,
                    value: float, initial_value: float, weights: Mapping[str, float],
                    recent_allocations: tuple[PastAllocation, ...] = ()) -> Observation:
        """Return ``agent``'s observation: this view plus the agent's own part."""
        return Observation(
            agent=agent, market=self.market, decision_ts=self.decision_ts, assets=self.assets,
            prices=self.prices, history=self.history, holdings=holdings, cash=cash,
            value=value, initial_value=initial_value, weights=weights,
            recent_allocations=recent_allocations, news=self.news, questions=self.questions,
            fundamentals=self.fundamentals, bars=self.bars,
        )

    def encode(self, obs: Observation) -> bytes:
        """Return the canonical JSON of ``obs``, an observation made by :meth:`observation`."""
        return self.encode_parts(obs)[0]

    def encode_parts(self, obs: Observation) -> tuple[bytes, dict[str, bytes]]:
        """Return the canonical JSON of ``obs`` and the encoded value of each per-agent key."""
        enc = msgspec.json.encode
        if not self.encoded:
            self.encoded.update({k: enc(v, order="sorted")
                                 for k, v in obs.market_dict().items()})
        own = {k: enc(v, order="sorted") for k, v in obs.agent_dict().items()}
        return join_encoded({**own, **self.encoded}), own

    def market_json(self) -> bytes:
        """Return the canonical JSON of the market-wide keys (after a first :meth:`encode`)."""
        return join_encoded(self.encoded)


def join_encoded(parts: Mapping[str, bytes]) -> bytes:
    """Return the JSON object of already encoded values, keys sorted."""
    return b"{" + b",".join(b'"' + k.encode() + b'":' + parts[k] for k in sorted(parts)) + b"}"


@dataclass(frozen=True, slots=True)
class AgentDecision:
    """What an agent answered: the raw target allocation and, for LLM agents, the audit trail."""

    allocation: Mapping[str, float] | None
    raw_output: str = ""
    reasoning: str = ""
    outcome: str = "ok"
    """``ok`` (apply ``allocation``), ``hold`` (keep the portfolio as it is, a valid choice), or
    why there is no valid allocation (``invalid``, ``error``, ``paused``...)."""
    reason: str = ""
    attempts: int = 1
    usage: Mapping[str, float] = field(default_factory=dict)
    template_version: str = ""
    raw_responses: tuple[str, ...] = ()
    calls: tuple[Mapping[str, Any], ...] = ()
    """One record per model call: attempt, ts, model, raw_response, error, tokens_in,
    tokens_out, latency_s, cost_usd, and for protocol steps step, input_sha256 (of the prompt
    sent), outcome and parsed (stored in the ``llm_calls`` table)."""


@runtime_checkable
class Agent(Protocol):
    """An agent maps an observation to a target allocation (weights over assets plus CASH)."""

    id: str

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return the target allocation for ``obs`` (validation happens outside)."""
        ...

#: An agent call longer than this is abandoned and recorded as ``error`` (LLM agents have their
#: own, shorter per-call timeouts inside).
AGENT_DEADLINE = 600.0


class LookAheadError(AssertionError):
    """An observation contains data timestamped after its decision time."""


def assert_no_lookahead(obs: Observation) -> None:
    """Raise :class:`LookAheadError` if anything in ``obs`` is later than its decision time."""
    t = obs.decision_ts
    for asset, pp in obs.prices.items():
        if pp.ts > t:
            raise LookAheadError(f"price of {asset} at {pp.ts} is after decision time {t}")
    for asset, hist in obs.history.items():
        for pp in hist:
            if pp.ts > t:
                raise LookAheadError(f"history of {asset} at {pp.ts} is after decision time {t}")
    for key, items in obs.news.items():
        for item in items:
            if item.ts > t:
                raise LookAheadError(f"news for {key} at {item.ts} is after decision time {t}")
    for asset, f in obs.fundamentals.items():
        if f.ts > t:
            raise LookAheadError(f"fundamentals of {asset} at {f.ts} are after decision time {t}")
    for asset, bars in obs.bars.items():
        for bar in bars:
            if bar.ts > t:
                raise LookAheadError(f"bar of {asset} at {bar.ts} is after decision time {t}")
    for past in obs.recent_allocations:
        if past.ts > t:
            raise LookAheadError(f"past allocation at {past.ts} is after decision time {t}")
