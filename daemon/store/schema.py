"""The store's schema: its version and the SQL of every migration (SQLite and PostgreSQL)."""

from __future__ import annotations

SCHEMA_VERSION = 17

_V1 = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  id INTEGER PRIMARY KEY, started_ts REAL NOT NULL, stopped_ts REAL, mode TEXT NOT NULL,
  version TEXT NOT NULL, config_json TEXT NOT NULL, recording TEXT);
CREATE TABLE IF NOT EXISTS market_events(
  id INTEGER PRIMARY KEY, seq INTEGER, ts REAL NOT NULL, recv_ts REAL NOT NULL, kind TEXT NOT NULL,
  market TEXT, asset TEXT, price REAL, bid REAL, ask REAL, payload TEXT);
CREATE TABLE IF NOT EXISTS decisions(
  agent TEXT NOT NULL, market TEXT NOT NULL, scheduled_ts REAL NOT NULL, decided_ts REAL NOT NULL,
  outcome TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', input_json TEXT,
  input_sha256 TEXT, raw_output TEXT, allocation_json TEXT, template_version TEXT,
  attempts INTEGER NOT NULL DEFAULT 0, duration_s REAL NOT NULL DEFAULT 0, run_id INTEGER,
  PRIMARY KEY(agent, market, scheduled_ts));
CREATE TABLE IF NOT EXISTS llm_calls(
  id INTEGER PRIMARY KEY, agent TEXT NOT NULL, market TEXT NOT NULL, scheduled_ts REAL NOT NULL,
  attempt INTEGER NOT NULL, ts REAL NOT NULL, model TEXT, raw_response TEXT, error TEXT,
  finish_reason TEXT, tokens_in INTEGER, tokens_out INTEGER, latency_s REAL, cost_usd REAL);
CREATE TABLE IF NOT EXISTS fills(
  id INTEGER PRIMARY KEY, agent TEXT NOT NULL, market TEXT NOT NULL, scheduled_ts REAL NOT NULL,
  ts REAL NOT NULL, trades_json TEXT NOT NULL, traded_value REAL NOT NULL, cost REAL NOT NULL,
  value_before REAL NOT NULL, value_after REAL NOT NULL, weights_json TEXT NOT NULL,
  UNIQUE(agent, market, scheduled_ts));
CREATE TABLE IF NOT EXISTS books(market TEXT PRIMARY KEY, state_json TEXT NOT NULL,
  updated_ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS equity(
  agent TEXT NOT NULL, market TEXT NOT NULL, ts REAL NOT NULL, kind TEXT NOT NULL,
  value REAL NOT NULL, cash REAL NOT NULL, PRIMARY KEY(agent, market, kind, ts));
CREATE TABLE IF NOT EXISTS alerts(
  id INTEGER PRIMARY KEY, ts REAL NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL,
  agent TEXT, market TEXT, value REAL, limit_value REAL, message TEXT, payload TEXT);
CREATE TABLE IF NOT EXISTS resolutions(
  question_id TEXT PRIMARY KEY, market TEXT NOT NULL, ts REAL NOT NULL, payouts_json TEXT NOT NULL,
  source TEXT);
CREATE TABLE IF NOT EXISTS checkpoint(
  id INTEGER PRIMARY KEY CHECK (id = 1), offset INTEGER NOT NULL, clock REAL NOT NULL,
  state_json TEXT NOT NULL);
"""

# v2: indexes for the report and API, and per-agent operational state (halted / paused).
_V2 = """
CREATE INDEX IF NOT EXISTS market_events_asset_ts ON market_events(market, asset, ts);
CREATE INDEX IF NOT EXISTS market_events_seq ON market_events(seq);
CREATE INDEX IF NOT EXISTS fills_agent ON fills(agent, market, ts);
CREATE INDEX IF NOT EXISTS llm_calls_agent ON llm_calls(agent, ts);
CREATE TABLE IF NOT EXISTS agent_state(
  agent TEXT NOT NULL, market TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
  ts REAL NOT NULL, PRIMARY KEY(agent, market));
"""

# v3: market_events is append-only and hot; its secondary indexes halved insert throughput and
# nothing hot reads them (a restart reads the tail by rowid, recorded with each checkpoint).
_V3 = """
DROP INDEX IF EXISTS market_events_asset_ts;
DROP INDEX IF EXISTS market_events_seq;
ALTER TABLE checkpoint ADD COLUMN events_id INTEGER NOT NULL DEFAULT 0;
"""

# v4: consistency probes of LLM agents (paperarena probe), shown beside their rank.
_V4 = """
CREATE TABLE IF NOT EXISTS probes(
  id INTEGER PRIMARY KEY, agent TEXT NOT NULL, market TEXT NOT NULL,
  scheduled_ts REAL NOT NULL, ts REAL NOT NULL, repeats INTEGER NOT NULL,
  valid INTEGER NOT NULL, mean_l1 REAL, std_l1 REAL, min_l1 REAL, max_l1 REAL,
  input_sha256 TEXT, result_json TEXT);
CREATE INDEX IF NOT EXISTS probes_agent_ts ON probes(agent, ts);
"""

# v5: multi-step protocols; each model call names its step, the SHA-256 of the prompt it sent,
# its outcome (ok / invalid / error / fatal) and the value its answer was parsed into (JSON).
_V5 = """
ALTER TABLE llm_calls ADD COLUMN step TEXT;
ALTER TABLE llm_calls ADD COLUMN input_sha256 TEXT;
ALTER TABLE llm_calls ADD COLUMN outcome TEXT;
ALTER TABLE llm_calls ADD COLUMN parsed_json TEXT;
"""

# ---- v6: CapitalBench rounds (issue 14, docs/protocol-capitalbench.md) -----------------------
# One row per frozen round (its dates, the SHA-256 of its hashes.json, the start and end closes
# once stored) and one per model submission (official or consistency run), every call kept.
_V6 = """
CREATE TABLE IF NOT EXISTS capital_rounds(
  round_id TEXT PRIMARY KEY, track TEXT NOT NULL, frozen_ts REAL NOT NULL,
  deadline_ts REAL NOT NULL, start_day TEXT NOT NULL, start_ts REAL NOT NULL,
  end_day TEXT NOT NULL, end_ts REAL NOT NULL, dir TEXT NOT NULL, manifest_json TEXT NOT NULL,
  hashes_sha256 TEXT NOT NULL, status TEXT NOT NULL, start_prices_json TEXT,
  end_prices_json TEXT);
CREATE TABLE IF NOT EXISTS capital_submissions(
  round_id TEXT NOT NULL, run_id TEXT NOT NULL, agent TEXT NOT NULL, replicate INTEGER NOT NULL,
  official INTEGER NOT NULL, ts REAL NOT NULL, model TEXT, outcome TEXT NOT NULL,
  reason TEXT NOT NULL, holdings_json TEXT, submission_json TEXT, raw_responses_json TEXT NOT NULL,
  calls_json TEXT NOT NULL, tokens_in INTEGER NOT NULL, tokens_out INTEGER NOT NULL,
  cost_usd REAL NOT NULL, template_version TEXT,
  PRIMARY KEY(round_id, run_id, agent, replicate));
"""
# ---- end v6 -------------------------------------------------------------------------------------
# ---- v7: AlphaForgeBench instability runs (issue 14, point 7; paperarena alphaforge-instability)
# One row per run: repeated strategy generations of every configured alphaforgebench model on one
# frozen input, at each temperature, with their agreement / Jaccard / SNR figures (result_json).
_V7 = """
CREATE TABLE IF NOT EXISTS instability_runs(
  id INTEGER PRIMARY KEY, ts REAL NOT NULL, input_sha256 TEXT NOT NULL,
  prompt_sha256 TEXT NOT NULL, repeats INTEGER NOT NULL, result_json TEXT NOT NULL);
"""
# ---- end v7
# --- v8: compact decision inputs (issue 16, point 4) -------------------------------------------
# The market-wide part of a round's observation is stored once in ``observations`` (keyed by
# the SHA-256 of its canonical JSON); each decision keeps only its own part in input_json and
# names the round's part in observation_sha256 (agents.stored_input.join_input rebuilds it).
# Rows older than v8 keep the whole observation in input_json and no observation_sha256.
_V8 = """
CREATE TABLE IF NOT EXISTS observations(
  sha256 TEXT PRIMARY KEY, market TEXT NOT NULL, decision_ts REAL NOT NULL,
  market_json TEXT NOT NULL);
ALTER TABLE decisions ADD COLUMN observation_sha256 TEXT;
"""
# --- end v8 ------------------------------------------------------------------------------------
# --- v9: PortBench stage scores, delayed scoring (issue 13, point 6) ---------------------------
# S1..S5 and CEPS of a portbench decision, written by the process owning its agent once the
# decision's horizon has passed (agents/portbench/stage_scoring.py); score NULL: not a number.
_V9 = """
CREATE TABLE IF NOT EXISTS stage_scores(
  agent TEXT NOT NULL, market TEXT NOT NULL, scheduled_ts REAL NOT NULL, stage TEXT NOT NULL,
  horizon INTEGER NOT NULL, score REAL, scored_ts REAL NOT NULL,
  PRIMARY KEY(agent, market, scheduled_ts, stage));
"""
# --- end v9 ------------------------------------------------------------------------------------
# --- v10: sparse fill weights (issue 16, point 4) ------------------------------------------------
# fills.weights_json keeps only non-zero weights; assets_sha256 names the sorted list of every
# asset the weights had (asset_sets, once per distinct list; daemon.core.sparse_rows rebuilds them).
# Rows older than v10 hold every weight and no assets_sha256.
_V10 = """
CREATE TABLE IF NOT EXISTS asset_sets(sha256 TEXT PRIMARY KEY, assets_json TEXT NOT NULL);
ALTER TABLE fills ADD COLUMN assets_sha256 TEXT;
"""
# --- end v10 -----------------------------------------------------------------------------------
# --- v11: assets by index (issue 16, point 4) --------------------------------------------------
# A decision's per-agent input keeps its holdings and weights as [asset index, value] pairs
# (holdings_ix, weights_ix: indexes into the market part's assets; agents.stored_input), its
# allocation_json likewise, indexing the round's asset list (observations.assets_sha256 ->
# asset_sets), and a fill's trades_json and weights_json index its own asset list
# (daemon.core.sparse_rows). Rows written before keep assets by id and read as before. fills_agent
# went: the unique (agent, market, scheduled_ts) index serves every reader of fills.
_V11 = """
ALTER TABLE observations ADD COLUMN assets_sha256 TEXT;
DROP INDEX IF EXISTS fills_agent;
"""
# --- end v11 -----------------------------------------------------------------------------------

# --- v12: reasoning as its own field (issue 30, point 2) ---------------------------------------
# A decision's reasoning per step, JSON [{"step", "text"}] (agents.reasoning), written with the
# decision for every protocol ("[]" without any); NULL in rows written before, which readers
# derive from the stored calls as before.
_V12 = """
ALTER TABLE decisions ADD COLUMN reasoning TEXT;
"""
# --- end v12 -----------------------------------------------------------------------------------

# --- v13: hash chains (issue 32, point 2) ------------------------------------------------------
# Every decision, model call, fill, market event, mark and resolution carries ``chain`` (20
# bytes): its content's hash chained to the previous row of its table
# (daemon.store.integrity.chain); NULL
# in rows written before, which precede every chained row. ``season``: the frozen lineup of a
# season and its dated amendments (daemon.store.integrity.season).
_V13 = """
ALTER TABLE decisions ADD COLUMN chain BLOB;
ALTER TABLE llm_calls ADD COLUMN chain BLOB;
ALTER TABLE fills ADD COLUMN chain BLOB;
ALTER TABLE market_events ADD COLUMN chain BLOB;
ALTER TABLE equity ADD COLUMN chain BLOB;
ALTER TABLE resolutions ADD COLUMN chain BLOB;
CREATE TABLE IF NOT EXISTS season(
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL,
  lineup_json TEXT NOT NULL, lineup_sha256 TEXT NOT NULL, changes_json TEXT);
"""
# --- end v13 -----------------------------------------------------------------------------------

# --- v14: the run's config chained (issue 32) -------------------------------------------------
# Every ``runs`` row carries ``chain``: its config as it started, chained to the run before
# (daemon.store.integrity.chain); the rows written before are chained by the migration itself
# (chain_existing), so ``verify`` names an edited config of any run.
_V14 = """
ALTER TABLE runs ADD COLUMN chain BLOB;
"""
# --- end v14 -----------------------------------------------------------------------------------

# --- v15: CapitalBench chained (issue 32, point 2) ---------------------------------------------
# ``capital_rounds`` and ``capital_submissions`` carry ``chain`` (a round's columns fixed as it
# was frozen; a submission whole); a round's later status and prices are appended to
# ``capital_round_states`` (chained, one row a change: the round's status and prices after it),
# which ``verify`` holds the round's current values to (daemon.store.integrity.capital). The
# migration chains the rows stored before and writes each round's present state.
_V15 = """
ALTER TABLE capital_rounds ADD COLUMN chain BLOB;
ALTER TABLE capital_submissions ADD COLUMN chain BLOB;
CREATE TABLE IF NOT EXISTS capital_round_states(
  id INTEGER PRIMARY KEY, round_id TEXT NOT NULL, status TEXT NOT NULL, start_prices_json TEXT,
  end_prices_json TEXT, chain BLOB);
"""
# --- end v15 -----------------------------------------------------------------------------------

# --- v16: a CapitalBench round's trailing closes (issue 32, point 3) ---------------------------
# ``trailing_json``: the dividend-adjusted closes a live round's trailing-returns table was built
# from (``[capitalbench] adjusted_closes``, fetched at the freeze), chained with the round as
# frozen, so a replay freezes it again without fetching; NULL for a round of the daily closes the
# store holds, and for every round stored before (a NULL is left out of the chained content:
# their chains stand).
_V16 = """
ALTER TABLE capital_rounds ADD COLUMN trailing_json TEXT;
"""
# --- end v16 -----------------------------------------------------------------------------------

# --- v17: a reload's config and CapitalBench's briefing in the store (issue 32, point 3) --------
# ``config_reloads``: the config a running daemon took at a reload (``SIGHUP``), one row a
# reload, with the run it amended and when, chained like ``runs``, so a replay switches config
# where the live run did. ``capital_briefings``: each CapitalBench briefing file a round was
# frozen from, once per content (its SHA-256, the name it had, its text), chained, so a bundle's
# store holds every round's prompt input and replays without the file. ``season`` rows (its
# start and amendments) carry ``chain`` too; the rows stored before are chained by the
# migration itself (chain_existing), so an edited or deleted amendment is named by ``verify``.
_V17 = """
ALTER TABLE season ADD COLUMN chain BLOB;
CREATE TABLE IF NOT EXISTS config_reloads(
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, ts REAL NOT NULL, config_json TEXT NOT NULL,
  chain BLOB);
CREATE TABLE IF NOT EXISTS capital_briefings(
  id INTEGER PRIMARY KEY, sha256 TEXT NOT NULL UNIQUE, name TEXT NOT NULL, text TEXT NOT NULL,
  chain BLOB);
"""
# --- end v17 -----------------------------------------------------------------------------------

MIGRATIONS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7,
                               8: _V8, 9: _V9, 10: _V10, 11: _V11, 12: _V12, 13: _V13,
                               14: _V14, 15: _V15, 16: _V16, 17: _V17}


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
