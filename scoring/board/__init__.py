"""The leaderboard and the reports built from a store's rows.

Owns the entry (:mod:`.leaderboard`), reading rows and price panels (:mod:`.load`), each row's
figures (:mod:`.figures`), standings and ranks (:mod:`.rank`), the inference: block-bootstrap
intervals, Holm-adjusted comparisons, Sharpe tests, rank stability and the Model Confidence Set
(:mod:`.significance`), the text and JSON forms (:mod:`.text`), protocol sections and run groups
(:mod:`.extras`, :mod:`.run_groups`) and the HTML report (:mod:`.report_html`, its significance
cells :mod:`.significance_html`). Every function takes a read connection or computed figures;
a store is opened by name in :mod:`daemon.store.reports`.

May import: the ground, scoring's ledger and statistics, and the agents' protocol homes (their
report sections).
"""
