"""bm25's lazy index (backend "bm25s") against bm25s' eager score matrix ("bm25s-eager") on real data: the same
hits and the same scores to the last digit, for several k1/b and every variant; columns computed only for the
terms asked; the late work counted as indexing by IndexedExperiment."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.data import load_dataset
from lab.data.types import Corpus
from lab.experiment.run import prepare_experiment
from lab.retrievers import Context, build
from lab.retrievers.bm25 import _Bm25sBackend, _LazyBm25sBackend

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = [
    {},  # Anserini's defaults: lucene, k1 0.9, b 0.4
    {"k1": 1.5, "b": 0.75},
    {"k1": 0.0, "b": 0.0},
    {"variant": "robertson", "k1": 1.2, "b": 1.0},
    {"variant": "atire", "k1": 2.0, "b": 0.3},
    {"variant": "bm25l"},
    {"variant": "bm25+", "k1": 1.2, "b": 0.9, "delta": 0.7},
]


@pytest.fixture(scope="module")
def ordqa():
    ds = load_dataset(ROOT / "data" / "ord-qa", progress=False)
    return ds.corpus, ds.split("test")[0]


@pytest.fixture(scope="module")
def scifact_slice():
    """SciFact's first 1,500 documents and its test queries (real text, a vocabulary of thousands of terms)."""
    ds = load_dataset(ROOT / "data" / "scifact", progress=False)
    docs = list(ds.corpus)[:1500]
    return Corpus({d.id: d for d in docs}), ds.split("test")[0]


def _indexed(corpus, backend, params, tmp_path):
    r = build("bm25", {**params, "backend": backend}, Context(cache_dir=tmp_path, progress=False))
    r.index(corpus)
    return r


@pytest.mark.parametrize("params", SETTINGS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
@pytest.mark.parametrize("data", ["ordqa", "scifact_slice"])
def test_lazy_scores_equal_eager_to_the_last_digit(data, params, request, tmp_path):
    corpus, queries = request.getfixturevalue(data)
    lazy, eager = _indexed(corpus, "bm25s", params, tmp_path), _indexed(corpus, "bm25s-eager", params, tmp_path)
    assert isinstance(lazy._backend, _LazyBm25sBackend) and isinstance(eager._backend, _Bm25sBackend)
    one, ref = lazy.search(queries, 100), eager.search(queries, 100)
    assert sum(len(h) for h in ref.scores.values()) > 0
    assert one.scores == ref.scores  # dicts of floats: equal ids and equal doubles
    assert lazy.search_batch(queries, 100).scores == eager.search_batch(queries, 100).scores


def test_columns_only_for_the_terms_asked(ordqa, tmp_path):
    corpus, queries = ordqa
    r = _indexed(corpus, "bm25s", {}, tmp_path)
    backend = r._backend
    assert backend.columns == {} and r.lazy_seconds == 0.0
    first = list(queries)[0]
    r.search(queries.subset([first]), 10)
    asked = {t for t in r.tokenizer(queries[first]) if t in backend.vocab}
    assert {backend.vocab[t] for t in asked} == set(backend.columns)
    assert len(backend.columns) < len(backend.vocab)
    assert r.lazy_seconds > 0.0


def test_narrow_dtype_uses_the_eager_matrix(ordqa, tmp_path):
    corpus, _ = ordqa
    assert isinstance(_indexed(corpus, "bm25s", {"dtype": "float32"}, tmp_path)._backend, _Bm25sBackend)


def test_late_index_work_counts_as_indexing(tmp_path):
    exp = prepare_experiment(ROOT / "data" / "ord-qa", "bm25", {}, ctx=Context(cache_dir=tmp_path, progress=False))
    built = exp.index_seconds
    assert exp.retriever.lazy_seconds == 0.0
    exp.result(list(exp.queries)[:5])
    lazy = exp.retriever.lazy_seconds
    assert lazy > 0.0 and exp.index_seconds == pytest.approx(built + lazy)
    exp.result(list(exp.queries)[:5])  # nothing new searched: nothing added
    assert exp.retriever.lazy_seconds == lazy and exp.index_seconds == pytest.approx(built + lazy)
