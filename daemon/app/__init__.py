"""The roof: the command line and the wiring of live runs, replays, recordings and roles.

Owns the ``paperarena`` command line (:mod:`.cli`, :mod:`.cli_alphaforge`), the live daemon
(:mod:`.live`, :mod:`.run`, the sources it builds :mod:`.sources`, systemd integration
:mod:`.systemd`, stop signals :mod:`.signals`), replays (:mod:`.replay`, :mod:`.replay_roles`,
:mod:`.replay_publish`), recording (:mod:`.record`), split roles over MQTT (:mod:`.roles`) and
the pluggable components started around the engine (:mod:`.components`).

May import: anything. Nothing imports it.
"""
