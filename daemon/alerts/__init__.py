"""Alerts: drawdown breaches, halts and source health, evaluated on the bus and delivered.

Owns the ``[alerts]`` table (:mod:`.config`), the alert kinds (:mod:`.kinds`), the rules that
fire them (:mod:`.rules`) and their delivery to webhooks and logs (:mod:`.delivery`).

May import: everything below the web (the engine, config, store, market, ground, scoring).
"""
