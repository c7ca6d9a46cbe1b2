"""Round directories without following links: the lstat walk, reads and writes below an open
directory whose every path component is opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a
FIFO is never waited on). :mod:`agents.capitalbench.rounds` freezes and verifies rounds with
them: nothing inside a round may be a symlink, a hard link, a FIFO, a device or a socket.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from dataclasses import dataclass, field

#: Open flags that never follow a symlink (``O_NOFOLLOW``) and never wait on a FIFO
#: (``O_NONBLOCK``; a regular file ignores it).
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: A round is three levels deep (``runs/official/x.json``); deeper directories are not examined.
MAX_DEPTH = 16


class Refused(Exception):
    """An entry (relative path) that is not a plain directory or single-link regular file."""

    def __init__(self, where: str, kind: str) -> None:
        super().__init__(f"{where}: {kind}")
        self.where, self.kind = where, kind


@dataclass(slots=True)
class Tree:
    """What an lstat walk of a round found: refused entries (relative path -> kind), plain files,
    directories that could not be listed."""

    refused: dict[str, str] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    unreadable: dict[str, str] = field(default_factory=dict)


def show(text: str) -> str:
    """Return ``text``, quoted when printing it could break the one-line messages."""
    return text if text.isprintable() else repr(text)


def kind_of(st: os.stat_result, dir_fd: int, name: str) -> str | None:
    """Return why an entry (its lstat) is refused, or None for a directory or a regular file
    with a single link. A symlink is named with its target text, never followed."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return None
    if stat.S_ISREG(mode):
        return None if st.st_nlink == 1 else f"hard link ({st.st_nlink} links)"
    if stat.S_ISLNK(mode):
        try:
            return f"symlink to {show(os.readlink(name, dir_fd=dir_fd))}"
        except OSError:
            return "symlink"
    kinds = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))
    return next((k for test, k in kinds if test(mode)), "not a regular file or directory")


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def describe(dir_fd: int, name: str, default: str) -> str:
    """Return the kind of ``name`` found when opening it without following failed (a race)."""
    st = lstat_at(dir_fd, name)
    return (kind_of(st, dir_fd, name) if st is not None else None) or default


def walk(fd: int, prefix: str, tree: Tree, depth: int = 0) -> None:
    """Examine every entry below ``fd`` with lstat (never following, never opening a file)."""
    try:
        names = sorted(os.listdir(fd))
    except OSError as exc:
        tree.unreadable[prefix.rstrip("/")] = exc.strerror or str(exc)
        return
    for name in names:
        rel = prefix + name
        st = lstat_at(fd, name)
        if st is None:
            continue  # removed meanwhile
        kind = kind_of(st, fd, name)
        if kind is not None:
            tree.refused[rel] = kind
        elif stat.S_ISREG(st.st_mode):
            tree.files.add(rel)
        elif depth >= MAX_DEPTH:
            tree.refused[rel] = f"directory nested deeper than {MAX_DEPTH} levels"
        else:
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped meanwhile
                    tree.refused[rel] = describe(fd, name, "not a directory")
                elif exc.errno != errno.ENOENT:
                    tree.unreadable[rel] = exc.strerror or str(exc)
                continue
            try:
                walk(sub, rel + "/", tree, depth + 1)
            finally:
                os.close(sub)


def read_at(dir_fd: int, rel: str) -> bytes:
    """Return the bytes of ``rel`` below ``dir_fd``, opening every component with
    ``O_NOFOLLOW`` (a link swapped in after the walk is refused, a FIFO is never waited on);
    raises :class:`Refused` for anything but a single-link regular file."""
    *dirs, name = rel.split("/")
    fd = dir_fd
    try:
        for i, d in enumerate(dirs):
            try:
                nfd = os.open(d, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                kind = describe(fd, d, "") if exc.errno in (errno.ELOOP, errno.ENOTDIR) else ""
                if kind:
                    raise Refused("/".join(dirs[:i + 1]), kind) from None
                raise
            if fd != dir_fd:
                os.close(fd)
            fd = nfd
        try:
            ffd = os.open(name, READ_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(rel, describe(fd, name, "symlink")) from None
            raise
        try:
            st = os.fstat(ffd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise Refused(rel, kind_of(st, fd, name) or "not a regular file")
            chunks = []
            while chunk := os.read(ffd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(ffd)
    finally:
        if fd != dir_fd:
            os.close(fd)


def write_at(dir_fd: int, rel: str, data: bytes) -> None:
    """Write ``rel`` below ``dir_fd``: sub-directories created or opened with ``O_NOFOLLOW``,
    the file written to a new (``O_EXCL``) temporary file then renamed over ``rel``, so nothing
    already there (a symlink, a hard link, a FIFO) is ever written through."""
    *dirs, name = rel.split("/")
    fd = dir_fd
    try:
        for d in dirs:
            with contextlib.suppress(FileExistsError):
                os.mkdir(d, dir_fd=fd)
            nfd = os.open(d, DIR_FLAGS, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = nfd
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o666, dir_fd=fd)
        try:
            with os.fdopen(wfd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        if fd != dir_fd:
            os.close(fd)
