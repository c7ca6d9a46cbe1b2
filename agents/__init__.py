"""Agents and the decision protocols they answer under.

Generic modules: the agent interface and observation (:mod:`.base`), allocation validation,
prompting and answer parsing, the LLM agent and its steps (:mod:`.llm`, :mod:`.llm_output`,
:mod:`.stepwise`), remote HTTP agents, plugins, baselines, the ``[[agents]]`` config section
(:mod:`.config`), the factory and the protocol table (:mod:`.factory`, :mod:`.protocols`), and
what a protocol may ask of its host (:mod:`.host`). Each benchmark protocol has one home holding
everything of it: :mod:`.alphaforgebench`, :mod:`.capitalbench`, :mod:`.portbench`,
:mod:`.stockbench`; no protocol imports another.

May import: the ground (``daemon.core``, ``daemon.timing``), feeds (recordings) and
``scoring.ledger`` / ``scoring.stats``. Never the engine, store, web, alerts, MQTT, config or roof:
a runner that needs the store is handed it (:mod:`.host`).
"""
