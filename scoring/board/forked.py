"""Independent parts of a report computed in forked processes, when forking is safe.

A report's markets are independent (their rows and their inference share nothing but what
was read before), so a single-threaded caller (``paperarena report``) may compute them on
several cores: :func:`map_forked` runs ``fn`` on the first item in this process and on each
other item in a child made by ``fork`` (the same code on the same data, so the same results
bit for bit), and takes the children's results back through a pipe (``pickle``, which keeps
every float, its sign and its type). Forking is done only when the caller opts in and this
process runs a single thread: a process with other threads (the daemon's event loop, its
worker and SQLite threads) could fork while one of them holds a lock, so there ``fn`` runs
here, item after item. A child that fails or dies gives no result; its item is then computed
here, so a result (or the error ``fn`` raises) never depends on the children.

While the processes share the cores, numpy's OpenBLAS runs one thread in each (its threads
would otherwise spin beside the other process's, about a fifth more CPU time); OpenBLAS
splits a product among its threads by rows and columns of the result, never along the sum,
so every product is the same bit for bit. The count is restored afterwards, and so is the
garbage collector, frozen meanwhile (``gc.freeze``: it would touch every object's page in
both processes, copying pages the fork shares). A one-shot caller may also pause the cyclic
collector for the whole report (:func:`collector_paused`: the rows' many small dicts set off
collections that scan every object alive, about a tenth of a market's time; reference
counting still frees all that is not a cycle). Meanwhile glibc's allocator keeps the memory
freed at the top of its heap (``mallopt``; blocks under 32 MiB from the heap): the large
temporaries of the inference reuse pages already mapped instead of faulting in new zeroed ones
(less system time); afterwards the defaults are set again and the memory given back. Numpy's
huge-page advice on its large arrays is off meanwhile (:func:`_small_pages`): the kernel zeroes
each 2 MiB page whole at its first touch, most of the system time of a market's temporaries
(about 0.2 s of CPU per process on a 1,000-agent report, measured with ``perf``).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

__all__ = ["blas_threads", "collector_paused", "fork_safe", "map_forked", "one_blas_thread"]

T = TypeVar("T")
R = TypeVar("R")


def fork_safe() -> bool:
    """Tell whether this process may fork: Linux (elsewhere system libraries may not survive
    a fork) and only this thread runs."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and threading.active_count() == 1)


_BLAS_CALLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
               ("openblas_get_num_threads", "openblas_set_num_threads"))


def _blas() -> tuple[Any, Any] | None:
    """Return the get and set thread-count functions of numpy's OpenBLAS (None if not found)."""
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"  # a wheel's bundled BLAS
    for path in sorted(libs.glob("*openblas*.so*")):
        try:
            lib = ctypes.CDLL(str(path))  # loaded already: the same library numpy calls
        except OSError:
            continue
        for get, put in _BLAS_CALLS:
            if hasattr(lib, get) and hasattr(lib, put):
                return getattr(lib, get), getattr(lib, put)
    return None


def blas_threads() -> int | None:
    """Return numpy's OpenBLAS thread count (None when it cannot be read)."""
    calls = _blas()
    return None if calls is None else int(calls[0]())


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with numpy's OpenBLAS on one thread, then restore its count."""
    calls = _blas()
    before = None if calls is None else int(calls[0]())
    if calls is not None:
        calls[1](1)
    try:
        yield
    finally:
        if calls is not None and before is not None:
            calls[1](before)


_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters
_MMAP_FROM = 32 << 20  # blocks from 32 MiB (glibc's largest threshold) mapped on their own
_HEAP_KEPT = 1 << 30  # freed memory kept up to 1 GiB, the heap grown 256 MiB at a time
_HEAP_PAD = 256 << 20
_GLIBC_DEFAULT = 128 * 1024  # both parameters' defaults


@contextmanager
def _heap_kept() -> Iterator[None]:
    """Run the block with glibc's allocator keeping the memory freed at the top of its heap
    (``mallopt``): a large temporary freed and allocated again reuses pages already mapped
    instead of new zeroed ones (fewer page faults: system time). Nothing else changes; the
    defaults are set again afterwards and the memory kept given back. Without glibc's
    ``mallopt``: the block as it is."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_FROM)
        mallopt(_M_TRIM_THRESHOLD, _HEAP_KEPT)
        mallopt(_M_TOP_PAD, _HEAP_PAD)
    try:
        yield
    finally:
        if mallopt is not None:
            mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT)
            mallopt(_M_TOP_PAD, _GLIBC_DEFAULT)
            mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT)
            trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
            if trim is not None:
                trim(0)  # what was kept goes back to the system


@contextmanager
def _small_pages() -> Iterator[None]:
    """Run the block with numpy's ``madvise(MADV_HUGEPAGE)`` on large arrays off, then as it
    was (numpy's runtime switch of ``NUMPY_MADVISE_HUGEPAGE``; without it, the block as it is).
    Only the kernel's page size changes, never a value."""
    switch = None
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, numpy 1
        try:
            switch = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
            break
        except ImportError:
            continue
    before = switch(False) if switch is not None else None
    try:
        yield
    finally:
        if switch is not None and before is not None:
            switch(bool(before))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector disabled, then as it was (for a
    one-shot process such as ``paperarena report``; never in the daemon, whose other threads
    would lose their collections meanwhile)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _child(fn: Callable[[T], R], item: T, w: int) -> None:
    """Compute ``fn(item)`` in a forked child, write its pickle to ``w`` and exit (never
    returns; exit status 1 and nothing written when ``fn`` or the pickling fails)."""
    code = 1
    try:
        data = pickle.dumps(fn(item), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(w, view) :]
        code = 0
    except BaseException:  # the parent computes the item itself
        code = 1
    finally:
        os._exit(code)  # no atexit, no flushing of the parent's buffers


def _collect(pid: int, r: int) -> tuple[bool, object]:
    """Read a child's pickled result from ``r`` and reap it; ``(False, None)`` if it failed."""
    chunks: list[bytes] = []
    with os.fdopen(r, "rb") as f:
        while chunk := f.read(1 << 20):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return False, None
    try:
        return True, pickle.loads(b"".join(chunks))
    except Exception:  # a truncated result: computed here instead
        return False, None


def map_forked(fn: Callable[[T], R], items: Sequence[T], *, parallel: bool = False,
               meanwhile: Callable[[], object] | None = None) -> list[R]:
    """Return ``[fn(x) for x in items]``, items after the first in forked children when
    ``parallel`` and :func:`fork_safe` (else all in this process, in order).

    ``fn`` must compute its result from data this process holds (a child's side effects are
    lost) and return something ``pickle`` can carry. ``meanwhile`` (independent of the
    results) is called once in this process: after the first item, while the children run.
    """
    if not parallel or len(items) < 2 or not fork_safe():
        results = [fn(x) for x in items]
        if meanwhile is not None:
            meanwhile()
        return results
    gc.freeze()  # the collector leaves what exists now alone: fewer shared pages copied
    try:
        with one_blas_thread(), _heap_kept(), _small_pages():
            return _map_forked(fn, items, meanwhile)
    finally:
        gc.unfreeze()


def _map_forked(fn: Callable[[T], R], items: Sequence[T],
                meanwhile: Callable[[], object] | None) -> list[R]:
    """Compute :func:`map_forked` in forked children (items after the first) and here."""
    children: list[tuple[int, int]] = []  # (pid, read end) per item after the first
    try:
        for item in items[1:]:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child
                os.close(r)
                for _, other in children:
                    os.close(other)
                _child(fn, item, w)
            os.close(w)
            children.append((pid, r))
        results: list[R] = [fn(items[0])]
        if meanwhile is not None:
            meanwhile()  # while the children still compute
        for item in items[1:]:
            pid, r = children.pop(0)
            ok, value = _collect(pid, r)
            results.append(value if ok else fn(item))  # type: ignore[arg-type]
        return results
    finally:  # an error or interrupt here: stop and reap the children not collected
        for pid, r in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
            os.close(r)
