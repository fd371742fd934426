"""The `lab` command: a thin shell over the package. Each subcommand calls into `lab`, nothing more."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lab.cli.options import Parser, add_tracking_root, non_negative_int, positive_int

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _parse_set(items: list[str] | None) -> dict:
    """`--set key=value` pairs; values parsed as YAML scalars/lists (k1=1.2, retrievers=[bm25,dense]).
    Dotted keys nest: `dense.model=mpnet` -> {"dense": {"model": "mpnet"}}."""
    import yaml

    from lab.core.errors import ConfigError

    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set k1=1.2")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: the value is not a valid YAML scalar or list "
                              f"({getattr(exc, 'problem', exc)}); quote it or write e.g. --set retrievers=[bm25,dense]"
                              ) from None
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _metrics_arg(value: list[str] | None):
    """``--metrics`` names (space or comma separated), each checked (ConfigError naming a bad one)."""
    from lab.core.errors import ConfigError
    from lab.metrics.ranking import parse_metric

    if not value:
        return None
    names = [m for v in value for m in v.replace(",", " ").split()]
    for name in names:
        try:
            parse_metric(name)
        except ValueError as exc:
            raise ConfigError(f"--metrics {exc}") from None
    return names


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
    from lab.data.beir import read_qrels
    from lab.data.trec import read_trec_run
    from lab.metrics import DEFAULT_METRICS, bootstrap_ci, evaluate

    qrels = read_qrels(args.qrels)
    run = read_trec_run(args.run)
    ev = evaluate(qrels, run, _metrics_arg(args.metrics) or DEFAULT_METRICS, rel_threshold=args.rel_threshold,
                  condensed=args.condensed)
    cis = bootstrap_ci(ev.per_query, n_resamples=args.resamples, seed=args.seed).set_index("metric") if args.ci else None
    if args.per_query:
        _write_table(ev.per_query, args.per_query)
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
    import lab

    return {"metrics_version": lab.METRICS_VERSION, "n_queries": ev.n_queries, "n_excluded": len(ev.excluded), **extra}


def _write_table(df, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        df.to_parquet(path)
    elif path.suffix == ".json":
        df.to_json(path, orient="index", indent=1)
    else:
        df.to_csv(path, sep="\t" if path.suffix == ".tsv" else ",")


def cmd_run(args) -> int:
    import math

    from lab.data.trec import write_trec_run
    from lab.core.errors import ConfigError
    from lab.experiment.run import run_experiment
    from lab.retrievers.base import Context

    if bool(args.strategy) == bool(args.from_trec):
        raise ConfigError("lab run: give --strategy NAME (run a strategy) or --from-trec RUN.trec (evaluate a run "
                          "made elsewhere), not both or neither")
    progress = not args.no_progress and not args.json
    if args.from_trec:
        if args.set:
            raise ConfigError("--set has no effect with --from-trec: the run was made elsewhere")
        res = trec_result(args.dataset, args.from_trec, split=args.split, k=args.k, name=args.name,
                          metrics=_metrics_arg(args.metrics), max_queries=args.max_queries, progress=progress,
                          condensed=args.condensed)
    else:
        from lab.experiment.run import check_run_args

        params = _parse_set(args.set)
        chunking = params.pop("chunking", None)
        check_run_args(args.strategy, params, k=args.k, max_queries=args.max_queries,
                       metrics=_metrics_arg(args.metrics), relevance=args.relevance, chunking=chunking)
        ctx = Context(cache_dir=Path(args.cache_dir), progress=progress, seed=args.seed)
        res = run_experiment(args.dataset, args.strategy, params, split=args.split, k=args.k, chunking=chunking,
                             relevance=args.relevance, metrics=_metrics_arg(args.metrics), ctx=ctx,
                             max_queries=args.max_queries, condensed=args.condensed)
    strategy = res.config["strategy"]
    if args.out:
        write_trec_run(res.run, args.out, tag=strategy.replace(":", "_"))
    if args.per_query:
        _write_table(res.evaluation.per_query, args.per_query)
    from lab.core.errors import TrackingError

    run_id, log_error = None, None
    if args.mlflow or args.experiment:
        try:
            run_id = _log_run(res, args)
        except TrackingError as exc:  # the result was saved locally: print it, then say where and why
            log_error = exc
    if args.json:
        out = {k: (None if isinstance(v, float) and math.isnan(v) else v)  # NaN: not measured (an imported run)
               for k, v in res.summary().items()}
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


def trec_result(dataset, run_path, *, split: str = "test", k: int = 100, name: str | None = None, metrics=None,
                max_queries: int | None = None, progress: bool = True, condensed: bool = False):
    """A :class:`lab.experiment.run.Result` for a TREC run made elsewhere (Pyserini, Elasticsearch, a vendor),
    evaluated like our own strategies so it is logged, compared and reported beside them.

    Conventions: strategy name ``name`` or ``trec:<file stem>``; only the split's queries are kept (the first
    ``max_queries`` by id when given), each cut to its top ``k`` hits in the Run tie order; a split query the
    run lacks scores 0. Latency, index and search seconds are NaN (not measured here). ``info["retriever"]``
    records the file, its sha256, its tag, the run's queries outside the split and hit ids that match no
    document (first few shown). Bad files raise DataError naming file, line and field (read_trec_run); a run
    sharing no query with the split raises DataError too."""
    import hashlib
    import math

    from lab.data.fingerprint import fingerprint
    from lab.data.trec import read_trec_run
    from lab.data.types import Qrels, Run
    from lab.core.errors import ConfigError, DataError
    from lab.experiment.run import Result, load
    from lab.metrics import DEFAULT_METRICS, evaluate, latency_summary

    path = Path(run_path)
    ds = load(dataset, progress=progress)
    try:
        queries, qrels = ds.split(split)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    if max_queries:
        keep = sorted(queries)[:max_queries]
        queries, qrels = queries.subset(keep), Qrels({q: qrels[q] for q in keep}, name=qrels.name)
    raw = read_trec_run(path)
    strategy = name or f"trec:{path.name.split('.')[0]}"
    scores = {q: dict(raw.ranked(q, k)) for q in queries if q in raw}
    if not scores:
        some = ", ".join(list(raw)[:3])
        raise DataError(path, f"none of its {len(raw)} queries (e.g. {some}) is in split {split!r} of {ds.name}",
                        field="qid", hint="check --dataset and --split; query ids must be those of queries.jsonl")
    unknown = [d for hits in scores.values() for d in hits if d not in ds.corpus]
    run = Run(scores, name=strategy)
    evaluation = evaluate(qrels, run, metrics or DEFAULT_METRICS, condensed=condensed)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    describe = {
        "strategy": strategy, "source": "trec", "run_file": str(path), "run_sha256": digest, "run_tag": raw.name,
        "run_queries": len(raw), "run_queries_outside_split": sum(q not in queries for q in raw),
        "split_queries_without_hits": len(queries) - len(scores), "unknown_ids": len(unknown),
        "unknown_examples": ",".join(list(dict.fromkeys(unknown))[:5]),
    }
    info = {"dataset": ds.name, "dataset_path": str(ds.path), "dataset_fingerprint": fingerprint(ds.path),
            "split": split, "n_queries": len(queries), "n_units": len(ds.corpus), "relevance_mode": "doc",
            "chunking": {"chunker": "none"}, "retriever": describe}
    config = {"dataset": ds.name, "strategy": strategy, "split": split, "k": k,
              "params": {"run_file": path.name}, "chunking": {"chunker": "none"},
              "relevance": "doc", **({"condensed": True} if condensed else {})}
    return Result(config, run, evaluation, latency_summary({}), math.nan, math.nan, info, run)


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
    from lab.tracking.store import log_metrics, log_result

    run_id = log_result(res, experiment=args.experiment or "raglab", root=args.tracking_root, seed=args.seed)
    describe = res.info.get("retriever") or {}
    counters = {k: float(v) for k, v in describe.items()
                if k.startswith("http_") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if counters:
        log_metrics(run_id, counters, root=args.tracking_root)
    return run_id


def cmd_strategies(args) -> int:
    from lab.retrievers import available
    from lab.retrievers.base import declared_params

    if not args.params:
        print("\n".join(available()))
        return 0
    for name in available():  # each strategy's declared params: what --set and sweep params accept
        decl = declared_params(name)
        print(name)
        for p in decl.params.values():
            print(f"  {p.name}: {p.expected()} (default {p.default!r})")
        if isinstance(decl.extra, str):
            print(f"  ... and the params of {decl.extra}")
        elif decl.extra is not None:
            print("  ... and a mapping of params per part, under the part's name")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="lab", description="raglab: measure and improve RAG retrieval.")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("evaluate", help="evaluate a TREC run against qrels (BEIR tsv or TREC format)")
    e.add_argument("qrels")
    e.add_argument("run")
    e.add_argument("--metrics", nargs="+", help="metric names, e.g. ndcg@10 recall@100 (default: 7 metrics x k=1,3,5,10,100)")
    e.add_argument("--json", action="store_true", help="print one JSON object: metric name -> mean")
    e.add_argument("--per-query", metavar="FILE", help="write the per-query table (.csv, .tsv, .parquet or .json)")
    e.add_argument("--ci", action="store_true", help="add percentile bootstrap confidence intervals")
    e.add_argument("--resamples", type=positive_int, default=1000)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--rel-threshold", type=non_negative_int, default=1, help="grade from which a document counts as relevant")
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
    r.add_argument("--max-queries", type=positive_int, help="evaluate only the first N queries (by id), for a quick look")
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
    import importlib

    # subcommands that live beside the code they call: sweep / compare / ui, demo, train-*, report / gate,
    # testset, and the ones for outside systems (http, monitoring)
    for module in SUBCOMMAND_MODULES:
        importlib.import_module(module).add_parsers(sub)
    return p


SUBCOMMAND_MODULES = ("lab.cli.workbench", "lab.workbench.demo", "lab.cli.train", "lab.cli.report", "lab.cli.ingest",
                      "lab.cli.testset", "lab.cli.answers", "lab.analysis.robustness", "lab.workbench.notebook_server")


def main(argv: list[str] | None = None) -> int:
    from lab.core.errors import LabError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as exc:
        for line in str(exc).splitlines() or [""]:  # one line per problem (a sweep lists each bad config)
            print(f"error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
