"""What a repeated sweep costs against the first: cold caches, warm caches, and resume.

Runs one sweep spec (default params/smoke.yaml: BM25 and dense on 10 ORD-QA queries) three times, each time
through the real engine (Papermill executions, MLflow runs), with a fresh embedding cache (LAB_CACHE_DIR) in a
temporary folder:
  cold    new tracking store, empty cache: every config executes and encodes
  warm    another new store, the cache the cold sweep filled: every config executes again, encodes nothing
  resume  the warm store again: every config has a FINISHED run, nothing executes
The stores are created before the clock starts (creating an MLflow DB runs its migrations, ~15 s here).
Prints wall seconds, the ratios to the cold sweep, and index_seconds per config as MLflow recorded it.

    .venv/bin/python benchmarks/sweep_cache.py [params/smoke.yaml]
    .venv/bin/python benchmarks/sweep_cache.py --smoke     # one BM25 config, 1 query: checks that it runs (CI)
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path


def main(spec: str = "params/smoke.yaml") -> None:
    from lab.core.paths import resolve_repo_path
    from lab.tracking.store import client
    from lab.workbench.sweep import run_sweep

    spec_path = resolve_repo_path(spec)
    with tempfile.TemporaryDirectory(prefix="sweep-cache-") as tmp:
        tmp = Path(tmp)
        os.environ["LAB_CACHE_DIR"] = str(tmp / "cache")  # inherited by the notebook kernels
        for store in ("cold", "warm"):
            client(tmp / store).search_experiments()
        timings, index_s = {}, {}
        for name, store in (("cold", "cold"), ("warm", "warm"), ("resume", "warm")):
            t0 = time.perf_counter()
            rep = run_sweep(spec_path, tracking_root=tmp / store, output_dir=tmp / f"out-{name}", progress=False,
                            echo=None)
            timings[name] = time.perf_counter() - t0
            if not rep.ok:
                raise SystemExit(f"{name} sweep failed:\n{rep.table().to_string()}")
            cl = client(tmp / store)
            index_s[name] = {o.label: cl.get_run(o.run_id).data.metrics.get("index_seconds", float("nan"))
                             for o in rep.outcomes if o.status == "FINISHED"}
            print(f"{name:>6}: {timings[name]:7.1f} s  ({rep.n_finished} executed, {rep.n_skipped} skipped)",
                  flush=True)
        cold = timings["cold"]
        print(f"\nwarm / cold   = {timings['warm'] / cold:.3f}")
        print(f"resume / cold = {timings['resume'] / cold:.4f}")
        print("\nindex_seconds per config (cold -> warm):")
        for label, secs in index_s["cold"].items():
            print(f"  {label:<30} {secs:8.2f} -> {index_s['warm'].get(label, float('nan')):8.2f}")


def smoke_spec() -> str:
    """``--smoke``: one BM25 config on 1 ORD-QA query, in a temporary spec (checks that the script runs, for CI)."""
    repo = Path(__file__).resolve().parents[1]
    path = Path(tempfile.mkdtemp(prefix="sweep-cache-smoke-")) / "smoke.yaml"
    path.write_text(f"notebook: {repo / 'notebooks' / '03_strategy_comparison.ipynb'}\ndataset: data/ord-qa\n"
                    "experiment: sweep_cache_smoke\nseed: 0\nfixed: {strategy: bm25, split: test, k: 10, "
                    "max_queries: 1}\n")
    return str(path)


if __name__ == "__main__":
    os.environ.setdefault("LAB_NO_PROGRESS", "1")
    main(*([smoke_spec()] if sys.argv[1:2] == ["--smoke"] else sys.argv[1:2]))
