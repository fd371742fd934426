"""Parity of lab.retrievers.fusion with ranx's ``fuse`` (ranx 0.3.x, ranx/fusion and ranx/normalization).

Method and norm names: ours -> ranx. weighted -> wsum, combsum -> sum (comb_sum), combmnz -> mnz (comb_mnz;
weighted: wmnz),
rrf -> rrf; minmax -> min-max, zscore -> zmuv, sum -> sum, max -> max, rank -> rank.
Checked: the same fused scores (1e-9) and the same nDCG@10 (1e-6) for every method x norm ranx shares, on runs
without tied scores and without constant-score queries, with documents missing from some runs. The two documented
differences (see the lab.retrievers.fusion docstring) are checked as such: minmax of equal scores, and ties
(ranx's numba argsort has no tie rule; ours is trec_eval's, doc id descending), which is what separates the two
on ORD-QA's duplicate chunks.
ranx compiles with numba on first use (cached afterwards), as in test_metrics_parity.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lab.data.types import Qrels, Run
from lab.metrics import evaluate
from lab.retrievers.fusion import combmnz, combsum, fuse, normalise, rrf, weighted

DATA = Path(__file__).resolve().parents[2] / "data"
NORMS = {"minmax": "min-max", "zscore": "zmuv", "sum": "sum", "max": "max", "rank": "rank"}


def random_runs(seed: int, n_runs: int = 3, n_queries: int = 25):
    """Tie-free runs over a shared pool, depths 3..60 (so documents go missing from some runs), positive scores on
    different scales per run, and graded qrels drawn from the pool."""
    rng = np.random.default_rng(seed)
    pool = [f"d{i:03d}" for i in range(150)]
    runs, qrels = [], {}
    for r in range(n_runs):
        scores = {}
        for q in range(n_queries):
            depth = int(rng.integers(3, 61))
            docs = rng.choice(len(pool), size=depth, replace=False)
            vals = rng.permutation(depth) + rng.random(depth) * 0.5 + 0.1
            scores[f"q{q}"] = {pool[d]: float(v * (r + 1) * 3.7) for d, v in zip(docs, vals, strict=False)}
        runs.append(Run(scores, name=f"r{r}"))
    for q in range(n_queries):
        judged = rng.choice(len(pool), size=20, replace=False)
        qrels[f"q{q}"] = {pool[d]: int(rng.integers(0, 3)) for d in judged}
    return runs, Qrels(qrels, name="random")


def to_ranx(run: Run):
    from ranx import Run as RanxRun

    return RanxRun({q: dict(run.ranked(q)) for q in run}, name=run.name)


def from_ranx(run) -> Run:
    return Run({q: dict(v) for q, v in run.to_dict().items()}, name="ranx")


def same_scores(ours: Run, theirs: Run) -> None:
    assert set(ours.scores) == set(theirs.scores)
    for q in ours:
        assert set(ours.scores[q]) == set(theirs.scores[q]), q
        for d, s in ours.scores[q].items():
            assert s == pytest.approx(theirs.scores[q][d], rel=1e-9, abs=1e-12), (q, d)


def same_ndcg(ours: Run, theirs: Run, qrels: Qrels) -> None:
    a = evaluate(qrels, ours, ["ndcg@10"]).means["ndcg@10"]
    b = evaluate(qrels, theirs, ["ndcg@10"]).means["ndcg@10"]
    assert abs(a - b) < 1e-6, (a, b)


@pytest.fixture(scope="module")
def case():
    return random_runs(11)


@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("method", ["weighted", "combsum", "combmnz"])
def test_score_fusion_matches_ranx(case, method, norm):
    from ranx import fuse as ranx_fuse

    runs, qrels = case
    w = [0.5, 0.3, 0.2]
    if method == "weighted":
        ours = weighted(runs, w, norm)
        theirs = ranx_fuse([to_ranx(r) for r in runs], norm=NORMS[norm], method="wsum", params={"weights": w})
    elif method == "combsum":
        ours = combsum(runs, norm)
        theirs = ranx_fuse([to_ranx(r) for r in runs], norm=NORMS[norm], method="sum")
    else:
        ours = combmnz(runs, norm)
        theirs = ranx_fuse([to_ranx(r) for r in runs], norm=NORMS[norm], method="mnz")
    theirs = from_ranx(theirs)
    same_scores(ours, theirs)
    same_ndcg(ours, theirs, qrels)
    assert fuse(runs, method, weights=w if method == "weighted" else None, norm=norm).scores == ours.scores


@pytest.mark.parametrize("norm", list(NORMS))
def test_weighted_combmnz_matches_ranx_wmnz(case, norm):
    from ranx import fuse as ranx_fuse

    runs, qrels = case
    w = [0.6, 0.1, 0.3]
    theirs = from_ranx(ranx_fuse([to_ranx(r) for r in runs], norm=NORMS[norm], method="wmnz", params={"weights": w}))
    same_scores(combmnz(runs, norm, weights=w), theirs)


def test_rrf_matches_ranx(case):
    from ranx import fuse as ranx_fuse

    runs, qrels = case
    theirs = from_ranx(ranx_fuse([to_ranx(r) for r in runs], norm=None, method="rrf", params={"k": 60}))
    same_scores(rrf(runs, k=60), theirs)
    same_ndcg(rrf(runs, k=60), theirs, qrels)


def test_documented_difference_minmax_of_equal_scores():
    """One hit (or equal scores): 1.0 here (the run's best), 0.0 in ranx (0 / max(0, 1e-9))."""
    from ranx import Run as RanxRun
    from ranx.normalization import min_max_norm

    one = {"q": {"d1": 4.2}}
    assert normalise(one["q"], "minmax") == {"d1": 1.0}
    assert dict(min_max_norm(RanxRun(one)).to_dict()["q"]) == {"d1": 0.0}
    # the other norms follow ranx in the degenerate case
    assert normalise({"a": 2.0, "b": 2.0}, "zscore") == {"a": 0.0, "b": 0.0}
    assert normalise({"a": 2.0, "b": 2.0}, "sum") == {"a": 0.0, "b": 0.0}


def test_ordqa_gap_is_ties_of_duplicate_chunks_not_fusion():
    """Real ORD-QA, two real BM25 runs (Lucene and ATIRE-like params): the fused scores equal ranx's, so nDCG@10 of
    ranx's fused run under our evaluator is ours; chunks with the same text tie in the fused run, and there our
    order (doc id descending) is the one the metric sees, whatever ranx's sort does."""
    from ranx import fuse as ranx_fuse

    from lab.data.beir import load_dataset
    from lab.retrievers import Context, build

    ds = load_dataset(DATA / "ord-qa", progress=False)
    queries, qrels = ds.split("test")
    ctx = Context(progress=False)
    runs = []
    for name, params in (("lucene", {}), ("atire", {"k1": 1.5, "b": 0.75})):
        r = build("bm25", params, ctx)
        r.index(ds.corpus)
        runs.append(Run(r.search(queries, 100).scores, name=name))
    ours = weighted(runs, [0.5, 0.5], "minmax", top=100)
    theirs = from_ranx(ranx_fuse([to_ranx(r) for r in runs], norm="min-max", method="wsum",
                                 params={"weights": [0.5, 0.5]}))
    for q in ours:  # ranx keeps every candidate; compare on our top 100
        for d, s in ours.scores[q].items():
            assert s == pytest.approx(theirs.scores[q][d], rel=1e-9, abs=1e-12)
    theirs100 = Run({q: dict(theirs.ranked(q, 100)) for q in theirs}, name="ranx")
    same_ndcg(ours, theirs100, qrels)
    dup = ("restructure_0", "floorplan_initialization_0")
    assert ds.corpus[dup[0]].text == ds.corpus[dup[1]].text
    tied = [q for q in ours if all(d in ours.scores[q] for d in dup)]
    assert tied and all(ours.scores[q][dup[0]] == ours.scores[q][dup[1]] for q in tied)
    for q in tied:
        order = [d for d, _ in ours.ranked(q) if d in dup]
        assert order == sorted(dup, reverse=True)  # trec_eval's rule: doc id descending
