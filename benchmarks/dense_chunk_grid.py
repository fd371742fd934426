"""The dense chunk grid (all-MiniLM-L6-v2, recursive chunker, five sizes): seconds per config cold, then warm.

Cold: an empty embedding cache in a temporary folder, the sizes in order (64 to 1,024 tokens), each config prepared
and scored as a sweep config is (``prepare_experiment(...).result()``); a chunk that an earlier size already made
(a short document is one chunk under every size) is read from the cache, not encoded again, so ``encoded`` counts
only the new texts. Warm: the same five configs again on the filled cache. Prints one JSON line per config: phase,
size, seconds, index_seconds, chunks, encoded, hits, nDCG@10. The first cold config includes the model load.

    nice -n 5 .venv/bin/python benchmarks/dense_chunk_grid.py [--dataset data/ord-qa] [--smoke]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LAB_NO_PROGRESS", "1")

from lab.data.types import Corpus  # noqa: E402
from lab.experiment.run import load, prepare_experiment  # noqa: E402
from lab.retrievers.base import Context  # noqa: E402

SIZES = (64, 128, 256, 512, 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="data/ord-qa")
    ap.add_argument("--split", default="test")
    ap.add_argument("--smoke", action="store_true",
                    help="size 1,024, 2 queries, the first 30 passages: checks that it runs (CI)")
    args = ap.parse_args()
    sizes, max_queries = ((1024,), 2) if args.smoke else (SIZES, None)
    ds = load(args.dataset, progress=False)
    if args.smoke:  # encoding the whole corpus is most of a smoke run: 30 passages go through the same code
        ds = dataclasses.replace(ds, corpus=Corpus(dict(list(ds.corpus.docs.items())[:30]), ds.corpus.name))
    cache = Path(tempfile.mkdtemp(prefix="dense-chunk-grid-"))
    for phase in ("cold", "warm"):
        for size in sizes:
            ctx = Context(cache_dir=cache, progress=False)
            t0 = time.perf_counter()
            exp = prepare_experiment(ds, "dense", {}, split=args.split, k=100, max_queries=max_queries, ctx=ctx,
                                     chunking={"chunker": "recursive", "size": size, "overlap": 0,
                                               "size_unit": "tokens"})
            r = exp.result()
            emb = exp.retriever.embeddings
            print(json.dumps({"phase": phase, "size": size, "seconds": round(time.perf_counter() - t0, 2),
                              "index_seconds": round(r.index_seconds, 2), "chunks": r.info["n_units"],
                              "encoded": emb.encoded, "hits": emb.hits,
                              "ndcg@10": r.evaluation.means["ndcg@10"]}), flush=True)


if __name__ == "__main__":
    main()
