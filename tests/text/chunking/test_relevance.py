"""lab.text.chunking.relevance: span qrels by overlap, aggregation to documents, SciFact evidence covered by chunks,
relevance modes."""
from __future__ import annotations

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.data.types import Document, EvidenceSpan, Qrels, Run
from lab.text.chunking import (
    aggregate_to_docs,
    chunk_corpus,
    chunk_to_doc,
    doc_id_of,
    relevance_for,
    span_qrels,
)


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)



def _chunks_by_hand():
    text = "Aaaa aaaa. Bbbb bbbb. Cccc cccc. Dddd dddd."  # sentences at 0-10, 11-21, 22-32, 33-43
    docs = [Document("d1", text), Document("d2", text)]
    return chunk_corpus(docs, "recursive", 2, 0, "words", title_prefix=False, progress=False)


def test_span_qrels_by_overlap_on_a_hand_case():
    chunks = _chunks_by_hand()
    assert [c.id for c in chunks if c.doc_id == "d1"] == ["d1@0-10", "d1@11-21", "d1@22-32", "d1@33-43"]
    evidence = [
        EvidenceSpan("q1", "d1", 15, 25),  # crosses the 2nd and 3rd chunk
        EvidenceSpan("q1", "d2", 33, 43, grade=1),  # exactly the 4th
        EvidenceSpan("q2", "d1", 21, 22),  # only the space between chunks: overlaps nothing
        EvidenceSpan("q2", "d1", 10, 11, tier="edge"),
        EvidenceSpan("q3", "d1", 0, 1),  # not in the split's qrels: ignored
    ]
    doc_qrels = Qrels({"q1": {"d1": 2, "d2": 1}, "q2": {"d1": 1}, "q4": {"d2": 1}}, name="test")
    q = span_qrels(chunks, evidence, doc_qrels)
    assert q.qrels == {"q1": {"d1@11-21": 2, "d1@22-32": 2, "d2@33-43": 1}}
    assert q.name == "test/span"
    # a span touching a chunk's end (half-open) does not count; a span inside does
    q = span_qrels(chunks, [EvidenceSpan("q", "d1", 10, 12), EvidenceSpan("q", "d1", 5, 6, grade=3)])
    assert q.qrels == {"q": {"d1@11-21": 1, "d1@0-10": 3}}
    assert span_qrels(chunks, evidence, doc_qrels, tiers=["edge"]).qrels == {}


def test_aggregate_to_docs_keeps_max_score_and_first_rank_order():
    run = Run({"q": {"a@0-5": 0.9, "b@0-5": 0.8, "a@6-9": 0.95, "c@0-3": 0.1, "b@6-9": 0.2},
               "r": {"c@0-3": 1.0}}, name="chunks", latency={"q": 0.01})
    mapping = {"a@0-5": "a", "a@6-9": "a", "b@0-5": "b", "b@6-9": "b", "c@0-3": "c"}
    docs = aggregate_to_docs(run, mapping)
    assert docs.scores == {"q": {"a": 0.95, "b": 0.8, "c": 0.1}, "r": {"c": 1.0}}
    assert [d for d, _ in docs.ranked("q")] == ["a", "b", "c"]
    assert docs.latency == {"q": 0.01} and docs.name == "chunks"
    assert aggregate_to_docs(run, None).scores == docs.scores  # ids parsed when no mapping is given
    assert aggregate_to_docs(run, mapping, how="sum").scores["q"] == pytest.approx({"a": 1.85, "b": 1.0, "c": 0.1})
    assert aggregate_to_docs(run, mapping, k=2).scores["q"] == {"a": 0.95, "b": 0.8}
    with pytest.raises(ConfigError, match="not in the chunk mapping"):
        aggregate_to_docs(run, {"a@0-5": "a"})
    with pytest.raises(ConfigError):
        aggregate_to_docs(run, mapping, how="mean")


def test_scifact_evidence_spans_are_covered_by_128_token_chunks(scifact, tokenizer):
    """Real data: chunk the test-qrels documents at 128 tokens; each evidence span lies in a chunk."""
    queries, qrels = scifact.split("test")
    doc_ids = sorted({d for q in qrels for d in qrels[q]})
    docs = [scifact.corpus[d] for d in doc_ids]
    chunks = chunk_corpus(docs, "recursive", 128, 16, "tokens", tokenizer, progress=False)
    by_doc: dict[str, list] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    spans = [s for s in scifact.evidence if s.query_id in qrels]
    assert len(spans) > 300
    inside = 0
    for sp in spans:
        text = scifact.corpus[sp.doc_id].text
        if any(c.start <= sp.start and sp.end <= c.end for c in by_doc[sp.doc_id]):
            inside += 1
        else:  # only a span longer than a chunk may be cut, and then its pieces are all in chunks
            assert _n_tokens(tokenizer, text[sp.start:sp.end]) > 128
            covered = np.zeros(sp.end - sp.start, bool)
            for c in by_doc[sp.doc_id]:
                lo, hi = max(c.start, sp.start), min(c.end, sp.end)
                covered[max(0, lo - sp.start):max(0, hi - sp.start)] = True
            gaps = [text[sp.start + i] for i in np.flatnonzero(~covered)]
            assert all(ch.isspace() for ch in gaps)
    assert inside / len(spans) > 0.97

    rel = relevance_for(scifact, chunks, "test", "span")
    assert rel.mode == "span" and len(rel.qrels) == 188 and len(rel.dropped) == 112  # as SOURCE.md counts
    assert rel.describe() == {"relevance": "span", "queries_evaluated": 188, "queries_dropped_no_evidence": 112,
                              "queries_in_split": 300}
    for qid, row in rel.qrels.qrels.items():  # relevant chunks belong to documents the query cites
        assert all(doc_id_of(cid) in qrels[qid] for cid in row)
    qrels_doc, mapping = relevance_for(scifact, chunks, "test", "doc")
    assert qrels_doc is qrels and mapping == chunk_to_doc(chunks)
    # doc mode turns a chunk run into a document run before evaluation; span mode leaves it
    run = Run({"1": {chunks[0].id: 2.0, chunks[1].id: 3.0}})
    doc_rel = relevance_for(scifact, chunks, "test", "doc")
    assert set(doc_rel.prepare(run)["1"]) == {chunks[0].doc_id, chunks[1].doc_id}
    assert rel.prepare(run) is run


def test_relevance_modes_are_checked(scifact):
    with pytest.raises(ConfigError, match="relevance mode"):
        relevance_for(scifact, [], "test", "passage")
