"""LLM output handling: JSON extraction, strict validation, Polymarket names, prompt rendering.

The fuzz runs the pure extraction + validation path on >= 1,000 malformed answers and checks,
against an independent oracle, that no invalid allocation is ever accepted.

Why one module over 500 lines: table-driven tests of one parser (answers, JSON extraction, prompt
rendering) sharing their cases.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.base import CASH, NewsItem, Observation, PastAllocation, PricePoint, Question
from agents.llm_output import (
    InvalidOutput,
    check_response,
    extract_json,
    map_keys,
    parse_output,
    strip_think,
)
from agents.prompting import key_map_for, load_template, neutralise, render_prompt
from agents.validation import SUM_EPSILON, SUM_TOLERANCE, validate_allocation

T = 1_714_600_000.0
DAY = 86_400.0


def equity_obs() -> Observation:
    """Return AAPL/MSFT/NVDA with NVDA unpriced."""
    return Observation(
        agent="a",
        market="equity",
        decision_ts=T,
        assets=("AAPL", "MSFT", "NVDA"),
        prices={"AAPL": PricePoint(T - 60, 180.0), "MSFT": PricePoint(T - 60, 400.0)},
        history={"AAPL": tuple(PricePoint(T - (12 - i) * DAY, 170.0 + i) for i in range(12))},
        holdings={},
        cash=1000.0,
        value=1000.0,
        initial_value=1000.0,
        weights={CASH: 1.0},
    )


def poly_obs() -> Observation:
    """Return two questions (one with a long condition id), every token priced."""
    toks = ("y1", "n1", "y2", "n2")
    return Observation(
        agent="a",
        market="polymarket",
        decision_ts=T,
        assets=toks,
        prices={t: PricePoint(T - 60, p) for t, p in zip(toks, (0.6, 0.4, 0.3, 0.7), strict=True)},
        history={},
        holdings={},
        cash=500.0,
        value=500.0,
        initial_value=500.0,
        weights={CASH: 1.0},
        questions=(
            Question("fedcut", "Will the Fed cut?", "y1", "n1"),
            Question("0x" + "cd" * 32, "Will X win?", "y2", "n2"),
        ),
    )


EQ = equity_obs()
PM = poly_obs()
PM_KEYS = key_map_for(PM)


# -- extraction ------------------------------------------------------------------------------
GOOD = '{"reasoning": "r", "allocations": {"AAPL": 0.6, "CASH": 0.4}}'


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        f"```json\n{GOOD}\n```",
        f"```\n{GOOD}\n```",
        f"Sure! Here is my allocation:\n\n{GOOD}\n\nLet me know.",
        f'<think>I could do {{"allocations": {{"NVDA": 1}}}} but no.</think>\n{GOOD}',
        f"<THINKING>hmm</THINKING>{GOOD}",
        f"reasoning that ended with </think>\n{GOOD}",
        '{"reasoning": "r", "allocations": {"AAPL": 0.6, "CASH": 0.4,},}',
        '{\n "reasoning": "braces } { and \\" quotes",\n'
        ' "allocations": {"AAPL": 0.6, "CASH": 0.4}\n}',
        f"Weights {{AAPL: 0.6}} in short; JSON: {GOOD}",
        f'{{"note": "draft"}} then {GOOD}',
    ],
)
def test_extract_tolerates_wrapping(text: str) -> None:
    obj = extract_json(text)
    assert obj["allocations"] == {"AAPL": 0.6, "CASH": 0.4}
    parsed = parse_output(text, EQ)
    assert parsed.allocation == {"AAPL": 0.6, "MSFT": 0.0, "NVDA": 0.0, CASH: 0.4}


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ('{"allocations": {"AAPL": 1}} on second thought {"allocations": {"MSFT": 1}}', 2),
        ('[{"allocations": {"AAPL": 1}}, {"allocations": {"MSFT": 1}}]', 2),
        ("[" + ", ".join(f'{{"allocations": {{"AAPL": {w}, "CASH": {1 - w}}}}}'
                         for w in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)) + "]", 8),
        (f'```json\n{GOOD}\n```\nor, bolder: {{"allocations": {{"AAPL": 1}}}}', 2),
        (f'{GOOD}\n{GOOD}\n{{"reasoning": "x", "allocations": {{"CASH": 1}}}}', 3),
    ],
)
def test_ambiguous_answers_are_held(text: str, n: int) -> None:
    with pytest.raises(InvalidOutput, match=f"^ambiguous: {n} allocation objects$"):
        extract_json(text)
    with pytest.raises(InvalidOutput, match="ambiguous"):
        check_response(text, "stop", EQ)


@pytest.mark.parametrize(
    "text",
    [
        f"{GOOD}\n\nTo repeat, my final answer:\n{GOOD}",
        f'[{GOOD}, {{"reasoning": "other words", "allocations": {{"AAPL": 0.6, "CASH": 0.4}}}}]',
        f"[{GOOD}]",
        f'{{"note": "no allocation here"}} {GOOD}',
    ],
)
def test_identical_duplicates_pass(text: str) -> None:
    assert extract_json(text)["allocations"] == {"AAPL": 0.6, "CASH": 0.4}


# -- the sum tolerance is what the prompt says: beyond 0.98 / 1.02 only ------------------------
@pytest.mark.parametrize(
    "allocations",
    [
        '{"AAPL": 0.49, "MSFT": 0.49}',
        '{"AAPL": 0.5, "MSFT": 0.48}',
        '{"AAPL": 0.33, "MSFT": 0.33, "CASH": 0.32}',
        '{"AAPL": 0.98}',
        '{"AAPL": 0.51, "MSFT": 0.51}',
        '{"AAPL": 0.5, "MSFT": 0.52}',
        '{"AAPL": 0.34, "MSFT": 0.34, "CASH": 0.34}',
        '{"AAPL": 1.02}',
    ],
)
def test_sums_at_the_tolerance_boundary_are_accepted(allocations: str) -> None:
    parsed = parse_output(f'{{"allocations": {allocations}}}', EQ)
    assert math.fsum(parsed.allocation.values()) == pytest.approx(1.0, abs=1e-12)
    raw = json.loads(allocations)
    assert validate_allocation(raw, EQ) == pytest.approx(parsed.allocation)


@pytest.mark.parametrize(
    ("allocations", "total"),
    [
        ('{"AAPL": 0.4899, "MSFT": 0.49}', "0.9799"),
        ('{"AAPL": 0.979}', "0.979"),
        ('{"AAPL": 0.5101, "MSFT": 0.51}', "1.0201"),
        ('{"AAPL": 1.021}', "1.021"),
    ],
)
def test_sums_beyond_the_tolerance_are_rejected(allocations: str, total: str) -> None:
    with pytest.raises(InvalidOutput, match=re.escape(f"weights sum to {total}, not 1")):
        parse_output(f'{{"allocations": {allocations}}}', EQ)


def test_prompt_states_the_accepted_bounds() -> None:
    text = render_prompt(EQ).text
    assert "less than 0.98 or more than 1.02 is rejected" in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty response"),
        ("   \n", "empty response"),
        ("I will not answer.", "no JSON object"),
        ('{"reasoning": "r", "weights": {"AAPL": 1}}', "no 'allocations'"),
        ('{"allocations": {"AAPL": 0.5, "AAPL": 0.5}}', "duplicate key"),
        ('{"allocations": {"AAPL": 1.0', "no JSON object"),
        ("{'allocations': {'AAPL': 1.0}}", "malformed JSON"),
        ('<think>{"allocations": {"AAPL": 1}}</think>', "empty response"),
        ("<think>still thinking about {", "no JSON object"),
        ('{"allocations": {"AAPL": 1.0} // comment\n}', "malformed JSON"),
    ],
)
def test_extract_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidOutput, match=re.escape(message)):
        extract_json(text)


@pytest.mark.parametrize(
    ("allocations", "message"),
    [
        ('{"AAPL": "30%", "MSFT": "70%"}', "not a number"),
        ('{"AAPL": "0.5", "CASH": 0.5}', "not a number"),
        ('{"AAPL": true}', "not a number"),
        ('{"AAPL": null, "CASH": 1}', "not a number"),
        ('{"TSLA": 0.5, "CASH": 0.5}', "unknown asset"),
        ('{"aapl": 1}', "unknown asset"),
        ('{"AAPL": NaN, "CASH": 1}', "not finite"),
        ('{"AAPL": Infinity}', "not finite"),
        ('{"AAPL": 1e999}', "not finite"),
        ('{"AAPL": 1.2, "CASH": -0.2}', "negative"),
        ('{"AAPL": 0.4, "MSFT": 0.3}', "sum to 0.7"),
        ('{"AAPL": 0.6, "MSFT": 0.5}', "sum to 1.1"),
        ('{"NVDA": 0.5, "CASH": 0.5}', "no price"),
        ("{}", "empty"),
        ("[0.5, 0.5]", "must be an object"),
        ('"all in AAPL"', "must be an object"),
        ('{"AAPL": 1' + "0" * 400 + "}", "out of range"),
        ('{"AAPL": 1e308, "MSFT": 1e308}', "out of range"),
    ],
)
def test_validation_is_strict(allocations: str, message: str) -> None:
    with pytest.raises(InvalidOutput, match=re.escape(message)):
        parse_output(f'{{"reasoning": "r", "allocations": {allocations}}}', EQ)


def test_sum_within_tolerance_is_renormalised() -> None:
    parsed = parse_output('{"allocations": {"AAPL": 0.5, "MSFT": 0.51}}', EQ)
    assert math.fsum(parsed.allocation.values()) == pytest.approx(1.0, abs=1e-12)
    assert parsed.allocation["AAPL"] == pytest.approx(0.5 / 1.01)
    assert parsed.reasoning == ""


def test_truncated_is_invalid_even_if_parsable() -> None:
    with pytest.raises(InvalidOutput, match="truncated"):
        check_response(GOOD, "length", EQ)
    with pytest.raises(InvalidOutput, match="empty"):
        check_response(None, "stop", EQ)
    assert check_response(GOOD, "stop", EQ).allocation["AAPL"] == 0.6


def test_non_string_reasoning_is_kept_as_json() -> None:
    parsed = parse_output('{"reasoning": ["a", 1], "allocations": {"CASH": 1}}', EQ)
    assert parsed.reasoning == '["a", 1]'


def test_strip_think() -> None:
    assert strip_think("<think>a</think>b<think>c</think>d") == " b d"
    assert strip_think("a</think>b") == "b"
    assert strip_think("a<think>b") == "a"
    assert strip_think("x</think>y<think>z</think>w") == "y w"
    assert strip_think("<think>a<think>b</think>c") == " c"


@pytest.mark.parametrize(
    "text",
    [
        f"<think>The user wants weights. I pick AAPL.\n{GOOD}",
        f"<think>\nLet me think. Done.\n```json\n{GOOD}\n```",
        f"<thinking>draft {{not json}} then {GOOD}",
        f"Answer below.<think>{GOOD}",
    ],
)
def test_unclosed_think_before_json_is_parsed(text: str) -> None:
    assert extract_json(text)["allocations"] == {"AAPL": 0.6, "CASH": 0.4}
    assert parse_output(text, EQ).allocation["AAPL"] == 0.6


def test_answer_outside_an_unclosed_think_wins() -> None:
    text = f'{GOOD}<think>what if {{"allocations": {{"MSFT": 1}}}}'
    assert extract_json(text)["allocations"] == {"AAPL": 0.6, "CASH": 0.4}


def _traced_lines(fn: Any, *args: Any) -> int:
    """Return how many Python lines of agents/llm_output.py ``fn(*args)`` executes."""
    target = extract_json.__code__.co_filename
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if frame.f_code.co_filename != target:
            return None
        if event == "line":
            count += 1
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(old)
    return count


@pytest.mark.parametrize(
    "filler",
    ["lorem ipsum dolor sit amet ", 'a "quoted" [word] ', "{ ", '"{[', "<think>x "],
)
def test_extraction_work_is_linear_in_the_answer(filler: str) -> None:
    """Count executed lines (deterministic), not time: work per character stays bounded."""
    counts = []
    for size in (2_000, 8_000):
        text = "{" * 255 + (filler * (size // len(filler) + 1))[:size] + "\n" + GOOD
        counts.append(_traced_lines(_try_extract, text))
        assert counts[-1] <= 25 * len(text), (filler, size, counts)
    # Four times the text costs about four times the work, never sixteen.
    assert counts[1] <= 6 * counts[0], counts


def _try_extract(text: str) -> None:
    with contextlib.suppress(InvalidOutput):
        extract_json(text)


def test_huge_answer_after_unmatched_braces_is_found() -> None:
    text = "{" * 255 + "x" * 190_000 + GOOD
    assert len(text) < 200_000
    assert extract_json(text)["allocations"] == {"AAPL": 0.6, "CASH": 0.4}
    assert _traced_lines(_try_extract, text) <= 5 * len(text)


# -- Polymarket names ------------------------------------------------------------------------
def test_polymarket_key_map() -> None:
    assert PM_KEYS == {"fedcut_YES": "y1", "fedcut_NO": "n1", "Q2_YES": "y2", "Q2_NO": "n2"}
    assert key_map_for(EQ) is None


def test_polymarket_answer_maps_to_tokens() -> None:
    text = '{"allocations": {"fedcut_YES": 0.5, "Q2_NO": 0.25, "CASH": 0.25}}'
    parsed = parse_output(text, PM, key_map=PM_KEYS)
    assert parsed.allocation == {"y1": 0.5, "n1": 0.0, "y2": 0.0, "n2": 0.25, CASH: 0.25}


@pytest.mark.parametrize(
    ("allocations", "message"),
    [
        ('{"fedcut_YES": 0.3, "fedcut_NO": 0.3, "CASH": 0.4}', "both YES and NO"),
        ('{"y1": 1}', "unknown asset 'y1'"),
        ('{"FEDCUT_YES": 1}', "unknown asset"),
        ('{"fedcut": 1}', "unknown asset"),
    ],
)
def test_polymarket_rejects(allocations: str, message: str) -> None:
    with pytest.raises(InvalidOutput, match=re.escape(message)):
        parse_output(f'{{"allocations": {allocations}}}', PM, key_map=PM_KEYS)


def test_zero_weight_on_other_side_is_fine() -> None:
    text = '{"allocations": {"fedcut_YES": 0.5, "fedcut_NO": 0, "CASH": 0.5}}'
    assert parse_output(text, PM, key_map=PM_KEYS).allocation["y1"] == 0.5


def test_map_keys_passes_non_mappings() -> None:
    assert map_keys([1], PM_KEYS) == [1]
    assert map_keys({"AAPL": 1}, None) == {"AAPL": 1}


# -- prompts -----------------------------------------------------------------------------------
def test_template_version_hashes_the_file() -> None:
    text, version = load_template("equity")
    assert re.fullmatch(r"equity-v1\+[0-9a-f]{8}", version)
    assert "$market" in text and "$news" in text
    assert load_template("polymarket")[1].startswith("polymarket-v1+")
    with pytest.raises(ValueError):
        load_template("../equity")


def test_equity_prompt_content() -> None:
    obs = Observation.from_dict(
        {
            **EQ.to_dict(),
            "recent_allocations": [
                [T - (9 - i) * DAY, {"AAPL": 0.1 * i, CASH: 1 - 0.1 * i}, 0.01 * i]
                for i in range(8)
            ],
            "news": {
                "AAPL": [[T - 100 * i, f"headline {i}", "src", "", ""] for i in range(8)],
                "MSFT": [[T - 3 * DAY, "too old", "", "", ""]],
            },
        }
    )
    r = render_prompt(obs, memory=3, news_per_asset=2)
    text = r.text
    assert r.key_map is None and r.template_version == load_template("equity")[1]
    assert "AAPL: current price 180.00" in text
    assert "NVDA: no current price" in text
    assert "+1.00 (+0.56%)" in text  # 180 vs 179
    assert text.count("| cumulative return then") == 3
    assert "+7.00%" in text and "+4.00%" not in text  # only the last 3 allocations
    assert "headline 0" in text and "headline 1" in text and "headline 2" not in text
    assert "too old" not in text
    assert "AAPL, MSFT, CASH" in text  # NVDA (unpriced) is not offered
    assert '{"reasoning":' in text and "0.98" in text and "1.02" in text
    assert "$" not in text.replace("USD", "")


def test_memory_zero_hides_past_allocations() -> None:
    obs = Observation.from_dict(
        {**EQ.to_dict(), "recent_allocations": [[T - DAY, {CASH: 1.0}, 0.0]]}
    )
    assert "Recent allocations" not in render_prompt(obs, memory=0).text
    assert "Recent allocations" in render_prompt(obs, memory=1).text


def test_polymarket_prompt_content() -> None:
    obs = Observation.from_dict(
        {
            **PM.to_dict(),
            "news": {
                "fedcut": [[T - 10, "Fed hints", "", "", ""]],
                "y2": [[T - 5, "X up", "", "", ""]],
            },
            "recent_allocations": [[T - DAY, {"y1": 0.5, CASH: 0.5}, 0.02]],
        }
    )
    text = render_prompt(obs).text
    assert "Question fedcut: Will the Fed cut?" in text
    assert "Question Q2: Will X win?" in text
    assert "implied probability 60.0%" in text
    assert "fedcut_YES / fedcut_NO  (at most one of them)" in text
    assert "question fedcut:\n  - [" in text and "question Q2:\n  - [" in text
    assert "fedcut_YES 0.500, CASH 0.500" in text
    assert "(UTC)" in text and "y1" not in text


def test_news_is_neutralised() -> None:
    item = NewsItem(T - 1, "a </news>\n<news> b ```json", "src<x>", "line1\nline2")
    obs = Observation.from_dict(EQ.to_dict())
    obs = Observation(**{**{f: getattr(obs, f) for f in obs.__slots__}, "news": {"AAPL": (item,)}})
    text = render_prompt(obs).text
    lines = text.splitlines()
    assert lines.count("<news>") == 1 and lines.count("</news>") == 1
    assert "a ‹/news› ‹news› b '''json (src‹x›): line1 line2" in text
    assert neutralise("x" * 50, 10) == "x" * 9 + "…"


def test_past_allocation_dataclass_roundtrip() -> None:
    p = PastAllocation(T, {CASH: 1.0}, 0.0)
    assert p.weights[CASH] == 1.0


# -- fuzz --------------------------------------------------------------------------------------
def oracle_valid(raw: Any, obs: Observation, key_map: Mapping[str, str] | None) -> bool:
    """Decide independently whether an allocation object is acceptable."""
    if not isinstance(raw, dict) or not raw:
        return False
    weights: dict[str, float] = {}
    for key, value in raw.items():
        if key_map is not None:
            if key != CASH and key not in key_map:
                return False
            key = key_map.get(key, key)
        elif key != CASH and key not in obs.assets:
            return False
        if type(value) not in (int, float):
            return False
        try:
            w = float(value)
        except OverflowError:
            return False
        if not math.isfinite(w) or w < 0:
            return False
        weights[key] = weights.get(key, 0.0) + w
    try:
        total = math.fsum(weights.values())
    except OverflowError:
        return False
    if abs(total - 1.0) > SUM_TOLERANCE + SUM_EPSILON:
        return False
    if any(w > 0 and k != CASH and k not in obs.prices for k, w in weights.items()):
        return False
    return not any(weights.get(q.yes, 0) > 0 and weights.get(q.no, 0) > 0 for q in obs.questions)


NUMBERS = st.one_of(
    st.floats(min_value=0, max_value=1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([10**400, 1e308, -0.0, 0.0, 1.0, 0.5, 0.25]),
)
JUNK = st.one_of(
    st.builds(lambda n: f"{n}%", st.integers(0, 100)),
    st.sampled_from(["0.5", "", "half", "1/3"]),
    st.booleans(),
    st.none(),
    st.lists(st.floats(0, 1), max_size=2),
    st.dictionaries(st.text(max_size=3), st.floats(0, 1), max_size=2),
)


@st.composite
def allocation_objects(draw: st.DrawFn, names: list[str]) -> Any:
    """Draw an allocation object: near-valid weights, random junk, or not a mapping at all.

    Near-valid weights use the first two ``names`` (compatible with each other) and CASH.
    """
    kind = draw(st.sampled_from(["plausible", "plausible", "random", "not_mapping"]))
    keys = st.one_of(
        st.sampled_from([*names, CASH]),
        st.sampled_from(["cash", "XYZ", " AAPL"]),
        st.text(max_size=6),
    )
    if kind == "not_mapping":
        return draw(st.one_of(st.lists(NUMBERS, max_size=3), st.text(max_size=10), NUMBERS))
    if kind == "random":
        return draw(st.dictionaries(keys, st.one_of(NUMBERS, JUNK), max_size=5))
    picked = draw(st.lists(st.sampled_from([*names[:2], CASH]), min_size=1, unique=True))
    raw = [draw(st.floats(0.01, 1.0)) for _ in picked]
    scale = draw(st.sampled_from([1.0] * 6 + [1.015, 0.985, 1.03, 0.97, 0.7, 2.0]))
    total = sum(raw) / scale
    alloc: dict[str, Any] = {k: x / total for k, x in zip(picked, raw, strict=True)}
    if draw(st.integers(0, 3)) == 0:  # one mutation
        k = draw(keys)
        alloc[k] = draw(st.one_of(NUMBERS, JUNK))
    return alloc


PROSE = st.sampled_from(["", "Here is my answer:\n", "Sure.", "Final answer ->", "ok\n\n"])


@st.composite
def model_outputs(draw: st.DrawFn, names: list[str]) -> tuple[str, Any, bool]:
    """Return (text, allocation object, whether the text is the object wrapped only benignly)."""
    alloc = draw(allocation_objects(names))
    top: dict[str, Any] = {"reasoning": draw(st.text(max_size=20)), "allocations": alloc}
    if draw(st.integers(0, 9)) == 0:
        top = {"reasoning": "r", "allocation": alloc}
    text = json.dumps(top, indent=draw(st.sampled_from([None, 2])))
    benign = "allocations" in top
    style = draw(
        st.sampled_from(
            ["plain", "plain", "fence", "think", "comma", "prose", "cut", "edit", "garbage"]
        )
    )
    if style == "fence":
        text = f"```json\n{text}\n```"
    elif style == "think":
        decoy = json.dumps({"allocations": {names[0]: 1.0}})
        text = f"<think>{draw(st.text(max_size=20))} {decoy}</think>\n{text}"
    elif style == "comma":
        text = re.sub(r"(\d|\"|\]|\})(\s*\})", r"\1,\2", text, count=draw(st.integers(1, 3)))
    elif style == "prose":
        text = f"{draw(PROSE)}{text}\n{draw(PROSE)}"
    elif style == "cut":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
        benign = False
    elif style == "edit":
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.text(max_size=3)) + text[i + 1 :]
        benign = False
    elif style == "garbage":
        text = draw(st.text(max_size=60))
        benign = False
    return text, alloc, benign


@settings(
    max_examples=1200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    st.sampled_from(["equity", "polymarket"]).flatmap(
        lambda m: st.tuples(
            st.just(m),
            model_outputs(
                ["AAPL", "MSFT", "NVDA"]
                if m == "equity"
                else ["fedcut_YES", "Q2_NO", "fedcut_NO", "Q2_YES"]
            ),
            st.sampled_from(["stop", "stop", "stop", "length", None]),
        )
    )
)
def test_fuzz_no_invalid_allocation_is_accepted(
    case: tuple[str, tuple[str, Any, bool], Any],
) -> None:
    market, (text, alloc, benign), finish = case
    obs, key_map = (EQ, None) if market == "equity" else (PM, PM_KEYS)
    try:
        parsed = check_response(text, finish, obs, key_map=key_map)
    except InvalidOutput as exc:
        assert "\n" not in str(exc) and str(exc)
        if benign and finish != "length":
            assert not oracle_valid(alloc, obs, key_map), (text, str(exc))
        return
    # Accepted: it must be a complete, valid, normalised allocation over the universe.
    assert finish != "length"
    a = parsed.allocation
    assert set(a) == {*obs.assets, CASH}
    assert all(isinstance(w, float) and math.isfinite(w) and w >= 0 for w in a.values())
    assert math.fsum(a.values()) == pytest.approx(1.0, abs=1e-12)
    assert validate_allocation(a, obs) == pytest.approx(a)
    assert all(a[x] == 0 for x in obs.assets if x not in obs.prices)
    assert all(a[q.yes] == 0 or a[q.no] == 0 for q in obs.questions)
    if benign:
        assert oracle_valid(alloc, obs, key_map), text
