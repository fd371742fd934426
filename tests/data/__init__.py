"""Tests of lab.data (a package so test files may share a basename with another layer's, e.g. test_trec.py)."""
