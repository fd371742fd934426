"""`lab evaluate` (a TREC run against qrels), `lab run` (one strategy, or a run made elsewhere, on a dataset split)
and `lab strategies` (what `--strategy` accepts): thin commands over lab.metrics, lab.experiment and lab.retrievers.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import lab
from lab.cli.options import add_tracking_root, checked_metrics, non_negative_int, positive_int, write_table
from lab.core.errors import ConfigError, TrackingError
from lab.core.flat import nan_to_none
from lab.core.settings import parse_settings
from lab.data.beir import read_qrels
from lab.data.trec import read_trec_run, write_trec_run
from lab.experiment.run import check_run_args, run_experiment
from lab.experiment.trec import trec_result
from lab.metrics import DEFAULT_METRICS, bootstrap_ci, evaluate
from lab.retrievers import available
from lab.retrievers.base import Context, declared_params
from lab.tracking.results import log_result
from lab.tracking.store import log_metrics


def _print_table(means: dict, cis=None, title: str = "") -> None:
    if title:
        print(title)
    width = max(len(k) for k in means) if means else 10
    for name, value in means.items():
        line = f"  {name:<{width}}  {value:.4f}"
        if cis is not None and name in cis.index:
            line += f"   [{cis.loc[name, 'ci_low']:.4f}, {cis.loc[name, 'ci_high']:.4f}]"
        print(line)


def cmd_evaluate(args) -> int:
    qrels = read_qrels(args.qrels)
    run = read_trec_run(args.run)
    ev = evaluate(qrels, run, checked_metrics(args.metrics) or DEFAULT_METRICS, rel_threshold=args.rel_threshold,
                  condensed=args.condensed)
    cis = bootstrap_ci(ev.per_query, n_resamples=args.resamples,
                       seed=args.seed).set_index("metric") if args.ci else None
    if args.per_query:
        write_table(ev.per_query, args.per_query)
    if args.json:
        out = {k: float(v) for k, v in ev.means.items()}
        if cis is not None:
            out["_ci"] = {m: [float(cis.loc[m, "ci_low"]), float(cis.loc[m, "ci_high"])] for m in cis.index}
        out["_meta"] = _meta(ev, run=str(args.run), qrels=str(args.qrels), condensed=bool(args.condensed))
        print(json.dumps(out, indent=2))
    else:
        _print_table(ev.means, cis, f"{args.run} ({ev.n_queries} queries evaluated"
                     + (f", {len(ev.excluded)} without relevant documents excluded" if ev.excluded else "")
                     + (", condensed lists: unjudged documents removed" if args.condensed else "") + ")")
    return 0


def _meta(ev, **extra) -> dict:
    return {"metrics_version": lab.METRICS_VERSION, "n_queries": ev.n_queries, "n_excluded": len(ev.excluded), **extra}


def cmd_run(args) -> int:
    if bool(args.strategy) == bool(args.from_trec):
        raise ConfigError("lab run: give --strategy NAME (run a strategy) or --from-trec RUN.trec (evaluate a run "
                          "made elsewhere), not both or neither")
    progress = not args.no_progress and not args.json
    if args.from_trec:
        if args.set:
            raise ConfigError("--set has no effect with --from-trec: the run was made elsewhere")
        res = trec_result(args.dataset, args.from_trec, split=args.split, k=args.k, name=args.name,
                          metrics=checked_metrics(args.metrics), max_queries=args.max_queries, progress=progress,
                          condensed=args.condensed)
    else:
        params = parse_settings(args.set)
        chunking = params.pop("chunking", None)
        check_run_args(args.strategy, params, k=args.k, max_queries=args.max_queries,
                       metrics=checked_metrics(args.metrics), relevance=args.relevance, chunking=chunking)
        ctx = Context(cache_dir=Path(args.cache_dir), progress=progress, seed=args.seed)
        res = run_experiment(args.dataset, args.strategy, params, split=args.split, k=args.k, chunking=chunking,
                             relevance=args.relevance, metrics=checked_metrics(args.metrics), ctx=ctx,
                             max_queries=args.max_queries, condensed=args.condensed)
    strategy = res.config["strategy"]
    if args.out:
        write_trec_run(res.run, args.out, tag=strategy.replace(":", "_"))
    if args.per_query:
        write_table(res.evaluation.per_query, args.per_query)

    run_id, log_error = None, None
    if args.mlflow or args.experiment:
        try:
            run_id = _log_run(res, args)
        except TrackingError as exc:  # the result was saved locally: print it, then say where and why
            log_error = exc
    if args.json:
        out = {k: nan_to_none(v) for k, v in res.summary().items()}  # NaN: not measured (an imported run)
        out["_meta"] = _meta(res.evaluation, **res.info, config=res.config)
        if run_id:
            out["_meta"]["mlflow_run_id"] = run_id
        print(json.dumps(out, indent=2, default=str))
    else:
        lat = res.latency
        _print_table(res.evaluation.means, None,
                     f"{strategy} on {res.info['dataset']}/{args.split}: {res.evaluation.n_queries} queries, "
                     f"relevance={res.info['relevance_mode']}"
                     + (", condensed lists: unjudged documents removed" if args.condensed else ""))
        for line in _diagnostic_lines(res.info.get("retriever") or {}):
            print(f"  {line}")
        if not math.isnan(lat["latency_p50_ms"]):  # latency was measured here (not for an imported run)
            print(f"  latency per query: P50 {lat['latency_p50_ms']:.2f} ms  P95 {lat['latency_p95_ms']:.2f} ms  "
                  f"P99 {lat['latency_p99_ms']:.2f} ms")
            print(f"  index build: {res.index_seconds:.2f} s   search (all queries): {res.search_seconds:.2f} s")
        if args.out:
            print(f"  run written to {args.out}")
        if run_id:
            print(f"  logged to MLflow experiment {args.experiment or 'raglab'!r}, run {run_id}")
    if log_error is not None:
        print(f"error: {log_error}", file=sys.stderr)
        return log_error.exit_code
    return 0


def _diagnostic_lines(describe: dict) -> list[str]:
    """Human lines for the counters a strategy reports in its description (http failures, unknown ids)."""
    lines = []
    if "http_queries" in describe:
        lines.append(f"http: {describe['http_queries']} queries, {describe['http_failed']} failed "
                     f"({describe['http_error_rate']:.1%}), {describe['http_retries']} retries, "
                     f"final status {describe.get('http_final_status')}")
        if describe["http_failed"]:
            lines.append(f"failed queries (scored 0): {describe['http_failed_queries']}; first error: "
                         f"{describe['http_first_error']}")
        if describe["http_unknown_ids"]:
            lines.append(f"{describe['http_unknown_ids']} hit ids match no document (e.g. "
                         f"{describe['http_unknown_examples']}); {describe['http_mapped_by_text']} mapped by text")
    if describe.get("source") == "trec":
        lines.append(f"imported run {describe['run_file']} (tag {describe['run_tag']}): {describe['run_queries']} "
                     f"queries, {describe['run_queries_outside_split']} outside the split, "
                     f"{describe['split_queries_without_hits']} split queries without hits (scored 0)")
        if describe["unknown_ids"]:
            lines.append(f"{describe['unknown_ids']} hit ids match no document (e.g. {describe['unknown_examples']})")
    return lines


def _log_run(res, args) -> str:
    """Log a `lab run` result into MLflow (log_result), plus the strategy's http_* counters as metrics."""
    run_id = log_result(res, experiment=args.experiment or "raglab", tracking_root=args.tracking_root, seed=args.seed)
    describe = res.info.get("retriever") or {}
    counters = {k: float(v) for k, v in describe.items()
                if k.startswith("http_") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if counters:
        log_metrics(run_id, counters, tracking_root=args.tracking_root)
    return run_id


def cmd_strategies(args) -> int:
    if not args.params:
        print("\n".join(available()))
        return 0
    for name in available():  # each strategy's declared params: what --set and sweep params accept
        decl = declared_params(name)
        print(name)
        for p in decl.params.values():
            print(f"  {p.name}: {p.expected()} (default {p.default!r})")
        if decl.extra.strategy is not None:
            print(f"  ... and the params of {decl.extra.strategy}")
        elif decl.extra.check is not None:
            print("  ... and a mapping of params per part, under the part's name")
        elif decl.extra.unchecked:
            print("  ... and any other keyword (not checked)")
    return 0


def add_parsers(sub) -> None:
    """Add the `evaluate`, `run` and `strategies` subcommands to an argparse subparsers object."""
    e = sub.add_parser("evaluate", help="evaluate a TREC run against qrels (BEIR tsv or TREC format)")
    e.add_argument("qrels")
    e.add_argument("run")
    e.add_argument("--metrics", nargs="+",
                   help="metric names, e.g. ndcg@10 recall@100 (default: 7 metrics x k=1,3,5,10,100)")
    e.add_argument("--json", action="store_true", help="print one JSON object: metric name -> mean")
    e.add_argument("--per-query", metavar="FILE", help="write the per-query table (.csv, .tsv, .parquet or .json)")
    e.add_argument("--ci", action="store_true", help="add percentile bootstrap confidence intervals")
    e.add_argument("--resamples", type=positive_int, default=1000)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--rel-threshold", type=non_negative_int, default=1,
                   help="grade from which a document counts as relevant")
    e.add_argument("--condensed", action="store_true",
                   help="score the condensed lists: unjudged documents removed before scoring (trec_eval -J)")
    e.set_defaults(func=cmd_evaluate)

    r = sub.add_parser("run", help="run one strategy on a dataset split and evaluate it")
    r.add_argument("--dataset", required=True, help="a BEIR-layout folder, e.g. data/scifact")
    r.add_argument("--strategy", help="a registered strategy (see `lab strategies`); e.g. http with "
                   "--set url=http://127.0.0.1:8000/retrieve for a service")
    r.add_argument("--from-trec", metavar="RUN.trec", help="evaluate a TREC run made elsewhere instead of a strategy")
    r.add_argument("--name", help="with --from-trec: strategy name to report and log (default trec:<file stem>)")
    r.add_argument("--split", default="test")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="strategy param (repeatable); chunking.* keys set chunking, e.g. --set chunking.size=256")
    r.add_argument("--out", metavar="RUN.trec", help="write the run in TREC format")
    r.add_argument("--json", action="store_true", help="print one JSON object with metrics and latency")
    r.add_argument("--k", type=positive_int, default=100, help="hits retrieved per query")
    r.add_argument("--metrics", nargs="+")
    r.add_argument("--relevance", default="auto", choices=["auto", "doc", "span"])
    r.add_argument("--condensed", action="store_true",
                   help="score the condensed lists: unjudged documents removed before scoring (trec_eval -J)")
    r.add_argument("--per-query", metavar="FILE")
    r.add_argument("--max-queries", type=positive_int,
                   help="evaluate only the first N queries (by id), for a quick look")
    r.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--mlflow", action="store_true", help="log the result into MLflow (experiment raglab)")
    r.add_argument("--experiment", help="log into this MLflow experiment (implies --mlflow)")
    add_tracking_root(r)
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("strategies", help="list registered strategies")
    s.add_argument("--params", action="store_true", help="also list the params each accepts, with types and ranges")
    s.set_defaults(func=cmd_strategies)
