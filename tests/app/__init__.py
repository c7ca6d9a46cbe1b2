"""Tests of the command line, live runs, replays, split roles over MQTT, systemd and signals."""
