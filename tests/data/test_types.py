"""lab.data.types: the typed values of the data layer (Corpus, Queries, Qrels, Run, EvidenceSpan, Dataset)."""
from __future__ import annotations

import dataclasses

import pytest

from lab.core.errors import ConfigError, UnknownSplitError
from lab.data.types import Corpus, Dataset, Document, EvidenceSpan, Qrels, Queries, Run


def _dataset() -> Dataset:
    corpus = Corpus({"d1": Document("d1", "first"), "d2": Document("d2", "second", title="Two")}, name="c")
    queries = Queries({"q1": "one", "q2": "two", "q3": "three"}, metadata={"q2": {"lang": "en"}})
    qrels = {"test": Qrels({"q2": {"d1": 1}, "q1": {"d2": 0}}, name="test"), "dev": Qrels({"q3": {"d2": 2}})}
    return Dataset("data/x", corpus, queries, qrels, name="x")


def test_corpus_is_a_mapping_of_documents_in_insertion_order():
    corpus = _dataset().corpus
    assert len(corpus) == 2 and corpus.ids == ["d1", "d2"]
    assert [d.id for d in corpus] == ["d1", "d2"]
    assert corpus["d2"].title == "Two" and "d1" in corpus and "d9" not in corpus
    with pytest.raises(KeyError):
        corpus["d9"]


def test_a_document_is_frozen_with_empty_defaults():
    doc = Document("d", "text")
    assert doc.title == "" and dict(doc.metadata) == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.text = "other"


def test_queries_subset_keeps_the_order_given_drops_unknown_ids_and_carries_metadata():
    queries = _dataset().queries
    sub = queries.subset(["q3", "q2", "q9"])
    assert list(sub) == ["q3", "q2"] and sub["q2"] == "two"
    assert sub.metadata == {"q2": {"lang": "en"}}
    assert len(queries) == 3 and "q9" not in queries


def test_qrels_relevant_uses_the_grade_threshold():
    qrels = Qrels({"q": {"a": 0, "b": 1, "c": 2}})
    assert qrels.relevant("q") == {"b", "c"}
    assert qrels.relevant("q", threshold=2) == {"c"}
    assert qrels.relevant("missing") == set()
    assert qrels.query_ids == ["q"] and qrels["q"]["c"] == 2 and list(qrels) == ["q"]


def test_run_ranked_sorts_by_score_then_doc_id_descending_like_trec_eval():
    run = Run({"q": {"a": 1.0, "c": 2.0, "b": 1.0, "d": 0.5}})
    assert run.ranked("q") == [("c", 2.0), ("b", 1.0), ("a", 1.0), ("d", 0.5)]
    assert run.ranked("q", k=2) == [("c", 2.0), ("b", 1.0)]
    assert run.ranked("absent") == []
    assert run.name == "run" and run.latency == {} and len(run) == 1 and "q" in run


def test_evidence_span_defaults():
    span = EvidenceSpan("q", "d", 3, 9)
    assert (span.label, span.tier, span.grade) == ("", "core", 1)


def test_dataset_split_gives_the_queries_its_qrels_name_in_qrels_order():
    ds = _dataset()
    queries, qrels = ds.split("test")
    assert list(queries) == ["q2", "q1"] and qrels is ds.qrels["test"]
    dev_queries, _ = ds.split("dev")
    assert list(dev_queries) == ["q3"]


def test_an_unknown_split_is_a_config_error_naming_the_splits():
    with pytest.raises(UnknownSplitError, match=r"data/x: no qrels for split 'nosuch'; available: \['dev', 'test'\]"
                       ) as exc:
        _dataset().split("nosuch")
    assert isinstance(exc.value, ConfigError) and isinstance(exc.value, KeyError)
