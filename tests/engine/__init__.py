"""Tests of the engine and its rounds: observations, skips, opening fills, the daemon lifecycle."""
