"""paperarena feeds package."""
