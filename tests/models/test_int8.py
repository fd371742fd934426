"""lab.models.int8: openvino-int8 is calibrated on the corpus's own passages with static scales, so a query alone
gives its vector in a batch; the quantised graph is cached by content key; the default quantises only corpora
large enough to pay for the calibration and otherwise runs the openvino graph, saying why; misuse is one line."""
from __future__ import annotations

import numpy as np
import pytest

from lab.core.cache import Cache, EmbeddingCache
from lab.core.errors import ConfigError
from lab.data.beir import load_dataset
from lab.models.embedders import load_embedder
from lab.models.int8 import (
    CALIBRATION_SIZE,
    INT8_MIN_PASSAGES,
    MIN_CALIBRATION_TEXTS,
    calibration_key,
    calibration_sample,
)
from lab.retrievers.dense import passage_text

N_PASSAGES = 48


@pytest.fixture(scope="module")
def corpus_texts():
    ds = load_dataset("data/ord-qa", splits=["test"], progress=False)
    docs = list(ds.corpus)[:N_PASSAGES]
    queries, _ = ds.split("test")
    return [passage_text(d.title, d.text) for d in docs], [queries[q] for q in list(queries)[:6]]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("int8-cache")


@pytest.fixture(scope="module")
def int8(cache_dir, corpus_texts):
    emb = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="openvino-int8")
    emb.calibrate(corpus_texts[0])
    return emb


@pytest.fixture(scope="module")
def openvino(cache_dir):
    return load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="openvino")


def test_calibrated_on_a_seeded_sample_of_the_corpus(int8, corpus_texts):
    d = int8.describe()
    assert d["backend"] == "openvino-int8" and d["inference_precision"] == "int8"
    assert d["calibration_passages"] == min(CALIBRATION_SIZE, N_PASSAGES) and len(d["calibration_key"]) == 12
    texts = corpus_texts[0]
    assert calibration_sample(texts) == calibration_sample(list(texts))  # seeded
    assert calibration_sample(texts, size=10) != calibration_sample(texts, size=10, seed=1)
    assert len(set(calibration_sample(texts + texts))) == len(calibration_sample(texts + texts))  # distinct texts
    key = calibration_key("export", calibration_sample(texts))
    assert key != calibration_key("export", calibration_sample(texts[1:])) and key != calibration_key("other", [])


def test_query_alone_gives_its_vector_in_a_batch(int8, corpus_texts):
    """Static activation scales and unfused attention: a text's vector does not depend on what it is batched with
    (the fused attention kernels moved some by 3e-3 with the batch's padding)."""
    queries = corpus_texts[1]
    batch = int8.encode_queries(queries)
    alone = np.stack([int8.encode_queries([q])[0] for q in queries])
    assert np.abs(alone - batch).max() < 1e-5
    passages = int8.encode_passages(corpus_texts[0])
    assert (np.argsort(-(alone @ passages.T), axis=1)[:, :5] == np.argsort(-(batch @ passages.T), axis=1)[:, :5]).all()
    assert np.allclose(np.linalg.norm(batch, axis=1), 1, atol=1e-5)


def test_close_to_the_unquantised_graph(int8, openvino, corpus_texts):
    """int8 MatMuls move the vectors a little (cosine to the openvino graph's 0.99 on average on SciFact)."""
    p8, p = int8.encode_passages(corpus_texts[0]), openvino.encode_passages(corpus_texts[0])
    cos = (p8 * p).sum(axis=1)
    assert cos.mean() > 0.98 and cos.min() > 0.94
    q8, q = int8.encode_queries(corpus_texts[1]), openvino.encode_queries(corpus_texts[1])
    assert (np.argmax(q8 @ p8.T, axis=1) == np.argmax(q @ p.T, axis=1)).mean() >= 0.5


def test_quantised_graph_and_vectors_are_cached_by_key(int8, cache_dir, corpus_texts):
    exports = cache_dir / "models" / "exports"
    folders = sorted(f.name for f in exports.iterdir() if f.name.startswith("openvino-int8-"))
    again = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="openvino-int8")
    again.calibrate(list(corpus_texts[0]))
    assert again.calibration == int8.calibration
    assert sorted(f.name for f in exports.iterdir() if f.name.startswith("openvino-int8-")) == folders
    assert not [f for f in exports.iterdir() if f.name.startswith(".")]  # no temporary folder left
    assert np.abs(again.encode_queries(corpus_texts[1]) - int8.encode_queries(corpus_texts[1])).max() < 1e-6
    ident = int8.cache_identity("passage")
    assert ident.endswith(f"|backend=openvino-int8@{int8.calibration[:12]}")
    store = EmbeddingCache(Cache(cache_dir), progress=False)
    store.encode(int8, corpus_texts[0][:4])
    store.encode(again, corpus_texts[0][:4])
    assert store.encoded == 4 and store.hits == 4  # same calibration, same keys


def test_default_quantises_only_large_corpora_and_says_why(cache_dir, openvino, corpus_texts):
    default = load_embedder("minilm", cache_dir=cache_dir, progress=False)
    store = EmbeddingCache(Cache(cache_dir), progress=False)
    store.encode(default, corpus_texts[0])  # the cache calibrates it on the passages first
    assert default.backend == "openvino" and f"{INT8_MIN_PASSAGES:,}" in default.describe()["int8_skipped"]
    assert default.cache_identity("passage") == openvino.cache_identity("passage")  # the same vectors, same keys
    early = load_embedder("minilm", cache_dir=cache_dir, progress=False)
    early.encode_queries(corpus_texts[1][:1])  # a text before any passages: no corpus to calibrate on
    assert early.backend == "openvino" and "before any passages" in early.describe()["int8_skipped"]


def test_misuse_is_one_line(cache_dir, corpus_texts):
    asked = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="openvino-int8")
    with pytest.raises(ConfigError, match="encode .index. the passages before any query"):
        asked.encode_queries(["a query first"])
    small = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="openvino-int8")
    with pytest.raises(ConfigError, match=f"at least {MIN_CALIBRATION_TEXTS} distinct passages, got 3; "
                                          "use backend=openvino"):
        small.calibrate(corpus_texts[0][:3] * 20)


def test_dense_retriever_calibrates_on_its_corpus(int8, cache_dir, corpus_texts):
    from lab.data.types import Corpus, Document
    from lab.retrievers.base import Context
    from lab.retrievers.dense import DenseRetriever

    fresh = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="openvino-int8")
    corpus = Corpus({f"d{i}": Document(f"d{i}", t) for i, t in enumerate(corpus_texts[0])})
    dense = DenseRetriever(Context(cache_dir=cache_dir, progress=False), embedder=fresh)
    dense.index(corpus)
    assert fresh.calibration == int8.calibration  # calibrated on the same passages: the same graph
    d = dense.describe()
    assert d["backend"] == "openvino-int8" and d["calibration_passages"] == N_PASSAGES
    assert dense.search_one(corpus_texts[0][3], 1)[0][0] == "d3"
