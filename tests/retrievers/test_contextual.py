"""Contextual retrieval: documents rebuilt for the prompt, the excerpt of long documents, params, and (slow: one LLM
call per chunk) a real index + search with the packaged SmolLM2-135M on a few ORD-QA chunks."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.data.types import Corpus
from lab.retrievers import Context, build
from lab.retrievers.base import param_problems
from lab.retrievers.contextual import PROMPT, documents_of, excerpt
from lab.text.chunking import chunk_corpus, chunks_to_corpus

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


def test_prompts_fit_the_packaged_models_context(ordqa, tmp_path):
    """ORD-QA's partition_manager document (16 units, 31 kB; one unit of 7.4 kB) overflowed the packaged model's
    2,048-token context with a 4,000-character excerpt plus the whole unit (2,157 tokens). Prompts are now cut to fit:
    the real model answers every one of them, and prompts that already fit are the same text as before."""
    from lab.models.llm import load_llm
    from lab.retrievers.contextual import ContextualRetriever

    units = [u for u in ordqa.corpus if u.id.startswith("partition_manager_")]
    corpus = Corpus({u.id: u for u in units}, name="partition_manager")
    r = build("contextual", {"apply": "bm25"}, Context(cache_dir=tmp_path, progress=False))
    assert isinstance(r, ContextualRetriever) and r.llm.n_ctx == 2048
    texts, where = documents_of(corpus)
    budget = r.prompt_budget()
    assert 0 < budget < 2048 * 3
    longest = max(units, key=lambda u: len(u.text))
    doc, s, e = where[longest.id]
    cut = r.prompt_for(texts[doc], s, e, longest.text)
    assert len(cut) <= budget + len(PROMPT.format(document="", chunk=""))
    assert r.prompt_for(texts[doc], s, e, longest.text[:200]) == PROMPT.format(
        document=excerpt(texts[doc], s, e, 4000), chunk=longest.text[:200])  # a prompt that fits is left alone
    # the real packaged model takes the cut prompt (it refused the uncut one with HTTP 400)
    llm = load_llm(None, cache_dir=tmp_path, progress=False)
    out = llm.map([cut], max_tokens=16, temperature=0.0)
    assert out[0].finish_reason in ("stop", "length")


def test_cached_contexts_counts_without_generating(tmp_path):
    """cached_contexts says how many units' contexts a run would read back; it generates nothing."""
    from lab.data.types import Document

    corpus = Corpus({"a": Document("a", "Cats sleep most of the day."),
                     "b": Document("b", "Dogs need a walk twice a day.")}, name="pets")
    ctx = Context(cache_dir=tmp_path, progress=False)
    r = build("contextual", {"max_tokens": 12}, ctx)
    assert r.cached_contexts(corpus) == 0 and r.usage()["calls"] == 0
    ids, prompts = r.prompts(corpus)
    assert ids == ["a", "b"] and "Cats sleep" in prompts[0]
    r.llm.complete(prompts[0], **r.gen)  # the call write_contexts makes for unit "a"
    again = build("contextual", {"max_tokens": 12}, ctx)
    assert again.cached_contexts(corpus) == 1 and again.usage()["calls"] == 0
    assert build("contextual", {"max_tokens": 13}, ctx).cached_contexts(corpus) == 0


def test_index_build_prints_its_estimate_and_asks_each_chunk_once(tmp_path, monkeypatch, capsys):
    """With more contexts to write than INDEX_ESTIMATE_CALLS (lowered to 1 here) the first calls are timed and the
    estimate of the build goes to stderr (shown however short: SHOW_SECONDS 0 here); each chunk is still asked once."""
    from lab.data.types import Document
    from lab.models import estimate as estimate_module
    from lab.retrievers import contextual

    monkeypatch.setattr(contextual, "INDEX_ESTIMATE_CALLS", 1)
    monkeypatch.setattr(estimate_module, "SHOW_SECONDS", 0.0)
    corpus = Corpus({f"d{i}": Document(f"d{i}", text) for i, text in enumerate(
        ["Cats sleep most of the day.", "Dogs need a walk twice a day.", "Owls hunt at night.",
         "Bees make honey in hives."])}, name="animals")
    r = build("contextual", {"max_tokens": 12, "apply": "bm25"}, Context(cache_dir=tmp_path, progress=False))
    r.index(corpus)
    err = capsys.readouterr().err
    assert "estimate (contextual index: 4 chunk contexts): 4 LLM calls (0 cached), about " in err, err
    assert r.usage()["calls"] == 4 and r.usage()["generated"] == 4 and set(r.contexts) == set(corpus.ids)
    again = build("contextual", {"max_tokens": 12, "apply": "bm25"}, Context(cache_dir=tmp_path, progress=False))
    again.index(corpus)  # all cached: nothing to time, nothing printed
    assert "estimate" not in capsys.readouterr().err and again.contexts == r.contexts
