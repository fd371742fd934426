"""lab.analysis.robustness: the robustness table on a small real example (ORD-QA, BM25, 30 queries) and its
statistics."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lab.analysis.robustness import (
    CLEAN,
    abstention,
    auroc,
    find_variants,
    format_table,
    make_variants,
    paired_deltas,
    plot_robustness,
    plot_top1,
    run_robustness,
    write_outputs,
)
from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.retrievers.base import Context
from lab.testset.perturb import Resources, perturb_dataset

ORD_QA = resolve_repo_path("data/ord-qa")
N = 30


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    out = tmp_path_factory.mktemp("variants")
    perturb_dataset(ORD_QA, ["typo", "unanswerable"], out, seed=0, progress=False,
                    res=Resources(cache_dir=resolve_repo_path(".") / ".cache"))
    return out


@pytest.fixture(scope="module")
def rob(variants):
    return run_robustness(ORD_QA, variants, ["bm25"], ctx=Context(progress=False), max_queries=N, log_to_mlflow=False,
                          n_resamples=2000, seed=0)


def test_table_has_a_row_per_strategy_and_variant(rob):
    assert list(rob.table["variant"]) == [CLEAN, "typo", "unanswerable"]
    clean = rob.table.iloc[0]
    assert clean["ndcg@10_delta"] == 0 and clean["n_queries"] == N
    assert clean["ndcg@10_ci_low"] <= clean["ndcg@10"] <= clean["ndcg@10_ci_high"]


def test_delta_and_ci_match_the_per_query_values(rob):
    clean = rob.results[("bm25", CLEAN)].evaluation.per_query
    typo = rob.results[("bm25", "typo")].evaluation.per_query
    row = rob.table[rob.table.variant == "typo"].iloc[0]
    for m in ("ndcg@10", "recall@10"):
        diff = (typo[m] - clean.loc[typo.index, m]).mean()
        assert row[f"{m}_delta"] == pytest.approx(diff)
        assert row[m] - row[f"{m}_clean"] == pytest.approx(diff)
        assert row[f"{m}_delta_ci_low"] <= row[f"{m}_delta"] <= row[f"{m}_delta_ci_high"]
        assert 0 < row[f"{m}_p"] <= 1
    assert row["ndcg@10_delta"] < 0  # typos in most queries cost BM25 exact matches
    assert row["share_changed"] > 0.9 and row["n_changed"] >= 0.9 * N


def test_unanswerable_row_pairs_only_the_kept_queries(rob, variants):
    from lab.testset.perturb import unanswerable_ids

    held = set(unanswerable_ids(next(p for p in find_variants(variants) if p.name.endswith("unanswerable"))))
    row = rob.table[rob.table.variant == "unanswerable"].iloc[0]
    evaluated = set(rob.results[("bm25", "unanswerable")].evaluation.per_query.index)
    assert not (evaluated & held) and row["n_queries"] == len(evaluated)
    assert set(rob.results[("bm25", "unanswerable")].evaluation.excluded) == held & set(
        rob.results[("bm25", "unanswerable")].run)
    un = rob.unanswerable.iloc[0]
    assert un["n_unanswerable"] == len(held & set(rob.results[("bm25", CLEAN)].run))
    for key in ("confident_rate", "answer_rate_answerable", "auroc"):
        assert 0 <= un[key] <= 1
    assert un["confident_rate_ci_low"] <= un["confident_rate"] <= un["confident_rate_ci_high"]
    assert set(rob.top1["group"]) == {"answerable", "unanswerable"}


def test_outputs_and_figures(rob, tmp_path):
    files = write_outputs(rob, tmp_path)
    assert {f.name for f in files} >= {"robustness.csv", "robustness.md", "unanswerable.csv", "robustness.png"}
    back = pd.read_csv(tmp_path / "robustness.csv")
    assert back.shape == rob.table.shape
    md = format_table(rob.table)
    assert md.count("\n") == len(rob.table) + 1 and "delta ndcg@10" in md
    assert len(plot_robustness(rob.table).axes) == 2 and len(plot_top1(rob.top1).axes) == 1


def test_paired_deltas_by_hand():
    clean = pd.DataFrame({"m": [1.0, 0.5, 0.0, 1.0]}, index=["a", "b", "c", "d"])
    var = pd.DataFrame({"m": [0.5, 0.5, 0.0]}, index=["a", "b", "c"])
    out = paired_deltas(clean, var, ["m"], changed={"a"}, n_resamples=500)
    assert out["n_queries"] == 3 and out["n_changed"] == 1
    assert out["m_delta"] == pytest.approx(-0.5 / 3) and out["m_delta_changed"] == pytest.approx(-0.5)
    assert out["m_clean"] == pytest.approx(0.5) and out["m_rel_delta"] == pytest.approx(-1 / 3)


def test_auroc_and_abstention_by_hand():
    assert auroc([3, 4], [1, 2]) == 1.0 and auroc([1], [2]) == 0.0 and auroc([1, 2], [1, 2]) == 0.5
    assert auroc([np.nan], [0.0]) == 0.0 and np.isnan(auroc([], [1.0]))
    clean = pd.Series(np.arange(1.0, 21.0))  # tau at 95 % answered = 5th percentile of 1..20 = 1.95
    out = abstention(clean, pd.Series([5.0, 6.0]), pd.Series([1.0, 3.0, np.nan, 10.0]),
                     pd.Series([8.0, 8.0, 8.0, 12.0]), answer_rate=0.95, n_resamples=200)
    assert out["tau"] == pytest.approx(1.95)
    assert out["confident_rate"] == pytest.approx(0.5)  # 3.0 and 10.0 are answered; 1.0 and no hit are not
    assert out["answer_rate_answerable"] == 1.0
    assert out["top1_drop"] == pytest.approx(-14 / 3)  # mean of -7, -5, -2 (no hit: left out)
    with pytest.raises(ConfigError):
        abstention(clean, clean, clean, answer_rate=1.0)


def test_make_variants_reuses_the_variants_already_made(variants):
    stamps = {v: (variants / f"ord-qa-{v}" / "PERTURBATION.json").stat().st_mtime_ns for v in ("typo", "unanswerable")}
    paths = make_variants(ORD_QA, variants, ["unanswerable", "typo"], progress=False)
    assert paths == [variants / "ord-qa-unanswerable", variants / "ord-qa-typo"]
    assert {v: (variants / f"ord-qa-{v}" / "PERTURBATION.json").stat().st_mtime_ns for v in stamps} == stamps


def test_a_variant_of_another_dataset_is_refused(variants, tmp_path):
    with pytest.raises(ConfigError, match="fingerprint"):
        run_robustness(resolve_repo_path("data/scifact"), variants, ["bm25"], ctx=Context(progress=False),
                       max_queries=5, log_to_mlflow=False)
    with pytest.raises(ConfigError, match="no perturbed variants"):
        find_variants(tmp_path)


def test_logged_to_mlflow_with_one_nested_run_per_strategy_and_variant(variants, tmp_path, pytestconfig):
    from conftest import blank_store

    from lab.tracking.store import client

    if getattr(pytestconfig, "cache", None) is not None:
        root = blank_store(tmp_path, pytestconfig)
    else:  # pytest -p no:cacheprovider: a fresh store (runs the migrations)
        root = tmp_path / "mlruns"
    typo_only = [p for p in find_variants(variants) if p.name.endswith("typo")]
    rob = run_robustness(ORD_QA, typo_only, ["bm25"], ctx=Context(progress=False), max_queries=10,
                         n_resamples=200, tracking_root=root, experiment="robustness")
    cl = client(root)
    parent = cl.get_run(rob.summary_run_id)
    assert parent.info.status == "FINISHED" and "bm25.typo.ndcg_at_10_delta" in parent.data.metrics
    arts = {a.path for a in cl.list_artifacts(rob.summary_run_id)}
    assert {"robustness.csv", "robustness.md", "figures"} <= arts
    kids = cl.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{rob.summary_run_id}'")
    assert sorted(r.data.tags["variant"] for r in kids) == [CLEAN, "typo"]
    assert all(r.info.status == "FINISHED" and "ndcg_at_10" in r.data.metrics for r in kids)
