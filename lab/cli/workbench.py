"""`lab sweep` (also `--halving` and `--scheduled`), `lab compare` and `lab ui`: thin commands over lab.workbench.sweep,
lab.workbench.halving, lab.workbench.schedule, lab.analysis.compare and the MLflow UI (lab.tracking.ui).

Wired into lab.cli.main through SUBCOMMAND_MODULES: ``add_parsers(sub)`` adds the three subcommands.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

from lab.analysis.compare import (
    CompareWarning,
    experiment_leaderboard,
    format_leaderboard,
    format_leaderboard_by,
    latest_experiment,
    leaderboard_by,
    plot_leaderboard,
    query_groups,
    runs_overlap,
)
from lab.analysis.gate import DEFAULT_MAX_DROP
from lab.analysis.leaderboard import to_records
from lab.analysis.ppi import TARGET_HALFWIDTH, add_ppi, check_ppi_options, check_recorded_ppi, ppi_lines
from lab.analysis.trust import trust_lines
from lab.cli.options import add_correction_option, add_tracking_root, positive_int, split_names
from lab.core.atomic import atomic_path, write_text_atomic
from lab.core.errors import ConfigError
from lab.core.net import exposure_warning
from lab.core.paths import existing_or_repo_path
from lab.metrics.overlap import P
from lab.metrics.ranking import parse_metric
from lab.tracking.faults import UNLOGGED_ENV
from lab.tracking.store import client, existing_store
from lab.tracking.ui import UI_ENV, base_url, runs_url, ui_command, ui_links
from lab.workbench.halving import run_halving_sweep
from lab.workbench.monitoring import parse_publish, publish
from lab.workbench.schedule import compare_records, previous_pair, run_scheduled
from lab.workbench.spec_env import check_spec_env
from lab.workbench.sweep import run_sweep
from lab.workbench.sweep.options import cli_fields


def cmd_sweep(args) -> int:
    check_spec_env(args.spec, args.allow_env or ())
    if args.output_dir:  # results that cannot be logged go there, for this process and its notebooks
        os.environ.setdefault(UNLOGGED_ENV, str(Path(args.output_dir).resolve() / "unlogged"))
    if args.human_qrels:  # checked before any work
        if args.scheduled or args.halving:
            raise ConfigError("--human-qrels: not with --scheduled or --halving; `lab compare --human-qrels` reads "
                              "their runs")
        check_ppi_options(args.human_qrels, TARGET_HALFWIDTH)
    if args.halving:
        if args.scheduled:
            raise ConfigError("--halving and --scheduled: choose one (halving explores a grid; a scheduled sweep "
                              "runs every config)")
        return _halving(args)
    gate_opts = [o for o, v in (("--metric", args.metric), ("--max-drop", args.max_drop), ("--relative", args.relative),
                                ("--significant-only", args.significant_only), ("--alpha", args.alpha),
                                ("--schedule", args.schedule), ("--report-dir", args.report_dir)) if v]
    if gate_opts and not args.scheduled:
        raise ConfigError(f"{', '.join(gate_opts)}: only with --scheduled (they set the comparison with the previous "
                          "scheduled sweep)")
    common = {**_sweep_option_values(args), "tracking_root": args.tracking_root, "publish": _publish_args(args)}
    if args.scheduled and not args.dry_run:
        common.pop("dry_run")
        common.pop("holdout")
        return _scheduled(args, common)
    rep = run_sweep(args.spec, **common)
    if not args.dry_run:
        print(rep.summary())
        if rep.selection_error:
            print(f"error: the held-out check of the winner failed: {rep.selection_error}", file=sys.stderr)
        for o in rep.outcomes:
            if o.status not in ("FINISHED", "SKIPPED"):
                print(f"  [{o.index}] {o.label}: {o.status} {o.error} (run {o.run_id}, notebook {o.notebook})")
        if rep.publish_error:
            print(f"error: publishing metrics failed: {rep.publish_error}", file=sys.stderr)
        if rep.n_finished + rep.count("SKIPPED"):
            _print_sweep_board(rep.experiment, args.tracking_root, human_qrels=args.human_qrels)
        if rep.experiment_id:
            print(f"runs in the MLflow UI (`lab ui`): {runs_url(rep.experiment_id, cl=client(args.tracking_root))}")
    return 0 if (args.dry_run or rep.ok) else 1


def _board_text(df, experiment: str, metric: str, long_labels: bool = False) -> str:
    """The text leaderboard `lab compare` prints: a header line, the trust lines (lab.analysis.trust), the table
    (rows named by their short labels, lab.analysis.labels; ``long_labels``: the whole ``key=value`` labels)."""
    lines = [f"experiment {experiment!r}, {len(df)} finished runs, by {metric}"]
    if df.attrs.get("trust"):
        lines += trust_lines(df.attrs["trust"], metric)
    ppi = (df.attrs.get("trust") or {}).get("ppi")
    return "\n".join([*lines, format_leaderboard(df, long_labels=long_labels), *(ppi_lines(ppi) if ppi else [])])


def _print_sweep_board(experiment: str, tracking_root, metric: str = "ndcg@10", human_qrels: str | None = None) -> None:
    """After a sweep: the leaderboard `lab compare --experiment EXPERIMENT` would print (its warnings on stderr);
    with ``human_qrels`` the prediction-powered one too (lab.analysis.ppi)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)
        df = experiment_leaderboard(experiment, metric=metric, tracking_root=tracking_root)
    if df.empty:
        return
    if human_qrels:
        add_ppi(df, human_qrels, tracking_root)
    for note in df.attrs.get("warnings", []):
        print(f"warning: {note}", file=sys.stderr)
    print(f"\n{_board_text(df, experiment, metric)}\n(the same as `lab compare --experiment {experiment}`; "
          "--metric ranks by another metric)")


def _halving(args) -> int:
    """``lab sweep SPEC --halving``: print the rungs and the winner; ``--json FILE`` writes the report."""
    if args.eta < 2:
        raise ConfigError(f"--eta {args.eta}: must be an integer >= 2")
    try:
        metric = (args.metric or ["ndcg@10"])[0] if isinstance(args.metric, (list, tuple)) else (args.metric
                                                                                                 or "ndcg@10")
        parse_metric(metric)
    except ValueError as e:
        raise ConfigError(f"--metric {metric!r}: {e}") from None
    out = run_halving_sweep(args.spec, metric=metric, eta=args.eta, min_queries=args.min_queries,
                            compare_full=args.compare_full, tracking_root=args.tracking_root, holdout=args.holdout)
    if args.json:
        write_text_atomic(args.json, json.dumps(out, indent=1))
        print(f"report: {args.json}")
    return 0


def _scheduled(args, common) -> int:
    out = run_scheduled(args.spec, schedule=args.schedule, metrics=split_names(args.metric),
                        max_drop=DEFAULT_MAX_DROP if args.max_drop is None else args.max_drop,
                        relative=args.relative, significant_only=args.significant_only,
                        alpha=0.05 if args.alpha is None else args.alpha, report_dir=args.report_dir, **common)
    print(out.sweep.summary())
    for f in out.files:
        print(f"wrote {f}")
    if out.exit_code:
        print(f"error: {out.message}", file=sys.stderr)
    else:
        print(out.message)
    return out.exit_code


def cmd_compare(args) -> int:
    metrics = split_names(args.metric) or ["ndcg@10"]
    existing_store(args.tracking_root)
    experiment = args.experiment or latest_experiment(args.tracking_root)
    if args.previous:
        if args.correction:
            raise ConfigError("--correction: only for the leaderboard; --previous compares two scheduled sweeps "
                              "config by config (lab gate's rule)")
        return _compare_previous(args, experiment, metrics)
    if args.alpha is not None and not 0 < args.alpha < 1:
        raise ConfigError(f"--alpha {args.alpha}: the significance level must lie strictly between 0 and 1, e.g. 0.05")
    groups = query_groups(args.dataset, args.by) if args.by and args.dataset else None  # checked before any work
    if args.human_qrels:  # checked before any work: the file, its grades, at least 10 queries, the half-width
        check_ppi_options(args.human_qrels, args.target_halfwidth)
    # without --human-qrels, the grades people gave that the --dataset set keeps (import-annotation --record-in)
    kept = None if args.human_qrels else check_recorded_ppi(args.dataset, args.target_halfwidth)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)  # printed with the table
        df = experiment_leaderboard(experiment, metric=metrics[0], tracking_root=args.tracking_root,
                                    parent_run_id=args.parent,
                                   alpha=0.05 if args.alpha is None else args.alpha, correction=args.correction)
    if args.by and groups is None and not df.empty:
        groups = query_groups(existing_or_repo_path(f"data/{df['dataset'].iloc[0]}"), args.by)
    if (args.human_qrels or kept is not None) and not df.empty:
        add_ppi(df, args.human_qrels, args.tracking_root, args.dataset, args.target_halfwidth)
    for note in df.attrs.get("warnings", []):
        print(f"warning: {note}", file=sys.stderr)
    info = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON alone
    if args.json:
        keys = ("experiment", "metric", "alpha", "best_run_id", "correction", "n_comparisons", "correction_note",
                "warnings")
        extra = {"overlap": to_records(runs_overlap(df, args.tracking_root))} if args.overlap and len(df) > 1 else {}
        print(json.dumps({**{k: df.attrs.get(k) for k in keys}, "trust": df.attrs.get("trust"),
                          "rows": to_records(df), **extra}, indent=2))
    else:
        print(_board_text(df, experiment, metrics[0], args.long_labels))
        if args.overlap and len(df) > 1:
            print(f"\nhow the rankings differ, without labels: rank-biased overlap (p = {P}) and top-10 Jaccard "
                  "per pair of runs, mean over the queries both answered (most different first)")
            print(runs_overlap(df, args.tracking_root).to_string(index=False, float_format="{:.3f}".format))
    if args.by and not df.empty:
        by = leaderboard_by(df, groups, args.by, tracking_root=args.tracking_root)
        print(format_leaderboard_by(by, long_labels=args.long_labels), file=info)
    if args.png and not df.empty:
        print(f"chart written to {plot_leaderboard(df, args.png)}", file=info)
    if args.csv:
        with atomic_path(args.csv) as tmp:
            df.to_csv(tmp, index=False)
        print(f"table written to {args.csv}", file=info)
    opts = _publish_args(args)
    if opts:
        opts = parse_publish({**opts, "metrics": opts.get("metrics") or [metrics[0]]}, "lab compare")
        done = publish(experiment, prometheus=opts.get("prometheus"), pushgateway=opts.get("pushgateway"),
                       job=opts.get("job", "raglab"), metrics=opts["metrics"], tracking_root=args.tracking_root,
                       parent_run_id=args.parent)
        print(f"metrics {', '.join(opts['metrics'])} published to {', '.join(done)}", file=info)
    return 0


def _compare_previous(args, experiment: str, metrics: list[str]) -> int:
    """`lab compare --previous`: the latest scheduled sweep against the one before it, by lab gate's rule."""
    cl = client(args.tracking_root)
    prev, cur = previous_pair(cl, experiment, args.schedule)
    comp = compare_records(prev, cur, metrics, DEFAULT_MAX_DROP if args.max_drop is None else args.max_drop,
                           args.relative, args.significant_only, 0.05 if args.alpha is None else args.alpha,
                           tracking_root=args.tracking_root, cl=cl)
    if args.json:
        print(json.dumps(comp.to_dict(), indent=2))
    else:
        print(comp.table())
    return comp.exit_code


def _publish_args(args) -> dict | None:
    """The --prometheus / --pushgateway / --push-job / --publish-metrics options as a publish mapping (None: none
    given)."""
    opts = {"prometheus": str(Path(args.prometheus).resolve()) if args.prometheus else None,  # relative to the cwd
            "pushgateway": args.pushgateway, "job": args.push_job,
            "metrics": split_names(args.publish_metrics)}
    opts = {k: v for k, v in opts.items() if v}
    return opts or None


def _add_publish_options(p, what: str, default: str) -> None:
    p.add_argument("--prometheus", metavar="FILE",
                   help=f"write {what} as Prometheus text (atomically; e.g. into the node exporter's textfile folder)")
    p.add_argument("--pushgateway", metavar="URL", help=f"push {what} to a Prometheus Pushgateway")
    p.add_argument("--push-job", help="Pushgateway job name (default raglab)")
    p.add_argument("--publish-metrics", nargs="+", metavar="METRIC", help=f"metrics to publish (default {default})")


def _add_gate_options(p, metric: bool = True) -> None:
    """The options of `lab gate` that set the rule (same names, same meaning)."""
    if metric:
        p.add_argument("--metric", nargs="+", metavar="METRIC", help="metrics gated (default ndcg@10)")
    p.add_argument("--max-drop", type=float, help="largest drop allowed (default 0.02)")
    p.add_argument("--relative", action="store_true", help="--max-drop is a fraction of the previous value")
    p.add_argument("--significant-only", action="store_true",
                   help="fail only on drops that are also significant (paired test)")
    p.add_argument("--alpha", type=float, help="significance level (default 0.05)")


def cmd_ui(args) -> int:
    cmd = ui_command(args.tracking_root, args.host, args.port)
    line = " ".join(f"{k}={v}" for k, v in UI_ENV.items()) + " " + shlex.join(cmd)
    if args.print:
        print(line)
        return 0

    warning = exposure_warning(args.host, args.port, "the MLflow UI and its REST API (every run, param, metric and "
                               "artifact of the store, read and write, without a login)")
    if warning:
        print(warning, file=sys.stderr, flush=True)
    links = ui_links(args.tracking_root, args.host, args.port, args.experiment)
    print(f"{line}\nMLflow UI on {base_url(args.host, args.port)} (Ctrl-C to stop); runs of each experiment:",
          flush=True)
    print("\n".join(links) if links else "  (no experiments yet: run `lab sweep params/smoke.yaml`)", flush=True)
    try:
        return subprocess.call(cmd, env={**os.environ, **UI_ENV})
    except KeyboardInterrupt:
        return 0


_FLAG_TYPES = {"positive_int": positive_int, "float": float}


def _add_sweep_options(parser) -> None:
    """One flag per field of SweepOptions that has one (lab.workbench.sweep.options): its name, help, type,
    choices and default come from the field."""
    for f in cli_fields():
        meta = f.metadata
        if isinstance(f.default, bool):
            parser.add_argument(meta["flag"], dest=f.name, action="store_false" if meta.get("invert") else "store_true",
                                help=meta.get("flag_help", meta["help"]))
            continue
        extra = {k: meta[k] for k in ("choices", "metavar") if k in meta}
        parser.add_argument(meta["flag"], dest=f.name, type=_FLAG_TYPES.get(meta.get("type", ""), str),
                            default=f.default, help=meta["help"], **extra)


def _sweep_option_values(args) -> dict:
    """The SweepOptions keywords ``lab sweep`` was given (every field with a flag)."""
    return {f.name: getattr(args, f.name) for f in cli_fields()}


def add_parsers(sub) -> None:
    """Add the `sweep`, `compare` and `ui` subcommands to an argparse subparsers object."""
    s = sub.add_parser("sweep", help="run a params/*.yaml sweep: one notebook execution and MLflow run per config")
    s.add_argument("spec", help="a sweep spec, e.g. params/chunk_size_grid.yaml")
    s.add_argument("--allow-env", action="append", metavar="NAME", help="an environment variable the spec may name "
                   "(in a *_env key, e.g. publish.headers_env) besides RAGLAB_* ones; repeat for several")
    _add_sweep_options(s)
    add_tracking_root(s)
    s.add_argument("--human-qrels", metavar="FILE",
                   help="people's grades on a uniform random sample of the queries: the leaderboard printed after the "
                        "sweep adds the prediction-powered one (as `lab compare --human-qrels`)")
    s.add_argument("--halving", action="store_true",
                   help="successive halving over seeded query slices instead of every config on every query "
                        "(in this process, no notebooks; the outcome and the winner's result on every query are "
                        "logged to MLflow; see --eta, --min-queries, --compare-full)")
    s.add_argument("--eta", type=positive_int, default=2, help="halving: keep 1/eta of the configs per rung (>= 2)")
    s.add_argument("--min-queries", type=positive_int, default=20, help="halving: queries of the first slice")
    s.add_argument("--compare-full", action="store_true", help="halving: also run the full grid and compare winners")
    s.add_argument("--json", metavar="FILE", help="halving: write the report (rungs, scores, saved) as JSON")
    _add_publish_options(s, "the sweep's headline metrics (overrides the spec's publish key)",
                         "the spec's, else ndcg@10 recall@10 recall@100 mrr@10")
    g = s.add_argument_group("scheduled sweeps (cron, CI schedule)")
    g.add_argument("--scheduled", action="store_true",
                   help="tag this sweep as scheduled, compare each config with the previous scheduled sweep, write "
                   "the report, publish, and exit 1 when a metric dropped more than allowed")
    g.add_argument("--schedule", metavar="NAME", help="name of the schedule (default: the sweep's name)")
    _add_gate_options(g)
    g.add_argument("--report-dir", metavar="DIR",
                   help="where the comparison and report.html go (default results/scheduled/<schedule>)")
    s.set_defaults(func=cmd_sweep)

    c = sub.add_parser("compare", help="leaderboard of an experiment's runs with CIs and paired tests")
    c.add_argument("--experiment", help="MLflow experiment (default: the one with the latest run)")
    c.add_argument("--metric", nargs="+", metavar="METRIC",
                   help="ranks the leaderboard (default ndcg@10); with --previous: the metrics gated")
    c.add_argument("--parent", help="only the child runs of this sweep parent run id")
    c.add_argument("--previous", action="store_true",
                   help="compare the latest scheduled sweep with the one before it (paired tests, lab gate's rule; "
                   "exit 1 when a metric dropped more than allowed)")
    c.add_argument("--schedule", metavar="NAME", help="with --previous: the schedule (default: the latest one's)")
    _add_gate_options(c, metric=False)
    c.add_argument("--json", action="store_true",
                   help="print JSON: the leaderboard (rows with p_value, p_adjusted, wins/ties/losses; the correction; "
                   "warnings), or with --previous the comparison")
    add_correction_option(c)
    c.add_argument("--overlap", action="store_true",
                   help="also rank-biased overlap (p = 0.9) and top-10 Jaccard between each pair of runs' rankings: "
                        "where strategies differ, without labels (JSON key overlap)")
    c.add_argument("--by", choices=["tier", "type"],
                   help="also the metric per group of queries: tier (difficulty easy / medium / hard) or type "
                        "(question type), as `lab testset generate` records them in the queries' metadata")
    c.add_argument("--dataset", metavar="DIR",
                   help="with --by: the test set folder whose queries carry the groups; with --human-qrels: the set "
                        "the runs were scored on (default: the folder each run logged, else data/<the runs' dataset>); "
                        "without --human-qrels, people's grades this set keeps (import-annotation --record-in) add the "
                        "prediction-powered leaderboard")
    c.add_argument("--human-qrels", metavar="FILE",
                   help="people's grades on a uniform random sample of the queries (BEIR tsv or TREC qrels, or a set "
                        "from `lab testset import-annotation`): adds the prediction-powered leaderboard (judge "
                        "corrected by people, PPI++; JSON key trust.ppi); at least 10 queries")
    c.add_argument("--target-halfwidth", type=float, default=TARGET_HALFWIDTH, metavar="H",
                   help="with --human-qrels: the CI half-width the top-two difference should reach; prints how many "
                        "human-graded queries that needs (default 0.02)")
    c.add_argument("--long-labels", action="store_true",
                   help="name the rows by their whole config (strategy=rerank, params.model=...) instead of the short "
                        "labels of the charts (rerank · biencoder MiniLM · α 0.5); --json always holds the whole label")
    c.add_argument("--png", metavar="FILE", help="write a bar chart with CI error bars")
    c.add_argument("--csv", metavar="FILE", help="write the table as CSV")
    add_tracking_root(c)
    _add_publish_options(c, "the experiment's runs", "--metric")
    c.set_defaults(func=cmd_compare)

    u = sub.add_parser("ui", help="run the MLflow UI on the store (127.0.0.1:5000, one worker, no job runner)")
    add_tracking_root(u)
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=positive_int, default=5000)
    u.add_argument("--experiment", help="print only this experiment's link (default: every experiment)")
    u.add_argument("--print", action="store_true", help="only print the command")
    u.set_defaults(func=cmd_ui)
