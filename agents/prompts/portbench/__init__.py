"""PortBench prompt set: one template per model stage (views, signals, weights, risk)."""
