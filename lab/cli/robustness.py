"""`lab robustness`: the strategies on a clean BEIR set and on its perturbed variants (made when missing), the
table of metric drops with paired CIs, logged to MLflow; a thin command over lab.analysis.robustness."""
from __future__ import annotations

import os
from pathlib import Path

from lab.analysis.robustness import DEFAULT_EXPERIMENT, STRATEGIES, make_variants, run_robustness, write_outputs
from lab.cli.options import add_tracking_root, positive_int
from lab.core.settings import parse_settings
from lab.retrievers.base import Context
from lab.testset.perturb import VARIANTS


def cmd_robustness(args) -> int:
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    params = parse_settings(args.set)
    ctx = Context(cache_dir=Path(args.cache_dir), progress=not args.no_progress, seed=args.seed)
    variants = args.variants
    if variants is None:
        names = [v for v in (args.make or ",".join(VARIANTS)).split(",") if v]
        variants = make_variants(args.dataset, Path(args.out) / "variants", names, split=args.split, seed=args.seed,
                                 progress=ctx.progress)
    rob = run_robustness(args.dataset, variants, strategies, params, split=args.split, k=args.k, ctx=ctx,
                         max_queries=args.max_queries, n_resamples=args.resamples, seed=args.seed,
                         log_to_mlflow=not args.no_log, tracking_root=args.tracking_root, experiment=args.experiment)
    files = write_outputs(rob, args.out)
    print(rob.format())
    print(f"\nwritten: {', '.join(str(f) for f in files)}")
    if rob.summary_run_id:
        print(f"MLflow: experiment {args.experiment!r}, summary run {rob.summary_run_id}")
    return 0


def add_parsers(sub) -> None:
    """``lab robustness``: perturb (when needed), run the strategies on clean + variants, print and log."""
    p = sub.add_parser("robustness", help="robustness table: strategies on clean vs perturbed variants",
                       description="Run strategies on a clean BEIR set and on its perturbed variants (lab testset "
                                   "perturb); print the metric drops with paired CIs; log to MLflow.")
    p.add_argument("--dataset", required=True, help="the clean BEIR dataset folder")
    p.add_argument("--variants", default=None,
                   help="folder of variant folders (default: make them under OUT/variants with --make)")
    p.add_argument("--make", default=None, help="variants to make when --variants is not given "
                                                "(default: typo,synonym,distractor,unanswerable)")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--set", action="append", metavar="STRATEGY.KEY=VALUE", help="strategy params, e.g. bm25.k1=1.2")
    p.add_argument("--split", default="test")
    p.add_argument("-k", type=positive_int, default=100)
    p.add_argument("--max-queries", type=positive_int, default=None)
    p.add_argument("--resamples", type=positive_int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/robustness", help="folder for the table, CSVs and figures")
    add_tracking_root(p)
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
    p.add_argument("--no-log", action="store_true", help="do not log to MLflow")
    p.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_robustness)
