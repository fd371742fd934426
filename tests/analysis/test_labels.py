"""lab.analysis.labels: short plot labels that show only what varies between configurations."""
from __future__ import annotations

from lab.analysis.labels import parse_label, short_labels, short_model, table_labels

RERANK = ("strategy=rerank, params.reranker=biencoder, params.model=all-MiniLM-L6-v2, params.alpha=0.5, "
          "params.top_n=50")


def test_the_readme_example_and_the_demo_strategies():
    labels = ["strategy=bm25", "strategy=dense", "strategy=hybrid", RERANK, RERANK.replace("=rerank", "=hybrid_rerank")]
    assert short_labels(labels) == ["bm25", "dense", "hybrid", "rerank · biencoder MiniLM · α 0.5 · top 50",
                                    "hybrid_rerank · biencoder MiniLM · α 0.5 · top 50"]


def test_only_what_varies_is_shown():
    other = RERANK.replace("alpha=0.5", "alpha=0.7")
    assert short_labels([RERANK, other]) == ["α 0.5", "α 0.7"]
    assert short_labels(["chunking.chunker=recursive, chunking.overlap=0, chunking.size=64",
                         "chunking.chunker=fixed, chunking.overlap=32, chunking.size=64"]) == [
        "recursive · overlap 0", "fixed · overlap 32"]
    # empty params are left out; a key only some configs have is shown where present
    assert short_labels(["strategy=bm25, params={}", "strategy=kg, params.base=bm25"]) == ["bm25", "kg · base bm25"]
    assert short_labels([{"strategy": "dense", "params.model": "all-mpnet-base-v2"},
                         {"strategy": "dense", "params.model": "multilingual-e5-small"}]) == [
        "mpnet-base", "multilingual-e5-small"]


def test_names_are_kept_and_values_with_commas_parse():
    assert short_labels(["bm25", "my system"]) == ["bm25", "my system"]
    assert parse_label("strategy=hybrid, params.retrievers=[bm25, dense], params.fusion=rrf") == {
        "strategy": "hybrid", "params.retrievers": "[bm25, dense]", "params.fusion": "rrf"}
    assert short_model("sentence-transformers/all-MiniLM-L6-v2") == "MiniLM"
    assert short_model("/models/ft/epoch-2") == "epoch-2"


def test_table_labels_are_the_short_labels_cut_to_the_width():
    other = RERANK.replace("alpha=0.5", "alpha=0.7")
    assert table_labels([RERANK, other]) == ["α 0.5", "α 0.7"]
    assert table_labels([RERANK, other], long=True, width=200) == [RERANK, other]
    cut = table_labels([RERANK, other], long=True, width=20)
    assert [len(c) for c in cut] == [20, 20] and all(c.endswith("...") for c in cut)
