"""Tests of lab.tracking (a package so its conftest.py does not shadow tests/conftest.py)."""
