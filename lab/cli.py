"""The `lab` command: a thin shell over the package. Each subcommand calls into `lab`, nothing more."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _parse_set(items: list[str] | None) -> dict:
    """`--set key=value` pairs; values parsed as YAML scalars/lists (k1=1.2, retrievers=[bm25,dense]).
    Dotted keys nest: `dense.model=mpnet` -> {"dense": {"model": "mpnet"}}."""
    import yaml

    from lab.errors import ConfigError

    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set k1=1.2")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw else ""
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _metrics_arg(value: list[str] | None):
    if not value:
        return None
    names = [m for v in value for m in v.replace(",", " ").split()]
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
    ev = evaluate(qrels, run, _metrics_arg(args.metrics) or DEFAULT_METRICS, rel_threshold=args.rel_threshold)
    cis = bootstrap_ci(ev.per_query, n_resamples=args.resamples, seed=args.seed).set_index("metric") if args.ci else None
    if args.per_query:
        _write_table(ev.per_query, args.per_query)
    if args.json:
        out = {k: float(v) for k, v in ev.means.items()}
        if cis is not None:
            out["_ci"] = {m: [float(cis.loc[m, "ci_low"]), float(cis.loc[m, "ci_high"])] for m in cis.index}
        out["_meta"] = _meta(ev, run=str(args.run), qrels=str(args.qrels))
        print(json.dumps(out, indent=2))
    else:
        _print_table(ev.means, cis, f"{args.run} ({ev.n_queries} queries evaluated"
                     + (f", {len(ev.excluded)} without relevant documents excluded" if ev.excluded else "") + ")")
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
    from lab.data.trec import write_trec_run
    from lab.experiment import run_experiment
    from lab.retrievers.base import Context

    params = _parse_set(args.set)
    chunking = params.pop("chunking", None)
    ctx = Context(cache_dir=Path(args.cache_dir), progress=not args.no_progress and not args.json, seed=args.seed)
    res = run_experiment(args.dataset, args.strategy, params, split=args.split, k=args.k, chunking=chunking,
                         relevance=args.relevance, metrics=_metrics_arg(args.metrics), ctx=ctx,
                         max_queries=args.max_queries)
    if args.out:
        write_trec_run(res.run, args.out, tag=args.strategy)
    if args.per_query:
        _write_table(res.evaluation.per_query, args.per_query)
    if args.json:
        out = res.summary()
        out["_meta"] = _meta(res.evaluation, **res.info, config=res.config)
        print(json.dumps(out, indent=2, default=str))
    else:
        lat = res.latency
        _print_table(res.evaluation.means, None,
                     f"{args.strategy} on {res.info['dataset']}/{args.split}: {res.evaluation.n_queries} queries, "
                     f"relevance={res.info['relevance_mode']}")
        print(f"  latency per query: P50 {lat['latency_p50_ms']:.2f} ms  P95 {lat['latency_p95_ms']:.2f} ms  "
              f"P99 {lat['latency_p99_ms']:.2f} ms")
        print(f"  index build: {res.index_seconds:.2f} s   search (all queries): {res.search_seconds:.2f} s")
        if args.out:
            print(f"  run written to {args.out}")
    return 0


def cmd_strategies(args) -> int:
    from lab.retrievers import available

    print("\n".join(available()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lab", description="raglab: measure and improve RAG retrieval.")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("evaluate", help="evaluate a TREC run against qrels (BEIR tsv or TREC format)")
    e.add_argument("qrels")
    e.add_argument("run")
    e.add_argument("--metrics", nargs="+", help="metric names, e.g. ndcg@10 recall@100 (default: 7 metrics x k=1,3,5,10,100)")
    e.add_argument("--json", action="store_true", help="print one JSON object: metric name -> mean")
    e.add_argument("--per-query", metavar="FILE", help="write the per-query table (.csv, .tsv, .parquet or .json)")
    e.add_argument("--ci", action="store_true", help="add percentile bootstrap confidence intervals")
    e.add_argument("--resamples", type=int, default=1000)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--rel-threshold", type=int, default=1, help="grade from which a document counts as relevant")
    e.set_defaults(func=cmd_evaluate)

    r = sub.add_parser("run", help="run one strategy on a dataset split and evaluate it")
    r.add_argument("--dataset", required=True, help="a BEIR-layout folder, e.g. data/scifact")
    r.add_argument("--strategy", required=True, help="a registered strategy (see `lab strategies`)")
    r.add_argument("--split", default="test")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="strategy param (repeatable); chunking.* keys set chunking, e.g. --set chunking.size=256")
    r.add_argument("--out", metavar="RUN.trec", help="write the run in TREC format")
    r.add_argument("--json", action="store_true", help="print one JSON object with metrics and latency")
    r.add_argument("--k", type=int, default=100, help="hits retrieved per query")
    r.add_argument("--metrics", nargs="+")
    r.add_argument("--relevance", default="auto", choices=["auto", "doc", "span"])
    r.add_argument("--per-query", metavar="FILE")
    r.add_argument("--max-queries", type=int, help="evaluate only the first N queries (by id), for a quick look")
    r.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("strategies", help="list registered strategies")
    s.set_defaults(func=cmd_strategies)
    import importlib

    # subcommands that live beside the code they call: sweep / compare / ui, demo, train-*, report / gate,
    # testset, and the ones for outside systems (http, monitoring)
    for module in SUBCOMMAND_MODULES:
        importlib.import_module(module).add_parsers(sub)
    return p


SUBCOMMAND_MODULES = ("lab.cli_workbench", "lab.demo", "lab.cli_train", "lab.cli_report", "lab.cli_testset",
                      "lab.cli_answers")


def main(argv: list[str] | None = None) -> int:
    from lab.errors import LabError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
