"""BM25 speed on SciFact: bm25s (lazy and eager index) against rank-bm25 on the same tokens, one run each, in one
process.

Prints tokenisation time, index time and queries per second (one query at a time, as ``search`` does, and
batched), then the ratios bm25s / rank_bm25. Also checks that both backends return the same top 10, and that the
lazy index (backend "bm25s": score columns computed when a query first asks for them, counted in its "search"
times here) returns exactly the scores of bm25s' eager matrix ("bm25s-eager").

    .venv/bin/python benchmarks/bm25_speed.py [--data data/scifact] [--split test] [--k 100] [--smoke]

``--smoke``: ORD-QA (290 docs) and 20 queries, to check that the script runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("LAB_NO_PROGRESS", "1")

import bm25s  # noqa: E402,F401  (loaded up front: neither bm25s index pays its ~2 s import, numba's)

from lab.data import load_dataset  # noqa: E402
from lab.retrievers import Context, build  # noqa: E402
from lab.retrievers.bm25 import doc_text  # noqa: E402

CPU: dict[str, float] = {}  # label -> CPU seconds of the last timed call (robust on a shared, loaded machine)


def timed(fn, *args, label: str = ""):
    """(result, wall seconds); CPU seconds go to CPU[label]."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    CPU[label] = time.process_time() - c0
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/scifact")
    ap.add_argument("--split", default="test")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--smoke", action="store_true", help="ORD-QA, 20 queries: checks that the script runs (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.data = "data/ord-qa"

    ds = load_dataset(args.data, progress=False)
    queries, _ = ds.split(args.split)
    if args.smoke:
        queries = queries.subset(list(queries)[:20])
    docs = list(ds.corpus)
    ctx = Context(cache_dir=Path(".cache"), progress=False)
    print(f"BM25 speed: {args.data} ({len(docs)} docs, {len(queries)} {args.split} queries, k={args.k}); "
          f"python {platform.python_version()}, {os.cpu_count()} CPUs (shared machines vary: compare ratios)")

    # the same tokens for both backends
    tok_r = build("bm25", {}, ctx)
    texts = [doc_text(d.title, d.text) for d in docs]
    corpus_tokens, t_tok = timed(tok_r.tokenizer.tokenize, texts, label="tokenize")
    query_tokens, t_qtok = timed(tok_r.tokenizer.tokenize, [queries[q] for q in queries])
    n_tokens = sum(map(len, corpus_tokens))
    print(f"tokenise corpus: {t_tok:.2f} s ({n_tokens / t_tok / 1e6:.2f} M tokens/s, {n_tokens:,} tokens); "
          f"cpu {CPU['tokenize']:.2f} s; queries: {t_qtok * 1e3:.0f} ms")

    res = {}
    for backend in ("bm25s", "bm25s-eager", "rank_bm25"):
        r = build("bm25", {"backend": backend}, ctx)
        _, t_index = timed(r.index_tokens, corpus_tokens, [d.id for d in docs], label="index")
        single, t_single = timed(lambda r=r: [r.search_tokens(t, args.k) for t in query_tokens], label="single")
        run, t_batch = timed(r.search_batch, queries, args.k, label="batch")  # includes query tokenisation
        res[backend] = {"index": t_index, "single": t_single, "batch": t_batch, "hits": single, "cpu": dict(CPU)}
        n = len(queries)
        print(f"{backend:>11}: index {t_index:6.2f} s (cpu {CPU['index']:.2f}) | one at a time {n / t_single:8.1f} q/s "
              f"(cpu {n / CPU['single']:.1f}) | batch {n / t_batch:8.1f} q/s (cpu {n / CPU['batch']:.1f})")

        if backend == "bm25s-eager":  # peer: the library's own retrieve (numpy top-k, no hit filter, no tie rule)
            model = r._backend.model
            _, t_lib = timed(lambda model=model: model.retrieve(query_tokens, k=args.k, show_progress=False,
                                                                n_threads=0),
                             label="lib")
            print(f"{'':>11}  bm25s.retrieve itself: {len(queries) / t_lib:8.1f} q/s (cpu {n / CPU['lib']:.1f})")

    lazy, eager = res["bm25s"], res["bm25s-eager"]
    if lazy["hits"] != eager["hits"]:
        raise SystemExit("the lazy bm25s index gave other hits or scores than bm25s' eager matrix")
    print(f"lazy index / eager index: index {lazy['index'] / eager['index']:.2f}, index + one at a time "
          f"{(lazy['index'] + lazy['single']) / (eager['index'] + eager['single']):.2f} (wall); same hits and scores")
    a, b = res["bm25s"], res["rank_bm25"]
    same = sum([d for d, _ in x[:10]] == [d for d, _ in y[:10]] for x, y in zip(a["hits"], b["hits"], strict=False))
    print(f"ratio rank_bm25 time / bm25s time: index {b['index'] / a['index']:.2f}, "
          f"one query at a time {b['single'] / a['single']:.0f}, batch {b['batch'] / a['batch']:.0f} (wall); "
          f"index {b['cpu']['index'] / a['cpu']['index']:.2f}, "
          f"one at a time {b['cpu']['single'] / a['cpu']['single']:.0f}, "
          f"batch {b['cpu']['batch'] / a['cpu']['batch']:.0f} (cpu)")
    print(f"same top 10 for {same}/{len(queries)} queries (differences only among equal scores are allowed; "
          "see tests/comparison/test_bm25_parity.py)")


if __name__ == "__main__":
    main()
