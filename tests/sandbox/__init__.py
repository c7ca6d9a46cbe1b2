"""Tests of the AlphaForgeBench strategy sandbox: its layers one by one, the outside attack
suite, the shipped unit's allowances, and the same again as an unprivileged user."""
