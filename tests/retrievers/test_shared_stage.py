"""lab.retrievers.shared_stage: rerank configs that differ only in their second stage share one indexed first
stage (each query searched once) and one loaded bi-encoder, and rank exactly as unshared ones (ORD-QA)."""
from __future__ import annotations

import pytest
from conftest import ORDQA

from lab.core.cache import clear_memos
from lab.data.beir import load_dataset
from lab.data.types import Corpus
from lab.retrievers import Context, build
from lab.retrievers.shared_stage import SharedStage


@pytest.fixture(scope="module")
def ordqa():
    ds = load_dataset(ORDQA, progress=False)
    queries = ds.split("test")[0]
    return ds.corpus, queries.subset(sorted(queries)[:8])


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return Context(cache_dir=tmp_path_factory.mktemp("shared") / "cache", progress=False)


def rerank(ctx, **params):
    return build("rerank", {"reranker": "biencoder", "model": "all-MiniLM-L6-v2", "backend": "torch",
                            "first_stage": "bm25", **params}, ctx)


def test_second_stage_configs_share_one_first_stage_and_model_and_rank_as_alone(ordqa, ctx):
    corpus, queries = ordqa
    clear_memos()
    a, b = rerank(ctx, top_n=20, alpha=0.5), rerank(ctx, top_n=10, alpha=1.0)
    a.index(corpus)
    b.index(corpus)
    assert isinstance(a.first, SharedStage) and a.first is b.first
    assert a.scorer().embedder is b.scorer().embedder
    run_a, run_b = a.search(queries, 20), b.search(queries, 20)
    assert (a.first.searched, a.first.reused) == (len(queries), len(queries))  # b read a's first-stage hits
    assert a.describe()["first_stage"]["strategy"] == "bm25"

    clear_memos()  # alone: nothing shared
    alone = rerank(ctx, top_n=10, alpha=1.0)
    alone.index(corpus)
    assert alone.first is not a.first and alone.scorer().embedder is not a.scorer().embedder
    assert alone.search(queries, 20).scores == run_b.scores
    assert run_a.scores != run_b.scores  # the second stages differ


def test_another_first_stage_or_corpus_is_not_shared(ordqa, ctx):
    corpus, _ = ordqa
    a, b = rerank(ctx), rerank(ctx, first_stage_params={"k1": 0.9})
    a.index(corpus)
    b.index(corpus)
    assert a.first is not b.first
    c = rerank(ctx)
    c.index(Corpus({d.id: d for d in list(corpus)[:50]}))
    assert c.first is not a.first
