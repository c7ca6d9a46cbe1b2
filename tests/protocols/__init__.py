"""Tests of the protocols in their homes: AlphaForgeBench (its sandbox: tests/sandbox/),
CapitalBench, PortBench, StockBench."""
