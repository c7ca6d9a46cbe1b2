"""The ground's time: one clock abstraction for live runs and replays, the NYSE calendar and the
schedulers that fire rounds on it.

Owns :mod:`.clock` (live and simulated clocks) and :mod:`.schedule` (NYSE sessions, triggers, the
simulated and live schedulers). A replay runs the same code on a simulated clock.

May import: nothing of the project.
"""
