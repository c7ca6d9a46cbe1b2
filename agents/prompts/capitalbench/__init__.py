"""CapitalBench prompt set: the round prompt every model of a round receives."""
