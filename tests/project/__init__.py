"""Tests of the project itself: import layers, docs that cite real files, the installer and
dev.py."""
