"""Tests of the HTTP API, the live page, metrics and alerts, with a real Prometheus and Chromium."""
