"""`lab report` (one self-contained HTML report) and `lab gate` (the CI regression gate).

Wired into lab.cli.main through SUBCOMMAND_MODULES: ``add_parsers(sub)`` adds both subcommands.
"""
from __future__ import annotations

import sys
import warnings

from lab.analysis.compare import latest_experiment
from lab.analysis.gate import GateWarning, gate_files, report_json
from lab.analysis.report import report_experiment, report_files
from lab.cli.options import add_correction_option, add_tracking_root, non_negative_int, positive_int, split_names
from lab.core.errors import ConfigError
from lab.tracking.store import existing_store, read_only


def cmd_report(args) -> int:
    common = {"metrics": split_names(args.metric), "reference": args.baseline, "n_worst": args.worst,
              "alpha": args.alpha, "seed": args.seed, "title": args.title, "correction": args.correction}
    if not 0 < args.alpha < 1:
        raise ConfigError(f"--alpha {args.alpha}: the significance level must lie strictly between 0 and 1, e.g. 0.05")
    if args.files and args.experiment:
        raise ConfigError("pass result files or --experiment, not both")
    if args.files and args.human_qrels:
        raise ConfigError("--human-qrels: only with --experiment (the runs' logged ranked lists are rescored)")
    if args.files:
        res = report_files(args.files, out=args.out, qrels=args.qrels, dataset=args.dataset, split=args.split,
                           **common)
        where = "not logged to MLflow (file inputs)"
    else:
        existing_store(args.tracking_root)
        experiment = args.experiment or latest_experiment(args.tracking_root)
        frozen = not args.no_log and read_only(args.tracking_root)  # read the store, write only the HTML
        res = report_experiment(experiment, tracking_root=args.tracking_root, out=args.out, parent_run_id=args.parent,
                                log_to_mlflow=not (args.no_log or frozen), dataset=args.dataset,
                                human_qrels=args.human_qrels,
                                target_halfwidth=args.target_halfwidth, **common)
        where = (f"logged as report.html of MLflow run {res.report_run_id} in "
                 f"experiment {experiment!r}") if res.report_run_id else \
            ("not logged (the store is read-only)" if frozen else "not logged (--no-log)")
    print(f"report written to {res.path} ({res.size / 1024:.0f} KiB, {len(res.leaderboard)} runs, built in "
          f"{res.seconds:.1f} s); {where}")
    corrections = res.leaderboard.attrs.get("corrections") or {}
    for m, line in corrections.items():
        print(f"{m}: {line}")
    for n in res.notes:
        print(f"note: {n}")
    return 0


def cmd_gate(args) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GateWarning)  # printed with the table
        rep = gate_files(args.baseline, args.current, metrics=split_names(args.metric), qrels=args.qrels,
                         rel_threshold=args.rel_threshold, max_drop=args.max_drop, relative=args.relative,
                         significant_only=args.significant_only, alpha=args.alpha, n_resamples=args.resamples,
                         seed=args.seed)
    if args.json:
        print(report_json(rep))
        for w in rep.warnings:
            print(f"warning: {w}", file=sys.stderr)
    else:
        print(rep.table())
    return rep.exit_code


def add_parsers(sub) -> None:
    """Add the `report` and `gate` subcommands to an argparse subparsers object."""
    r = sub.add_parser("report", help="write one self-contained HTML report of an MLflow experiment or result files",
                       description="Leaderboard with CIs and paired tests (raw and adjusted p, wins/ties/losses), "
                       "charts, quality vs latency with its Pareto front, per-query distributions, worst queries "
                       "and a diagnosis, in one offline HTML file. "
                       "From an experiment the report is also logged to MLflow as report.html of a new run.")
    r.add_argument("files", nargs="*", help="result files: `lab run --json` output, per-query tables, TREC runs "
                   "(files sharing a name before their suffixes are one run)")
    r.add_argument("--experiment", help="MLflow experiment (default: the one with the latest run, when no files)")
    add_tracking_root(r)
    r.add_argument("--parent", metavar="RUN_ID", help="only the children of this sweep parent run")
    r.add_argument("--out", default="report.html", help="HTML file to write (default report.html)")
    r.add_argument("--metric", nargs="+", help="metrics to report, first one ranks (default ndcg@10 recall@100 mrr@10)")
    r.add_argument("--dataset", help="BEIR dataset folder for the worst queries (default: the runs' dataset)")
    r.add_argument("--split", default="test", help="split of the dataset (file inputs; MLflow runs say their own)")
    r.add_argument("--human-qrels", metavar="FILE",
                   help="with --experiment: people's grades on a uniform random sample of the queries (qrels file, or "
                        "a set from `lab testset import-annotation`): adds the prediction-powered leaderboard")
    r.add_argument("--target-halfwidth", type=float, default=0.02, metavar="H",
                   help="with --human-qrels: the CI half-width the top-two difference should reach (default 0.02)")
    r.add_argument("--qrels", help="qrels to evaluate TREC run files with")
    r.add_argument("--baseline", help="reference run (label or run id) for the paired tests (default: the best)")
    r.add_argument("--worst", type=positive_int, default=10, help="worst queries shown (default 10)")
    r.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    add_correction_option(r, "the reference run")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--title")
    r.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    r.set_defaults(func=cmd_report)

    g = sub.add_parser("gate", help="regression gate: exit 1 when a metric drops more than allowed vs a baseline",
                       description="Exit 0 when every gated metric holds, 1 when one drops more than allowed, 2 on bad "
                       "input. BASE/CUR: `lab evaluate --json` / `lab run --json` output "
                       "(X.per_query.csv beside X.json is picked up), per-query tables, or TREC runs with --qrels.")
    g.add_argument("--baseline", required=True, metavar="BASE")
    g.add_argument("--current", required=True, metavar="CUR")
    g.add_argument("--metric", nargs="+", help="metrics to gate (default ndcg@10)")
    g.add_argument("--max-drop", type=float, default=0.02, help="largest drop allowed (default 0.02)")
    g.add_argument("--relative", action="store_true", help="--max-drop is a fraction of the baseline value")
    g.add_argument("--qrels", help="qrels for TREC run inputs")
    g.add_argument("--rel-threshold", type=non_negative_int, default=1)
    g.add_argument("--significant-only", action="store_true",
                   help="fail only on drops that are also significant (paired test; needs per-query data)")
    g.add_argument("--alpha", type=float, default=0.05)
    g.add_argument("--resamples", type=positive_int, default=10000)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--json", action="store_true", help="print the outcome as JSON")
    g.set_defaults(func=cmd_gate)
