"""Tests of the ledger, the statistics and the leaderboard, against hand-derived numbers."""
