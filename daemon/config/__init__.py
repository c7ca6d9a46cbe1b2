"""The config file: parsed once at load into frozen, validated objects.

Owns the whole file (:mod:`.settings`: ``Config``, ``load_config``), its error (:mod:`.errors`:
``ConfigError``, caught by the command line without importing the config), the ``[markets]``
section (:mod:`.markets`) and the runtime sections (:mod:`.runtime`: store, HTTP, scheduler,
logging, leaderboard). Other sections' types live with the package they configure and are
assembled here: ``[[agents]]`` in :mod:`agents.config`, ``[capitalbench]`` in
:mod:`agents.capitalbench.config`, ``[sources.*]`` in :mod:`feeds.settings`, ``[mqtt]`` in
:mod:`daemon.mqtt.settings`; the ``[alerts]`` table is parsed by :mod:`daemon.alerts.config`.

May import: the ground, feeds, agents, scoring, :mod:`daemon.store` (a shared store's URL check)
and :mod:`daemon.mqtt` (its settings).
"""
