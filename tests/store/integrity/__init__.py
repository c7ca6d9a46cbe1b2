"""Tests of the store's integrity: hash chains, seasons, bundles (issue 32)."""
