"""Render an LLM agent's prompt from an :class:`~agents.base.Observation`.

Templates live in ``agents/prompts/<name>.txt`` and are filled with :class:`string.Template`
(``$placeholder``). A prompt's version is ``<name>-v<N>+<first 8 hex of the file's SHA-256>``, so
any edit of a template file changes the version stored with each decision.

Polymarket keys: the model sees readable asset names instead of token ids. For a question with
id ``Q`` the assets are ``Q_YES`` and ``Q_NO`` when ``Q`` is short and plain (letters, digits,
``_`` and ``-``, at most 32 characters, unique); otherwise, e.g. for 66-character condition ids,
they are ``Q<n>_YES`` / ``Q<n>_NO`` with ``n`` the 1-based position of the question in
``obs.questions``. :attr:`RenderedPrompt.key_map` maps every presented name back to its token id;
the answer is mapped through it before validation, and names outside it are invalid.

News is untrusted data: it is rendered only inside the ``<news>`` ... ``</news>`` lines, each
item on one line, with ``<`` and ``>`` replaced by look-alike characters so that no item can close
the block or open another one.
"""

from __future__ import annotations

import hashlib
import math
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from importlib import resources
from pathlib import Path
from zoneinfo import ZoneInfo

from agents.base import CASH, NewsItem, Observation, PricePoint, Question
from agents.validation import SUM_TOLERANCE

#: Template name -> version label (bump it when a template's meaning changes).
TEMPLATE_VERSIONS: dict[str, str] = {"equity": "v1", "polymarket": "v1"}
#: Daily closes shown per asset.
HISTORY_DAYS = 10
#: Longest news headline / summary rendered (characters).
HEADLINE_CHARS = 200
SUMMARY_CHARS = 300
QUESTION_CHARS = 300

_PLAIN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$")
_WS = re.compile(r"\s+")
_NEUTRAL = str.maketrans({"<": "‹", ">": "›", "`": "'"})
_EASTERN = ZoneInfo("America/New_York")


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """A rendered prompt, its template version and the presented-name -> asset mapping."""

    text: str
    template_version: str
    key_map: Mapping[str, str] | None = None
    """Presented asset name -> asset id (``None``: names are the asset ids themselves)."""


@lru_cache(maxsize=8)
def load_template(name: str) -> tuple[str, str]:
    """Return ``(template text, version)`` of the template file ``agents/prompts/<name>.txt``."""
    if name not in TEMPLATE_VERSIONS:
        raise ValueError(f"unknown prompt template {name!r}")
    data = resources.files("agents.prompts").joinpath(f"{name}.txt").read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:8]
    return data.decode("utf-8"), f"{name}-{TEMPLATE_VERSIONS[name]}+{digest}"


#: Placeholders a template may use; an own prompt file must use ``$assets`` and ``$market``.
PLACEHOLDERS = frozenset(
    {"now", "timezone", "market", "news", "account", "assets", "sum_low", "sum_high"}
)
REQUIRED_PLACEHOLDERS = ("market", "assets")
#: Largest own prompt file accepted (bytes).
MAX_PROMPT_FILE_BYTES = 256 * 1024


class PromptFileError(ValueError):
    """An own prompt file is unusable; the message is one line naming the file."""


def load_prompt_file(path: str, name: str) -> tuple[str, str]:
    """Return ``(template text, version)`` of an agent's own template for market ``name``.

    Checked here, at load: readable, at most :data:`MAX_PROMPT_FILE_BYTES`, UTF-8, valid
    ``$placeholder`` syntax, only known placeholders, and ``$market`` and ``$assets`` present.
    The version is ``<name>-custom:<file stem>+<first 8 hex of the file's SHA-256>``.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PROMPT_FILE_BYTES + 1)
    except OSError as exc:
        raise PromptFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise PromptFileError(f"{path}: larger than {MAX_PROMPT_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptFileError(f"{path}: not UTF-8 (invalid byte at offset {exc.start})") from None
    template = string.Template(text)
    if not template.is_valid():
        raise PromptFileError(f"{path}: invalid placeholder syntax (write $$ for a dollar sign)")
    used = set(template.get_identifiers())
    unknown = sorted(used - PLACEHOLDERS)
    if unknown:
        raise PromptFileError(f"{path}: unknown placeholder(s) ${', $'.join(unknown)}"
                              f" (known: ${', $'.join(sorted(PLACEHOLDERS))})")
    missing = [p for p in REQUIRED_PLACEHOLDERS if p not in used]
    if missing:
        raise PromptFileError(f"{path}: missing placeholder(s) ${', $'.join(missing)}")
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", Path(path).stem)[:40]
    return text, f"{name}-custom:{stem}+{hashlib.sha256(data).hexdigest()[:8]}"


def template_name(obs: Observation) -> str:
    """Return the template used for ``obs`` (``polymarket`` when it has questions)."""
    return "polymarket" if obs.market == "polymarket" or obs.questions else "equity"


def neutralise(text: str, limit: int) -> str:
    """Return ``text`` on one line, without delimiter characters, cut to ``limit`` characters."""
    flat = _WS.sub(" ", text.translate(_NEUTRAL)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def question_labels(questions: Sequence[Question]) -> dict[str, str]:
    """Return question id -> the label its assets are named after (see module doc)."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for i, q in enumerate(questions, start=1):
        label = q.id if _PLAIN_ID.match(q.id) else f"Q{i}"
        if label in seen:
            label = f"Q{i}"
        while label in seen:
            label = f"{label}x"
        seen.add(label)
        out[q.id] = label
    return out


def polymarket_keys(questions: Sequence[Question]) -> dict[str, tuple[str, str]]:
    """Return question id -> (YES name, NO name) as presented to the model (see module doc)."""
    return {qid: (f"{b}_YES", f"{b}_NO") for qid, b in question_labels(questions).items()}


def key_map_for(obs: Observation) -> dict[str, str] | None:
    """Return presented name -> asset id for ``obs`` (``None`` for equity observations)."""
    if template_name(obs) != "polymarket":
        return None
    keys = polymarket_keys(obs.questions)
    out: dict[str, str] = {}
    in_question: set[str] = set()
    for q in obs.questions:
        yes_name, no_name = keys[q.id]
        out[yes_name] = q.yes
        out[no_name] = q.no
        in_question.update((q.yes, q.no))
    for asset in obs.assets:
        if asset not in in_question and asset not in out:
            out[asset] = asset
    return out


def render_prompt(
    obs: Observation,
    *,
    memory: int = 5,
    news_window: float = 172_800.0,
    news_per_asset: int = 5,
    history_days: int = HISTORY_DAYS,
    tolerance: float = SUM_TOLERANCE,
    templates: Mapping[str, tuple[str, str]] | None = None,
) -> RenderedPrompt:
    """Render the prompt for ``obs`` with its template version and key mapping.

    ``templates`` maps a template name to an own ``(text, version)`` (see
    :func:`load_prompt_file`); names it lacks use the built-in template.
    """
    name = template_name(obs)
    own = templates.get(name) if templates else None
    template, version = own if own is not None else load_template(name)
    key_map = key_map_for(obs)
    names = {v: k for k, v in key_map.items()} if key_map is not None else {}
    tz, tz_label = (UTC, "UTC") if name == "polymarket" else (_EASTERN, "US Eastern time")
    ctx = _Ctx(obs, tz, names, news_window, news_per_asset, history_days)
    if name == "polymarket":
        market = ctx.polymarket_market()
        news = ctx.news_by_question()
        assets = ctx.polymarket_assets()
    else:
        market = ctx.equity_market()
        news = ctx.news_by_asset()
        assets = ", ".join([*obs.tradable, CASH])
    text = string.Template(template).substitute(
        now=_fmt_ts(obs.decision_ts, tz),
        timezone=tz_label,
        market=market,
        news=news,
        account=ctx.account(memory),
        assets=assets,
        sum_low=f"{1.0 - tolerance:g}",
        sum_high=f"{1.0 + tolerance:g}",
    )
    return RenderedPrompt(text=text, template_version=version, key_map=key_map)


def _fmt_ts(ts: float, tz: tzinfo) -> str:
    return datetime.fromtimestamp(ts, tz=tz).strftime("%Y-%m-%d %H:%M")


def _fmt_day(ts: float, tz: tzinfo) -> str:
    return datetime.fromtimestamp(ts, tz=tz).strftime("%Y-%m-%d")


def _fmt_price(p: float, decimals: int) -> str:
    return f"{p:.{decimals}f}" if math.isfinite(p) else str(p)


def _fmt_change(prev: float, cur: float, decimals: int) -> str:
    diff = cur - prev
    pct = f"{diff / prev * 100:+.2f}%" if prev else "n/a"
    return f"{diff:+.{decimals}f} ({pct})"


def _fmt_pct(x: float) -> str:
    return f"{x * 100:+.2f}%"


class _Ctx:
    """Render the parts of one prompt."""

    def __init__(
        self,
        obs: Observation,
        tz: tzinfo,
        names: Mapping[str, str],
        news_window: float,
        news_per_asset: int,
        history_days: int,
    ) -> None:
        self.obs = obs
        self.tz = tz
        self.names = names
        self.news_window = news_window
        self.news_per_asset = news_per_asset
        self.history_days = history_days
        self.decimals = 3 if obs.questions or obs.market == "polymarket" else 2

    def name(self, asset: str) -> str:
        """Return the presented name of ``asset``."""
        return self.names.get(asset, asset)

    def history_lines(self, asset: str, indent: str) -> list[str]:
        """Return the recent daily closes of ``asset`` with changes, oldest first."""
        hist: Sequence[PricePoint] = self.obs.history.get(asset, ())
        # One extra close (not shown) gives the change of the oldest shown one.
        window = list(hist[-(self.history_days + 1) :]) if self.history_days > 0 else []
        if not window:
            return [f"{indent}(no daily history)"]
        lines = []
        for i in range(max(0, len(window) - self.history_days), len(window)):
            pp = window[i]
            line = f"{indent}{_fmt_day(pp.ts, self.tz)}  {_fmt_price(pp.price, self.decimals)}"
            if i > 0:
                line += "  " + _fmt_change(window[i - 1].price, pp.price, self.decimals)
            lines.append(line)
        return lines

    def price_line(self, asset: str) -> str:
        """Return the current price of ``asset`` (or that it has none)."""
        pp = self.obs.prices.get(asset)
        if pp is None:
            return "no current price (cannot be bought now)"
        return (
            f"current price {_fmt_price(pp.price, self.decimals)} (as of {_fmt_ts(pp.ts, self.tz)})"
        )

    def equity_market(self) -> str:
        """Return the MARKET ANALYSIS block for stocks."""
        blocks = []
        for asset in self.obs.assets:
            lines = [f"{asset}: {self.price_line(asset)}", "  daily closes:"]
            lines += self.history_lines(asset, "    ")
            blocks.append("\n".join(lines))
        return "\n".join(blocks) if blocks else "(no assets)"

    def polymarket_market(self) -> str:
        """Return the MARKET ANALYSIS block for Polymarket questions."""
        keys = polymarket_keys(self.obs.questions)
        labels = question_labels(self.obs.questions)
        blocks = []
        for q in self.obs.questions:
            yes_name, no_name = keys[q.id]
            lines = [f"Question {labels[q.id]}: {neutralise(q.question, QUESTION_CHARS)}"]
            for side, token, key in (("YES", q.yes, yes_name), ("NO", q.no, no_name)):
                pp = self.obs.prices.get(token)
                prob = f", implied probability {pp.price * 100:.1f}%" if pp is not None else ""
                lines.append(f"  {side} asset {key}: {self.price_line(token)}{prob}")
                lines.append("    daily closes:")
                lines += self.history_lines(token, "      ")
            blocks.append("\n".join(lines))
        in_question = {t for q in self.obs.questions for t in (q.yes, q.no)}
        for asset in self.obs.assets:
            if asset not in in_question:
                lines = [f"{asset}: {self.price_line(asset)}", "  daily closes:"]
                lines += self.history_lines(asset, "    ")
                blocks.append("\n".join(lines))
        return "\n".join(blocks) if blocks else "(no questions)"

    def polymarket_assets(self) -> str:
        """Return the AVAILABLE ASSETS list for Polymarket (tradable sides plus CASH)."""
        tradable = set(self.obs.tradable)
        keys = polymarket_keys(self.obs.questions)
        out: list[str] = []
        in_question: set[str] = set()
        for q in self.obs.questions:
            yes_name, no_name = keys[q.id]
            in_question.update((q.yes, q.no))
            sides = [n for n, t in ((yes_name, q.yes), (no_name, q.no)) if t in tradable]
            if sides:
                out.append(" / ".join(sides) + "  (at most one of them)" * (len(sides) == 2))
        out += [a for a in self.obs.tradable if a not in in_question]
        out.append(CASH)
        return "\n".join(out)

    def _recent(self, items: Sequence[NewsItem]) -> list[NewsItem]:
        start = self.obs.decision_ts - self.news_window
        kept = [n for n in items if start <= n.ts <= self.obs.decision_ts]
        kept.sort(key=lambda n: n.ts, reverse=True)
        return kept[: self.news_per_asset]

    def _news_lines(self, items: Sequence[NewsItem]) -> list[str]:
        lines = []
        for n in self._recent(items):
            text = f"  - [{_fmt_ts(n.ts, self.tz)}] {neutralise(n.headline, HEADLINE_CHARS)}"
            if n.source:
                text += f" ({neutralise(n.source, 60)})"
            if n.summary:
                text += f": {neutralise(n.summary, SUMMARY_CHARS)}"
            lines.append(text)
        return lines

    def news_by_asset(self) -> str:
        """Return the news lines grouped by asset (other keys grouped last under their key)."""
        groups: list[tuple[str, list[str]]] = []
        order = [a for a in self.obs.assets if a in self.obs.news]
        order += sorted(k for k in self.obs.news if k not in set(self.obs.assets))
        for key in order:
            lines = self._news_lines(self.obs.news[key])
            if lines:
                label = neutralise(key, 64) or "general"
                groups.append((label, lines))
        return _join_groups(groups)

    def news_by_question(self) -> str:
        """Return the news lines grouped by question (keyed by question id or either token)."""
        labels = question_labels(self.obs.questions)
        used: set[str] = set()
        groups: list[tuple[str, list[str]]] = []
        for q in self.obs.questions:
            items: list[NewsItem] = []
            for k in (q.id, q.yes, q.no):
                if k in self.obs.news and k not in used:
                    used.add(k)
                    items.extend(self.obs.news[k])
            lines = self._news_lines(items)
            if lines:
                groups.append((f"question {labels[q.id]}", lines))
        for key in sorted(k for k in self.obs.news if k not in used):
            lines = self._news_lines(self.obs.news[key])
            if lines:
                groups.append((neutralise(self.name(key), 64) or "general", lines))
        return _join_groups(groups)

    def _weights(self, weights: Mapping[str, float]) -> str:
        shown = [(self.name(a), w) for a, w in weights.items() if a != CASH and w > 1e-9]
        shown.sort(key=lambda aw: -aw[1])
        parts = [f"{n} {w:.3f}" for n, w in shown]
        parts.append(f"{CASH} {weights.get(CASH, 0.0):.3f}")
        return ", ".join(parts)

    def account(self, memory: int) -> str:
        """Return the ACCOUNT INFO block: value, current weights and recent allocations."""
        obs = self.obs
        cr = obs.value / obs.initial_value - 1.0 if obs.initial_value else 0.0
        lines = [
            f"Account value: {obs.value:.2f} USD (started at {obs.initial_value:.2f} USD,"
            f" cumulative return {_fmt_pct(cr)}); cash {obs.cash:.2f} USD.",
            f"Current weights: {self._weights(obs.weights)}",
        ]
        if memory <= 0:
            return "\n".join(lines)
        past = obs.recent_allocations[-memory:]
        lines.append(f"Recent allocations (oldest first, last {memory} at most):")
        if not past:
            lines.append("  (none yet)")
        for p in past:
            lines.append(
                f"  {_fmt_ts(p.ts, self.tz)}: {self._weights(p.weights)}"
                f" | cumulative return then {_fmt_pct(p.cumulative_return)}"
            )
        return "\n".join(lines)


def _join_groups(groups: Sequence[tuple[str, Sequence[str]]]) -> str:
    if not groups:
        return "(no recent news)"
    return "\n".join(f"{label}:\n" + "\n".join(lines) for label, lines in groups)
