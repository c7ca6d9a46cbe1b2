"""AlphaForgeBench prompt set: the strategy-generation step."""
