"""Tests of the source adapters against local fake servers, the read loop and recordings."""
