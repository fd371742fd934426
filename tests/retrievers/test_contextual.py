"""Contextual retrieval: documents rebuilt for the prompt, the excerpt of long documents, params, and (slow: one LLM
call per chunk) a real index + search with the packaged SmolLM2-135M on a few ORD-QA chunks."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.text.chunking import chunk_corpus, chunks_to_corpus
from lab.data.types import Corpus
from lab.core.errors import ConfigError
from lab.retrievers import Context, build
from lab.retrievers.base import param_problems
from lab.retrievers.contextual import PROMPT, documents_of, excerpt

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def ordqa():
    from lab.data.beir import load_dataset

    return load_dataset(DATA / "ord-qa", progress=False)


def test_ordqa_chunks_group_into_their_documents(ordqa):
    texts, where = documents_of(ordqa.corpus)
    assert len(where) == len(ordqa.corpus) and len(texts) < len(ordqa.corpus)
    doc, s, e = where["restructure_1"]
    assert doc == "restructure" and texts[doc][s:e] == ordqa.corpus["restructure_1"].text
    assert texts[doc].startswith(ordqa.corpus["restructure_0"].text)


def test_chunked_documents_are_rebuilt_at_their_offsets(ordqa):
    docs = [ordqa.corpus[d] for d in ordqa.corpus.ids[:20]]
    chunks = chunk_corpus(docs, size=64, overlap=16, progress=False)
    texts, where = documents_of(chunks_to_corpus(chunks))
    for c in chunks:
        doc, s, e = where[c.id]
        assert texts[doc][s:e] == c.body
    for d in docs:  # every character but whitespace between chunks is back in place
        assert "".join(texts[d.id].split()) == "".join(d.text.split())


def test_excerpt_is_centred_on_the_chunk():
    doc = "".join(str(i % 10) for i in range(1000))
    assert excerpt(doc, 0, 10, 2000) == doc
    cut = excerpt(doc, 500, 520, 100)
    assert len(cut) == 100 and cut == doc[460:560]
    assert excerpt(doc, 990, 1000, 100) == doc[900:]
    assert "{document}" in PROMPT and "{chunk}" in PROMPT


def test_params_are_checked():
    assert "apply='all' is not valid" in param_problems("contextual", {"apply": "all"})[0]
    assert "bm25_params: unknown param 'k2'" in param_problems("contextual", {"bm25_params": {"k2": 1}})[0]
    assert "fusion='max' is not valid" in param_problems("contextual", {"fusion": "max"})[0]
    with pytest.raises(ConfigError, match="weights"):
        build("contextual", {"weights": "tune"})


@pytest.mark.slow
def test_real_contexts_with_the_packaged_model(ordqa, tmp_path):
    """Four ORD-QA chunks: one LLM call each at index time (cost reported), the BM25 part indexes the contexts and
    the dense part the plain chunks (apply=bm25), and a second index reads every context from the cache."""
    from lab.data.types import Queries

    corpus = Corpus({d: ordqa.corpus[d] for d in ["restructure_0", "restructure_1", "gui_3", "gui_4"]}, name="s")
    ctx = Context(cache_dir=tmp_path, progress=False)
    r = build("contextual", {"apply": "bm25", "max_tokens": 40}, ctx)
    r.index(corpus)
    assert r.usage()["calls"] == 4 and set(r.contexts) == set(corpus.ids)
    bm25, dense = r.hybrid.parts
    assert r.describe()["diagnostics"]["chunks"] == 4
    run = r.search(Queries({"q": "What does the restructure module do?"}), k=4)
    assert set(run.scores["q"]) <= set(corpus.ids) and run.latency["q"] > 0
    again = build("contextual", {"apply": "bm25", "max_tokens": 40}, ctx)
    again.index(corpus)
    assert again.contexts == r.contexts and again.usage().get("cache_hits", 0) == 4
