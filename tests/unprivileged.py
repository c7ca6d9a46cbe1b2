"""Run a command as an unprivileged user (``nobody``), from a root test run.

    python tests/unprivileged.py PATH [PATH ...] -- CMD [ARG ...]

As root, in a private mount namespace (``unshare --mount``; nothing outside it changes): every
directory on the way to each ``PATH`` that ``nobody`` could not traverse (``/root`` at mode
0700, where pyenv keeps the interpreter) is covered by an empty tmpfs into which ``PATH`` itself
is bound back, read-only; then ``setpriv`` becomes uid/gid 65534 with no supplementary group,
an empty capability bounding set, no inheritable or ambient capability and no_new_privs, and
execs ``CMD``. So the command sees the files it needs and nothing else of what was private,
and holds no privilege at all: what a ``DynamicUser=`` service has.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

NOBODY = 65534


def _closed_ancestor(path: Path) -> Path | None:
    """Return the highest ancestor of ``path`` that others cannot traverse, if any."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not os.stat(parent).st_mode & stat.S_IXOTH:
            return parent
    return None


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def open_paths(paths: list[Path]) -> None:
    """Make each of ``paths`` reachable by others in this (private) mount namespace."""
    covered: dict[Path, list[Path]] = {}
    for p in paths:
        closed = _closed_ancestor(p)
        if closed is not None:
            covered.setdefault(closed, []).append(p)
    stage = Path(tempfile.mkdtemp(prefix="unpriv-stage-"))
    count = 0
    for closed, inside in covered.items():
        staged = []
        for p in inside:
            count += 1
            keep = stage / str(count)
            keep.mkdir()
            _mount("--bind", str(p), str(keep))
            staged.append((p, keep))
        _mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", str(closed))
        for p, keep in staged:
            p.mkdir(parents=True, exist_ok=True)
            _mount("--bind", str(keep), str(p))
            _mount("-o", "remount,bind,ro", str(p))


def main(argv: list[str]) -> int:
    """Open the paths, drop every privilege, exec the command."""
    cut = argv.index("--")
    paths, cmd = [Path(p).resolve() for p in argv[:cut]], argv[cut + 1:]
    if os.environ.get("_UNPRIV_INSIDE") != "1":
        os.environ["_UNPRIV_INSIDE"] = "1"
        os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", "--",
                              sys.executable, *sys.argv])
    open_paths(paths)
    os.environ.pop("_UNPRIV_INSIDE", None)
    os.execvp("setpriv", ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                          "--clear-groups", "--bounding-set=-all", "--inh-caps=-all",
                          "--ambient-caps=-all", "--no-new-privs", "--", *cmd])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
