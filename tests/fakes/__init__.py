"""Local fake servers used by the feed tests."""
