"""Statistics of equity curves: metrics (:mod:`.metrics`), the papers' benchmark measures
(:mod:`.benchmarks`: rolling-k, ranking scores, risk and regime), PortBench's correlation-aware
diversification (:mod:`.diversification`) and inference: the stationary block bootstrap
(``arch``'s draws and block lengths, reproduced in numpy and tested against arch), intervals,
paired comparisons and figures relative to a benchmark (:mod:`.inference`), the Sharpe tests
PSR, DSR, MinTRL and the HAC difference (:mod:`.sharpe_tests`), Holm and the Model Confidence
Set (:mod:`.multiple`).

May import: nothing of the project (third-party: numpy; arch and scipy only in the tests,
as the reference).
"""
