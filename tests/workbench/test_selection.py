"""Held-out confirmation of a sweep's winner: real Papermill executions of the fixture notebook (BM25 on 40 ORD-QA
queries) into a real MLflow store, the selection recorded on the parent and shown by `lab compare --json`; bad
holdouts stop before any work; halving selects on dev queries too."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import blank_store

from lab.cli.main import main
from lab.core.paths import repo_root
from lab.tracking.results import HOLDOUT_ARTIFACT, TAG_HOLDOUT, TAG_SELECTION
from lab.tracking.store import TAG_PARENT, artifact_file, client, load_per_query
from lab.workbench.sweep import run_sweep

NOTEBOOK = Path(__file__).parents[1] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
SPEC = """\
notebook: {notebook}
dataset: data/ord-qa
experiment: held
seed: 3
holdout: 0.4
fixed: {{strategy: bm25, k: 10, max_queries: 40}}
grid:
  params.k1: [0.0, 1.2]
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory, pytestconfig):
    base = tmp_path_factory.mktemp("held")
    root = blank_store(base, pytestconfig)
    spec = base / "held.yaml"
    spec.write_text(SPEC.format(notebook=NOTEBOOK))
    report = run_sweep(spec, tracking_root=root, output_dir=base / "out", progress=False, echo=None, summary=False)
    return {"root": root, "report": report, "spec": spec, "base": base}


def test_children_log_dev_metrics_and_keep_the_held_out_queries_aside(swept, tmp_path):
    rep, root = swept["report"], swept["root"]
    assert rep.ok and rep.selection_error == ""
    cl = client(root)
    parent = cl.get_run(rep.parent_run_id)
    assert parent.data.params["holdout.fraction"] == "0.4" and parent.data.params["holdout.seed"] == "3"
    for o in rep.outcomes:
        run = cl.get_run(o.run_id)
        assert run.data.tags[TAG_HOLDOUT] == "0.4" and run.data.tags[TAG_PARENT] == rep.parent_run_id
        assert run.data.tags["labels.source"] == "human"
        dev = load_per_query(o.run_id, root, cl)
        held = pd.read_parquet(artifact_file(o.run_id, HOLDOUT_ARTIFACT, tmp_path / o.run_id, root, cl))
        assert len(dev) + len(held) == 40 and not set(dev.index) & set(held.index)
        assert run.data.metrics["n_dev_queries"] == len(dev) >= 5 and run.data.metrics["n_holdout_queries"] == len(held)
        assert run.data.metrics["ndcg_at_10"] == pytest.approx(dev["ndcg@10"].mean())  # ranked on dev only


def test_the_winner_is_chosen_on_dev_and_scored_on_held_out(swept, tmp_path, capsys):
    rep, root = swept["report"], swept["root"]
    cl = client(root)
    sel = rep.selection
    dev = {o.run_id: load_per_query(o.run_id, root, cl)["ndcg@10"].mean() for o in rep.outcomes}
    assert sel["winner_run"] == max(dev, key=dev.get) and sel["dev_score"] == pytest.approx(max(dev.values()))
    held = pd.read_parquet(artifact_file(sel["winner_run"], HOLDOUT_ARTIFACT, tmp_path, root, cl))["ndcg@10"]
    assert sel["holdout_score"] == pytest.approx(held.mean()) and sel["holdout_queries"] == len(held)
    assert sel["optimism"] == pytest.approx(sel["dev_score"] - sel["holdout_score"])
    assert sel["holdout_ci"][0] <= sel["holdout_score"] <= sel["holdout_ci"][1]
    assert json.loads(cl.get_run(rep.parent_run_id).data.tags[TAG_SELECTION]) == sel
    assert main(["compare", "--experiment", "held", "--tracking-root", str(root), "--json"]) == 0
    trust = json.loads(capsys.readouterr().out)["trust"]
    assert set(trust) >= {"n_queries", "labels", "min_detectable_diff", "queries_needed", "judged_at_10", "warnings",
                          "selection"}
    assert trust["selection"] == sel and trust["n_queries"] == 40  # dev plus held-out
    assert trust["labels"] == {"source": "human", "generator": None, "judge": None, "judge_check": None}
    assert main(["compare", "--experiment", "held", "--tracking-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "trust: 40 queries; labels human" in out and "held-out check of the winner" in out
    # rows named by the charts' short labels (what varies: k1), --long-labels by the whole config
    assert "k1 1.2" in out and "params.k1=" not in out
    assert main(["compare", "--experiment", "held", "--tracking-root", str(root), "--long-labels"]) == 0
    assert "params.k1=1.2" in capsys.readouterr().out


def test_a_sweep_without_the_holdout_does_not_reuse_held_out_runs(swept):
    spec = swept["base"] / "plain.yaml"
    spec.write_text(SPEC.format(notebook=NOTEBOOK).replace("holdout: 0.4\n", ""))
    rep = run_sweep(spec, tracking_root=swept["root"], dry_run=True, echo=None)
    assert [o.status for o in rep.outcomes] == ["PENDING", "PENDING"]
    assert all("was scored holdout 0.4 (seed 3); this sweep has no holdout" in o.reason for o in rep.outcomes)


@pytest.mark.parametrize("args, message", [
    (["--holdout", "0.95"],
     "error: --holdout=0.95: expected a fraction of the queries to hold out, a number in (0, 0.9)"),
    (["--holdout", "0.05"], "error: --holdout=0.05: leaves "),
    (["--halving", "--holdout", "0"], "error: --holdout=0.0: expected a fraction"),
])
def test_bad_holdouts_stop_before_any_work(tmp_path, capsys, args, message):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(notebook=NOTEBOOK).replace("holdout: 0.4\n", ""))
    store = tmp_path / "store"
    assert main(["sweep", str(spec), "--tracking-root", str(store), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and len(err.splitlines()) == 1
    assert not store.exists()  # nothing ran, nothing was logged


def test_a_bad_holdout_key_names_the_file_and_key(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(notebook=NOTEBOOK).replace("holdout: 0.4", "holdout: 1.5"))
    assert main(["sweep", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {spec}, key 'holdout': expected a fraction") and len(err.splitlines()) == 1


def test_halving_selects_on_dev_and_logs_the_held_out_check(tmp_path, monkeypatch):
    from lab.workbench.halving import run_halving_sweep

    root = repo_root()
    spec = tmp_path / "k1.yaml"
    spec.write_text(f"notebook: {root / 'notebooks/03_strategy_comparison.ipynb'}\n"
                    f"dataset: {root / 'data/ord-qa'}\nexperiment: halving_held\nseed: 0\nholdout: 0.3\n"
                    "fixed:\n  split: test\n  k: 100\n  strategy: bm25\ngrid:\n  params.k1: [0.0, 1.2]\n")
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "mlruns"
    out = run_halving_sweep(spec, metric="ndcg@10", eta=2, min_queries=20, echo=None, tracking_root=str(store))
    sel = out["selection"]
    assert out["n_queries"] == out["n_dev_queries"] == sel["dev_queries"]
    assert sel["holdout_queries"] == 90 - sel["dev_queries"]
    assert out["rungs"][-1]["n_queries"] == sel["dev_queries"]  # the last rung is every dev query, no held-out one
    assert sel["dev_score"] == pytest.approx(out["rungs"][-1]["scores"][0])
    cl = client(str(store))
    assert json.loads(cl.get_run(out["parent_run_id"]).data.tags[TAG_SELECTION])["winner_run"] == out["winner_run_id"]
    child = cl.get_run(out["winner_run_id"])
    assert child.data.metrics["ndcg_at_10"] == pytest.approx(sel["dev_score"])


def test_compare_overlap_reads_the_runs_rankings(swept, capsys):
    from lab.data.trec import read_trec_run
    from lab.metrics.overlap import overlap_table
    from lab.tracking.store import RUN_ARTIFACT

    root = swept["root"]
    assert main(["compare", "--experiment", "held", "--tracking-root", str(root), "--json", "--overlap"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (pair,) = doc["overlap"]
    cl = client(root)
    runs = {}
    for row, tmp in zip(doc["rows"], ("a", "b"), strict=False):
        runs[row["label"]] = read_trec_run(artifact_file(row["run_id"], RUN_ARTIFACT, swept["base"] / tmp, root, cl))
    want = overlap_table(runs).iloc[0]
    assert pair["rbo"] == pytest.approx(want.rbo) and 0 < pair["rbo"] < 1 and pair["n_queries"] == 40
    assert main(["compare", "--experiment", "held", "--tracking-root", str(root), "--overlap"]) == 0
    assert "rank-biased overlap (p = 0.9) and top-10 Jaccard" in capsys.readouterr().out
