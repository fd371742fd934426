"""Tests of lab.experiment (a package so test files may share a basename with another layer's, e.g. test_trec.py)."""
