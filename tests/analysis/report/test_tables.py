"""lab.analysis.report.tables: the worst queries in a stable order, and a query's detail (relevant documents with the
rank the run gave them, retrieved chunks graded by their document)."""
from __future__ import annotations

import pandas as pd

from lab.analysis.report import query_detail, worst_query_ids
from lab.data.types import Corpus, Document


def test_worst_query_ids_ties_by_id():
    s = pd.Series([0.5, 0.0, 0.0, 1.0], index=["b", "z", "a", "c"])
    assert worst_query_ids(s, 3) == ["a", "z", "b"]


def test_query_detail_ranks_chunks_by_document():
    corpus = Corpus({"d1": Document("d1", "alpha beta gamma delta", "T1"), "d2": Document("d2", "other text")})
    hits = [("d2", 3.0), ("d1@6-10", 2.5), ("d1@0-5", 2.0)]
    det = query_detail("q", "what?", {"d1": 2, "d3": 1, "d9": 0}, hits, corpus, depth=2)
    assert [r["doc_id"] for r in det["relevant"]] == ["d1", "d3"]  # grade 0 left out, highest grade first
    assert det["relevant"][0]["rank"] == 2 and det["relevant"][1]["rank"] is None
    assert not det["relevant"][1]["in_corpus"]
    assert [(h["rank"], h["doc_id"], h["grade"]) for h in det["retrieved"]] == [(1, "d2", 0), (2, "d1@6-10", 2)]
    assert det["retrieved"][1]["text"] == "beta" and det["n_retrieved"] == 3
