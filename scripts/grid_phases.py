"""Where a sweep's in-process time goes: every config of a spec scored on the first N queries of halving's order,
in one process (as ``lab sweep SPEC --halving`` runs them), with the wall seconds of each phase summed over configs.

Phases: chunking (``chunk_corpus``), chunks to a corpus, chunk relevance, tokenisation (``Tokenizer.tokenize``,
BM25's), BM25's index build (lazy or eager backend; for chunks, the documents' positional index once per process
and each config's index read off it), search, and ``result`` (search and evaluation). The late index work (the
columns of the queries searched: ``BM25Retriever.warm``) is a phase of its own. Used to say
what halving's first rung pays whatever it evaluates (docs/results.md).

    python scripts/grid_phases.py params/chunk_size_grid.yaml [--queries 20] [--bm25-backend bm25s-eager]
"""
from __future__ import annotations

import argparse
import collections
import functools
import time

import lab.experiment.run as run
import lab.retrievers.bm25 as bm25
import lab.text.chunking.chunker as chunker
import lab.text.tokenize as tokenize
from lab.workbench.config import expand, load_spec
from lab.workbench.halving import experiment_scorer, query_order

SECONDS: collections.Counter[str] = collections.Counter()


def timed(owner: object, name: str, label: str) -> None:
    """Wrap ``owner.name`` so that its wall seconds add to ``SECONDS[label]``."""
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SECONDS[label] += time.perf_counter() - t0

    setattr(owner, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--queries", type=int, default=0, help="first N queries of halving's order (0: all)")
    ap.add_argument("--bm25-backend", default=None, help="set params.backend of the bm25 configs (e.g. bm25s-eager)")
    args = ap.parse_args()
    # each function is wrapped where its caller looks it up (lab.experiment.run, the chunker)
    for owner, name, label in ((run, "chunk_corpus", "chunk"),
                               (chunker, "unit_offsets",
                                "chunk: token offsets (within chunk; memo, once per process)"),
                               (run, "chunks_to_corpus", "to_corpus"),
                               (run, "relevance_for", "relevance"), (tokenize.Tokenizer, "tokenize", "tokenize"),
                               (bm25.Bm25sBackend, "__init__", "bm25 eager build"),
                               (bm25.LazyBm25sBackend, "__init__", "bm25 lazy build"),
                               (bm25.PositionalBm25sBackend, "__init__", "bm25 chunk index from document tokens"),
                               (bm25, "corpus_positions", "bm25 document tokens (once per process)"),
                               (bm25.BM25Retriever, "warm", "bm25 late index work (the queries' columns)"),
                               (run.IndexedExperiment, "search", "search"),
                               (run.IndexedExperiment, "result", "result (search, evaluation)")):
        timed(owner, name, label)
    configs = expand(load_spec(args.spec))
    if args.bm25_backend:
        for c in configs:
            if c.get("strategy") == "bm25":
                c["params"] = {**(c.get("params") or {}), "backend": args.bm25_backend}
    ds = run.load(configs[0]["dataset"], progress=False)
    qids = query_order(list(ds.qrels[configs[0].get("split", "test")].qrels), 0)
    qids = qids[:args.queries] if args.queries else qids
    score = experiment_scorer(configs)
    t0 = time.perf_counter()
    for i in range(len(configs)):
        score(i, qids)
    total = time.perf_counter() - t0
    print(f"{len(configs)} configs on {len(qids)} queries: {total:.1f} s, index_seconds {score.index_seconds:.1f} s")
    for label, seconds in SECONDS.most_common():
        print(f"  {label}: {seconds:.1f} s ({seconds / total:.0%})")


if __name__ == "__main__":
    main()
