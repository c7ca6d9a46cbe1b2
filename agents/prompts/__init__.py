"""Prompt templates of the LLM agents (``equity.txt``, ``polymarket.txt``), shipped as data."""
