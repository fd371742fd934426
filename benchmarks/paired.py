"""Paired comparison of two per-query tables written by `lab run --per-query FILE` (same dataset, split, relevance).

Prints each side's mean with its 95% percentile-bootstrap CI and the paired difference A - B with its bootstrap CI
and two-sided sign-flip randomisation p-value (lab.metrics.stats), on the queries both scored.

    .venv/bin/python benchmarks/paired.py A.csv B.csv [--metric ndcg@10] [--seed 0]
    .venv/bin/python benchmarks/paired.py --smoke     # two seeded tables of its own: checks that it runs (CI)
"""
from __future__ import annotations

import argparse

import pandas as pd

from lab.metrics.stats import bootstrap_ci, paired_test


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", nargs="?")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--metric", default="ndcg@10")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="two seeded 30-query tables of its own (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.a, args.b = _smoke_tables(args.metric)
    elif not (args.a and args.b):
        ap.error("give two per-query tables A.csv B.csv (or --smoke)")
    a, b = (pd.read_csv(p, dtype={"query_id": str}).set_index("query_id")[args.metric] for p in (args.a, args.b))
    common = a.index.intersection(b.index)
    if len(common) != len(a) or len(common) != len(b):
        print(f"note: {len(a)} vs {len(b)} queries; compared on the {len(common)} both scored")
    a, b = a.loc[common], b.loc[common]
    for name, s in (("A", a), ("B", b)):
        ci = bootstrap_ci(s.to_frame(), seed=args.seed).set_index("metric").loc[args.metric]
        print(f"{name} {args.metric} {s.mean():.4f} [{ci['ci_low']:.3f}, {ci['ci_high']:.3f}]")
    t = paired_test(a, b, seed=args.seed)
    print(f"A - B {t['diff']:+.4f} [{t['ci_low']:+.3f}, {t['ci_high']:+.3f}], p={t['p_permutation']:.3g}, n={t['n']}")


def _smoke_tables(metric: str) -> tuple[str, str]:
    """Two per-query tables of 30 seeded queries in a temporary folder (``--smoke``: checks that the script runs)."""
    import tempfile
    from pathlib import Path

    import numpy as np

    folder = Path(tempfile.mkdtemp(prefix="paired-smoke-"))
    rng = np.random.default_rng(0)
    a = rng.random(30)
    paths = []
    for name, values in (("a", a), ("b", np.clip(a - 0.05 + rng.normal(0, 0.05, 30), 0, 1))):
        path = folder / f"{name}.csv"
        pd.DataFrame({"query_id": [f"q{i}" for i in range(30)], metric: values}).to_csv(path, index=False)
        paths.append(str(path))
    return paths[0], paths[1]


if __name__ == "__main__":
    main()
