"""A season's bundle (issue 32, points 3-4): ``export --bundle`` writes it, ``verify-bundle``
checks it offline (hashes, chains, heads, the rebuilt report, the Ed25519 signature) and names
what does not hold, and ``report --bundle`` prints the report of a bundle that verifies."""

from __future__ import annotations

import io
import json
import sqlite3
import tarfile
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.config.settings import parse_config
from daemon.store.integrity.chain import STREAMS, chain_rows
from tests.store.test_cli_database import ROOT, cli
from tests.store.test_faults import TINY_CONFIG, make_recording


def _keys(d: Path) -> tuple[Path, Path, Path]:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    pub = ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo
    (d / "key.pem").write_bytes(key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
                                                  ser.NoEncryption()))
    (d / "pub.pem").write_bytes(key.public_key().public_bytes(*pub))
    (d / "other.pem").write_bytes(other.public_key().public_bytes(*pub))
    return d / "key.pem", d / "pub.pem", d / "other.pem"


@pytest.fixture(scope="module")
def season(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """A replayed season's store, its signed bundle, the public key and another key."""
    d = tmp_path_factory.mktemp("bundle")
    key, pub, other = _keys(d)
    rec = d / "rec.jsonl.gz"
    make_recording(rec)
    cfg = d / "season.toml"
    cfg.write_text(TINY_CONFIG + f'\n[season]\nname = "S1"\nsigning_key = "{key}"\n')
    r = cli("replay", str(rec), "--config", str(cfg), "--db", str(d / "s.db"), "--no-progress",
            timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("export", "--db", str(d / "s.db"), "--bundle", str(d / "b.tar"), "--config",
            str(cfg), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.endswith(", 13 heads, signed\n")  # every stream (four of CapitalBench)
    return d / "s.db", d / "b.tar", pub, other


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def _pack(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_bundle_verifies_offline_and_reports_as_its_store(
        season: tuple[Path, Path, Path, Path]) -> None:
    db, bundle, pub, _ = season
    r = cli("verify-bundle", str(bundle), "--key", str(pub), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok: ") and "signature verified (season S1)" in r.stdout
    assert ", report replayed from the stored answers matches, " in r.stdout
    manifest = json.loads(_members(bundle)["manifest.json"])
    assert manifest["season"]["name"] == "S1" and manifest["rows"]["decisions"] > 0
    assert all(len(h) == 40 for h in manifest["heads"].values() if h)
    assert cli("report", "--bundle", str(bundle), "--json", timeout=120).stdout == cli(
        "report", "--db", str(db), "--json", timeout=120).stdout
    text = cli("report", "--bundle", str(bundle), timeout=120).stdout
    assert "season S1: lineup frozen " in text


def test_another_key_or_no_signature_is_named(season: tuple[Path, Path, Path, Path],
                                              tmp_path: Path) -> None:
    _, bundle, pub, other = season
    r = cli("verify-bundle", str(bundle), "--key", str(other), timeout=120)
    assert (r.returncode, r.stdout) == (
        1, "manifest.sig is not this key's signature of manifest.json\n")
    members = _members(bundle)
    del members["manifest.sig"]
    unsigned = _pack(tmp_path / "u.tar", members)
    r = cli("verify-bundle", str(unsigned), "--key", str(pub), timeout=120)
    assert (r.returncode, r.stdout) == (1, "the bundle is not signed (no manifest.sig)\n")
    assert cli("verify-bundle", str(unsigned), timeout=120).returncode == 0  # no key asked


def test_an_edited_store_or_report_in_a_bundle_is_named(
        season: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    import hashlib

    _, bundle, pub, _ = season
    members = _members(bundle)
    store = tmp_path / "store.db"
    store.write_bytes(members["store.db"])
    con = sqlite3.connect(store)
    with con:
        con.execute("UPDATE fills SET cost = cost + 1 WHERE id = (SELECT MIN(id) FROM fills)")
    con.close()
    edited = store.read_bytes()
    r = cli("verify-bundle", str(_pack(tmp_path / "a.tar", {**members, "store.db": edited})),
            timeout=120)
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == (
        "store.db is not the file the manifest names (sha256 differs)")
    assert any(line.startswith("store.db: fills: row 1 (") and line.endswith(
        "was edited: its content does not match its hash") for line in r.stdout.splitlines())
    # the manifest rewritten to the edited file's hash: the signature no longer holds
    manifest = json.loads(members["manifest.json"])
    manifest["files"]["store.db"] = hashlib.sha256(edited).hexdigest()
    forged = {**members, "store.db": edited,
              "manifest.json": json.dumps(manifest, sort_keys=True, indent=2).encode()}
    r = cli("verify-bundle", str(_pack(tmp_path / "b.tar", forged)), "--key", str(pub),
            timeout=120)
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == "manifest.sig is not this key's signature of manifest.json"
    report = members["report.json"].replace(b'"S1"', b'"S2"')
    r = cli("verify-bundle", str(_pack(tmp_path / "c.tar", {**members, "report.json": report})),
            timeout=120)
    assert r.returncode == 1 and "report.json is not the file the manifest names" in r.stdout
    assert "the report rebuilt from store.db differs from report.json" in r.stdout
    r = cli("report", "--bundle", str(tmp_path / "c.tar"), timeout=120)
    line = f"paperarena: {tmp_path / 'c.tar'}: the report replayed from the stored answers"
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(line) and "differs from report.json at line " in r.stderr
    assert "report.json has '" in r.stderr and "S2" in r.stderr and "S1" in r.stderr


def test_a_file_that_is_no_bundle_is_refused_in_one_line(tmp_path: Path) -> None:
    odd = _pack(tmp_path / "odd.tar", {"../etc/passwd": b"x"})
    r = cli("verify-bundle", str(odd))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unexpected member" in r.stderr
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    r = cli("verify-bundle", str(tmp_path / "junk.tar"))
    assert r.returncode == 2 and "not a readable bundle" in r.stderr and "Traceback" not in (
        r.stderr)
    r = cli("export", "--db", str(tmp_path / "none.db"))
    assert r.returncode == 2 and "give --out DIR (tables) or --bundle FILE" in r.stderr


def _stored_config(bundle: Path, d: Path) -> str:
    """Return the config a bundle's store keeps of its run."""
    store = d / "config.db"
    store.write_bytes(_members(bundle)["store.db"])
    con = sqlite3.connect(store)
    try:
        return str(con.execute("SELECT config_json FROM runs").fetchone()[0])
    finally:
        con.close()


def rechain(con: sqlite3.Connection, table: str) -> None:
    """Recompute every chain of ``table`` (an edit the chains then accept)."""
    stream = STREAMS[table]
    rows = con.execute(f"SELECT {stream.order}, {', '.join(stream.columns)} FROM {table}"
                       f" ORDER BY {stream.order}").fetchall()
    chains = chain_rows(table, b"", [r[1:] for r in rows])
    con.executemany(f"UPDATE {table} SET chain=? WHERE {stream.order}=?",
                    [(c, r[0]) for c, r in zip(chains, rows, strict=True)])


def _with_runs(bundle: Path, d: Path, edit: str, *params: object,
               also: Callable[[sqlite3.Connection], object] | None = None) -> Path:
    """Return a bundle re-exported from ``bundle``'s store after the SQL ``edit`` of its runs
    (their chains recomputed: a publisher's own config) and ``also``, so every other check
    holds."""
    store = d / "store.db"
    store.write_bytes(_members(bundle)["store.db"])
    con = sqlite3.connect(store)
    with con:
        con.execute(edit, params)
        rechain(con, "runs")
        if also is not None:
            also(con)
    con.close()
    out = d / "edited.tar"
    r = cli("export", "--db", str(store), "--bundle", str(out), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


#: A CapitalBench round as a store before schema v17 holds it: its manifest names no briefing.
_OLD_ROUND = ("weekly-2026-10-19", "weekly", 1_760_880_600.0, 1_760_884_200.0, "2026-10-19",
              1_760_904_000.0, "2026-10-26", 1_761_508_800.0, "/rounds/weekly-2026-10-19",
              json.dumps({"round_id": "weekly-2026-10-19", "track": "weekly"}), "0" * 64,
              "frozen")


def test_a_season_the_replay_does_not_support_is_named_not_replayed(
        season: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    _, bundle, _, _ = season
    cfg = json.loads(_stored_config(bundle, tmp_path))
    capital = parse_config(tomllib.loads((ROOT / "examples" / "capitalbench.toml").read_text()))
    cfg = {**capital.model_dump(mode="json"), "store": cfg["store"]}  # CapitalBench rounds
    # its briefing (a round's prompt is rebuilt from it) absent, and not in the store: a round
    # frozen before schema v17
    cfg["capitalbench"]["briefing"] = str(tmp_path / "gone.md")

    def edit(con: sqlite3.Connection) -> None:
        con.execute("INSERT INTO capital_rounds(round_id, track, frozen_ts, deadline_ts,"
                    " start_day, start_ts, end_day, end_ts, dir, manifest_json, hashes_sha256,"
                    " status) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", _OLD_ROUND)
        con.execute("INSERT INTO capital_round_states(round_id, status) VALUES(?, 'frozen')",
                    (_OLD_ROUND[0],))
        rechain(con, "capital_rounds")
        rechain(con, "capital_round_states")

    edited = _with_runs(bundle, tmp_path, "UPDATE runs SET config_json = ?", json.dumps(cfg),
                        also=edit)
    why = (f"the CapitalBench briefing {tmp_path / 'gone.md'} is not here and the store holds no"
           f" copy of the briefing round {_OLD_ROUND[0]} was frozen from (a store written before"
           " schema v17 keeps only its SHA-256)")
    # One line naming why the replay was not done; the rest of the bundle verifies.
    r = cli("verify-bundle", str(edited), timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr  # not wholly checked, never 0
    assert r.stdout.startswith(f"not wholly checked: {edited}: "), r.stdout
    assert f"not replayed: {why}" in r.stdout, r.stdout + r.stderr
    r = cli("report", "--bundle", str(edited), "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert why in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert "not replayed" in r.stderr, r.stderr


def test_a_store_of_live_and_replay_runs_or_replays_of_two_configs_is_not_replayed(
        season: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    _, bundle, _, _ = season
    # A replay's store a live run went on (a mix), or a replay resumed with another config (the
    # replay refuses that: an edit); a real resumed replay: test_bundle_resumed.
    for mode, config, why in (
            ("live", "config_json", "the store was written by 2 runs of modes live, replay: live "
             "runs are replayed one after the other and the runs of one resumed replay as one, "
             "never a mix"),
            ("replay", "json_set(config_json, '$.agents[0].id', 'x')", "the store was written"
             " by 2 replay runs with different configs: only the runs of one resumed replay "
             "(one config) are replayed as one")):
        edited = _with_runs(bundle, tmp_path, "INSERT INTO runs(started_ts, mode, version,"
                            f" config_json) SELECT started_ts + 1, ?, version, {config}"
                            " FROM runs", mode)
        r = cli("verify-bundle", str(edited), timeout=120)
        assert r.returncode == 3, r.stdout + r.stderr  # not wholly checked, never 0
        assert r.stdout.startswith(f"not wholly checked: {edited}: "), r.stdout
        assert f"not replayed: {why}" in r.stdout, r.stdout
        assert r.stdout.count("\n") == 1 and "Traceback" not in r.stdout + r.stderr


def test_a_season_whose_config_was_reloaded_is_not_replayed(
        season: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    _, bundle, _, _ = season
    # An amendment an hour into the season that no run started with and no stored reload took:
    # a reload's by a daemon before schema v17 (which stored no config).
    edited = _with_runs(bundle, tmp_path, "INSERT INTO season(name, kind, ts, lineup_json,"
                        " lineup_sha256, changes_json) SELECT name, 'amendment', ts + 3600,"
                        " lineup_json, lineup_sha256, '[]' FROM season",
                        also=lambda con: rechain(con, "season"))
    r = cli("verify-bundle", str(edited), timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr  # not wholly checked, never 0
    assert r.stdout.startswith(f"not wholly checked: {edited}: "), r.stdout
    assert "not replayed: the config was reloaded while running (" in r.stdout, r.stdout
    assert ("a season amendment) and the store holds no config of that reload (a reload"
            " before schema v17 stored none; or the row is gone): it cannot be replayed"
            ) in r.stdout
