"""paperarena daemon package."""
