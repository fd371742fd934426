"""Fusion variants of hybrid (bm25 + dense all-MiniLM-L6-v2) on one dataset, each paired against hybrid's RRF.

The two parts are run once each through run_experiment (real retrievers, latency per query measured); every
variant fuses the same two runs (depth 100) with lab.retrievers.fusion, as `lab run --strategy hybrid --set
fusion=... --set norm=...` does (tests/retrievers/test_fusion.py checks hybrid equals fusing its parts' runs). A
variant's
latency is the parts' latencies plus its own fusion time per query. "tuned" rows pick weights by 5-fold
cross-validation over the queries (lab.retrievers.fusion_cv, seed 0): every query is scored with weights tuned on
the other folds; the picked weights per fold are printed.

Each row: nDCG@10 with its 95% percentile-bootstrap CI, Recall@100, P50 latency, and the paired difference to
hybrid RRF (bootstrap CI, two-sided sign-flip randomisation p; lab.metrics.compare).

    .venv/bin/python benchmarks/fusion_variants.py --dataset data/ord-qa [--seed 0] [--smoke: 20 queries, 2 folds]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

from lab.data.types import Run
from lab.experiment.run import load, run_experiment, split_queries
from lab.metrics import bootstrap_ci, compare, evaluate
from lab.retrievers import Context
from lab.retrievers.fusion import fuse
from lab.retrievers.fusion_cv import tune_fusion

METRICS = ["ndcg@10", "recall@100"]
VARIANTS = [("rrf", None, None), ("weighted", "minmax", None), ("weighted", "zscore", None),
            ("combsum", "minmax", None), ("combsum", "zscore", None), ("combsum", "sum", None),
            ("combsum", "max", None), ("combsum", "rank", None), ("combmnz", "minmax", None),
            ("combmnz", "rank", None), ("weighted", "minmax", "tuned"), ("rrf", None, "tuned"),
            ("combmnz", "minmax", "tuned")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="data/ord-qa")
    ap.add_argument("--split", default="test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="the first 20 queries, 2 folds: checks that it runs (CI)")
    args = ap.parse_args()
    max_queries = 20 if args.smoke else None
    if args.smoke:
        args.folds = 2
    ctx = Context(progress=False, seed=args.seed)
    ds = load(args.dataset, progress=False)
    _, qrels = split_queries(ds, args.split, max_queries)
    parts = {name: run_experiment(ds, name, {}, split=args.split, k=100, ctx=ctx, max_queries=max_queries)
             for name in ("bm25", "dense")}
    runs = [Run(r.run.scores, name=n) for n, r in parts.items()]
    base_latency = {q: sum(r.run.latency.get(q, 0.0) for r in parts.values()) for q in runs[0]}
    rows, evals = [], {}
    for fusion, norm, weights in VARIANTS:
        label = fusion + (f" {norm}" if norm else "") + (" tuned" if weights else "")
        t0 = time.perf_counter()
        if weights == "tuned":
            tuned = tune_fusion(runs, qrels, lambda rs, w, f=fusion, n=norm: fuse(rs, f, 60, w, n or "minmax", 100),
                                folds=args.folds, seed=args.seed)
            fused, extra = tuned.run, tuned.describe()["tuned_weights"]
            per_q = (time.perf_counter() - t0) / len(fused.scores) / len(tuned.grid)
        else:
            fused, extra = fuse(runs, fusion, 60, None, norm or "minmax", 100), None
            per_q = (time.perf_counter() - t0) / len(fused.scores)
        ev = evaluate(qrels, fused, METRICS)
        evals[label] = ev
        ci = bootstrap_ci(ev.per_query[["ndcg@10"]], seed=args.seed).set_index("metric")
        p50 = float(np.percentile([base_latency[q] + per_q for q in fused.scores], 50)) * 1000
        rows.append((label, ev.means["ndcg@10"], ci.loc["ndcg@10", "ci_low"], ci.loc["ndcg@10", "ci_high"],
                     ev.means["recall@100"], p50, extra))
    print(f"{ds.name} {args.split}: {len(qrels)} queries; parts bm25 nDCG@10 "
          f"{parts['bm25'].evaluation.means['ndcg@10']:.4f}, dense {parts['dense'].evaluation.means['ndcg@10']:.4f}")
    print("| fusion | nDCG@10 [95% CI] | R@100 | P50 latency | vs hybrid rrf (paired) |")
    print("|---|---|---|---|---|")
    for label, nd, lo, hi, r100, p50, _extra in rows:
        vs = ""
        if label != "rrf":
            c = compare(evals[label], evals["rrf"], "ndcg@10", seed=args.seed)
            vs = f"{c['diff']:+.4f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}], p={c['p_permutation']:.3g}"
        print(f"| {label} | {nd:.4f} [{lo:.3f}, {hi:.3f}] | {r100:.3f} | {p50:.0f} ms | {vs} |")
    for label, *_, extra in rows:
        if extra:
            print(f"{label}: weights (bm25, dense) per fold {extra}")


if __name__ == "__main__":
    main()
