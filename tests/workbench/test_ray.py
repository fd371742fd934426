"""The Ray executor: a two-config sweep of the fixture notebook as Ray tasks on a local Ray instance."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import blank_store

from lab.core.flat import config_hash
from lab.workbench.config import expand, load_spec
from lab.workbench.sweep import TAG_PARENT, run_sweep
from lab.tracking.store import client

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'raglab[ray]'")

NOTEBOOK = Path(__file__).parents[1] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"



def test_sweep_on_a_local_ray_instance(tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    spec = tmp_path / "ray.yaml"
    spec.write_text(f"notebook: {NOTEBOOK}\ndataset: data/ord-qa\nexperiment: on-ray\n"
                    "fixed: {strategy: bm25, k: 10, max_queries: 5}\ngrid:\n  params.k1: [0.9, 1.2]\n")
    assert not ray.is_initialized()
    rep = run_sweep(spec, executor="ray", jobs=2, root=root, output_dir=tmp_path / "out", progress=False, echo=None)
    assert not ray.is_initialized()  # the local instance started for the sweep is shut down after it
    assert rep.ok and [o.status for o in rep.outcomes] == ["FINISHED", "FINISHED"], rep.table().to_string()
    cl = client(root)
    hashes = {config_hash(c) for c in expand(load_spec(spec))}
    runs = [cl.get_run(o.run_id) for o in rep.outcomes]
    assert {r.data.tags["config_hash"] for r in runs} == hashes
    assert all(r.data.tags[TAG_PARENT] == rep.parent_run_id and "ndcg_at_10" in r.data.metrics for r in runs)
    assert {r.data.params["params.k1"] for r in runs} == {"0.9", "1.2"}
    # the tasks ran in Ray worker processes, not in this one
    import os

    assert all(int(r.data.tags["sweep.pid"]) != os.getpid() for r in runs)
