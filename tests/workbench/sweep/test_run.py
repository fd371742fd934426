"""lab.workbench.sweep: real Papermill executions of the fixture notebook (BM25 on 10 ORD-QA queries) into a real MLflow
store in a tmp folder: a sweep with a failing config, dry run, resume, the lock, and kill -9 mid-way."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import blank_store

from lab.core.errors import ConfigError
from lab.core.flat import config_hash
from lab.tracking.store import TAG_PARENT, TAG_ROLE, client
from lab.workbench.config import expand, load_spec
from lab.workbench.sweep import ERROR_ARTIFACT, run_sweep
from lab.workbench.sweep.stale import sweep_lock

NOTEBOOK = Path(__file__).parents[2] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
REPO = Path(__file__).resolve().parents[3]



def children(root, experiment: str) -> list:
    cl = client(root)
    exp = cl.get_experiment_by_name(experiment)
    runs = cl.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get(TAG_ROLE) != "parent"]


SPEC = """\
notebook: {notebook}
dataset: data/ord-qa
experiment: engine
fixed: {{strategy: bm25, k: 10, max_queries: 10}}
zip:
  params.k1: [0.9, 1.5, 1.2]
  fail: [false, false, true]
"""


@pytest.fixture(scope="module")
def first(tmp_path_factory, pytestconfig):
    """One sweep of 3 configs, the last of which raises in the notebook."""
    base = tmp_path_factory.mktemp("sweep")
    root = blank_store(base, pytestconfig)
    spec = base / "engine.yaml"
    spec.write_text(SPEC.format(notebook=NOTEBOOK))
    report = run_sweep(spec, tracking_root=root, output_dir=base / "out", progress=False, echo=None)
    return {"base": base, "root": root, "spec": spec, "report": report}


def test_sweep_runs_every_config_and_records_the_failure(first):
    rep, root = first["report"], first["root"]
    assert [o.status for o in rep.outcomes] == ["FINISHED", "FINISHED", "FAILED"]
    assert rep.n_finished == 2 and rep.n_failed == 1 and not rep.ok
    configs = expand(load_spec(first["spec"]))
    cl = client(root)
    parent = cl.get_run(rep.parent_run_id)
    assert parent.data.tags[TAG_ROLE] == "parent" and parent.info.status == "FAILED"  # not every config finished
    runs = {r.info.run_id: r for r in children(root, "engine")}
    assert len(runs) == 3
    for o, config in zip(rep.outcomes, configs, strict=False):
        run = runs[o.run_id]
        assert run.data.tags[TAG_PARENT] == rep.parent_run_id
        assert run.data.tags["config_hash"] == o.config_hash == config_hash(config)
        assert run.data.params["params.k1"] == json.dumps(config["params"]["k1"])  # flattened config
        assert run.data.params["dataset"] == "data/ord-qa"  # as requested; what it resolved to is resolved.*
        assert run.info.status == o.status
        arts = {a.path for a in cl.list_artifacts(o.run_id)} | {a.path for a in cl.list_artifacts(o.run_id, "notebook")}
        assert f"notebook/{Path(o.notebook).name}" in arts
        executed = json.loads(Path(o.notebook).read_text())
        injected = "".join("".join(c["source"]) for c in executed["cells"]
                           if "injected-parameters" in c["metadata"].get("tags", []))
        assert o.run_id in injected and str(REPO / "data" / "ord-qa") in injected  # dataset made absolute
        if o.status == "FINISHED":
            assert 0.0 < run.data.metrics["ndcg_at_10"] <= 1.0 and "per_query.parquet" in arts
            assert run.data.params["resolved.dataset"] == "ord-qa"
        else:
            assert "fixture failure on purpose" in run.data.tags["error"] and ERROR_ARTIFACT in arts
            err = Path(cl.download_artifacts(o.run_id, ERROR_ARTIFACT, str(first["base"]))).read_text()
            assert err.startswith("ValueError: fixture failure on purpose") and "raise ValueError" in err
    # different k1, different scores: the params really reached the notebook
    fin = [runs[o.run_id].data.metrics for o in rep.outcomes if o.status == "FINISHED"]
    assert fin[0] != fin[1]
    # jobs=1: every config ran in a kernel started (and its imports done) ahead of it, each kernel used once
    assert [runs[o.run_id].data.tags["sweep.kernel"] for o in rep.outcomes] == ["prewarmed"] * 3


def test_cold_kernels_give_the_same_scores(first, tmp_path, pytestconfig):
    """warm_kernels=False (Papermill starts each kernel) logs the same metrics as the prewarmed first sweep."""
    root = blank_store(tmp_path, pytestconfig)
    rep = run_sweep(first["spec"], tracking_root=root, output_dir=tmp_path / "out", progress=False, echo=None,
                    warm_kernels=False)
    cold = {r.data.tags["config_hash"]: r for r in children(root, "engine")}
    warm = {r.data.tags["config_hash"]: r for r in children(first["root"], "engine")}
    assert [o.status for o in rep.outcomes] == ["FINISHED", "FINISHED", "FAILED"]
    for h, run in cold.items():
        assert run.data.tags["sweep.kernel"] == "cold"
        quality = {k: v for k, v in run.data.metrics.items() if "latency" not in k and "seconds" not in k}
        assert quality == {k: warm[h].data.metrics[k] for k in quality}


def test_dry_run_then_resume_skips_finished_and_retries_failed(first, capsys):
    root, spec = first["root"], first["spec"]
    before = len(children(root, "engine"))
    dry = run_sweep(spec, tracking_root=root, output_dir=first["base"] / "out", dry_run=True, progress=False)
    assert [o.status for o in dry.outcomes] == ["SKIPPED", "SKIPPED", "PENDING"]
    out = capsys.readouterr().out
    assert out.count("skip (finished run") == 2 and "would run" in out
    assert len(children(root, "engine")) == before  # a dry run creates nothing

    again = run_sweep(spec, tracking_root=root, output_dir=first["base"] / "out", progress=False, echo=None)
    assert [o.status for o in again.outcomes] == ["SKIPPED", "SKIPPED", "FAILED"]
    assert [o.run_id for o in again.outcomes[:2]] == [o.run_id for o in first["report"].outcomes[:2]]
    assert again.parent_run_id == first["report"].parent_run_id  # the unfinished parent is reused
    runs = children(root, "engine")
    assert len(runs) == before + 1
    finished = Counter(r.data.tags["config_hash"] for r in runs if r.info.status == "FINISHED")
    assert sorted(finished.values()) == [1, 1]


def test_a_live_sweep_of_the_same_name_is_refused(first):
    lock = sweep_lock(first["root"], first["base"] / "out", "engine", "engine")
    try:
        with pytest.raises(ConfigError, match="already running"):
            run_sweep(first["spec"], tracking_root=first["root"], output_dir=first["base"] / "out", progress=False,
                      echo=None)
    finally:
        lock.release()


def _status_counts(db: Path) -> Counter:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            rows = con.execute("select r.status, count(*) from runs r where not exists (select 1 from tags t where "
                               "t.run_uuid = r.run_uuid and t.key = 'sweep.role') group by r.status").fetchall()
        return Counter(dict(rows))
    except sqlite3.Error:
        return Counter()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def test_kill_9_mid_sweep_then_rerun_loses_and_duplicates_nothing(tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    spec = tmp_path / "killme.yaml"
    spec.write_text(f"notebook: {NOTEBOOK}\ndataset: data/ord-qa\nexperiment: killme\n"
                    "fixed: {strategy: bm25, k: 10, max_queries: 5}\n"
                    "zip:\n  params.k1: [0.9, 1.1]\n  sleep: [0, 6]\n")
    env = {**os.environ, "LAB_NO_PROGRESS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "lab", "sweep", str(spec), "--jobs", "2", "--root", str(root),
                             "--output-dir", str(tmp_path / "out"), "--no-progress"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = root / "mlflow.db"
    deadline = time.time() + 240
    while time.time() < deadline and _status_counts(db)["FINISHED"] < 1:
        assert proc.poll() is None, f"the sweep ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()

    runs = children(root, "killme")
    parent_before = {r.data.tags[TAG_PARENT] for r in runs}
    finished_before = {r.data.tags["config_hash"]: r.info.run_id for r in runs if r.info.status == "FINISHED"}
    running = [r for r in runs if r.info.status == "RUNNING"]
    assert finished_before and running, [r.info.status for r in runs]
    # pool workers die with the sweep process: nothing can finish a run behind the rerun's back
    pids = {int(r.data.tags["sweep.pid"]) for r in running}
    assert proc.pid not in pids
    t0 = time.time()
    while any(_alive(p) for p in pids) and time.time() - t0 < 10:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)

    rep = run_sweep(spec, tracking_root=root, output_dir=tmp_path / "out", progress=False, echo=None)
    assert rep.ok and rep.n_skipped == len(finished_before)
    assert sorted(rep.stale_marked) == sorted(r.info.run_id for r in running)
    assert parent_before == {rep.parent_run_id}  # the interrupted sweep's parent is reused, and now finished
    assert client(root).get_run(rep.parent_run_id).info.status == "FINISHED"
    after = children(root, "killme")
    finished = Counter(r.data.tags["config_hash"] for r in after if r.info.status == "FINISHED")
    hashes = {config_hash(c) for c in expand(load_spec(spec))}
    assert set(finished) == hashes and set(finished.values()) == {1}  # none lost, none duplicated
    status = {r.info.run_id: r.info.status for r in after}
    assert all(status[rid] == "FINISHED" for rid in finished_before.values())  # finished runs kept as they were
    assert all(status[r.info.run_id] == "KILLED" for r in running)
    killed = client(root).get_run(running[0].info.run_id)
    assert "interrupted" in killed.data.tags["error"]



