"""The Ray executor: a two-config sweep of the fixture notebook as Ray tasks on a local Ray instance."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import blank_store

from lab.core.flat import config_hash
from lab.tracking.store import TAG_PARENT, client
from lab.workbench.config import expand, load_spec

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'raglab[ray]'")

NOTEBOOK = Path(__file__).parents[2] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"
REPO = Path(__file__).resolve().parents[3]


def test_sweep_on_a_local_ray_instance(tmp_path, pytestconfig):
    """`lab sweep --executor ray` without an address, as a user runs it: its own local instance, in the command's
    process (not this one: Ray keeps process-wide state that a later in-process cluster test would inherit)."""
    root = blank_store(tmp_path, pytestconfig)
    spec = tmp_path / "ray.yaml"
    spec.write_text(f"notebook: {NOTEBOOK}\ndataset: data/ord-qa\nexperiment: on-ray\n"
                    "fixed: {strategy: bm25, k: 10, max_queries: 5}\ngrid:\n  params.k1: [0.9, 1.2]\n")
    proc = subprocess.Popen([sys.executable, "-m", "lab", "sweep", str(spec), "--executor", "ray", "--jobs", "2",
                             "--root", str(root), "--output-dir", str(tmp_path / "out"), "--no-progress"],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    cl = client(root)
    exp = cl.get_experiment_by_name("on-ray")
    runs = cl.search_runs([exp.experiment_id], max_results=100)
    children = [r for r in runs if TAG_PARENT in r.data.tags]
    hashes = {config_hash(c) for c in expand(load_spec(spec))}
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children), out
    assert {r.data.tags["config_hash"] for r in children} == hashes
    assert len({r.data.tags[TAG_PARENT] for r in children}) == 1  # one sweep, one parent
    assert all("ndcg_at_10" in r.data.metrics for r in children)
    assert {r.data.params["params.k1"] for r in children} == {"0.9", "1.2"}
    # the tasks ran in Ray worker processes, not in the driver
    assert all(int(r.data.tags["sweep.pid"]) != proc.pid for r in children)
