"""paperarena agents package."""
