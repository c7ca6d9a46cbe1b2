"""Tests of agents: the LLM path through LiteLLM against a local server, plugins, HTTP agents,
protocols."""
