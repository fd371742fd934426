"""lab.analysis.diagnosis: each rule fires exactly on its side of its named threshold, stays silent without its figures,
and the whole set reads real ORD-QA results the way a symptom -> cause -> fix table would."""
from __future__ import annotations

import math

import pytest

from lab.analysis import diagnosis as dg
from lab.analysis.diagnosis import Finding, diagnose, diagnosis_table


def fired(rule, figures) -> bool:
    out = rule(figures)
    assert out is None or isinstance(out, Finding)
    return out is not None


GOOD = {"recall@100": 0.97, "recall@3": 0.9, "mrr@10": 0.9, "map@100": 0.8, "hit_rate@3": 0.99, "ndcg@3": 0.9,
        "precision@3": 0.3, "precision@3_ceiling": 0.34, "latency_p95_ms": 20.0, "ndcg@10_ci_low": 0.8,
        "ndcg@10_ci_high": 0.85}


def test_a_healthy_run_has_no_finding():
    assert diagnose(GOOD) == []


def test_no_figures_no_finding():
    assert diagnose({}) == []
    assert diagnose({"recall@100": math.nan, "mrr@10": None}) == []


@pytest.mark.parametrize("rule,metric,threshold", [
    (dg.coverage_gap, "recall@100", dg.RECALL_AT_DEPTH_MIN),
    (dg.missing_key_evidence, "hit_rate@3", dg.HIT_RATE_AT_3_MIN),
])
def test_single_metric_rules_fire_below_threshold(rule, metric, threshold):
    assert fired(rule, {**GOOD, metric: threshold - 0.01})
    assert not fired(rule, {**GOOD, metric: threshold})
    assert not fired(rule, {k: v for k, v in GOOD.items() if k != metric})
    f = rule({**GOOD, metric: threshold - 0.01})
    assert f.metric == metric and f.threshold == threshold and f.value == pytest.approx(threshold - 0.01)
    assert f.cause and f.action and str(round(threshold - 0.01, 3)) in f.symptom


def test_coverage_vs_ranking_are_told_apart():
    """Low recall at depth -> chunking / embedding; good recall at depth but low MRR -> a reranker."""
    never_found = {**GOOD, "recall@100": 0.6, "mrr@10": 0.4}
    found_low = {**GOOD, "recall@100": 0.95, "mrr@10": 0.4}
    assert diagnose(never_found)[0].rule == "coverage_gap"
    assert "ranking_gap" not in [f.rule for f in diagnose(never_found)]
    rules = [f.rule for f in diagnose(found_low)]
    assert "ranking_gap" in rules and "coverage_gap" not in rules
    assert "chunk" in dg.coverage_gap(never_found).action.lower()
    assert "reranker" in dg.ranking_gap(found_low).action.lower()


def test_ranking_gap_threshold():
    assert fired(dg.ranking_gap, {**GOOD, "mrr@10": dg.MRR_MIN - 1e-9})
    assert not fired(dg.ranking_gap, {**GOOD, "mrr@10": dg.MRR_MIN})
    assert not fired(dg.ranking_gap, {**GOOD, "mrr@10": 0.3, "recall@100": dg.RECALL_AT_DEPTH_MIN - 0.01})


def test_early_recall_gap_needs_a_good_first_hit():
    split = {**GOOD, "recall@3": dg.RECALL_AT_3_MIN - 0.05}
    assert fired(dg.early_recall_gap, split)
    assert "overlap" in dg.early_recall_gap(split).action
    assert not fired(dg.early_recall_gap, {**split, "mrr@10": dg.MRR_MIN - 0.1})  # that is the ranking gap
    assert not fired(dg.early_recall_gap, {**split, "recall@100": 0.5})  # that is the coverage gap
    assert not fired(dg.early_recall_gap, {**GOOD, "recall@3": dg.RECALL_AT_3_MIN})


def test_tail_noise_and_order_mismatch_need_a_good_first_hit():
    assert fired(dg.tail_noise, {**GOOD, "map@100": dg.MAP_MIN - 0.01})
    assert not fired(dg.tail_noise, {**GOOD, "map@100": dg.MAP_MIN - 0.01, "mrr@10": 0.5})
    assert fired(dg.order_mismatch, {**GOOD, "ndcg@3": dg.NDCG_AT_3_MIN - 0.01})
    assert not fired(dg.order_mismatch, {**GOOD, "ndcg@3": dg.NDCG_AT_3_MIN})
    assert not fired(dg.order_mismatch, {**GOOD, "ndcg@3": 0.3, "mrr@10": 0.3})


def test_precision_rule_uses_the_reachable_ceiling():
    # one relevant document per query: precision@3 cannot exceed 1/3, so 0.30 is nearly perfect
    one_rel = {**GOOD, "precision@3": 0.30, "precision@3_ceiling": dg.precision_ceiling([1] * 10)}
    assert dg.precision_ceiling([1] * 10) == pytest.approx(1 / 3)
    assert not fired(dg.precision_noise, one_rel)
    assert fired(dg.precision_noise, {**one_rel, "precision@3": 0.2})
    assert not fired(dg.precision_noise, {k: v for k, v in one_rel.items() if k != "precision@3_ceiling"})
    assert dg.precision_ceiling([1, 3, 6]) == pytest.approx((1 / 3 + 1 + 1) / 3)
    assert math.isnan(dg.precision_ceiling([]))


def test_latency_ci_and_cheaper_equivalent():
    assert fired(dg.slow_queries, {**GOOD, "latency_p95_ms": dg.LATENCY_P95_MAX_MS + 1})
    assert not fired(dg.slow_queries, {**GOOD, "latency_p95_ms": dg.LATENCY_P95_MAX_MS})
    assert fired(dg.uncertain_estimate, {**GOOD, "ndcg@10_ci_low": 0.5, "ndcg@10_ci_high": 0.5 + dg.CI_WIDTH_MAX + .01})
    assert not fired(dg.uncertain_estimate, GOOD)
    cheap = {**GOOD, "latency_p50_ms": 1.0, "reference_latency_p50_ms": dg.SPEEDUP_MIN * 1.0, "p_value": 0.3,
             "diff": -0.01}
    assert fired(dg.cheaper_equivalent, cheap)
    assert not fired(dg.cheaper_equivalent, {**cheap, "p_value": dg.ALPHA / 2})  # significantly worse
    assert not fired(dg.cheaper_equivalent, {**cheap, "reference_latency_p50_ms": 4.0})  # not fast enough
    assert not fired(dg.cheaper_equivalent, {k: v for k, v in cheap.items() if k != "p_value"})  # the reference


def test_diagnose_orders_by_severity_and_table_has_one_row_per_finding():
    bad = {**GOOD, "recall@100": 0.5, "hit_rate@3": 0.5, "latency_p95_ms": 900.0, "ndcg@10_ci_low": 0.1,
           "ndcg@10_ci_high": 0.5}
    found = diagnose(bad)
    sev = [dg.SEVERITIES.index(f.severity) for f in found]
    assert sev == sorted(sev) and found[0].rule == "coverage_gap"
    table = diagnosis_table({"a": bad, "b": GOOD})
    assert list(table["run"]) == ["a"] * len(found)
    assert list(table.columns) == ["run", "rule", "severity", "metric", "value", "threshold", "symptom", "cause",
                                   "action"]
    assert diagnosis_table([("x", GOOD)]).empty


def test_every_rule_has_a_docstring_and_severity():
    for rule in dg.RULES:
        assert rule.__doc__
    worst = {"recall@100": 0.9, "recall@3": 0.1, "mrr@10": 0.7, "map@100": 0.1, "hit_rate@3": 0.1, "ndcg@3": 0.1,
             "precision@3": 0.01, "precision@3_ceiling": 0.5, "latency_p95_ms": 1e4, "ndcg@10_ci_low": 0.0,
             "ndcg@10_ci_high": 1.0, "latency_p50_ms": 1.0, "reference_latency_p50_ms": 100.0, "p_value": 0.9,
             "diff": -0.001}
    found = diagnose(worst)
    assert all(f.severity in dg.SEVERITIES for f in found)
    assert {f.rule for f in found} == {r.__name__ for r in dg.RULES} - {"coverage_gap", "ranking_gap"}


def test_real_ordqa_runs():
    """BM25 on ORD-QA finds most evidence by rank 100 (recall@100 ~0.95) but ranks it low (MRR@10 ~0.60): the
    diagnosis is a ranking gap, not a coverage gap. Retrieving only 3 hits makes it a coverage gap."""
    from lab.core.paths import resolve_repo_path
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context

    ds = resolve_repo_path("data/ord-qa")
    full = run_experiment(ds, "bm25", {}, ctx=Context(progress=False)).summary()
    rules = [f.rule for f in diagnose(full)]
    assert "ranking_gap" in rules and "coverage_gap" not in rules
    assert "missing_key_evidence" in rules  # hit_rate@3 ~0.67
    short = run_experiment(ds, "bm25", {}, k=3, ctx=Context(progress=False)).summary()
    assert diagnose(short)[0].rule == "coverage_gap"
