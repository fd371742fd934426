"""Speed of lab.metrics.evaluate against ranx, in the same process, on the same seeded data.

Data: 10,000 queries x 100 retrieved documents (distinct random scores), graded qrels (grades 0..3, about
half of a query's judged documents among its hits). Metrics: those of DEFAULT_METRICS that ranx also computes
(``judged@k`` is ours alone), the same names in ranx; both sides time the same list.

Printed:
- ranx first call in this process (numba compile, or loading numba's on-disk cache when an earlier process
  compiled it), then ranx warmed up: evaluate on prebuilt ranx objects, and total from dicts (Qrels/Run
  construction + evaluate);
- ours: total from Qrels/Run dicts (arrays + metrics + DataFrame), and the array part / metric part alone;
- the ratios, the largest per-query difference against ranx, and the bootstrap timing (1,000 resamples x
  10,000 queries x 35 metrics) and the paired_test timing (10,000 resamples of each kind).
Timings are the best of --repeat runs. Usage: python benchmarks/metrics_speed.py [--queries N] [--depth K]
[--smoke] (``--smoke``: 20 queries, one metric, one repeat, 20 resamples: checks that the script runs; its figures
mean nothing).
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

from lab.data.types import Qrels, Run
from lab.metrics import DEFAULT_METRICS, bootstrap_ci, evaluate, paired_test
from lab.metrics.ranking import build_arrays, compute_metrics

#: The metric names ranx computes (ranx.metrics); DEFAULT_METRICS names outside them (judged@k) are left out.
RANX_METRICS = frozenset({"hits", "hit_rate", "precision", "recall", "f1", "r-precision", "bpref", "rbp", "mrr", "map",
                          "dcg", "dcg_burges", "ndcg", "ndcg_burges"})


def make_data(n_queries: int, depth: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_docs = 1_000_000
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for i in range(n_queries):
        qid = f"q{i}"
        docs = rng.choice(n_docs, size=depth + 10, replace=False)
        judged = docs[depth // 2 : depth // 2 + int(rng.integers(1, 21))]  # half of them within the hits
        qrels[qid] = {f"doc{d}": int(g) for d, g in zip(judged, rng.integers(0, 4, size=len(judged)), strict=False)}
        run[qid] = {f"doc{d}": float(s) for d, s in zip(rng.permutation(docs[:depth]), rng.random(depth), strict=False)}
    return qrels, run


def best_of(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script runs (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.queries, args.repeat = 20, 1
    metrics = [m for m in DEFAULT_METRICS if m.split("@")[0] in RANX_METRICS]
    if args.smoke:  # ranx compiles each metric with numba on first use: one keeps the smoke run short
        metrics = ["ndcg@10"]

    t = time.perf_counter()
    qrels_d, run_d = make_data(args.queries, args.depth)
    print(f"data: {args.queries} queries x {args.depth} hits, {len(metrics)} metrics "
          f"(built in {time.perf_counter() - t:.1f} s); cpus: {os.cpu_count()}")

    import ranx  # imported here so that its import time is not counted in ours

    def ranx_objects():
        return ranx.Qrels(qrels_d), ranx.Run(run_d)

    def ranx_eval(objs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ranx.evaluate(objs[0], objs[1], metrics)

    t = time.perf_counter()
    objs = ranx_objects()
    ranx_eval(objs)
    ranx_first = time.perf_counter() - t
    ranx_build, objs = best_of(ranx_objects, args.repeat)
    ranx_only, ranx_means = best_of(lambda: ranx_eval(objs), args.repeat)
    ranx_total = ranx_build + ranx_only

    qrels, run = Qrels(qrels_d), Run(run_d)
    ours_total, ev = best_of(lambda: evaluate(qrels, run, metrics), args.repeat)
    ours_arrays, arrays = best_of(lambda: build_arrays(qrels, run, max(int(m.split("@")[1]) for m in metrics)),
                                  args.repeat)
    ours_metrics, _ = best_of(lambda: compute_metrics(arrays, metrics), args.repeat)
    # ranx scores queries without a relevant document as 0, we exclude them: compare query by query
    ranx_per_query = objs[1].scores
    diff = max(float(np.max(np.abs(ev.per_query[m].to_numpy() - [ranx_per_query[m][q] for q in ev.per_query.index])))
               for m in metrics)

    print(f"ranx first call (compile or cache load + build + evaluate): {ranx_first:8.3f} s")
    print(f"ranx warm: build Qrels/Run {ranx_build:.3f} s + evaluate {ranx_only:.3f} s = {ranx_total:8.3f} s")
    print(f"ours:      build arrays    {ours_arrays:.3f} s + metrics  {ours_metrics:.3f} s;  evaluate() total "
          f"{ours_total:8.3f} s")
    print(f"ratio ranx warm total / ours total:        {ranx_total / ours_total:6.2f}x (>1: ours faster)")
    print(f"ratio ranx evaluate only / ours total:     {ranx_only / ours_total:6.2f}x")
    print(f"ratio ranx first call / ours total:        {ranx_first / ours_total:6.2f}x")
    print(f"largest per-query difference vs ranx:      {diff:.2e} "
          f"({ev.n_queries} queries; {len(ev.excluded)} without a relevant document excluded)")

    n_res = 20 if args.smoke else 1000
    boot, ci = best_of(lambda: bootstrap_ci(ev.per_query, n_resamples=n_res, seed=0), args.repeat)
    print(f"bootstrap_ci: {n_res} resamples x {ev.n_queries} queries x {len(ci)} metrics: {boot:.3f} s")
    a = ev.per_query["ndcg@10"].to_numpy()
    b = np.clip(a + np.random.default_rng(1).normal(0, 0.05, a.size), 0, 1)
    n_paired = 20 if args.smoke else 10_000
    paired, _ = best_of(lambda: paired_test(a, b, n_resamples=n_paired, seed=0), 1)
    print(f"paired_test: {n_paired:,} bootstrap + {n_paired:,} sign-flip resamples x {a.size} queries: {paired:.3f} s")


if __name__ == "__main__":
    main()
