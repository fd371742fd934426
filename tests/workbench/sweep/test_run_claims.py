"""Two `lab sweep` processes at once, on spec files with different names and the same experiment:
every config runs once (lab.tracking.claims), the sweep that yields says so, and `lab compare` lists each config
once. Real Papermill executions of the fixture notebook (BM25 on 5 ORD-QA queries) into a real MLflow store."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import blank_store

from lab.core.flat import config_hash
from lab.tracking.store import TAG_ROLE, client
from lab.workbench.config import expand, load_spec

NOTEBOOK = Path(__file__).parents[2] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
REPO = Path(__file__).resolve().parents[3]
SPEC = ("notebook: {notebook}\ndataset: data/ord-qa\nexperiment: shared\n"
        "fixed: {{strategy: bm25, k: 10, max_queries: 5}}\ngrid:\n  params.k1: [0.9, 1.2]\n")


def test_two_sweeps_with_different_names_run_each_config_once(tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    specs = [tmp_path / "alpha.yaml", tmp_path / "beta.yaml"]
    for s in specs:
        s.write_text(SPEC.format(notebook=NOTEBOOK))
    env = {**os.environ, "LAB_NO_PROGRESS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "lab", "sweep", str(s), "--root", str(root), "--no-progress",
                               "--output-dir", str(tmp_path / s.stem)], env=env, cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for s in specs]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs

    cl = client(root)
    exp = cl.get_experiment_by_name("shared")
    runs = [r for r in cl.search_runs([exp.experiment_id], max_results=1000) if r.data.tags.get(TAG_ROLE) != "parent"]
    finished = Counter(r.data.tags["config_hash"] for r in runs if r.info.status == "FINISHED")
    hashes = {config_hash(c) for c in expand(load_spec(specs[0]))}
    assert set(finished) == hashes and set(finished.values()) == {1}, finished  # none twice, none lost
    assert all(r.info.status == "FINISHED" for r in runs)  # a yielding sweep leaves no run behind (deleted)
    said = "".join(outs)
    yielded = said.count("run by another sweep at the same time")
    ran = sum(o.count("finished,") and int(o.split(" configs, ")[1].split(" finished")[0]) for o in outs)
    assert ran == len(hashes) and yielded + ran == 2 * len(hashes), outs
    for o in outs:  # each sweep ends with the leaderboard `lab compare` prints, trust lines first
        board = o.split("experiment 'shared', ")[1]
        assert "labels human" in board and "(the same as `lab compare --experiment shared`" in board, o

    compare = subprocess.run([sys.executable, "-m", "lab", "compare", "--experiment", "shared", "--root", str(root),
                              "--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert compare.returncode == 0, compare.stderr
    import json

    rows = json.loads(compare.stdout)["rows"]
    assert sorted(r["config_hash"] for r in rows) == sorted(hashes)
