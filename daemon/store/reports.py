"""Reports of a store named by path or URL: open it for reading, hand the connection to scoring.

Scoring and the protocols compute from a read connection and never open a store themselves
(they sit below the store, see the import contracts in pyproject.toml); these are the entries
that take a store's name: a SQLite file, opened read-only, or a shared PostgreSQL store, read as
one consistent snapshot (:func:`daemon.store.read.open_for_reading`).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from agents.alphaforgebench import report as alphaforge_report
from agents.portbench.scores import HORIZON, StageScores, score_connection
from daemon.store.read import open_for_reading
from scoring.board import leaderboard as board
from scoring.board.forked import collector_paused
from scoring.board.load import Key, Report
from scoring.board.report_html import render_html

__all__ = ["leaderboard", "live_figures", "load_alphaforge", "load_report", "portbench_scores",
           "reading", "write_html"]

T = TypeVar("T")


@contextmanager
def reading(db: str | Path) -> Iterator[sqlite3.Connection]:
    """Open the store ``db`` for reading for the ``with`` block, then close it."""
    con = open_for_reading(db)
    try:
        yield con
    finally:
        con.close()


def _read(db: str | Path, compute: Callable[[sqlite3.Connection], T]) -> T:
    with reading(db) as con:
        return compute(con)


def load_report(db: str | Path, *, window: tuple[float | None, float | None] = (None, None),
                min_valid_rate: float | None = None, min_days: int | None = None,
                parallel: bool = False, curves_wanted: bool = True,
                json_wanted: bool = False) -> Report:
    """Return the leaderboard and chart series of the store ``db``
    (:func:`scoring.board.leaderboard.report_of`; ``parallel``: its markets in forked
    processes when this process runs one thread, for the CLI only; without ``curves_wanted``
    the report's curves, which only the HTML report draws, are left empty; it also pauses the
    cyclic garbage collector meanwhile, :func:`scoring.board.forked.collector_paused`;
    ``json_wanted``: the markets' rows and series also encoded as JSON where computed)."""
    with collector_paused() if parallel else contextlib.nullcontext():
        return _read(db, lambda con: board.report_of(
            con, window=window, min_valid_rate=min_valid_rate, min_days=min_days,
            parallel=parallel, curves_wanted=curves_wanted, json_wanted=json_wanted))


def leaderboard(db: str | Path, *, window: tuple[float | None, float | None] = (None, None),
                min_valid_rate: float | None = None, min_days: int | None = None
                ) -> dict[str, Any]:
    """Return the leaderboard of the store ``db``."""
    return load_report(db, window=window, min_valid_rate=min_valid_rate,
                       min_days=min_days).board


def live_figures(db: str | Path) -> dict[Key, dict[str, float]]:
    """Return the finite figures of every (agent, market) over the whole store ``db``
    (:func:`scoring.board.leaderboard.live_figures`)."""
    return board.live_figures(leaderboard(db))


def write_html(db: str | Path, out_path: str | Path, *,
               window: tuple[float | None, float | None] = (None, None)) -> Path:
    """Write the HTML report of the store ``db`` to ``out_path``; return the path."""
    out = Path(out_path)
    out.write_text(render_html(load_report(db, window=window)), encoding="utf-8")
    return out


def load_alphaforge(db: str | Path) -> dict[str, Any]:
    """Return AlphaForgeBench's figures per strategy version and the latest instability run of
    the store ``db`` (:func:`agents.alphaforgebench.report.load`)."""
    return _read(db, lambda con: alphaforge_report.load(
        lambda sql, params: con.execute(sql, params).fetchall()))


def portbench_scores(db: str | Path, classes: Mapping[str, str] | None = None, *,
                     horizon: int = HORIZON, stored: bool = True
                     ) -> dict[str, list[StageScores]]:
    """Return the PortBench stage scores of every ``portbench`` decision of the store ``db``, by
    agent (:func:`agents.portbench.scores.score_connection`)."""
    return _read(db, lambda con: score_connection(con, classes, horizon=horizon, stored=stored))
