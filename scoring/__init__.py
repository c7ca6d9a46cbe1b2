"""paperarena scoring package."""
