"""Contextual retrieval on a pooled SciFact corpus, each `apply` paired against hybrid (the same fusion, no contexts).

Why a pool: contextual retrieval costs one LLM call per chunk at index time. SciFact's 5,183 abstracts take about
9 hours with the packaged SmolLM2-135M on one core of the 2-core machine (~6 s a call: ~800 prompt tokens, the
abstract shown as the document and again as the chunk). The pool keeps the competition that decides nDCG@10: for
every test query, the top ``--pool-depth`` (5) documents of BM25 and of dense (MiniLM) over the *whole* corpus, plus
every judged document of the test queries (TREC-style pooling). All strategies, hybrid included, then index the
pool only and are scored on all test queries, so the pairing is fair; the figures are not the full-corpus ones (the
pool is an easier corpus: no distractor ranked below 5th by both parts), and a context that would pull a document
from outside the pool into the top 10 cannot show. Each abstract is its own document, so the prompts are the ones
the full corpus gives and the cached contexts serve a later full-corpus run.

Contexts are written through the LLM layer's persistent cache. Two ``--prefetch`` processes (one llama.cpp thread
each, shards 0/2 and 1/2) fill it in parallel; the measurement run then reads them back (a missing one is
generated). A stopped prefetch resumes where it stopped (cached contexts come back at once); ``--whole-corpus``
goes on to every other abstract, for params/contextual_scifact.yaml.

    .venv/bin/python benchmarks/contextual_pool.py --prefetch --shard 0/2 &
    .venv/bin/python benchmarks/contextual_pool.py --prefetch --shard 1/2 &
    wait; .venv/bin/python benchmarks/contextual_pool.py --json benchmarks/results/contextual_pool.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from lab.data.types import Corpus, Dataset
from lab.experiment.run import load, run_experiment
from lab.metrics import bootstrap_ci, compare
from lab.retrievers import Context
from lab.retrievers.base import build

APPLIES = ("both", "dense", "bm25")


def pool_ids(ds: Dataset, split: str, depth: int, ctx: Context) -> list[str]:
    """Judged documents of the split's queries plus each part's top ``depth`` per query over the whole corpus."""
    _, qrels = ds.split(split)
    pool = {d for q in qrels for d in qrels[q]}
    for part in ("bm25", "dense"):
        res = run_experiment(ds, part, {}, split=split, k=max(depth, 10), ctx=ctx)
        for q in res.run:
            pool |= {d for d, _ in res.run.ranked(q, depth)}
    return [d for d in ds.corpus.ids if d in pool]  # corpus order


def write_pool(ds: Dataset, ids: list[str], split: str, depth: int, folder: Path) -> Path:
    """The pooled corpus as a BEIR folder (corpus, the split's queries and qrels, SOURCE.md), so runs on it carry a
    dataset fingerprint and name (``<dataset>-pool<depth>``) like any dataset."""
    folder.mkdir(parents=True, exist_ok=True)
    keep = set(ids)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for d in ds.corpus.ids:
            if d in keep:
                doc = ds.corpus[d]
                rec = {"_id": d, "title": doc.title, "text": doc.text, **({"metadata": dict(doc.metadata)}
                                                                          if doc.metadata else {})}
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    queries, qrels = ds.split(split)
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in queries:
            fh.write(json.dumps({"_id": q, "text": queries[q]}, ensure_ascii=False) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q in qrels:
            for d, g in qrels[q].items():
                fh.write(f"{q}\t{d}\t{g}\n")
    (folder / "SOURCE.md").write_text(
        f"# {ds.name}, pooled (made by benchmarks/contextual_pool.py; not a dataset to publish)\n\n"
        f"{len(ids)} of {len(ds.corpus)} documents of {ds.path}: every judged document of the {split} queries plus "
        f"the top {depth} of bm25 and of dense (all-MiniLM-L6-v2) over the whole corpus for each {split} query. "
        f"License and citation: those of {ds.path}/SOURCE.md.\n", encoding="utf-8")
    return folder


def shard_arg(text: str) -> tuple[int, int]:
    """``i/n`` with 0 <= i < n."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected i/n, e.g. 0/2") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 <= i < n, e.g. 1/2")
    return i, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="data/scifact")
    ap.add_argument("--split", default="test")
    ap.add_argument("--pool-depth", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads of this process")
    ap.add_argument("--prefetch", action="store_true", help="only write the contexts of one shard into the cache")
    ap.add_argument("--shard", default=(0, 1), type=shard_arg,
                    help="i/n: this process takes every n-th pooled document from the i-th (default 0/1)")
    ap.add_argument("--whole-corpus", action="store_true",
                    help="with --prefetch: every document of the corpus (params/contextual_scifact.yaml's cache), "
                         "pooled ones first")
    ap.add_argument("--status", action="store_true", help="only count the pooled and other contexts already cached")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--experiment", help="also log each run to this MLflow experiment (lab compare --experiment)")
    ap.add_argument("--tracking-root", default="mlruns")
    ap.add_argument("--smoke", action="store_true",
                    help="ORD-QA, pool depth 1, --status: builds the pool and counts cached contexts, generates "
                         "nothing (CI: checks that the script runs up to the LLM calls)")
    args = ap.parse_args()
    if args.smoke:
        args.dataset, args.pool_depth, args.status = "data/ord-qa", 1, True
    ctx = Context(cache_dir=Path(args.cache_dir), progress=sys.stderr.isatty(), seed=args.seed)
    ds = load(args.dataset, progress=False)
    ids = pool_ids(ds, args.split, args.pool_depth, ctx)
    folder = write_pool(ds, ids, args.split, args.pool_depth,
                        Path(args.cache_dir) / "pools" / f"{ds.name}-pool{args.pool_depth}")
    pool = load(folder, progress=False)
    llm = {"backend": "local", "threads": args.threads}
    print(f"{ds.name} {args.split}: pool of {len(ids)} of {len(ds.corpus)} documents "
          f"(top {args.pool_depth} of bm25 and dense per query + judged)", flush=True)
    if args.status:
        r = build("contextual", {"llm": llm}, ctx)
        in_pool = set(ids)
        rest = Corpus({d: ds.corpus[d] for d in ds.corpus.ids if d not in in_pool})
        print(f"cached contexts: pool {r.cached_contexts(pool.corpus)} of {len(pool.corpus)}, other documents "
              f"{r.cached_contexts(rest)} of {len(rest)}")
        return
    if args.prefetch:
        i, n = args.shard
        in_pool = set(ids)
        order = ids + [d for d in ds.corpus.ids if d not in in_pool] if args.whole_corpus else ids
        shard = Corpus({d: ds.corpus[d] for d in order[i::n]}, name=pool.corpus.name)
        r = build("contextual", {"llm": llm}, ctx)
        t0 = time.perf_counter()
        r.write_contexts(shard)
        print(f"shard {i}/{n}: {len(shard)} contexts in {time.perf_counter() - t0:.0f} s; {r.usage()}")
        return
    results = {"hybrid": run_experiment(pool, "hybrid", {}, split=args.split, k=100, ctx=ctx)}
    for apply in APPLIES:
        results[f"contextual {apply}"] = run_experiment(pool, "contextual", {"apply": apply, "llm": llm},
                                                        split=args.split, k=100, ctx=ctx)
    if args.experiment:
        from lab.tracking.results import log_result

        for res in results.values():
            log_result(res, experiment=args.experiment, tracking_root=args.tracking_root, seed=args.seed)
    base = results["hybrid"].evaluation
    rows = []
    for label, res in results.items():
        ev = res.evaluation
        ci = bootstrap_ci(ev.per_query[["ndcg@10"]], seed=args.seed).set_index("metric")
        row = {"strategy": label, "ndcg@10": ev.means["ndcg@10"], "ci_low": ci.loc["ndcg@10", "ci_low"],
               "ci_high": ci.loc["ndcg@10", "ci_high"], "recall@100": ev.means["recall@100"],
               "latency_p50_ms": res.latency.get("latency_p50_ms"), "index_seconds": res.index_seconds,
               "cost": res.cost, "info": res.info}
        if label != "hybrid":
            c = compare(ev, base, "ndcg@10", seed=args.seed)
            row.update(diff=c["diff"], diff_low=c["ci_low"], diff_high=c["ci_high"], p=c["p_permutation"])
        rows.append(row)
    print("| strategy | nDCG@10 [95% CI] | R@100 | P50 latency | vs hybrid (paired) |\n|---|---|---|---|---|")
    for r in rows:
        vs = (f"{r['diff']:+.4f} [{r['diff_low']:+.3f}, {r['diff_high']:+.3f}], p={r['p']:.3g}" if "diff" in r
              else "")
        print(f"| {r['strategy']} | {r['ndcg@10']:.4f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
              f"{r['recall@100']:.3f} | {r['latency_p50_ms']:.1f} ms | {vs} |")
    for label, res in results.items():
        if res.cost:
            print(f"{label}: index {res.index_seconds:.0f} s; " + ", ".join(f"{k}={v:g}" for k, v in res.cost.items()
                                                                            if k.startswith("llm_index")))
    if args.json:
        Path(args.json).write_text(json.dumps({"pool": len(ids), "corpus": len(ds.corpus), "rows": rows}, indent=1,
                                              default=str) + "\n")


if __name__ == "__main__":
    main()
