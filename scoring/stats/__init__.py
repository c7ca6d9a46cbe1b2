"""Statistics of equity curves: metrics (:mod:`.metrics`), the papers' benchmark measures
(:mod:`.benchmarks`: rolling-k, ranking scores, risk and regime), PortBench's correlation-aware
diversification (:mod:`.diversification`) and inference: bootstrap confidence, paired
comparisons and figures relative to a benchmark (:mod:`.inference`).

May import: nothing of the project.
"""
