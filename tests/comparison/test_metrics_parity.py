"""Parity of lab.metrics with two independent implementations: ranx (numba) and pytrec_eval (trec_eval in C).

What each reference computes, read from its source (ranx 0.3.21 ranx/metrics/*.py, trec_eval 9.x m_*.c):
- ranx precision@k = hits / k; bare precision = hits / retrieved.      ours: same.
- ranx recall@k, map@k divide by all relevant (grade >= rel_lvl).      ours: same (spec).
- ranx mrr@k: cut at k in the code (its docstring says k is ignored).  ours: cut at k (spec).
  trec_eval recip_rank has no cut-off.                                 ours: bare "mrr".
- ranx hit_rate@k = trec_eval success_k.                               ours: same.
- ranx f1@k = 2PR/(P+R) with P = hits / k; bare f1 = trec_eval set_F.  ours: same.
- ranx ndcg = trec_eval ndcg_cut: gain = grade, log2(rank + 1), ideal from all judged grades.
  ranx ndcg_burges: gain 2^grade - 1.                                  ours: ndcg, ndcg_exp.
- Ties: ranx keeps an arbitrary order among equal scores, so the ranx cases draw scores without ties;
  trec_eval orders ties by doc id descending, which is our rule: the tie cases are checked against it.
- Queries: ranx scores a query without relevant documents as 0 and trec_eval skips it; we exclude it.
  Comparisons are made on the queries we evaluate.
ranx compiles its metrics with numba on first use (1-3 minutes on a fresh venv on 2 cores): the ranx tests
still run in `make test` (CI), since parity with ranx is the contract; tests/metrics/test_ranking.py also checks
every metric against a loop-by-loop reference.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from lab.data.types import Qrels, Run
from lab.metrics import evaluate

CUTOFFS = (1, 3, 5, 10, 100)
NAMES = ("ndcg", "ndcg_exp", "recall", "precision", "mrr", "map", "hit_rate", "f1")
OURS = [f"{m}@{k}" for m in NAMES for k in CUTOFFS] + list(NAMES)
RANX_NAME = {"ndcg_exp": "ndcg_burges"}
TOL = 1e-9


def ranx_label(label: str, rel_threshold: int = 1) -> str:
    name, _, k = label.partition("@")
    out = RANX_NAME.get(name, name) + (f"@{k}" if k else "")
    return out + (f"-l{rel_threshold}" if rel_threshold != 1 else "")


def random_case(seed: int, ties: bool = False):
    """Random graded qrels (grades 0..3) and a run with varied lengths (0..150), plus run-only queries.

    Scores are distinct (a random permutation) unless ``ties``, where they come from a small integer range.
    About half of a query's hits are drawn from its judged documents, so hits of every grade occur.
    """
    rng = np.random.default_rng(seed)
    pool = [f"d{i}" for i in range(int(rng.integers(20, 400)))]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for i in range(int(rng.integers(5, 30))):
        qid = f"q{i}"
        n_judged = int(rng.integers(0, 40))
        judged = rng.choice(len(pool), size=min(n_judged, len(pool)), replace=False)
        qrels[qid] = {pool[j]: int(rng.integers(0, 4)) for j in judged}
        r = rng.random()
        if r < 0.08:
            continue  # in the qrels, absent from the run
        if r < 0.12:
            run[qid] = {}  # present with nothing retrieved
            continue
        n_ret = int(rng.integers(1, 151))
        from_judged = list(judged[: int(rng.integers(0, len(judged) + 1))])
        taken = set(from_judged)
        others = [j for j in rng.permutation(len(pool)) if j not in taken]
        docs = (from_judged + others)[:n_ret]
        docs = [docs[j] for j in rng.permutation(len(docs))]
        if ties:
            scores = rng.integers(0, 5, size=len(docs)).astype(float)
        else:
            scores = rng.permutation(len(docs)) + rng.random()
        run[qid] = {pool[d]: float(s) for d, s in zip(docs, scores, strict=False)}
    for i in range(int(rng.integers(0, 3))):
        run[f"only_run_{i}"] = {pool[0]: 1.0, pool[1]: 0.5}
    return qrels, run


def ranx_scores(qrels, run, labels, rel_threshold=1):
    """{our label: {qid: score}} from ranx (make_comparable adds empty results for missing queries)."""
    import ranx

    rq = ranx.Qrels({q: d for q, d in qrels.items() if d})
    rr = ranx.Run({q: d for q, d in run.items() if d and q in qrels})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranx.evaluate(rq, rr, [ranx_label(m, rel_threshold) for m in labels], make_comparable=True, threads=1)
    return {m: dict(rr.scores[ranx_label(m, rel_threshold)]) for m in labels}


@pytest.fixture(scope="module")
def ranx_module():
    return pytest.importorskip("ranx")


# ------------------------------------------------------------------------------------------------ ranx
@pytest.mark.parametrize("rel_threshold", [1, 2])
def test_random_runs_match_ranx(ranx_module, rel_threshold):
    cases = range(30) if rel_threshold == 1 else range(30, 40)
    checked = 0
    for seed in cases:
        qrels, run = random_case(seed)
        ours = evaluate(Qrels(qrels), Run(run), OURS, rel_threshold=rel_threshold)
        ref = ranx_scores(qrels, run, OURS, rel_threshold)
        for label in OURS:
            for qid, value in ours.per_query[label].items():
                assert value == pytest.approx(ref[label][qid], abs=TOL), (seed, label, qid)
                checked += 1
        # excluded = the qrels queries without a relevant document
        assert set(ours.excluded) == {q for q, d in qrels.items() if not any(g >= rel_threshold for g in d.values())}
    assert checked > 1000


EDGE_QRELS = {
    "empty_run": {"a": 1, "b": 2},  # in the run with no hit
    "absent": {"a": 1},  # not in the run at all
    "one_rel": {"x": 2, "y": 0, "z": 0},  # one relevant document among judged non-relevant ones
    "many_rel": {f"r{i}": 1 + i % 3 for i in range(12)},  # more relevant documents than k (k = 1, 3, 5, 10)
    "short": {"s1": 3, "s2": 1, "s9": 2},  # run of 2, k up to 100 beyond its length
    "grade0": {"g1": 0, "g2": 0, "g3": 1},  # judged grade-0 documents ranked above the relevant one
    "no_rel": {"n1": 0},  # no relevant document: excluded
}
EDGE_RUN = {
    "empty_run": {},
    "one_rel": {"y": 9.0, "x": 8.0, "w": 7.0},
    "many_rel": {**{f"r{i}": 100.0 - i for i in range(0, 12, 2)}, **{f"u{i}": 50.0 - i for i in range(20)}},
    "short": {"s2": 2.0, "s1": 1.0},
    "grade0": {"g1": 3.0, "g2": 2.0, "g3": 1.0},
    "no_rel": {"n1": 1.0},
    "run_only": {"a": 1.0},
}


def test_edge_cases_match_ranx(ranx_module):
    ours = evaluate(Qrels(EDGE_QRELS), Run(EDGE_RUN), OURS)
    assert ours.excluded == ["no_rel"]
    assert ours.n_unjudged_run_queries == 1
    assert list(ours.per_query.index) == ["empty_run", "absent", "one_rel", "many_rel", "short", "grade0"]
    ref = ranx_scores(EDGE_QRELS, EDGE_RUN, OURS)
    for label in OURS:
        for qid, value in ours.per_query[label].items():
            assert value == pytest.approx(ref[label][qid], abs=TOL), (label, qid)
    # the spec, independently of ranx
    pq = ours.per_query
    assert (pq.loc[["empty_run", "absent"]] == 0).all().all()
    assert pq.loc["one_rel", "mrr@1"] == 0 and pq.loc["one_rel", "mrr@3"] == pytest.approx(1 / 2)
    assert pq.loc["many_rel", "recall@5"] == pytest.approx(5 / 12)
    assert pq.loc["many_rel", "precision@5"] == pytest.approx(1.0)
    assert pq.loc["short", "precision@100"] == pytest.approx(2 / 100)  # divides by k, not by 2 retrieved
    assert pq.loc["short", "precision"] == pytest.approx(1.0)  # bare: divides by the 2 retrieved
    assert pq.loc["short", "recall@100"] == pytest.approx(2 / 3)
    assert pq.loc["grade0", "mrr@10"] == pytest.approx(1 / 3)
    assert pq.loc["grade0", "ndcg@10"] == pytest.approx(0.5)  # 1/log2(4) over ideal 1/log2(2)


# ------------------------------------------------------------------------------------------ pytrec_eval
TREC_MEASURES = {
    "ndcg_cut.1,3,5,10,100", "P.1,3,5,10,100", "recall.1,3,5,10,100", "map_cut.1,3,5,10,100",
    "success.1,3,5,10,100", "recip_rank", "ndcg", "map", "set_P", "set_recall", "set_F",
}
TREC_OF = {
    **{f"ndcg@{k}": f"ndcg_cut_{k}" for k in CUTOFFS},
    **{f"precision@{k}": f"P_{k}" for k in CUTOFFS},
    **{f"recall@{k}": f"recall_{k}" for k in CUTOFFS},
    **{f"map@{k}": f"map_cut_{k}" for k in CUTOFFS},
    **{f"hit_rate@{k}": f"success_{k}" for k in CUTOFFS},
    "mrr": "recip_rank", "ndcg": "ndcg", "map": "map", "precision": "set_P", "recall": "set_recall", "f1": "set_F",
}
BINARY = [m for m in TREC_OF if not m.startswith("ndcg")]


def trec_scores(qrels, run, measures=TREC_MEASURES, rel_threshold=1):
    import pytrec_eval

    evaluator = pytrec_eval.RelevanceEvaluator(
        {q: d for q, d in qrels.items() if d}, set(measures), relevance_level=rel_threshold)
    return evaluator.evaluate({q: d for q, d in run.items() if d})


def _check_against_trec(qrels, run, labels, rel_threshold=1, context=()):
    ours = evaluate(Qrels(qrels), Run(run), labels, rel_threshold=rel_threshold)
    ref = trec_scores(qrels, run, rel_threshold=rel_threshold)
    checked = 0
    for label in labels:
        for qid, value in ours.per_query[label].items():
            if qid in ref:
                assert value == pytest.approx(ref[qid][TREC_OF[label]], abs=TOL), (*context, label, qid)
                checked += 1
            else:  # trec_eval does not report a query with nothing retrieved: ours must be 0
                assert value == 0.0
    return checked


@pytest.mark.parametrize("seed", range(100, 130))
def test_random_runs_match_trec_eval(seed):
    qrels, run = random_case(seed)
    assert _check_against_trec(qrels, run, list(TREC_OF), context=(seed,)) > 0


@pytest.mark.parametrize("seed", range(130, 140))
def test_random_runs_match_trec_eval_threshold_2(seed):
    # trec_eval's relevance_level applies to the binary measures; its ndcg keeps grade-1 gains, ours drops them
    qrels, run = random_case(seed)
    assert _check_against_trec(qrels, run, BINARY, rel_threshold=2, context=(seed,)) > 0


@pytest.mark.parametrize("seed", range(200, 230))
def test_ties_follow_trec_eval(seed):
    """Scores from {0..4}: most ranks are ties, resolved by doc id descending as trec_eval does."""
    qrels, run = random_case(seed, ties=True)
    assert any(len(set(d.values())) < len(d) for d in run.values())
    assert _check_against_trec(qrels, run, list(TREC_OF), context=(seed,)) > 0


def test_tie_rule_string_order_matches_trec_eval():
    """Doc ids compare as strings, not numbers: "d9" > "d10" > "d1"; all scores equal."""
    qrels = {"q": {"d10": 1, "d9": 0, "d1": 2, "D2": 1}}
    run = {"q": {"d1": 1.0, "d10": 1.0, "d9": 1.0, "D2": 1.0}}
    # ranking d9, d10, d1, D2 -> grades 0, 1, 2, 1
    ours = evaluate(Qrels(qrels), Run(run), ["mrr", "precision@1", "precision@2", "ndcg@2"])
    assert ours.per_query.loc["q", "mrr"] == pytest.approx(0.5)
    assert ours.per_query.loc["q", "precision@1"] == 0.0
    assert [d for d, _ in Run(run).ranked("q")] == ["d9", "d10", "d1", "D2"]
    ref = trec_scores(qrels, run, {"recip_rank", "P.1,2", "ndcg_cut.2"})["q"]
    assert ref["recip_rank"] == pytest.approx(0.5) and ref["P_1"] == 0.0
    assert ours.per_query.loc["q", "ndcg@2"] == pytest.approx(ref["ndcg_cut_2"], abs=TOL)


# ------------------------------------------------------------------ incomplete judgements: judged@k, condensed
def _shifted(qrels):
    """Every judged document made relevant (grade + 1 >= 1): trec_eval's P_k on these qrels is Judged@k
    (ir_measures documents Judged@k as P@k with a relevance level below every judgement)."""
    return {q: {d: g + 1 for d, g in docs.items()} for q, docs in qrels.items()}


@pytest.mark.parametrize("seed", range(300, 315))
def test_judged_at_k_matches_trec_eval_precision_on_all_judged(seed):
    qrels, run = random_case(seed)
    labels = [f"judged@{k}" for k in CUTOFFS]
    ours = evaluate(Qrels(qrels), Run(run), labels + ["judged"])
    ref = trec_scores(_shifted(qrels), run, {"P.1,3,5,10,100", "set_P"})
    checked = 0
    for qid in ours.per_query.index:
        for k in CUTOFFS:
            want = ref[qid][f"P_{k}"] if qid in ref else 0.0
            assert ours.per_query.loc[qid, f"judged@{k}"] == pytest.approx(want, abs=TOL), (seed, qid, k)
            checked += 1
        want = ref[qid]["set_P"] if qid in ref else 0.0
        assert ours.per_query.loc[qid, "judged"] == pytest.approx(want, abs=TOL), (seed, qid)
    assert checked > 0


@pytest.mark.parametrize("seed", range(320, 340))
def test_condensed_matches_trec_eval_judged_docs_only(seed):
    """evaluate(condensed=True) against pytrec_eval's judged_docs_only_flag (trec_eval -J), every measure."""
    import pytrec_eval

    qrels, run = random_case(seed)
    # mostly unjudged documents in the lists, so condensing changes the ranks
    ours = evaluate(Qrels(qrels), Run(run), list(TREC_OF), condensed=True)
    assert ours.condensed
    evaluator = pytrec_eval.RelevanceEvaluator({q: d for q, d in qrels.items() if d}, set(TREC_MEASURES),
                                               relevance_level=1, judged_docs_only_flag=True)
    ref = evaluator.evaluate({q: d for q, d in run.items() if d})
    plain = evaluate(Qrels(qrels), Run(run), list(TREC_OF))
    checked = differs = 0
    for label in TREC_OF:
        for qid, value in ours.per_query[label].items():
            if qid in ref:
                assert value == pytest.approx(ref[qid][TREC_OF[label]], abs=TOL), (seed, label, qid)
                checked += 1
            differs += value != plain.per_query.loc[qid, label]
    assert checked > 0 and differs > 0
