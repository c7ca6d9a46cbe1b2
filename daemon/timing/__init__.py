"""The ground's time: one clock abstraction for live runs and replays, the NYSE calendar and the
schedulers that fire rounds on it.

Owns :mod:`.clock` (live and simulated clocks), :mod:`.nyse` (the NYSE calendar and New York
time), :mod:`.triggers` (NYSE-session and 24/7 triggers) and :mod:`.schedule` (the simulated and
live schedulers that run them). A replay runs the same code on a simulated clock.

May import: nothing of the project.
"""
