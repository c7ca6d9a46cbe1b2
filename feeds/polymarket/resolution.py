"""Polymarket questions and their resolution: exactly one ResolutionEvent per question.

Resolutions come from the ``market_resolved`` WS event and from a Gamma poll (the source of
truth), whichever comes first; :class:`ResolutionTracker` keeps which questions are resolved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from daemon.core.events import ResolutionEvent
from feeds.polymarket.decode import WsEvent
from feeds.polymarket.gamma import GammaMarket, gamma_payout

__all__ = ["Question", "ResolutionTracker"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Question:
    """A binary question we track: Gamma id, text and its YES / NO tokens."""

    id: str
    question: str
    yes: str
    no: str
    end_ts: float | None = None
    closed: bool = False

    @classmethod
    def from_market(cls, m: GammaMarket) -> Question:
        """Build from a decoded Gamma market (annotating non Yes/No outcomes in the text)."""
        text = m.question
        if not m.is_yes_no:
            text = f"{text} [yes = {m.outcomes[0]}, no = {m.outcomes[1]}]"
        return cls(m.id, text, m.yes_token, m.no_token, m.end_ts, m.closed)

    @classmethod
    def from_config(cls, q: Mapping[str, Any] | Any) -> Question:
        """Build from a config entry ({"id","question","yes","no"} mapping or object)."""

        def get(key: str) -> Any:
            return q.get(key) if isinstance(q, Mapping) else getattr(q, key, None)

        return cls(str(get("id")), str(get("question") or ""), str(get("yes")), str(get("no")))


# --------------------------------------------------------------------------------- resolutions


class ResolutionTracker:
    """Known questions and which are resolved; guarantees one ResolutionEvent per question."""

    def __init__(self, on_resolved: Callable[[Question], None] | None = None) -> None:
        """Create an empty tracker; ``on_resolved`` is called once per resolved question."""
        self.questions: dict[str, Question] = {}
        self.by_token: dict[str, str] = {}
        self.by_condition: dict[str, str] = {}
        self.resolved: set[str] = set()
        self.on_resolved = on_resolved

    def add(self, q: Question, condition_id: str = "") -> bool:
        """Track ``q``; return False if it was already known."""
        if q.id in self.questions:
            return False
        self.questions[q.id] = q
        self.by_token[q.yes] = q.id
        self.by_token[q.no] = q.id
        if condition_id:
            self.by_condition[condition_id] = q.id
        return True

    def unresolved(self) -> list[Question]:
        """Return the known questions not resolved yet."""
        return [q for qid, q in self.questions.items() if qid not in self.resolved]

    def resolve(
        self, qid: str, p_yes: float, ts: float, recv_ts: float, source: str
    ) -> ResolutionEvent | None:
        """Mark ``qid`` resolved and return its event, or None if unknown or already resolved."""
        q = self.questions.get(qid)
        if q is None or qid in self.resolved:
            return None
        self.resolved.add(qid)
        log.info("polymarket question resolved", question_id=qid, yes=p_yes, source=source)
        if self.on_resolved is not None:
            self.on_resolved(q)
        return ResolutionEvent(
            ts=ts,
            recv_ts=recv_ts,
            question_id=qid,
            payouts={q.yes: p_yes, q.no: 1.0 - p_yes},
            source=source,
        )

    def from_ws(self, ev: WsEvent, ts: float, now: float) -> ResolutionEvent | None:
        """Handle a ``market_resolved`` event (custom feature)."""
        qid: str | None = ev.id if ev.id in self.questions else None
        for tok in (ev.winning_asset_id, *(ev.assets_ids or ())):
            if qid is not None:
                break
            qid = self.by_token.get(tok)
        if qid is None:
            qid = self.by_condition.get(ev.market)
        if qid is None:
            return None
        q = self.questions[qid]
        win = ev.winning_asset_id
        outcome = ev.winning_outcome.strip().lower()
        if win == q.yes or (not win and outcome == "yes"):
            p_yes = 1.0
        elif win == q.no or (not win and outcome == "no"):
            p_yes = 0.0
        elif outcome in ("50-50", "50/50", "split"):
            p_yes = 0.5
        else:
            log.warning(
                "polymarket market_resolved not understood",
                question_id=qid,
                winning_asset_id=win,
                winning_outcome=ev.winning_outcome,
            )
            return None
        return self.resolve(qid, p_yes, ts, now, "polymarket.ws")

    def from_gamma(self, m: GammaMarket, now: float) -> ResolutionEvent | None:
        """Handle a polled Gamma market (the source of truth)."""
        if m.id not in self.questions or m.id in self.resolved or not m.closed:
            return None
        p = gamma_payout(m)
        if p is None:
            log.info(
                "polymarket market closed without final prices",
                question_id=m.id,
                outcome_prices=list(m.outcome_prices),
                uma=list(m.uma_statuses),
            )
            return None
        return self.resolve(m.id, p, now, now, "polymarket.gamma")

