"""The one-daemon-per-database lock file (``<resolved database>.lock``).

The lock is taken before the database is opened and only *claimed* (our pid written into it)
once the open succeeded; an open that is refused removes the lock file and the directories it
created, so a refused open leaves the directory as it found it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from daemon.store.dbfile import StoreLockedError


def acquire_lock(path: str, created: list[Path]) -> int:
    """Take the exclusive lock of the database ``path`` and return its descriptor.

    The lock sits next to the resolved file, so two paths (symlinks) to one database share one
    lock. Directories and the lock file made here are appended to ``created``. Raise
    :class:`StoreLockedError` if another daemon holds it, :class:`OSError` if it cannot be made.
    """
    lock_path = Path(f"{os.path.realpath(path)}.lock")
    missing = [d for d in reversed(lock_path.parents) if not d.exists()]
    for d in missing:
        d.mkdir()
        created.append(d)
    while True:
        existed = lock_path.exists()
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise StoreLockedError(
                f"{path} is in use by another paperarena daemon{who}; stop it or use another --db"
            ) from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else a refused open removed the file we locked: lock the new one
            if not existed:
                created.append(lock_path)
            return fd
        os.close(fd)


def claim_lock(fd: int) -> None:
    """Write this process's pid into the lock file (once the database is open)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)


def abandon_lock(fd: int | None, created: list[Path]) -> None:
    """Remove what :func:`acquire_lock` created (still holding the lock), then release it."""
    for p in reversed(created):
        with contextlib.suppress(OSError):
            p.rmdir() if p.is_dir() else p.unlink()
    created.clear()
    if fd is not None:
        os.close(fd)
