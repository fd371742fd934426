"""lab.analysis.compare: leaderboards of real BM25 runs on ORD-QA (90 queries) logged into a tmp MLflow store."""
from __future__ import annotations

import math
import warnings

import pytest
from conftest import blank_store

from lab.analysis.compare import CompareWarning, experiment_leaderboard, format_leaderboard, plot_leaderboard
from lab.tracking.results import log_result
from lab.tracking.store import client, get_or_create_experiment


def bm25(params=None, k=10, max_queries=None):
    from lab.core.paths import resolve_repo_path
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context

    return run_experiment(resolve_repo_path("data/ord-qa"), "bm25", params or {}, k=k, max_queries=max_queries,
                          metrics=["ndcg@10", "recall@10", "judged@10"], ctx=Context(progress=False))


@pytest.fixture(scope="module")
def logged(tmp_path_factory, pytestconfig):
    """Three runs: BM25 defaults, k1=1.5, and k=1 (one hit per query: clearly worse on nDCG@10); the last one
    as the child of a parent run."""
    base = tmp_path_factory.mktemp("cmp")
    root = blank_store(base, pytestconfig)
    results = {"default": bm25(), "k1": bm25({"k1": 1.5}), "k1hit": bm25(k=1)}
    ids = {name: log_result(results[name], experiment="cmp", tracking_root=root, n_resamples=500)
           for name in ("default", "k1")}
    cl = client(root)
    exp = get_or_create_experiment("cmp", root, cl)
    parent = cl.create_run(exp, tags={"sweep.role": "parent"}).info.run_id
    child = cl.create_run(exp, tags={"mlflow.parentRunId": parent}).info.run_id
    ids["k1hit"] = log_result(results["k1hit"], run_id=child, tracking_root=root, n_resamples=500)
    cl.set_terminated(child, "FINISHED")
    cl.set_terminated(parent, "FINISHED")
    return {"root": root, "base": base, "results": results, "ids": ids, "parent": parent}


def test_leaderboard_rows_sorted_with_cis_and_paired_tests(logged):
    from lab.metrics import paired_test

    root, results, ids = logged["root"], logged["results"], logged["ids"]
    df = experiment_leaderboard("cmp", tracking_root=root, n_resamples=2000)
    assert len(df) == 3 and set(df["run_id"]) == set(ids.values())  # the parent run is not listed
    assert list(df["ndcg@10"]) == sorted(df["ndcg@10"], reverse=True)
    by_id = df.set_index("run_id")
    for name, rid in ids.items():
        ev = results[name].evaluation
        assert by_id.loc[rid, "ndcg@10"] == pytest.approx(ev.means["ndcg@10"])
        assert by_id.loc[rid, "ndcg@10_ci_low"] <= ev.means["ndcg@10"] <= by_id.loc[rid, "ndcg@10_ci_high"]
        assert by_id.loc[rid, "latency_p50_ms"] == pytest.approx(results[name].latency["latency_p50_ms"])
        assert by_id.loc[rid, "n_queries"] == ev.n_queries
        assert by_id.loc[rid, "judged"] == pytest.approx(ev.means["judged@10"]) and not by_id.loc[rid, "condensed"]
    assert "judged@10" in format_leaderboard(df)
    best = df.iloc[0]
    assert best["diff"] == 0 and math.isnan(best["p_value"]) and not best["significant"]
    assert df.attrs["best_run_id"] == best["run_id"]

    name_of = {rid: n for n, rid in ids.items()}
    best_pq = results[name_of[best["run_id"]]].evaluation.per_query["ndcg@10"]
    for _, row in df.iloc[1:].iterrows():
        pq = results[name_of[row["run_id"]]].evaluation.per_query["ndcg@10"]
        want = paired_test(pq.loc[best_pq.index].to_numpy(), best_pq.to_numpy(), n_resamples=2000, seed=0)
        assert row["diff"] == pytest.approx(want["diff"]) and row["diff"] <= 0
        assert row["p_value"] == pytest.approx(want["p_permutation"])
        assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((want["ci_low"], want["ci_high"]))
        assert row["p_adjusted"] >= row["p_value"] and row["significant"] == (row["p_adjusted"] < 0.05)
        assert row["wins"] + row["ties"] + row["losses"] == len(best_pq)
    # two runs tested against the best: Holm over 2 (lab.analysis.leaderboard), named in the printed table
    assert df.attrs["correction_note"] == "p adjusted: Holm over 2 comparisons" and set(df["correction"]) == {"holm"}
    assert "p adjusted: Holm over 2 comparisons" in format_leaderboard(df)
    worst = by_id.loc[ids["k1hit"]]
    assert worst["significant"] and worst["p_value"] < 0.01  # one hit per query is clearly worse on nDCG@10
    # labels name what differs between the runs
    assert "k=1" in by_id.loc[ids["k1hit"], "label"] and "params.k1=1.5" in by_id.loc[ids["k1"], "label"]
    # the printed table names them by the charts' short labels (lab.analysis.labels); long_labels by the whole label
    text, long = format_leaderboard(df), format_leaderboard(df, long_labels=True)
    assert "k1 1.5" in text and "params.k1=1.5" not in text
    assert "params.k1=1.5" in long and "k1 1.5" not in long

    only = experiment_leaderboard("cmp", tracking_root=root, parent_run_id=logged["parent"], n_resamples=200)
    assert list(only["run_id"]) == [ids["k1hit"]]
    two = experiment_leaderboard("cmp", tracking_root=root, run_ids=[ids["default"], ids["k1hit"]], n_resamples=200)
    assert set(two["run_id"]) == {ids["default"], ids["k1hit"]} and two.loc[0, "diff"] == 0
    assert two.attrs["correction"] == "none" and two.loc[1, "p_adjusted"] == two.loc[1, "p_value"]  # one comparison


def test_warnings_for_other_metrics_version_and_other_queries(logged, tmp_path):
    root = logged["root"]
    cl = client(root)
    rid = log_result(bm25(max_queries=10), experiment="cmp2", tracking_root=root, n_resamples=50)
    log_result(logged["results"]["default"], experiment="cmp2", tracking_root=root, n_resamples=50)
    other = log_result(logged["results"]["k1"], experiment="cmp2", tracking_root=root, n_resamples=50)
    cl.set_tag(other, "metrics_version", "0")
    with pytest.warns(CompareWarning) as caught:
        df = experiment_leaderboard("cmp2", tracking_root=root, n_resamples=200)
    text = " ".join(str(w.message) for w in caught)
    assert "metrics_version" in text and "other queries" in text
    row = df.set_index("run_id").loc[rid]
    assert math.isnan(row["p_value"]) and not row["significant"]
    assert "warning: runs carry different metrics_version" in format_leaderboard(df)


def test_plot_and_cli(logged, tmp_path, capsys):
    from lab.cli.main import main

    root = logged["root"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = experiment_leaderboard("cmp", tracking_root=root, n_resamples=200)
    png = plot_leaderboard(df, tmp_path / "lb.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000

    out_png, out_csv = tmp_path / "cli.png", tmp_path / "cli.csv"
    assert main(["compare", "--experiment", "cmp", "--root", str(root), "--png", str(out_png),
                 "--csv", str(out_csv)]) == 0
    out = capsys.readouterr().out
    assert "experiment 'cmp', 3 finished runs, by ndcg@10" in out and "best" in out and " *" in out
    assert out_png.exists() and out_csv.read_text().startswith("label,ndcg@10,ndcg@10_ci_low")
    assert main(["compare", "--root", str(root), "--metric", "recall@10"]) == 0  # latest experiment by default
    assert "by recall@10" in capsys.readouterr().out
    assert main(["compare", "--experiment", "nope", "--root", str(root)]) == 2
    assert "no experiment 'nope'" in capsys.readouterr().err


def _tiered_set(folder, every: int = 3):
    """ORD-QA's queries with a difficulty tier in their metadata (easy, medium, hard in turn), as a set folder."""
    import json
    from pathlib import Path

    from lab.core.paths import resolve_repo_path

    folder = Path(folder)
    folder.mkdir(parents=True)
    lines = resolve_repo_path("data/ord-qa/queries.jsonl").read_text(encoding="utf-8").splitlines()
    tiers = {}
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for i, ln in enumerate(lines):
            q = json.loads(ln)
            tiers[q["_id"]] = ("easy", "medium", "hard")[i % every]
            q["metadata"] = {**q.get("metadata", {}), "difficulty": tiers[q["_id"]]}
            fh.write(json.dumps(q) + "\n")
    return folder, tiers


def test_leaderboard_by_tier(logged, tmp_path, capsys):
    """Per-tier means are the means of each run's per-query values over the queries of that tier, in the order
    easy, medium, hard; `lab compare --by tier --dataset` prints them; a set without tiers is one line, exit 2."""
    from lab.analysis.compare import format_leaderboard_by, leaderboard_by, query_groups
    from lab.cli.main import main
    from lab.tracking.store import load_per_query

    root = logged["root"]
    folder, tiers = _tiered_set(tmp_path / "set")
    assert query_groups(folder, "tier") == tiers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)
        df = experiment_leaderboard("cmp", tracking_root=root, n_resamples=200)
    by = leaderboard_by(df, tiers, "tier", tracking_root=root)
    assert list(by["run_id"]) == list(df["run_id"]) and by.attrs["groups"] == ["easy", "medium", "hard"]
    for _, row in by.iterrows():
        scores = load_per_query(row["run_id"], root)["ndcg@10"]
        for tier in ("easy", "medium", "hard"):
            part = scores[[q for q in scores.index if tiers[q] == tier]]
            assert row[tier] == pytest.approx(part.mean()) and row[f"{tier} n"] == len(part) == 30
        assert row["all"] == pytest.approx(scores.mean())
    text = format_leaderboard_by(by)
    assert "ndcg@10 by tier" in text and "(30)" in text
    assert text.splitlines()[-1].startswith("note: tiers come from BM25")
    assert main(["compare", "--experiment", "cmp", "--root", str(root), "--by", "tier", "--dataset",
                 str(folder)]) == 0
    out = capsys.readouterr().out
    assert "ndcg@10 by tier" in out and "easy" in out and "hard" in out
    code = main(["compare", "--experiment", "cmp", "--root", str(root), "--by", "tier", "--dataset",
                 str(logged_dataset())])
    err = capsys.readouterr().err
    assert code == 2 and "no query has metadata field 'difficulty'" in err and len(err.strip().splitlines()) == 1


def logged_dataset():
    from lab.core.paths import resolve_repo_path

    return resolve_repo_path("data/ord-qa")
