"""Tests of the ground: events, the bus, price columns and stored formats, the clock and schedules,
logs, config validation."""
