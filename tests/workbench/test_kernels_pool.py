"""Pool workers (lab sweep --jobs N) prewarm their kernels as the single-process path does: each worker starts its
next config's kernel, with the notebook's imports done, while its current config runs."""
from __future__ import annotations

from pathlib import Path

from conftest import blank_store

from lab.tracking.store import client
from lab.workbench.sweep import run_sweep

NOTEBOOK = Path(__file__).parents[1] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"


def test_pool_workers_run_configs_on_prewarmed_kernels(tmp_path, pytestconfig):
    root = blank_store(tmp_path, pytestconfig)
    spec = tmp_path / "pool.yaml"
    spec.write_text(f"notebook: {NOTEBOOK}\ndataset: data/ord-qa\nexperiment: pool\n"
                    "fixed: {strategy: bm25, k: 10, max_queries: 5}\ngrid:\n  params.k1: [0.9, 1.2, 1.5]\n")
    rep = run_sweep(spec, jobs=2, tracking_root=root, output_dir=tmp_path / "out", progress=False, echo=None)
    assert rep.ok, rep.table().to_string()
    runs = [client(root).get_run(o.run_id) for o in rep.outcomes]
    assert [r.data.tags["sweep.kernel"] for r in runs] == ["prewarmed"] * 3
    assert all("ndcg_at_10" in r.data.metrics for r in runs)

