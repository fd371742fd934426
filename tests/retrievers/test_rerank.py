"""lab.retrievers.rerank and lab.models.crossencoder: score combination, composition over a real first stage
with a tiny freshly trained cross-encoder, caching, the guards, the bi-encoder second stage, hybrid_rerank."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from builders import train_tiny, write_tiny_dataset  # tests/ is on sys.path under pytest

from lab.core.errors import ConfigError
from lab.retrievers import Context, build
from lab.retrievers.rerank import RerankRetriever, combine, merge, minmax


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """data (folder), model (folder), meta (training.json), corpus, test_q and train_q (Queries)."""
    from lab.data.beir import load_dataset

    root = tmp_path_factory.mktemp("rerank")
    data = write_tiny_dataset(root / "data")
    meta = train_tiny(data, root / "model")
    ds = load_dataset(data, progress=False)
    return SimpleNamespace(data=data, model=root / "model", meta=meta, corpus=ds.corpus,
                           test_q=ds.split("test")[0], train_q=ds.split("train")[0])


def ctx_for(tmp_path) -> Context:
    return Context(cache_dir=tmp_path / "cache", progress=False)


# --- pure ---------------------------------------------------------------------------------------------------

def test_minmax_and_combine():
    assert minmax(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
    assert minmax(np.array([1.0, 1.0])).tolist() == [0.0, 0.0] and minmax(np.array([])).size == 0
    first, second = np.array([10.0, 5.0, 0.0]), np.array([-2.0, 3.0, 1.0])
    assert combine(first, second, 1.0).tolist() == second.tolist()  # pure rerank keeps raw scores
    assert combine(first, second, 0.0).tolist() == [1.0, 0.5, 0.0]
    assert combine(first, second, 0.5) == pytest.approx([0.5, 0.75, 0.3])


def test_merge_puts_the_tail_below_the_head_in_first_stage_order():
    head = [("a", 9.0), ("b", 8.0)]
    tail = [("c", 7.0), ("d", 6.0), ("e", 5.0)]
    out = merge(head, np.array([0.1, 0.9]), tail, k=4)
    assert list(out) == ["b", "a", "c", "d"] and out["c"] < 0.1 and out["d"] < out["c"]


# --- cross-encoder composition ------------------------------------------------------------------------------

def test_rerank_reorders_the_first_stage_top_n_by_the_cross_encoder(tiny, tmp_path):
    import torch

    model, meta, corpus, test_q = tiny.model, tiny.meta, tiny.corpus, tiny.test_q
    ctx = ctx_for(tmp_path)
    bm25 = build("bm25", {}, ctx)
    bm25.index(corpus)
    first = bm25.search(test_q, 20)
    r = build("rerank", {"model": str(model), "top_n": 5, "max_length": 64, "alpha": 1.0}, ctx)
    assert isinstance(r, RerankRetriever) and r.name == "rerank"
    r.index(corpus)
    run = r.search(test_q, 20)
    scorer = r.scorer()
    for qid in test_q:
        top5 = [d for d, _ in first.ranked(qid, 5)]
        got = [d for d, _ in run.ranked(qid)]
        assert set(got[:5]) == set(top5)  # the head is the first stage's top 5, reordered
        assert got[5:] == [d for d, _ in first.ranked(qid)][5:20]  # the tail keeps the first stage's order
        direct = scorer.model.predict([(test_q[qid], r._docs[d]) for d in top5], activation_fn=torch.nn.Identity())
        want = sorted(zip(direct, top5, strict=False), key=lambda t: (t[0], t[1]), reverse=True)
        assert got[:5] == [d for _, d in want]
        assert [run[qid][d] for d in got[:5]] == pytest.approx(sorted(direct, reverse=True), abs=1e-4)
    assert set(run.latency) == set(test_q) and all(t > 0 for t in run.latency.values())  # timed per query
    d = r.describe()
    assert d["strategy"] == "rerank" and d["top_n"] == 5 and d["alpha"] == 1.0
    assert d["first_stage"] == bm25.describe()
    rm = d["reranker_model"]
    assert rm["weights_sha256"] == meta["weights_sha256"] and rm["path"] == str(model)
    assert rm["training"]["metadata_sha256"] == meta["metadata_sha256"]


def test_cross_encoder_scores_are_cached(tiny, tmp_path):
    model, corpus, test_q = tiny.model, tiny.corpus, tiny.test_q
    ctx = ctx_for(tmp_path)
    r1 = build("rerank", {"model": str(model), "top_n": 4, "max_length": 64, "cache_scores": True}, ctx)
    r1.index(corpus)
    a = r1.search(test_q, 10)
    assert r1.scorer().misses == 4 * len(test_q) and r1.scorer().hits == 0
    # a fresh process would do this
    r2 = build("rerank", {"model": str(model), "top_n": 4, "max_length": 64, "cache_scores": True}, ctx)
    r2.index(corpus)
    b = r2.search(test_q, 10)
    assert r2.scorer().hits == 4 * len(test_q) and r2.scorer().misses == 0
    assert list(a) == list(b) and all(a[q] == pytest.approx(b[q]) for q in a)
    # another identity
    r3 = build("rerank", {"model": str(model), "top_n": 4, "max_length": 48, "cache_scores": True}, ctx)
    r3.index(corpus)
    r3.search(test_q, 10)
    assert r3.scorer().hits == 0


def test_scores_are_computed_by_default_so_latency_is_the_models(tiny, tmp_path):
    model, corpus, test_q = tiny.model, tiny.corpus, tiny.test_q
    ctx = ctx_for(tmp_path)
    for _ in range(2):  # a rerun scores again: nothing is read back
        r = build("rerank", {"model": str(model), "top_n": 4, "max_length": 64}, ctx)
        r.index(corpus)
        r.search(test_q, 10)
        assert r.scorer().hits == 0 and r.scorer().misses == 4 * len(test_q)
        assert r.describe()["cache_scores"] is False


def test_alpha_defaults_to_the_models_validated_choice(tiny, tmp_path):
    model, meta, corpus, test_q = tiny.model, tiny.meta, tiny.corpus, tiny.test_q
    r = build("rerank", {"model": str(model), "top_n": 5, "max_length": 64}, ctx_for(tmp_path))
    r.index(corpus)
    assert r.alpha == meta["recommended_alpha"] and r.describe()["alpha"] == meta["recommended_alpha"]
    bm = build("bm25", {}, ctx_for(tmp_path))
    bm.index(corpus)
    pure_first = build("rerank", {"model": str(model), "top_n": 5, "max_length": 64, "alpha": 0.0}, ctx_for(tmp_path))
    pure_first.index(corpus)
    run, base = pure_first.search(test_q, 10), bm.search(test_q, 10)
    for q in test_q:  # alpha=0: the first stage's order, rescaled
        assert [d for d, _ in run.ranked(q)] == [d for d, _ in base.ranked(q)]


def test_searching_training_queries_is_refused(tiny, tmp_path):
    model, corpus, train_q = tiny.model, tiny.corpus, tiny.train_q
    r = build("rerank", {"model": str(model), "top_n": 3, "max_length": 64}, ctx_for(tmp_path))
    r.index(corpus)
    with pytest.raises(ConfigError, match="training queries.*allow_trained_queries"):
        r.search(train_q, 5)
    ok = build("rerank", {"model": str(model), "top_n": 3, "max_length": 64, "allow_trained_queries": True},
               ctx_for(tmp_path))
    ok.index(corpus)
    assert len(ok.search(train_q.subset(list(train_q)[:2]), 5)) == 2


def test_default_model_missing_says_how_to_train(tmp_path, monkeypatch):
    (tmp_path / "lab").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setenv("LAB_REPO_ROOT", str(tmp_path))
    r = build("rerank", {}, ctx_for(tmp_path))
    from lab.data.types import Corpus, Document

    with pytest.raises(ConfigError, match=r"lab train-reranker --dataset data/scifact --split train"):
        r.index(Corpus({"d": Document("d", "text")}))
    with pytest.raises(ConfigError, match="no such model folder"):
        build("rerank", {"model": "models/not-there"}, ctx_for(tmp_path)).index(Corpus({"d": Document("d", "t")}))


def test_bad_params_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown reranker"):
        build("rerank", {"reranker": "llm"}, ctx_for(tmp_path))
    with pytest.raises(ConfigError, match="alpha"):
        build("rerank", {"alpha": 2}, ctx_for(tmp_path))
    with pytest.raises(ConfigError, match="rerank twice"):
        build("rerank", {"first_stage": "rerank"}, ctx_for(tmp_path))
    with pytest.raises(ConfigError, match="unknown strategy"):
        build("rerank", {"first_stage": "nope"}, ctx_for(tmp_path))
    with pytest.raises(ConfigError, match="first_stage='bm25' is not valid; first_stage takes one of 'hybrid'"):
        build("hybrid_rerank", {"first_stage": "bm25"}, ctx_for(tmp_path))


def test_first_stage_params_reach_the_first_stage(tmp_path):
    r = build("rerank", {"first_stage_params": {"k1": 1.5, "b": 0.6}}, ctx_for(tmp_path))
    assert r.first.describe()["k1"] == 1.5 and r.first.describe()["b"] == 0.6


# --- bi-encoder second stage, hybrid_rerank -----------------------------------------------------------------

def test_biencoder_rerank_orders_the_head_by_the_models_cosine(tiny, tmp_path):
    """The second stage's order is the embedding model's own cosine order, computed here independently."""
    from sentence_transformers import SentenceTransformer

    from lab.models.crossencoder import packaged_minilm_path

    corpus, test_q = tiny.corpus, tiny.test_q
    ctx = ctx_for(tmp_path)
    r = build("rerank", {"reranker": "biencoder", "model": "all-MiniLM-L6-v2", "top_n": 8}, ctx)
    r.index(corpus)
    run = r.search(test_q, 8)
    bm = build("bm25", {}, ctx)
    bm.index(corpus)
    first = bm.search(test_q, 8)
    st = SentenceTransformer(packaged_minilm_path(), device="cpu")
    changed = 0
    for qid in test_q:
        docs = [d for d, _ in first.ranked(qid, 8)]
        qv = st.encode([test_q[qid]], normalize_embeddings=True)
        dv = st.encode([r._docs[d] for d in docs], normalize_embeddings=True)
        cos = (dv @ qv[0]).tolist()
        expected = [d for _, d in sorted(zip(cos, docs, strict=False), key=lambda t: (t[0], t[1]), reverse=True)]
        # The scorer runs on the default backend (openvino; bf16 on CPUs with AVX512-BF16/AMX), whose cosines differ
        # from torch's by up to ~2e-3 (bf16 keeps 8 significant bits; 1.1e-3 seen here): scores are compared to
        # 5e-3, and the order may differ from torch's only between passages whose torch cosines are that close.
        tol = 5e-3
        got = [d for d, _ in run.ranked(qid)]
        torch_cos = dict(zip(docs, cos, strict=False))
        assert sorted(got) == sorted(expected)
        assert all(torch_cos[a] >= torch_cos[b] - tol for i, a in enumerate(got) for b in got[i + 1:])
        assert [run[qid][d] for d in got] == pytest.approx([torch_cos[d] for d in got], abs=tol)
        changed += expected != docs
    assert changed >= 1  # it reorders, not only rescales
    assert r.describe()["reranker_model"]["kind"] == "biencoder"
    assert r.describe()["reranker_model"]["identity"].startswith("st:all-MiniLM-L6-v2@")
    assert r.describe()["reranker_model"]["backend"] == "openvino"  # the default backend, named in the logged params
    assert r.describe()["reranker_model"]["inference_precision"] in ("bf16", "f32")

    # backend=torch: the cosines are torch's own (to float32 rounding) and say so
    t = build("rerank", {"reranker": "biencoder", "model": "all-MiniLM-L6-v2", "top_n": 8, "backend": "torch"}, ctx)
    t.index(corpus)
    trun = t.search(test_q, 8)
    assert t.describe()["reranker_model"]["backend"] == "torch"
    for qid in test_q:
        docs = [d for d, _ in first.ranked(qid, 8)]
        qv = st.encode([test_q[qid]], normalize_embeddings=True)
        dv = st.encode([t._docs[d] for d in docs], normalize_embeddings=True)
        want = dict(zip(docs, (dv @ qv[0]).tolist(), strict=False))
        assert [trun[qid][d] for d in docs] == pytest.approx([want[d] for d in docs], abs=1e-5)
    with pytest.raises(ConfigError, match="applies to reranker=biencoder"):
        build("rerank", {"backend": "torch"}, ctx)
    with pytest.raises(ConfigError, match="backend"):
        build("rerank", {"reranker": "biencoder", "backend": "tpu"}, ctx)


def test_hybrid_rerank_is_rerank_over_the_hybrid_strategy(tiny, tmp_path):
    from lab.retrievers.fusion import HybridRetriever

    model, corpus, test_q = tiny.model, tiny.corpus, tiny.test_q
    ctx = ctx_for(tmp_path)
    r = build("hybrid_rerank", {"model": str(model), "top_n": 5, "max_length": 64}, ctx)
    assert isinstance(r, RerankRetriever) and isinstance(r.first, HybridRetriever) and r.name == "hybrid_rerank"
    r.index(corpus)
    run = r.search(test_q, 10)
    hybrid = build("hybrid", {}, ctx)
    hybrid.index(corpus)
    first = hybrid.search(test_q, 10)
    for q in test_q:
        assert {d for d, _ in run.ranked(q, 5)} == {d for d, _ in first.ranked(q, 5)}
    d = r.describe()

    def stable(x):  # index_seconds is a measurement, not an identity
        return {k: v for k, v in x.items() if k != "index_seconds"}

    assert d["strategy"] == "hybrid_rerank" and stable(d["first_stage"]) == stable(hybrid.describe())
    assert d["first_stage"]["strategy"] == "hybrid"


@pytest.mark.slow
def test_biencoder_default_is_mpnet(tiny, tmp_path):
    corpus, test_q = tiny.corpus, tiny.test_q
    r = build("rerank", {"reranker": "biencoder", "top_n": 5}, Context(cache_dir=Path(".cache"), progress=False))
    r.index(corpus)
    assert len(r.search(test_q, 5)) == len(test_q)
    assert r.describe()["reranker_model"]["identity"].startswith("st:all-mpnet-base-v2@")


def test_biencoder_int8_is_calibrated_on_the_corpus_as_dense_is(tmp_path):
    """With static int8 the bi-encoder calibrates on the corpus at index time, as a dense index of that corpus does:
    the same calibration, so the candidates' vectors are the dense index's, read back from the embedding cache."""
    from lab.data.beir import load_dataset
    from lab.data.types import Queries

    ds = load_dataset(Path(__file__).resolve().parents[2] / "data" / "ord-qa", splits=["test"], progress=False)
    queries, _ = ds.split("test")
    ctx = ctx_for(tmp_path)
    dense = build("dense", {"backend": "openvino-int8"}, ctx)
    dense.index(ds.corpus)
    r = build("rerank", {"reranker": "biencoder", "model": "all-MiniLM-L6-v2", "backend": "openvino-int8",
                         "top_n": 10}, ctx)
    r.index(ds.corpus)
    assert r.describe()["reranker_model"]["backend"] == "openvino-int8"
    assert r.scorer().embedder.calibration == dense.embedder.calibration
    r.search(Queries({q: queries[q] for q in list(queries)[:5]}), 10)
    assert r.scorer().hits >= 10 and r.scorer().misses == 0
