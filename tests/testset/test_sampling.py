"""lab.testset.sampling: the visiting order is stratified, seeded, and skips units that are too short."""
from __future__ import annotations

from collections import Counter

from lab.data.types import Corpus, Document
from lab.testset.sampling import sample_order, stratum_of


def _corpus() -> Corpus:
    docs = {}
    for sec, n in (("a", 5), ("b", 2), ("c", 1)):
        for i in range(n):
            docs[f"{sec}{i}"] = Document(f"{sec}{i}", f"# {sec.upper()} heading\n" + "some words here " * 10,
                                         metadata={"source": sec})
    docs["tiny"] = Document("tiny", "too short", metadata={"source": "c"})
    return Corpus(docs)


def test_sample_order_is_stratified_seeded_and_skips_short_units():
    corpus = _corpus()
    passages, skipped, strata, _ = sample_order(corpus, seed=1, stratify="section", min_passage_words=10)
    order = [p.unit_id for p in passages]
    # each unit is one section (its heading and body); "tiny" is one window, too short
    assert skipped == 1 and "tiny" not in order and len(order) == 8 == len(set(order))
    assert {strata[p.key] for p in passages[:3]} == {"a", "b", "c"}  # round-robin: every section before any repeats
    assert Counter(strata[p.key] for p in passages[:5]) == Counter({"a": 2, "b": 2, "c": 1})
    assert all(p.text == corpus[p.unit_id].text[p.start:p.end] and p.section.endswith("heading") for p in passages)
    assert sample_order(corpus, 1, "section", 10)[0] == passages
    assert sample_order(corpus, 2, "section", 10)[0] != passages
    assert stratum_of(corpus["a0"], "doc") == "a0" and stratum_of(Document("x", "# Head\ntext"), "section") == "Head"
    assert stratum_of(Document("x@0-5", "t", metadata={"doc_id": "x"}), "doc") == "x"
