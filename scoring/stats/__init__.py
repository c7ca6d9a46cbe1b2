"""Statistics of equity curves: metrics (:mod:`.metrics`) and benchmarks, comparisons and their
confidence (:mod:`.benchmarks`).

May import: nothing of the project.
"""
