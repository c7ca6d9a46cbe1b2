"""StockBench prompt set: one template per step (overview, decision, revision)."""
