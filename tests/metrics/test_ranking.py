"""lab.metrics.ranking: hand-computed TREC fixtures, a loop-by-loop reference, names, arrays, Evaluation.

Parity with ranx and trec_eval is in tests/comparison/test_metrics_parity.py; here the reference is a plain
Python transcription of each metric's definition, one query and one rank at a time.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lab import METRICS_VERSION
from lab.data.types import Qrels, Run
from lab.metrics import DEFAULT_METRICS, Evaluation, evaluate, parse_metric
from lab.metrics.ranking import (
    DEFAULT_TIER_WEIGHTS,
    MetricSpec,
    build_arrays,
    f1_at_k,
    hit_rate_at_k,
    map_at_k,
    mrr_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    weighted_recall_at_k,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
TOL = 1e-12


def read_fixtures() -> tuple[Qrels, Run]:
    try:
        from lab.data.trec import read_qrels, read_trec_run
    except ImportError:  # the TREC reader lives in lab/data/trec.py; parse by hand if it is not there
        qrels: dict = {}
        for line in (FIXTURES / "qrels.txt").read_text().split("\n"):
            if line.strip():
                q, _, d, g = line.split()
                qrels.setdefault(q, {})[d] = int(g)
        run: dict = {}
        for line in (FIXTURES / "run.txt").read_text().split("\n"):
            if line.strip():
                q, _, d, _, s, _ = line.split()
                run.setdefault(q, {})[d] = float(s)
        return Qrels(qrels), Run(run)
    return read_qrels(FIXTURES / "qrels.txt"), read_trec_run(FIXTURES / "run.txt")


L2 = math.log2
# Q1 ranked: D3 (g0), D1 (g3), X1 (unjudged), D4 (g1), D2 (g2), X2 (unjudged); D5 (g1) not retrieved.
#   relevant (grade >= 1): D1, D2, D4, D5 -> 4.  Relevant ranks: 2, 4, 5.
# Q2 ranked: Z (2.0, unjudged), then ties at 1.0 by doc id descending: C (g0), B (g1), A (g1).
#   relevant: A, B -> 2. Relevant ranks: 3, 4.
# Q3: only grade-0 judgements -> excluded.  Q4: not in the run -> 0 everywhere.  Q5: run only -> ignored.
EXPECTED = {
    "Q1": {
        "precision@1": 0.0, "precision@3": 1 / 3, "precision@5": 3 / 5, "precision@10": 3 / 10,  # hits / k
        "precision": 3 / 6,  # bare: 3 relevant of 6 retrieved
        "recall@1": 0.0, "recall@3": 1 / 4, "recall@5": 3 / 4, "recall@10": 3 / 4,  # D5 never retrieved
        "mrr@1": 0.0, "mrr@3": 1 / 2, "mrr": 1 / 2,
        "hit_rate@1": 0.0, "hit_rate@3": 1.0,
        "map@3": (1 / 2) / 4,  # precision at rank 2 = 1/2, divided by 4 relevant
        "map@5": (1 / 2 + 2 / 4 + 3 / 5) / 4,  # = 0.4
        "f1@3": 2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4),  # = 2/7
        "f1@5": 2 * 0.6 * 0.75 / (0.6 + 0.75),  # = 2/3
        # DCG@3 = 3/log2(3); ideal grades 3, 2, 1, 1 -> IDCG@3 = 3/1 + 2/log2(3) + 1/2
        "ndcg@3": (3 / L2(3)) / (3 + 2 / L2(3) + 1 / 2),  # 0.397490
        # DCG@5 = 3/log2(3) + 1/log2(5) + 2/log2(6); IDCG@5 = IDCG@3 + 1/log2(5)
        "ndcg@5": (3 / L2(3) + 1 / L2(5) + 2 / L2(6)) / (3 + 2 / L2(3) + 1 / 2 + 1 / L2(5)),  # 0.596466
        "ndcg@10": (3 / L2(3) + 1 / L2(5) + 2 / L2(6)) / (3 + 2 / L2(3) + 1 / 2 + 1 / L2(5)),
        # exponential gains 2^g - 1: 7, 1, 3 at ranks 2, 4, 5; ideal 7, 3, 1, 1
        "ndcg_exp@5": (7 / L2(3) + 1 / L2(5) + 3 / L2(6)) / (7 + 3 / L2(3) + 1 / 2 + 1 / L2(5)),  # 0.611571
    },
    "Q2": {
        "precision@1": 0.0, "precision@3": 1 / 3, "precision@5": 2 / 5,
        "recall@3": 1 / 2, "recall@5": 1.0,
        "mrr@1": 0.0, "mrr@3": 1 / 3, "mrr@10": 1 / 3,
        "map@10": (1 / 3 + 2 / 4) / 2,  # = 5/12
        "hit_rate@1": 0.0, "hit_rate@3": 1.0,
        "f1@3": 2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2),  # = 0.4
        "ndcg@3": (1 / L2(4)) / (1 + 1 / L2(3)),  # 0.306574
        "ndcg@10": (1 / L2(4) + 1 / L2(5)) / (1 + 1 / L2(3)),  # 0.570642
    },
}


def test_fixture_values_by_hand():
    qrels, run = read_fixtures()
    labels = sorted({m for q in EXPECTED.values() for m in q} | set(DEFAULT_METRICS))
    ev = evaluate(qrels, run, labels)
    assert list(ev.per_query.index) == ["Q1", "Q2", "Q4"]
    assert ev.excluded == ["Q3"] and ev.n_unjudged_run_queries == 1 and ev.n_queries == 3
    for qid, expected in EXPECTED.items():
        for metric, value in expected.items():
            assert ev.per_query.loc[qid, metric] == pytest.approx(value, abs=TOL), (qid, metric)
    assert (ev.per_query.loc["Q4"] == 0).all()
    assert ev.means["map@5"] == pytest.approx((0.4 + 5 / 12 + 0) / 3, abs=TOL)  # Q2 AP@5: ranks 3 and 4


def test_fixture_weighted_recall():
    qrels, run = read_fixtures()
    # Q1 tiers: D1 core (1.0), D2 auxiliary (0.5), D4 edge (0.1), D5 unnamed -> core (1.0); total 2.6.
    # top 3 holds D1 -> 1.0 / 2.6; top 5 holds D1, D4, D2 -> 1.6 / 2.6. Q2 has no tiers: plain recall.
    tiers = {"Q1": {"D1": "core", "D2": "auxiliary", "D4": "edge", "D3": "core"}}
    ev = evaluate(qrels, run, ["recall@3", "recall@5"], tiers=tiers)
    assert ev.metrics == ["recall@3", "recall@5", "weighted_recall@3", "weighted_recall@5"]
    assert ev.per_query.loc["Q1", "weighted_recall@3"] == pytest.approx(1.0 / 2.6, abs=TOL)
    assert ev.per_query.loc["Q1", "weighted_recall@5"] == pytest.approx(1.6 / 2.6, abs=TOL)
    assert ev.per_query.loc["Q2", "weighted_recall@5"] == ev.per_query.loc["Q2", "recall@5"]
    assert ev.tier_weights == DEFAULT_TIER_WEIGHTS
    # configurable weights; with core only (auxiliary, edge 0) it is the seed's "core evidence" recall
    core_only = evaluate(qrels, run, ["weighted_recall@5"], tiers=tiers,
                         tier_weights={"core": 1.0, "auxiliary": 0.0, "edge": 0.0})
    assert core_only.per_query.loc["Q1", "weighted_recall@5"] == pytest.approx(1 / 2, abs=TOL)  # D1 of D1, D5


# ------------------------------------------------------------------------------------ reference (loops)
def reference(qrels: dict, run: dict, metric: str, thr: int = 1, tiers=None, weights=DEFAULT_TIER_WEIGHTS):
    """{qid: value} straight from the definitions, one query and one rank at a time."""
    spec = parse_metric(metric)
    out = {}
    for qid, judged in qrels.items():
        rel = {d: g for d, g in judged.items() if g >= thr}
        if not rel:
            continue
        ranked = [d for d, _ in sorted(run.get(qid, {}).items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]
        k = len(ranked) if spec.k is None else spec.k
        top = ranked[:k]
        hits = [d in rel for d in top]
        n_hits = sum(hits)
        if spec.name == "precision":
            value = n_hits / k if k else 0.0
        elif spec.name == "recall":
            value = n_hits / len(rel)
        elif spec.name == "f1":
            p, r = (n_hits / k if k else 0.0), n_hits / len(rel)
            value = 2 * p * r / (p + r) if p + r else 0.0
        elif spec.name == "hit_rate":
            value = float(n_hits > 0)
        elif spec.name == "mrr":
            value = next((1 / (i + 1) for i, h in enumerate(hits) if h), 0.0)
        elif spec.name == "map":
            value, seen = 0.0, 0
            for i, h in enumerate(hits):
                if h:
                    seen += 1
                    value += seen / (i + 1)
            value /= len(rel)
        elif spec.name in ("ndcg", "ndcg_exp"):
            gain = (lambda g: g) if spec.name == "ndcg" else (lambda g: 2**g - 1)
            dcg = sum(gain(rel.get(d, 0)) / math.log2(i + 2) for i, d in enumerate(top))
            ideal = sorted(rel.values(), reverse=True)[: (len(rel) if spec.k is None else spec.k)]
            value = dcg / sum(gain(g) / math.log2(i + 2) for i, g in enumerate(ideal))
        elif spec.name == "weighted_recall":
            t = (tiers or {}).get(qid, {})
            w = {d: weights[t.get(d, "core")] for d in rel}
            value = sum(w[d] for d in top if d in rel) / sum(w.values())
        else:
            raise AssertionError(metric)
        out[qid] = value
    return out


def random_case(seed: int, ties: bool = False):
    rng = np.random.default_rng(seed)
    pool = [f"doc{i}" for i in range(int(rng.integers(10, 200)))]
    qrels, run, tiers = {}, {}, {}
    for i in range(int(rng.integers(3, 25))):
        qid = str(i)
        judged = rng.choice(len(pool), size=min(int(rng.integers(0, 30)), len(pool)), replace=False)
        qrels[qid] = {pool[j]: int(rng.integers(0, 4)) for j in judged}
        tiers[qid] = {pool[j]: str(rng.choice(["core", "auxiliary", "edge"])) for j in judged if rng.random() < 0.7}
        if rng.random() < 0.1:
            continue
        n = int(rng.integers(0, 130))
        docs = list(dict.fromkeys(list(judged[: n // 2]) + list(rng.permutation(len(pool)))))[:n]
        scores = rng.integers(0, 4, size=len(docs)) if ties else rng.random(len(docs))
        run[qid] = {pool[d]: float(s) for d, s in zip(docs, scores, strict=False)}
    run["not_judged"] = {pool[0]: 1.0}
    return qrels, run, tiers


ALL = [f"{m}@{k}" for m in ("ndcg", "ndcg_exp", "recall", "precision", "mrr", "map", "hit_rate", "f1",
                            "weighted_recall") for k in (1, 2, 3, 5, 10, 100, 1000)]
ALL += ["ndcg", "ndcg_exp", "recall", "precision", "mrr", "map", "hit_rate", "f1", "weighted_recall"]


@pytest.mark.parametrize("seed,ties,thr", [(s, s % 3 == 0, 1 + (s % 4 == 1)) for s in range(40)])
def test_matches_reference(seed, ties, thr):
    qrels, run, tiers = random_case(seed, ties)
    ev = evaluate(Qrels(qrels), Run(run), ALL, rel_threshold=thr, tiers=tiers)
    for metric in ALL:
        ref = reference(qrels, run, metric, thr, tiers)
        assert list(ev.per_query.index) == list(ref)
        np.testing.assert_allclose(ev.per_query[metric].to_numpy(), list(ref.values()), atol=1e-12,
                                   err_msg=f"seed {seed} {metric}")


def test_run_order_does_not_matter():
    qrels, run, _ = random_case(7, ties=True)
    rev = {q: dict(reversed(list(d.items()))) for q, d in reversed(list(run.items()))}
    metrics = [m for m in ALL if not m.startswith("weighted")]
    a = evaluate(Qrels(qrels), Run(run), metrics)
    b = evaluate(Qrels(qrels), Run(rev), metrics)
    pd.testing.assert_frame_equal(a.per_query, b.per_query)


def test_ranks_follow_run_ranked():
    qrels, run, _ = random_case(3, ties=True)
    arrays = build_arrays(Qrels(qrels), Run(run), depth=None)
    r = Run(run)
    for i, qid in enumerate(arrays.query_ids):
        expected = [qrels[qid].get(d, 0) for d, _ in r.ranked(qid)]
        assert list(arrays.grades[i, : len(expected)]) == expected
        assert not arrays.grades[i, len(expected):].any()


# --------------------------------------------------------------------------------------- names, results
def test_parse_metric():
    assert parse_metric("ndcg@10") == MetricSpec("ndcg", 10)
    assert parse_metric("mrr") == MetricSpec("mrr", None)
    assert parse_metric(" Hit_Rate@5 ").label == "hit_rate@5"
    assert parse_metric("weighted_recall@3").k == 3
    for bad in ("ndcg@0", "ndcg@x", "ndcg@", "P@10", "ndcg_cut_10", "recall@-1", 5):
        with pytest.raises(ValueError):
            parse_metric(bad)


def test_default_metrics():
    assert len(DEFAULT_METRICS) == 40
    assert {"ndcg@10", "recall@100", "precision@5", "mrr@10", "map@100", "hit_rate@5", "f1@5"} <= set(DEFAULT_METRICS)
    assert all(parse_metric(m).label == m for m in DEFAULT_METRICS)


def test_evaluation_shape_and_json():
    qrels, run = read_fixtures()
    ev = evaluate(qrels, run)
    assert isinstance(ev, Evaluation)
    assert ev.per_query.index.name == "query_id"
    assert all(isinstance(q, str) for q in ev.per_query.index)
    assert ev.metrics == list(DEFAULT_METRICS)
    assert ev.means == pytest.approx(ev.per_query.mean().to_dict())
    assert ev.metrics_version == METRICS_VERSION
    d = json.loads(json.dumps(ev.to_dict()))
    assert d["n_queries"] == 3 and d["excluded"] == ["Q3"] and d["n_unjudged_run_queries"] == 1
    assert d["per_query"]["Q1"]["ndcg@5"] == pytest.approx(EXPECTED["Q1"]["ndcg@5"])
    assert "per_query" not in ev.to_dict(per_query=False)


def test_plain_dicts_accepted_and_duplicate_labels_collapsed():
    ev = evaluate({"q": {"a": 1}}, {"q": {"a": 0.3, "b": 0.9}}, ["mrr@10", "mrr@10", "recall"])
    assert ev.metrics == ["mrr@10", "recall"]
    assert ev.per_query.loc["q", "mrr@10"] == 0.5


def test_errors_say_what_to_do():
    with pytest.raises(ValueError, match="NaN"):
        evaluate({"q": {"a": 1}}, {"q": {"a": float("nan")}}, ["mrr"])
    with pytest.raises(ValueError, match="tiers"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, ["weighted_recall@5"])
    with pytest.raises(ValueError, match="unknown tier"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, ["recall@5"], tiers={"q": {"a": "gold"}})
    with pytest.raises(ValueError, match="rel_threshold"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, ["mrr"], rel_threshold=0)
    with pytest.raises(ValueError, match="no qrels query"):
        evaluate({"q": {"a": 0}}, {"q": {"a": 1.0}}, ["mrr"])
    with pytest.raises(ValueError, match="no metric"):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, [])


def test_infinite_scores_rank_like_numbers():
    ev = evaluate({"q": {"a": 1, "b": 2}}, {"q": {"a": -math.inf, "b": math.inf, "c": 0.0}}, ["mrr", "ndcg@3"])
    assert ev.per_query.loc["q", "mrr"] == 1.0  # b first, then c, then a
    assert ev.per_query.loc["q", "ndcg@3"] == pytest.approx((2 + 1 / 2) / (2 + 1 / L2(3)))


# ----------------------------------------------------------------------------------- array functions
def test_array_functions_state_their_conventions():
    g = np.array([[0, 3, 0, 1, 2, 0], [0, 0, 0, 0, 0, 0]], dtype=float)  # Q1 of the fixture, and an empty row
    n_rel = np.array([4, 0])
    ideal = np.array([[3, 2, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=float)
    np.testing.assert_allclose(precision_at_k(g, 10), [0.3, 0.0])
    np.testing.assert_allclose(precision_at_k(g), [0.5, 0.0])
    np.testing.assert_allclose(precision_at_k(g, n_retrieved=np.array([6, 0])), [0.5, 0.0])  # no /0
    np.testing.assert_allclose(recall_at_k(g, n_rel, 5), [0.75, 0.0])  # no relevant: 0, not NaN
    np.testing.assert_allclose(f1_at_k(g, n_rel, 5), [2 / 3, 0.0])
    np.testing.assert_allclose(hit_rate_at_k(g, 1), [0.0, 0.0])
    np.testing.assert_allclose(mrr_at_k(g, 3), [0.5, 0.0])
    np.testing.assert_allclose(map_at_k(g, n_rel, 5), [0.4, 0.0])
    np.testing.assert_allclose(ndcg_at_k(g, ideal, 5), [EXPECTED["Q1"]["ndcg@5"], 0.0])
    np.testing.assert_allclose(ndcg_at_k(g, ideal, 5, exponential=True), [EXPECTED["Q1"]["ndcg_exp@5"], 0.0])
    np.testing.assert_allclose(mrr_at_k(g, 3, rel_threshold=2), [0.5, 0.0])
    np.testing.assert_allclose(mrr_at_k(g, None, rel_threshold=3), [0.5, 0.0])
    np.testing.assert_allclose(weighted_recall_at_k([[0, 1.0, 0, 0.1, 0.5]], 2.6, 5), [1.6 / 2.6])
    # a document repeated in a row counts at each rank (rows are taken as given)
    np.testing.assert_allclose(recall_at_k([[1, 1]], 1, 2), [2.0])
    # cut-off beyond the row: precision still divides by k
    np.testing.assert_allclose(precision_at_k([[1, 0]], 100), [0.01])


def test_depth_is_the_largest_cutoff():
    qrels, run, _ = random_case(11)
    arrays = build_arrays(Qrels(qrels), Run(run), depth=10)
    assert arrays.grades.shape[1] == 10 and arrays.ideal.shape[1] == 10
    assert (arrays.n_retrieved == [len(run.get(q, {})) for q in arrays.query_ids]).all()


@pytest.mark.parametrize("seed", range(50, 60))
def test_ties_at_the_depth_boundary(seed):
    """Only cut-offs <= 3: the arrays are 3 wide and a tie across rank 3 decides which document gets in."""
    qrels, run, _ = random_case(seed, ties=True)
    metrics = ["ndcg@3", "precision@3", "mrr@2", "map@3", "recall@1"]
    ev = evaluate(Qrels(qrels), Run(run), metrics)
    assert build_arrays(Qrels(qrels), Run(run), depth=3).depth == 3
    for metric in metrics:
        np.testing.assert_allclose(ev.per_query[metric].to_numpy(), list(reference(qrels, run, metric).values()),
                                   atol=1e-12, err_msg=f"seed {seed} {metric}")


# ------------------------------------------------------------------ judged@k and condensed lists (hand-computed)
def test_judged_at_k_hand_computed():
    qrels = {"q": {"a": 2, "b": 0, "c": 1}}
    run = {"q": {"a": 5.0, "x": 4.0, "b": 3.0, "y": 2.0}}  # ranks: a (judged), x, b (judged 0), y
    ev = evaluate(qrels, run, ["judged@1", "judged@2", "judged@3", "judged@10", "judged"])
    pq = ev.per_query.loc["q"]
    assert pq["judged@1"] == 1.0
    assert pq["judged@2"] == 0.5
    assert pq["judged@3"] == pytest.approx(2 / 3)  # a grade-0 judgement counts as judged
    assert pq["judged@10"] == pytest.approx(2 / 10)  # divides by k, like precision@k
    assert pq["judged"] == pytest.approx(2 / 4)  # bare: divides by the 4 retrieved


def test_judged_at_k_extra_judged_mapping_and_empty_run():
    qrels = {"q": {"a": 1}, "e": {"a": 1}}
    run = {"q": {"a": 2.0, "x": 1.0}, "e": {}}
    ev = evaluate(qrels, run, ["judged@2"], judged={"q": ["x"]})
    assert ev.per_query.loc["q", "judged@2"] == 1.0
    assert ev.per_query.loc["e", "judged@2"] == 0.0  # nothing retrieved scores 0


def test_condensed_removes_unjudged_and_moves_the_rest_up():
    qrels = {"q": {"a": 0, "r": 1}}
    run = {"q": {"u1": 9.0, "a": 8.0, "u2": 7.0, "r": 6.0}}  # r at rank 4; condensed: a, r -> r at rank 2
    plain = evaluate(qrels, run, ["mrr@10", "ndcg@10", "precision@2", "judged@2"])
    cond = evaluate(qrels, run, ["mrr@10", "ndcg@10", "precision@2", "judged@2"], condensed=True)
    assert plain.per_query.loc["q", "mrr@10"] == pytest.approx(1 / 4)
    assert cond.per_query.loc["q", "mrr@10"] == pytest.approx(1 / 2)
    assert cond.per_query.loc["q", "ndcg@10"] == pytest.approx(1 / np.log2(3))
    assert cond.per_query.loc["q", "precision@2"] == pytest.approx(1 / 2)
    assert plain.per_query.loc["q", "judged@2"] == pytest.approx(1 / 2)
    assert cond.per_query.loc["q", "judged@2"] == 1.0
    assert cond.to_dict(per_query=False)["condensed"] is True
    assert "condensed" not in plain.to_dict(per_query=False)
    # extra judged documents survive condensing
    kept = evaluate(qrels, run, ["mrr@10"], condensed=True, judged={"q": {"u1"}})
    assert kept.per_query.loc["q", "mrr@10"] == pytest.approx(1 / 3)


def test_judged_at_k_array_function():
    from lab.metrics.ranking import judged_at_k

    out = judged_at_k([[1, 0, 1, 0], [0, 0, 0, 0]], k=3)
    assert out.tolist() == pytest.approx([2 / 3, 0.0])
    assert judged_at_k([[1, 1, 0]], n_retrieved=[2]).tolist() == [1.0]
