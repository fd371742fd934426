"""Fixtures of the tracking tests: a blank MLflow store and a real BM25 result on ORD-QA (10 queries) to log."""
from __future__ import annotations

import pytest
from conftest import blank_store

from lab.core.paths import resolve_repo_path
from lab.experiment.run import run_experiment
from lab.retrievers.base import Context


@pytest.fixture
def store(tmp_path, pytestconfig):
    return blank_store(tmp_path, pytestconfig)


@pytest.fixture(scope="module")
def result():
    return run_experiment(resolve_repo_path("data/ord-qa"), "bm25", {}, k=10, max_queries=10,
                          metrics=["ndcg@10", "recall@10", "mrr@10"], ctx=Context(progress=False))
