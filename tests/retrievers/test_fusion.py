"""Fusion functions on hand-made runs (and against ranx), and the composed "hybrid" strategy with real parts."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.data.types import Run
from lab.retrievers import Context, build
from lab.retrievers.fusion import HybridRetriever, combmnz, combsum, fuse, normalise, rrf, weighted

DATA = Path(__file__).resolve().parents[2] / "data"

A = Run({"q": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "only_a": {"d9": 0.5}}, name="A")
B = Run({"q": {"d3": 10.0, "d4": 5.0}}, name="B")


# --- rrf ----------------------------------------------------------------------------------------------------

def test_rrf_by_hand():
    fused = rrf([A, B], k=60)
    assert fused.scores["q"] == pytest.approx({"d1": 1 / 61, "d2": 1 / 62, "d3": 1 / 63 + 1 / 61, "d4": 1 / 62})
    # d2 and d4 tie at 1/62: the Run tie rule (doc id descending) orders them
    assert [d for d, _ in fused.ranked("q")] == ["d3", "d1", "d4", "d2"]
    assert fused.scores["only_a"] == pytest.approx({"d9": 1 / 61})  # a query missing from a run
    assert list(fused) == ["q", "only_a"] and fused.name == "rrf(A+B)" and fused.latency == {}


def test_rrf_ranks_follow_the_run_tie_rule_not_dict_order():
    tied = Run({"q": {"a": 1.0, "b": 1.0, "c": 2.0}})  # ranked: c, b, a
    assert rrf([tied], k=0).scores["q"] == pytest.approx({"c": 1.0, "b": 1 / 2, "a": 1 / 3})


def test_rrf_weights_and_top():
    fused = rrf([A, B], k=10, weights=[2.0, 0.5])
    assert fused.scores["q"]["d3"] == pytest.approx(2 / 13 + 0.5 / 11)
    assert fused.scores["q"]["d4"] == pytest.approx(0.5 / 12)
    only_b = rrf([A, B], weights=[0.0, 1.0])
    assert [d for d, s in only_b.ranked("q") if s > 0] == ["d3", "d4"]
    assert list(rrf([A, B], top=2).scores["q"]) == ["d3", "d1"]
    with pytest.raises(ConfigError, match="weights"):
        rrf([A, B], weights=[1.0])
    with pytest.raises(ConfigError):
        rrf([A, B], weights=[1.0, -1.0])
    with pytest.raises(ConfigError):
        rrf([])


# --- weighted -----------------------------------------------------------------------------------------------

def test_normalise_minmax_zscore_and_degenerate_cases():
    assert normalise({"a": 3.0, "b": 1.0, "c": 2.0}, "minmax") == {"a": 1.0, "b": 0.0, "c": 0.5}
    z = normalise({"a": 3.0, "b": 1.0}, "zscore")
    assert z == pytest.approx({"a": 1.0, "b": -1.0})  # population sd of {1, 3} is 1
    assert normalise({"a": 5.0}, "minmax") == {"a": 1.0}
    assert normalise({"a": 5.0, "b": 5.0}, "zscore") == {"a": 0.0, "b": 0.0}
    assert normalise({"a": 5.0}, "none") == {"a": 5.0}
    assert normalise({}, "minmax") == {}
    with pytest.raises(ConfigError, match="norm"):
        normalise({"a": 1.0}, "l2")


def test_weighted_minmax_by_hand_missing_doc_contributes_zero():
    fused = weighted([A, B], [0.7, 0.3], "minmax")
    # A normalised: d1 1, d2 .5, d3 0; B normalised: d3 1, d4 0
    assert fused.scores["q"] == pytest.approx({"d1": 0.7, "d2": 0.35, "d3": 0.3, "d4": 0.0})
    assert fused.name == "weighted-minmax(A+B)"


def test_weighted_zscore_by_hand():
    fused = weighted([A, B], [1.0, 1.0], "zscore")
    sd_a = (2 / 3) ** 0.5
    assert fused.scores["q"] == pytest.approx({"d1": 1 / sd_a, "d2": 0.0, "d3": -1 / sd_a + 1.0, "d4": -1.0})


def test_normalise_sum_max_rank_by_hand():
    s = {"a": 3.0, "b": 1.0, "c": 2.0}
    assert normalise(s, "sum") == pytest.approx({"a": 2 / 3, "b": 0.0, "c": 1 / 3})  # (s - min) / sum(s - min)
    assert normalise(s, "max") == pytest.approx({"a": 1.0, "b": 1 / 3, "c": 2 / 3})
    assert normalise(s, "rank") == pytest.approx({"a": 1.0, "c": 2 / 3, "b": 1 / 3})  # 1 - i / n
    # rank follows the Run tie rule (doc id descending), not dict order
    assert normalise({"x": 1.0, "y": 1.0}, "rank") == {"y": 1.0, "x": 0.5}


def test_combsum_and_combmnz_by_hand():
    # A minmax: d1 1, d2 .5, d3 0; B minmax: d3 1, d4 0
    assert combsum([A, B]).scores["q"] == pytest.approx({"d1": 1.0, "d2": 0.5, "d3": 1.0, "d4": 0.0})
    # d3 is retrieved by both runs: its sum counts twice
    assert combmnz([A, B]).scores["q"] == pytest.approx({"d1": 1.0, "d2": 0.5, "d3": 2.0, "d4": 0.0})
    # weighted MNZ (ranx wmnz): the plain sum times the weights of the runs that retrieved the document
    assert combmnz([A, B], weights=[0.5, 2.0]).scores["q"] == pytest.approx(
        {"d1": 0.5, "d2": 0.25, "d3": 2.5, "d4": 0.0})
    assert combsum([A, B], "rank").scores["q"] == pytest.approx(
        {"d1": 1.0, "d2": 2 / 3, "d3": 1 / 3 + 1.0, "d4": 0.5})
    assert fuse([A, B], "combmnz", norm="max").name == "combmnz-max(A+B)"


def test_fuse_dispatches_and_checks():
    assert fuse([A, B], "rrf", rrf_k=5).scores == rrf([A, B], k=5).scores
    assert fuse([A, B], "weighted").scores == weighted([A, B], [0.5, 0.5]).scores
    with pytest.raises(ConfigError, match="fusion"):
        fuse([A, B], "borda")


@pytest.mark.slow
def test_parity_with_ranx():
    """An independent implementation (ranx) gives the same fused scores on tie-free runs (slow: numba JIT)."""
    import random

    from ranx import Run as RanxRun
    from ranx import fuse as ranx_fuse

    rng = random.Random(7)
    runs = []
    for r in range(3):
        scores = {}
        for q in range(20):
            docs = rng.sample(range(200), 30)
            scores[f"q{q}"] = {f"d{d}": rng.random() * (r + 1) * 10 for d in docs}
        runs.append(Run(scores, name=f"r{r}"))
    ranx_runs = [RanxRun(r.scores) for r in runs]

    def same(ours: Run, theirs) -> None:
        theirs = theirs.to_dict()
        assert set(ours.scores) == set(theirs)
        for q in theirs:
            assert ours.scores[q] == pytest.approx(theirs[q], rel=1e-9, abs=1e-12)

    same(rrf(runs, k=60), ranx_fuse(ranx_runs, method="rrf", params={"k": 60}))
    w = [0.5, 0.3, 0.2]
    same(weighted(runs, w, "minmax"), ranx_fuse(ranx_runs, norm="min-max", method="wsum", params={"weights": w}))
    same(weighted(runs, w, "zscore"), ranx_fuse(ranx_runs, norm="zmuv", method="wsum", params={"weights": w}))


# --- the hybrid strategy ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scifact_small():
    """Real SciFact: the documents cited by 30 test queries plus 170 others, and those 30 queries."""
    from lab.data.beir import load_dataset
    from lab.data.types import Corpus

    ds = load_dataset(DATA / "scifact", splits=["test"], progress=False)
    queries, qrels = ds.split("test")
    qids = list(queries)[:30]
    cited = {d for q in qids for d in qrels[q]}
    others = [d for d in ds.corpus.ids if d not in cited][:200 - len(cited)]
    corpus = Corpus({d: ds.corpus[d] for d in sorted(cited) + others}, name="scifact-small")
    return corpus, queries.subset(qids), qrels


def _same_ranking(got: list, want: list) -> None:
    assert [d for d, _ in got] == [d for d, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12)


def _hits_at_10(run: Run, qrels) -> int:
    return sum(any(d in qrels[q] for d, _ in run.ranked(q, 10)) for q in run)


def test_hybrid_of_two_real_bm25_parts_equals_fusing_their_runs(scifact_small, tmp_path):
    corpus, queries, qrels = scifact_small
    ctx = Context(cache_dir=tmp_path, progress=False)
    parts = [{"strategy": "bm25", "label": "stemmed"}, {"strategy": "bm25", "label": "plain", "stem": False}]
    hybrid = build("hybrid", {"retrievers": parts, "depth": 50, "bm25": {"k1": 1.2}}, ctx)
    assert isinstance(hybrid, HybridRetriever)
    assert [p.k1 for p in hybrid.parts] == [1.2, 1.2]
    hybrid.index(corpus)
    run = hybrid.search(queries, k=10)
    assert set(run.latency) == set(queries) and all(t > 0 for t in run.latency.values())

    singles = []
    for params in ({"k1": 1.2}, {"k1": 1.2, "stem": False}):
        r = build("bm25", params, ctx)
        r.index(corpus)
        singles.append(r.search(queries, k=50))
    expected = rrf(singles, k=60, top=10)
    for q in queries:
        _same_ranking(run.ranked(q), expected.ranked(q))
    assert singles[0].scores != singles[1].scores  # the two parts really differ

    batch = hybrid.search_batch(queries, k=10)
    assert list(batch) == list(run)
    for q in run:
        _same_ranking(batch.ranked(q), run.ranked(q))

    d = hybrid.describe()
    assert d["strategy"] == "hybrid" and d["fusion"] == "rrf" and d["rrf_k"] == 60 and d["depth"] == 50
    assert d["retrievers"] == ["stemmed", "plain"] and [p["strategy"] for p in d["parts"]] == ["bm25", "bm25"]
    assert set(d["index_seconds"]) == {"stemmed", "plain"}


def test_hybrid_weighted_fusion_and_param_checks(scifact_small, tmp_path):
    corpus, queries, _ = scifact_small
    ctx = Context(cache_dir=tmp_path, progress=False)
    parts = ["bm25", {"strategy": "bm25", "label": "atire", "variant": "atire"}]
    hybrid = build("hybrid", {"retrievers": parts, "fusion": "weighted", "weights": [0.8, 0.2], "norm": "zscore",
                              "depth": 20}, ctx)
    hybrid.index(corpus)
    run = hybrid.search(queries, k=5)
    a, b = (build("bm25", p, ctx) for p in ({}, {"variant": "atire"}))
    a.index(corpus)
    b.index(corpus)
    expected = weighted([a.search(queries, 20), b.search(queries, 20)], [0.8, 0.2], "zscore", top=5)
    for q in queries:
        _same_ranking(run.ranked(q), expected.ranked(q))
    assert hybrid.describe()["norm"] == "zscore" and hybrid.describe()["weights"] == [0.8, 0.2]

    with pytest.raises(ConfigError, match="unknown param .bm52.; hybrid accepts"):
        build("hybrid", {"retrievers": ["bm25", "bm25"], "bm52": {"k1": 1}}, ctx)
    with pytest.raises(ConfigError, match="at least two"):
        build("hybrid", {"retrievers": ["bm25"]}, ctx)
    with pytest.raises(ConfigError, match="weights"):
        build("hybrid", {"retrievers": ["bm25", "bm25"], "weights": [1.0]}, ctx)
    with pytest.raises(ConfigError, match="fusion"):
        build("hybrid", {"retrievers": ["bm25", "bm25"], "fusion": "max"}, ctx)
    with pytest.raises(ConfigError, match="weights='tune' is not valid.*'tuned'"):
        build("hybrid", {"retrievers": ["bm25", "bm25"], "weights": "tune"}, ctx)
    with pytest.raises(ConfigError, match="folds=1 is not valid"):
        build("hybrid", {"retrievers": ["bm25", "bm25"], "weights": "tuned", "folds": 1}, ctx)
    with pytest.raises(ConfigError, match="unknown strategy"):
        build("hybrid", {"retrievers": ["bm25", "nope"]}, ctx)


@pytest.mark.slow
def test_hybrid_bm25_dense_defaults_on_real_data(scifact_small, tmp_path):
    """The default hybrid (bm25 + dense all-MiniLM-L6-v2, RRF k=60) against its parts on 30 SciFact queries."""
    corpus, queries, qrels = scifact_small
    ctx = Context(cache_dir=tmp_path, progress=False)
    hybrid = build("hybrid", {"dense": {"model": "all-MiniLM-L6-v2"}, "depth": 100}, ctx)
    hybrid.index(corpus)
    run = hybrid.search(queries, k=10)
    bm25, dense = hybrid.parts
    part_runs = [Run({q: dict(p.search_one(queries[q], 100)) for q in queries}, name=p.name) for p in (bm25, dense)]
    expected = rrf(part_runs, top=10)
    for q in queries:
        assert [d for d, _ in run.ranked(q)] == [d for d, _ in expected.ranked(q)]
    hits = [_hits_at_10(r, qrels) for r in (part_runs[0], part_runs[1], run)]
    assert hits[2] >= min(hits[:2]), hits
    d = hybrid.describe()
    assert d["retrievers"] == ["bm25", "dense"] and d["parts"][1]["model"] == "all-MiniLM-L6-v2"
