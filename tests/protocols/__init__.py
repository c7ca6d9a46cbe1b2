"""Tests of the protocols in their homes: AlphaForgeBench and its sandbox, CapitalBench, PortBench,
StockBench."""
