"""Papermill overhead per sweep config: cold kernels (Papermill starts each) against prewarmed ones
(lab.workbench.kernels: the next config's kernel and its notebook's imports are started while the current runs).

Two sweeps of the same ``--configs`` configs in one process, each into its own fresh MLflow store: notebook 03 on
ORD-QA with BM25 (cheap, so what is left is mostly overhead), ``--max-queries`` queries, k1 varied so no config is
skipped as finished. Prints wall seconds per config and in all, and the ratio. A third figure times one bare
Papermill execution of notebook 03's parameters-and-imports cells (what every config pays before retrieval).

    nice -n 5 .venv/bin/python benchmarks/papermill_overhead.py [--configs 8] [--max-queries 10] [--smoke]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]


def spec_text(n: int, max_queries: int) -> str:
    k1s = ", ".join(f"{0.5 + 0.1 * i:.1f}" for i in range(n))
    return (f"notebook: {REPO / 'notebooks' / '03_strategy_comparison.ipynb'}\ndataset: data/ord-qa\n"
            f"experiment: papermill_overhead\nseed: 0\nfixed: {{strategy: bm25, k: 100, max_queries: {max_queries}, "
            f"progress: false}}\ngrid:\n  params.k1: [{k1s}]\n")


def one_sweep(spec: Path, work: Path, warm: bool) -> tuple[float, list[float]]:
    from lab.workbench.sweep import run_sweep

    root = work / ("warm" if warm else "cold") / "mlruns"
    t0 = time.perf_counter()
    rep = run_sweep(spec, tracking_root=str(root), output_dir=work / ("warm" if warm else "cold") / "out",
                    progress=False,
                    echo=None, summary=False, warm_kernels=warm)
    total = time.perf_counter() - t0
    assert rep.ok, [o.error for o in rep.outcomes if o.error]
    return total, [o.seconds for o in rep.outcomes]


def bare_execution(work: Path, repeat: int = 3) -> float:
    import json

    import papermill as pm

    from lab.workbench.kernels import notebook_imports
    from lab.workbench.sweep import default_kernel

    nb03 = REPO / "notebooks" / "03_strategy_comparison.ipynb"
    nb = json.loads(nb03.read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    nb["cells"] = [first, {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                           "source": notebook_imports(nb03)}]
    path = work / "imports_only.ipynb"
    path.write_text(json.dumps(nb))
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        pm.execute_notebook(str(path), str(work / f"imports_only_{i}.ipynb"), kernel_name=default_kernel(),
                            progress_bar=False, log_output=False, cwd=str(REPO / "notebooks"))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=8)
    ap.add_argument("--max-queries", type=int, default=10)
    ap.add_argument("--smoke", action="store_true",
                    help="2 configs (prewarming needs two) of 1 query, one bare execution (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.configs, args.max_queries = 2, 1
    with tempfile.TemporaryDirectory(prefix="lab-pm-overhead-") as tmp:
        work = Path(tmp)
        spec = work / "overhead.yaml"
        spec.write_text(spec_text(args.configs, args.max_queries))
        repeat = 1 if args.smoke else 3
        bare = bare_execution(work, repeat)
        print(f"one Papermill execution of notebook 03's parameters + imports (kernel start, imports, write): "
              f"median of {repeat} {bare:.2f} s")
        cold_total, cold = one_sweep(spec, work, warm=False)
        warm_total, warm = one_sweep(spec, work, warm=True)
    print(f"{'kernels':<10} {'configs':>7} {'total s':>8} {'median s/config':>16} {'min':>6} {'max':>6}")
    for name, total, per in (("cold", cold_total, cold), ("prewarmed", warm_total, warm)):
        print(f"{name:<10} {len(per):>7} {total:>8.1f} {statistics.median(per):>16.2f} "
              f"{min(per):>6.2f} {max(per):>6.2f}")
    print(f"prewarmed / cold: total {warm_total / cold_total:.2f}x, per config (median) "
          f"{statistics.median(warm) / statistics.median(cold):.2f}x; saved {cold_total - warm_total:.1f} s over "
          f"{args.configs} configs ({(cold_total - warm_total) / args.configs:.2f} s a config)")


if __name__ == "__main__":
    main()
