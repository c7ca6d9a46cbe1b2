"""Rounds run without full garbage collections and freeze what they leave behind."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from daemon.engine.round_gc import no_full_collection


class _Node:
    """A participant of a reference cycle (weak-referenceable)."""

    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture(autouse=True)
def _gc_state() -> Iterator[None]:
    """Restore the collector as it was (thresholds, frozen objects) after each test."""
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_no_full_collection_inside_nested_rounds_and_thresholds_restored() -> None:
    before = gc.get_threshold()
    with no_full_collection():
        inside = gc.get_threshold()
        assert inside[:2] == before[:2] and inside[2] > 10**8
        with no_full_collection():  # a second market's round overlaps the first
            assert gc.get_threshold() == inside
        assert gc.get_threshold() == inside  # still one round running
    assert gc.get_threshold() == before


def test_survivors_are_frozen_and_cycles_of_the_round_are_freed() -> None:
    gc.unfreeze()
    kept: list[list[int]] = []
    with no_full_collection():
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # garbage once the names go: only the collector frees it
        dead = weakref.ref(a)
        del a, b
        kept.extend([i] for i in range(1000))  # per-agent state the round keeps
        assert any(o is kept[500] for o in gc.get_objects())  # scanned while the round runs
    assert dead() is None
    assert not any(o is kept[500] for o in gc.get_objects())  # frozen: never scanned again
    assert gc.get_freeze_count() >= 1000 and kept[999] == [999]


def test_thresholds_restored_when_the_round_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), no_full_collection():
        raise RuntimeError("round failed")
    assert gc.get_threshold() == before
