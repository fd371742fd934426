"""lab.retrievers.dense: registry, flat vs HNSW, cache reuse, threads, and the SciFact reproduction (slow)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document, Queries, Run
from lab.retrievers import Context, build
from lab.retrievers.dense import DenseRetriever, build_index, faiss_threads, passage_text

REPO = Path(__file__).resolve().parents[2]
SCIFACT = REPO / "data" / "scifact"

DOCS = {
    "d1": ("Vitamin D", "Vitamin D supplementation and bone mineral density in older adults."),
    "d2": ("Aspirin", "Low-dose aspirin reduces the risk of heart attack but raises bleeding risk."),
    "d3": ("", "Cats sleep between twelve and sixteen hours a day."),
    "d4": ("Coffee", "Caffeine intake is associated with improved alertness and reaction time."),
    "d5": ("Insulin", "Insulin resistance precedes type 2 diabetes by several years."),
    "d6": ("Paris", "The Eiffel Tower was completed in 1889 for the World's Fair."),
    "d7": ("Sleep", "Short sleep duration is linked to obesity in children."),
    "d8": ("Statins", "Statins lower LDL cholesterol and cardiovascular events."),
}
QUERIES = {
    "q1": "does vitamin D help bones in the elderly",
    "q2": "aspirin heart attack prevention",
    "q3": "how long do cats sleep",
    "q4": "what lowers cholesterol",
}
EXPECTED_TOP = {"q1": "d1", "q2": "d2", "q3": "d3", "q4": "d8"}


@pytest.fixture(scope="module")
def corpus():
    return Corpus({i: Document(i, text, title) for i, (title, text) in DOCS.items()}, name="toy")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return Context(cache_dir=tmp_path_factory.mktemp("dense-cache"), progress=False)


@pytest.fixture(scope="module")
def flat(ctx, corpus, minilm):
    r = build("dense", {"embedder": minilm}, ctx)
    r.index(corpus)
    return r


def test_passage_text():
    assert passage_text("Title", "body") == "Title body"
    assert passage_text("", "body") == "body"


def test_registered_and_describe(flat, minilm):
    assert isinstance(flat, DenseRetriever) and flat.name == "dense"
    d = flat.describe()
    assert d["strategy"] == "dense" and d["model_identity"] == minilm.identity
    assert d["dim"] == 384 and d["index_type"] == "IndexFlatIP" and d["model"] == "all-MiniLM-L6-v2"
    assert "M" not in d and "embedder" not in d


def test_flat_search_ranks_the_right_document_first(flat):
    run = flat.search(Queries(QUERIES), k=3)
    assert isinstance(run, Run) and set(run) == set(QUERIES)
    for qid, doc in EXPECTED_TOP.items():
        top = run.ranked(qid)
        assert top[0][0] == doc, (qid, top)
        assert len(top) == 3 and -1.0 <= top[-1][1] <= top[0][1] <= 1.0
        assert run.latency[qid] > 0


def test_search_batch_equals_search(flat):
    one = flat.search(Queries(QUERIES), k=5)
    many = flat.search_batch(Queries(QUERIES), k=5)
    for qid in QUERIES:
        assert [d for d, _ in one.ranked(qid)] == [d for d, _ in many.ranked(qid)]
        assert np.allclose([s for _, s in one.ranked(qid)], [s for _, s in many.ranked(qid)], atol=1e-5)


def test_k_larger_than_corpus_returns_every_document_once(flat):
    hits = flat.search_one(QUERIES["q1"], k=50)
    assert sorted(d for d, _ in hits) == sorted(DOCS)


def test_scores_are_cosines(flat, minilm, corpus):
    hits = dict(flat.search_one(QUERIES["q3"], k=8))
    q = minilm.encode_queries([QUERIES["q3"]])[0]
    p = minilm.encode_passages([passage_text(corpus["d6"].title, corpus["d6"].text)])[0]
    assert hits["d6"] == pytest.approx(float(q @ p), abs=1e-5)


def test_rerun_encodes_nothing(ctx, corpus, minilm, flat):
    again = build("dense", {"embedder": minilm}, ctx)
    again.index(corpus)
    assert again.embeddings.encoded == 0 and again.embeddings.hits == len(DOCS)


def test_hnsw_agrees_with_flat_on_the_small_set(ctx, corpus, minilm, flat):
    hnsw = build("dense", {"embedder": minilm, "index": "hnsw", "M": 8, "ef_search": 16}, ctx)
    hnsw.index(corpus)
    assert hnsw.describe()["index_type"].startswith("IndexHNSW") and hnsw.describe()["M"] == 8
    a, b = flat.search(Queries(QUERIES), k=5), hnsw.search(Queries(QUERIES), k=5)
    for qid in QUERIES:
        assert [d for d, _ in a.ranked(qid)] == [d for d, _ in b.ranked(qid)]
    # a second HNSW retriever loads the stored index instead of building it
    again = build("dense", {"embedder": minilm, "index": "hnsw", "M": 8, "ef_search": 16}, ctx)
    again.index(corpus)
    assert again._index.hnsw.efSearch == 16
    assert [d for d, _ in again.search_one(QUERIES["q1"], 5)] == [d for d, _ in a.ranked("q1")]


def test_auto_index_chooses_hnsw_above_the_threshold(ctx, corpus, minilm, monkeypatch):
    from lab.retrievers import dense as D

    assert D.choose_index(D.ANN_THRESHOLD) == "flat" and D.choose_index(D.ANN_THRESHOLD + 1) == "hnsw"
    assert D.choose_index(10**9, "flat") == "flat" and D.choose_index(5, "hnsw") == "hnsw"
    small = build("dense", {"embedder": minilm}, ctx)
    small.index(corpus)
    d = small.describe()
    assert d["index"] == "auto" and d["index_chosen"] == "flat" and d["index_type"] == "IndexFlatIP"
    monkeypatch.setattr(D, "ANN_THRESHOLD", len(DOCS) - 1)  # the same corpus is now "large"
    big = build("dense", {"embedder": minilm, "M": 8}, ctx)
    big.index(corpus)
    d = big.describe()
    assert d["index_chosen"] == "hnsw" and d["index_type"].startswith("IndexHNSW") and d["M"] == 8
    assert [h for h, _ in big.search_one(QUERIES["q1"], 3)] == [h for h, _ in small.search_one(QUERIES["q1"], 3)]


def test_hnsw_recall_against_exact_search_on_random_vectors():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:100] + 0.1 * rng.standard_normal((100, 64)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    _, exact = build_index(x, "flat").search(q, 10)
    _, approx = build_index(x, "hnsw", M=16, ef_construction=100, ef_search=64).search(q, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=False)])
    assert recall >= 0.95
    assert (exact[:, 0] == np.arange(100)).mean() >= 0.99  # each noisy copy finds its source


def test_faiss_and_torch_threads_set_together_and_restored(flat):
    import faiss
    import torch

    before_f, before_t = faiss.omp_get_max_threads(), torch.get_num_threads()
    flat.search(Queries({"q1": QUERIES["q1"]}), k=2)
    assert (faiss.omp_get_max_threads(), torch.get_num_threads()) == (before_f, before_t)
    with faiss_threads(1):
        # torch is set too: faiss may share torch's OpenMP runtime (see faiss_threads)
        assert faiss.omp_get_max_threads() == 1 and torch.get_num_threads() == 1
    assert (faiss.omp_get_max_threads(), torch.get_num_threads()) == (before_f, before_t)


def test_errors_are_clear(ctx, minilm):
    with pytest.raises(ConfigError, match="index='ivf' is not valid; index takes one of 'auto', 'flat', 'hnsw'"):
        build("dense", {"index": "ivf"}, ctx)
    with pytest.raises(ConfigError, match="index\\(\\) first|before index"):
        build("dense", {"embedder": minilm}, ctx).search_one("x", 3)


# ------------------------------------------------------------------------------------------------ reproduction
@pytest.mark.slow
def test_scifact_minilm_reproduces_mteb():
    """all-MiniLM-L6-v2 on SciFact test (300 queries): nDCG@10 >= 0.635 (MTEB reports ~0.645).

    Uses the repository cache (.cache) so the 5,183 passages are encoded once (minutes on 2 cores).
    """
    import pytrec_eval

    from lab.data.beir import load_dataset

    ds = load_dataset(SCIFACT, progress=False)
    queries, qrels = ds.split("test")
    assert len(queries) == 300
    r = build("dense", {}, Context(cache_dir=REPO / ".cache", progress=not os.environ.get("CI")))
    r.index(ds.corpus)
    run = r.search_batch(queries, k=100)
    ev = pytrec_eval.RelevanceEvaluator(qrels.qrels, {"ndcg_cut.10", "recall.100"})
    per_q = ev.evaluate(run.scores)
    ndcg = float(np.mean([v["ndcg_cut_10"] for v in per_q.values()]))
    recall = float(np.mean([v["recall_100"] for v in per_q.values()]))
    print(f"SciFact test all-MiniLM-L6-v2: nDCG@10={ndcg:.4f} R@100={recall:.4f}")
    assert len(per_q) == 300
    assert ndcg >= 0.635 and recall >= 0.85
    try:
        from lab.metrics import evaluate
    except ImportError:  # pragma: no cover - lab.metrics is written in parallel
        return
    ours = evaluate(qrels, run, metrics=["ndcg@10"]).means["ndcg@10"]
    assert ours == pytest.approx(ndcg, abs=1e-6)


def test_a_chunk_identical_across_chunk_sizes_is_encoded_once(tmp_path, corpus, minilm):
    from lab.text.chunking import chunk_corpus, chunks_to_corpus

    long = Document("long", " ".join(f"{t} {b}" for t, b in DOCS.values()), "Mixed")  # ~80 words: cut at both sizes
    docs = list(corpus) + [long]
    ctx = Context(cache_dir=tmp_path, progress=False)
    small, big = (chunks_to_corpus(chunk_corpus(docs, "recursive", n, 0, "words", progress=False)) for n in (16, 48))
    build("dense", {"embedder": minilm}, ctx).index(small)
    second = build("dense", {"embedder": minilm}, ctx)
    second.index(big)
    seen = {passage_text(d.title, d.text) for d in small}
    new = {passage_text(d.title, d.text) for d in big} - seen
    assert 0 < len(new) < len(big) - len(DOCS) + 1  # the toy documents are whole chunks under both sizes
    assert second.embeddings.encoded == len(new) and second.embeddings.hits == len(big) - len(new)
