"""Small-to-big retrieval ("parent"): children searched, parents or windows returned, deduplicated; judged at
document level and, for windows, at span level (lab.text.chunking.Relevance.judge); on real SciFact and ORD-QA text."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Run
from lab.retrievers import Context, build
from lab.retrievers.base import param_problems
from lab.text.chunking import chunk_corpus, chunks_to_corpus, doc_id_of, relevance_for

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def scifact_small():
    """Real SciFact: the documents of 20 test queries with evidence plus 80 others."""
    from lab.data.beir import load_dataset

    ds = load_dataset(DATA / "scifact", splits=["test"], progress=False)
    queries, qrels = ds.split("test")
    with_ev = sorted({e.query_id for e in ds.evidence if e.query_id in qrels})[:20]
    cited = sorted({d for q in with_ev for d in qrels[q]})
    others = [d for d in ds.corpus.ids if d not in cited][:80]
    corpus = Corpus({d: ds.corpus[d] for d in cited + others}, name="scifact-small")
    return ds, corpus, queries.subset(with_ev), qrels


def test_parent_returns_each_document_once_scored_by_its_best_child(scifact_small, tmp_path):
    ds, corpus, queries, qrels = scifact_small
    ctx = Context(cache_dir=tmp_path, progress=False)
    p = build("parent", {"child_size": 32, "depth": 400}, ctx)
    p.index(corpus)
    run = p.search(queries, k=10)
    children = p.base.search(queries, 400)
    for q in queries:
        ranked = run.ranked(q)
        assert len(ranked) == len({d for d, _ in ranked}) <= 10 and all(d in corpus for d, _ in ranked)
        # each document scores its best child; the documents are the first ten met among the ranked children
        best: dict[str, float] = {}
        for c, s in children.ranked(q):
            best.setdefault(p._child[c][0], s)
        assert all(s == best[d] for d, s in ranked)
        assert sorted(s for _, s in ranked) == sorted(list(best.values())[:10])
    d = p.describe()
    assert d["n_children"] > d["n_units"] == len(corpus) and d["mean_returned_chars"] > 0
    assert all(t > 0 for t in run.latency.values())


def test_window_spans_are_neighbours_in_document_offsets_and_never_repeat_a_centre(scifact_small, tmp_path):
    ds, corpus, queries, _ = scifact_small
    ctx = Context(cache_dir=tmp_path, progress=False)
    chunks = chunk_corpus(corpus, size=256, overlap=0, progress=False)
    p = build("parent", {"mode": "window", "window": 1, "child_size": 32}, ctx)
    p.index(chunks_to_corpus(chunks))
    run = p.search(queries, k=20)
    for q in queries:
        ids = [d for d, _ in run.ranked(q)]
        assert len(ids) == len(set(ids))
        for wid in ids:
            doc = doc_id_of(wid)
            s, e = (int(x) for x in wid.rpartition("@")[2].split("-"))
            text = ds.corpus[doc].text
            assert 0 <= s < e <= len(text)
            # a window is at most 3 children of one unit: it lies inside one chunk of the outer chunking
            assert any(c.doc_id == doc and c.start <= s and e <= c.end for c in chunks)
        spans = [(doc_id_of(w), *map(int, w.rpartition("@")[2].split("-"))) for w in ids]
        for i, a in enumerate(spans):  # no window lies inside another one returned before it
            assert not any(b[0] == a[0] and b[1] <= a[1] and a[2] <= b[2] for b in spans[:i])


def test_windows_are_judged_by_evidence_overlap(scifact_small, tmp_path):
    ds, corpus, queries, qrels = scifact_small
    chunks = chunk_corpus(corpus, size=256, overlap=0, progress=False)
    rel = relevance_for(ds, chunks, "test", "span")
    ev = next(e for e in ds.evidence if e.query_id in queries)
    inside = f"{ev.doc_id}@{ev.start}-{ev.end}"
    before = f"{ev.doc_id}@0-{max(ev.start, 1)}" if ev.start > 0 else None
    run = Run({ev.query_id: {inside: 2.0, **({before: 1.0} if before else {})}})
    judged = rel.judge(run)
    assert judged[ev.query_id][inside] >= 1
    if before:
        assert before not in judged[ev.query_id]
    assert rel.judge(Run({ev.query_id: {}})) is rel.qrels


def test_through_run_experiment_on_ordqa(tmp_path):
    """Real ORD-QA (no evidence spans: document level): parent beats nothing by construction, but runs, is judged
    and its windows map back to documents."""
    from lab.experiment.run import run_experiment

    ctx = Context(cache_dir=tmp_path, progress=False)
    par = run_experiment(DATA / "ord-qa", "parent", {"child_size": 64}, k=10, ctx=ctx)
    win = run_experiment(DATA / "ord-qa", "parent", {"mode": "window", "child_size": 64}, k=10, ctx=ctx)
    assert par.evaluation.means["ndcg@10"] > 0.3
    assert all("@" in d for q in win.run for d in win.run.scores[q])
    # both rank documents by their best child: the same documents in the same order at the top
    q = next(iter(par.run))
    first_docs = list(dict.fromkeys(doc_id_of(d) for d, _ in win.run.ranked(q)))[:3]
    assert first_docs == [d for d, _ in par.run.ranked(q)][:3]
    assert par.info["retriever"]["base"]["strategy"] == "bm25"


def test_params_are_checked():
    assert param_problems("parent", {"mode": "windows"})[0].endswith("takes one of 'parent', 'window' (default "
                                                                       "'parent')")
    assert "window=-1 is not valid" in param_problems("parent", {"window": -1})[0]
    assert "base_params: unknown param 'k2'" in param_problems("parent", {"base_params": {"k2": 1}})[0]
    with pytest.raises(ConfigError, match="nest"):
        build("parent", {"base": "parent"})
