"""The roof: the command line and the wiring of live runs, replays, recordings and roles.

Owns the ``paperarena`` command line (:mod:`.cli` the dispatch, :mod:`.cli_parser` its
arguments, :mod:`.cli_common` what the commands share, and the commands by purpose:
:mod:`.cli_runs` running, replaying and recording, :mod:`.cli_store` reading and copying stores,
:mod:`.cli_daemon` asking a running daemon, :mod:`.cli_protocols` the protocols' commands and the
probe), the live daemon (:mod:`.live`, :mod:`.run`, the sources it builds :mod:`.sources`,
systemd integration :mod:`.systemd`, stop signals :mod:`.signals`), replays (:mod:`.replay`,
:mod:`.replay_roles`, :mod:`.replay_publish`), recording (:mod:`.record`), split roles over MQTT
(:mod:`.roles`) and the pluggable components started around the engine (:mod:`.components`).

May import: anything. Nothing imports it.
"""
