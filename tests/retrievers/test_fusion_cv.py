"""Fusion weights tuned by k-fold cross-validation over queries (lab.retrievers.fusion_cv), and hybrid's
weights="tuned" through run_experiment on real ORD-QA data."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.data.types import Qrels, Run
from lab.retrievers.fusion import fuse
from lab.retrievers.fusion_cv import assign_folds, tune_fusion, weight_grid

DATA = Path(__file__).resolve().parents[2] / "data"


def test_weight_grid_is_the_simplex():
    g = weight_grid(2, 0.1)
    assert len(g) == 11 and g[0] == [0.0, 1.0] and g[-1] == [1.0, 0.0]
    assert len(weight_grid(3, 0.1)) == 66 and all(sum(w) == pytest.approx(1.0) for w in weight_grid(3, 0.1))
    with pytest.raises(ConfigError, match="step"):
        weight_grid(2, 0)


def test_folds_are_balanced_and_seeded():
    qids = [f"q{i}" for i in range(23)]
    f = assign_folds(qids, set(qids[:20]), 5, seed=0)
    sizes = [sum(1 for q in qids[:20] if f[q] == i) for i in range(5)]
    assert sizes == [4] * 5 and set(f) == set(qids)
    assert f == assign_folds(qids, set(qids[:20]), 5, seed=0) and f != assign_folds(qids, set(qids[:20]), 5, seed=1)


def _case():
    """40 queries, relevant doc "r", decoy "d0": run "good" ranks r first (d0 second) on 3 queries in 4 and last on
    the rest; run "other" does the opposite; the run that is wrong puts d0 first and r last."""
    good, other, qrels = {}, {}, {}
    for i in range(40):
        q = f"q{i}"
        right = {"r": 10.0, "d0": 9.0, "d1": 4.0, "d2": 3.0, "d3": 2.0, "d4": 1.0}
        wrong = {"d0": 10.0, "d1": 8.0, "d2": 7.0, "d3": 6.0, "d4": 5.0, "r": 0.0}
        good[q], other[q] = (right, wrong) if i % 4 else (wrong, right)
        qrels[q] = {"r": 1}
    return [Run(good, name="good"), Run(other, name="other")], Qrels(qrels, name="t")


def test_tuning_prefers_the_better_run_out_of_fold_and_is_deterministic():
    runs, qrels = _case()
    fuser = lambda rs, w: fuse(rs, "weighted", weights=w, norm="minmax")  # noqa: E731
    t = tune_fusion(runs, qrels, fuser, folds=4, seed=3)
    assert len(t.folds) == 4 and all(f["weights"][0] > f["weights"][1] for f in t.folds)
    assert sorted(q for f in t.folds for q in f["queries"]) == sorted(runs[0].scores)
    assert all(f["n_train"] == 30 for f in t.folds)
    again = tune_fusion(runs, qrels, fuser, folds=4, seed=3)
    assert again.run.scores == t.run.scores and again.folds == t.folds
    d = t.describe()
    assert d["tuned_fold_sizes"] == [10] * 4 and len(d["tuned_weights"]) == 4


def test_a_query_never_sees_its_own_judgments():
    """Flip one query's judgment: the weights used for that query's fold must not change, the others' may."""
    runs, qrels = _case()
    fuser = lambda rs, w: fuse(rs, "weighted", weights=w, norm="minmax")  # noqa: E731
    t = tune_fusion(runs, qrels, fuser, folds=4, seed=0)
    fold = next(i for i, f in enumerate(t.folds) if "q0" in f["queries"])
    flipped = Qrels({**qrels.qrels, "q0": {"d4": 1}}, name="t")
    t2 = tune_fusion(runs, flipped, fuser, folds=4, seed=0)
    assert t2.folds[fold]["weights"] == t.folds[fold]["weights"]
    assert t2.folds[fold]["train_score"] == t.folds[fold]["train_score"]


def test_needs_judged_queries_and_folds():
    runs, qrels = _case()
    fuser = lambda rs, w: fuse(rs, "weighted", weights=w)  # noqa: E731
    with pytest.raises(ConfigError, match="at least 2 judged"):
        tune_fusion(runs, Qrels({"q0": {"d3": 1}}), fuser)
    with pytest.raises(ConfigError, match="folds >= 2"):
        tune_fusion(runs, qrels, fuser, folds=1)


def test_hybrid_tuned_through_run_experiment_on_ordqa(tmp_path):
    """Real ORD-QA, two BM25 variants fused with weights tuned by 3-fold CV: the weights per fold are logged, a
    search without qrels says what to do."""
    from lab.experiment.run import run_experiment
    from lab.retrievers import Context, build

    parts = ["bm25", {"strategy": "bm25", "label": "plain", "stem": False}]
    params = {"retrievers": parts, "fusion": "combsum", "norm": "minmax", "weights": "tuned", "folds": 3}
    res = run_experiment(DATA / "ord-qa", "hybrid", params, k=10, ctx=Context(cache_dir=tmp_path, progress=False))
    info = res.info["retriever"]
    assert info["weights"] == "tuned" and len(info["tuned_weights"]) == 3
    assert all(len(w) == 2 and sum(w) == pytest.approx(1.0) for w in info["tuned_weights"])
    assert sum(info["tuned_fold_sizes"]) == res.info["n_queries"]
    assert 0.3 < res.evaluation.means["ndcg@10"] < 1.0
    assert all(v > 0 for v in res.run.latency.values())
    h = build("hybrid", params, Context(cache_dir=tmp_path, progress=False))
    from lab.data.beir import load_dataset

    ds = load_dataset(DATA / "ord-qa", progress=False)
    h.index(ds.corpus)
    with pytest.raises(ConfigError, match="cross-validation"):
        h.search(ds.split("test")[0], 10)
