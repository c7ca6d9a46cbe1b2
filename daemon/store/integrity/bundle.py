"""A season's bundle: one archive anyone can check offline (issue 32, points 3 and 4).

``paperarena export --bundle F --db S`` writes a tar file holding:

- ``store.db``: a consistent copy of the SQLite store (every market event it saw, every
  decision input and raw model answer, fills, marks, resolutions, the season's lineup);
- ``report.json``: ``paperarena report --json`` of that copy;
- ``manifest.json``: the format, the season, each chain's head and row count, and the SHA-256
  of the two files above;
- ``manifest.sig`` (optional): the Ed25519 signature of ``manifest.json``'s bytes by the
  publisher's key (``[season] signing_key``: a PEM private key file; the key never enters the
  config or the bundle).

``paperarena verify-bundle F [--key PUB]`` checks, with no network: the files' hashes, every
chain of the store (:mod:`.verify`), that the heads and counts are the manifest's, that the
report recomputed from the stored rows is byte-identical to ``report.json``, that the report
rebuilt by replaying the season from the stored answers is too (a ``replay`` callback:
:mod:`daemon.app.bundle_replay`, no model called, no key needed; the first differing line is
named, and the first replayed decision or fill that is not the stored one), and with ``--key``
(a PEM public key) the signature. The store is self-contained: CapitalBench rounds frozen
since schema v17 are replayed from the briefing text it holds (``capital_briefings``), the
briefing file not needed. What it does not do yet: replay a season the replay does not support
(CapitalBench rounds frozen before v17 without their briefing file, a store of live and replay
runs or of replay runs with different configs, a config reloaded while running by a daemon
before v17, which stored no config: :func:`daemon.app.bundle_replay.refusal` and the run
checks); the callback raises :class:`NotReplayed` and the caller says the replay check was not
done (``verify-bundle`` exits 3).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.store.integrity.verify import VerifyError, verify

__all__ = ["FORMAT", "REPLAY_PROBLEMS", "BundleError", "NotReplayed", "first_difference",
           "verify_bundle", "write_bundle"]

#: The manifest's ``format``.
FORMAT = "paperarena-bundle/1"
_MEMBERS = ("manifest.json", "manifest.sig", "store.db", "report.json")
#: Largest member read from a bundle (bytes): a store of a long season fits.
_MAX_MEMBER = 64 << 30


class BundleError(Exception):
    """The bundle cannot be written or does not verify (one line)."""


#: How the replay's problems begin: the replayed report, a replayed decision or fill.
REPLAY_PROBLEMS = ("the report replayed from the stored answers differs", "the replay")


class NotReplayed(BundleError):
    """The bundle's season cannot be replayed from its stored answers (one line: why)."""


def first_difference(want: bytes, got: bytes) -> str:
    """Return where ``got`` first differs from ``want``: the line and both texts, shortened."""
    a, b = want.decode(errors="replace").split("\n"), got.decode(errors="replace").split("\n")
    for n, (x, y) in enumerate(zip(a, b, strict=False), 1):
        if x != y:
            i = next((k for k, (p, q) in enumerate(zip(x, y, strict=False)) if p != q),
                     min(len(x), len(y)))
            lo = max(0, i - 30)
            return f"line {n}: report.json has {x[lo:i + 30]!r}, the replay {y[lo:i + 30]!r}"
    n = min(len(a), len(b)) + 1
    return (f"line {n}: report.json has {len(a)} lines, the replay {len(b)}" if len(a) != len(b)
            else "the bytes differ")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_bundle(db: str, out: str, report_json: Callable[[str], str],
                 key_path: str | None = None) -> dict[str, Any]:
    """Write the bundle of the SQLite store ``db`` to ``out``; return its manifest.

    ``report_json``: the report of a store path as ``report --json`` prints it.
    ``key_path``: a PEM Ed25519 private key signing the manifest.
    """
    from daemon.store.backup import BackupError, backup
    from daemon.store.dbfile import connect_readonly
    from daemon.store.integrity.season import read_season

    if str(db).startswith(("postgresql://", "postgres://")):
        raise BundleError("--db is a PostgreSQL store: bundle a SQLite store (paperarena "
                          "backup of a scope is not available; migrate or replay into a file)")
    sign = _signer(key_path) if key_path else None
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "store.db"
        try:
            backup(db, copy, verify=True)
        except BackupError as exc:
            raise BundleError(str(exc)) from None
        try:
            checks = verify(str(copy))
        except VerifyError as exc:
            raise BundleError(f"--db {exc}") from None
        broken = [c.problem for c in checks if c.problem]
        if broken:
            raise BundleError(f"--db {db}: the chains do not hold, nothing bundled: {broken[0]}")
        report = report_json(str(copy)).encode()
        con = connect_readonly(copy)
        try:
            season = read_season(con)
        finally:
            con.close()
        manifest = {
            "format": FORMAT, "season": season,
            "heads": {c.name: c.head.hex() for c in checks},
            "rows": {c.name: c.rows for c in checks},
            "files": {"store.db": _sha256_file(copy),
                      "report.json": hashlib.sha256(report).hexdigest()},
        }
        text = (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode()
        try:
            with tarfile.open(out, "w") as tar:
                _add(tar, "manifest.json", text)
                if sign is not None:
                    _add(tar, "manifest.sig", sign(text))
                tar.add(copy, arcname="store.db")
                _add(tar, "report.json", report)
        except OSError as exc:
            raise BundleError(f"{out}: cannot write: {exc.strerror or exc}") from None
    return manifest


def _signer(key_path: str) -> Callable[[bytes], bytes]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(Path(key_path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise BundleError(f"{key_path}: not a readable PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{key_path}: not an Ed25519 private key")
    return key.sign


def _check_signature(pub_path: str, text: bytes, sig: bytes | None) -> str | None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(Path(pub_path).read_bytes())
    except (OSError, ValueError) as exc:
        raise BundleError(f"--key {pub_path}: not a readable PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BundleError(f"--key {pub_path}: not an Ed25519 public key")
    if sig is None:
        return "the bundle is not signed (no manifest.sig)"
    try:
        key.verify(sig, text)
    except InvalidSignature:
        return "manifest.sig is not this key's signature of manifest.json"
    return None


def _extract(path: str, into: Path) -> dict[str, Path]:
    """Extract the bundle's known regular members into ``into``; refuse anything else."""
    out: dict[str, Path] = {}
    try:
        with tarfile.open(path, "r") as tar:
            for m in tar.getmembers():
                if m.name not in _MEMBERS or not m.isfile() or m.size > _MAX_MEMBER:
                    raise BundleError(f"{path}: unexpected member {m.name!r} (a bundle holds "
                                      f"{', '.join(_MEMBERS)})")
                src = tar.extractfile(m)
                if src is None:
                    raise BundleError(f"{path}: member {m.name!r} cannot be read")
                target = into / m.name
                with open(target, "wb") as f:
                    while chunk := src.read(1 << 20):
                        f.write(chunk)
                out[m.name] = target
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BundleError(f"{path}: not a readable bundle ({exc})") from None
    for need in ("manifest.json", "store.db", "report.json"):
        if need not in out:
            raise BundleError(f"{path}: no {need} in the bundle")
    return out


def verify_bundle(path: str, report_json: Callable[[str], str], key: str | None = None,
                  replay: Callable[[str], tuple[str, str | None]] | None = None
                  ) -> tuple[list[str], dict[str, Any], str | None]:
    """Check the bundle at ``path`` offline; return (problems, manifest, replay note).

    ``replay``: the report of a store path rebuilt by replaying its season from the stored
    answers, and the first replayed decision or fill that is not the stored one (None: none);
    it raises :class:`NotReplayed` when it cannot replay. The note is None when no replay was
    asked, ``""`` when it ran, else why it did not. Problems found by the replay start with
    one of :data:`REPLAY_PROBLEMS`.
    """
    with tempfile.TemporaryDirectory() as tmp:
        files = _extract(path, Path(tmp))
        text = files["manifest.json"].read_bytes()
        try:
            manifest = json.loads(text)
        except ValueError as exc:
            raise BundleError(f"{path}: manifest.json is not JSON ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise BundleError(f"{path}: not a {FORMAT} bundle")
        problems: list[str] = []
        if key is not None:
            sig = files["manifest.sig"].read_bytes() if "manifest.sig" in files else None
            bad = _check_signature(key, text, sig)
            if bad:
                problems.append(bad)
        store_holds = True  # its file, chains and heads: then it is worth replaying
        for name in ("store.db", "report.json"):
            if _sha256_file(files[name]) != manifest.get("files", {}).get(name):
                problems.append(f"{name} is not the file the manifest names (sha256 differs)")
                store_holds = store_holds and name != "store.db"
        before = len(problems)
        try:
            checks = verify(str(files["store.db"]))
        except VerifyError as exc:
            raise BundleError(f"{path}: store.db: {exc}") from None
        problems += [f"store.db: {c.problem}" for c in checks if c.problem]
        heads = {c.name: c.head.hex() for c in checks}
        rows = {c.name: c.rows for c in checks}
        if heads != manifest.get("heads") or rows != manifest.get("rows"):
            diff = sorted(n for n in heads if heads[n] != (manifest.get("heads") or {}).get(n)
                          or rows[n] != (manifest.get("rows") or {}).get(n))
            problems.append(f"the chain heads or row counts are not the manifest's: "
                            f"{', '.join(diff) or 'streams differ'}")
        store_holds = store_holds and len(problems) == before
        stored = files["report.json"].read_bytes()
        rebuilt = report_json(str(files["store.db"])).encode()
        if rebuilt != stored:
            problems.append("the report rebuilt from store.db differs from report.json at "
                            f"{first_difference(stored, rebuilt)}")
        note = None
        if replay is not None and store_holds:
            try:
                report_text, decision = replay(str(files["store.db"]))
            except NotReplayed as exc:
                note = str(exc)
            else:
                note = ""
                replayed = report_text.encode()
                if replayed != stored:
                    problems.append(f"{REPLAY_PROBLEMS[0]} from report.json at "
                                    f"{first_difference(stored, replayed)}")
                if decision:
                    problems.append(decision)
    return problems, manifest, note
