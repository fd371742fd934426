"""Encoding speed and quality of every embedding backend, side by side in one run.

For each backend of the packaged all-MiniLM-L6-v2 (torch, onnx, onnx-int8, openvino; see lab.models.backends) and
for the static model distilled from it (minilm-static, model2vec recipe), in one process, one after the other:

- corpus throughput: ``--n`` SciFact passages (a fixed random sample) encoded by ``encode_passages`` (length-sorted
  batches of ``--batch-size``, threads = cores this process may use), uncached, after a 16-passage warm-up;
  best of ``--rounds``; passages/s;
- single-query latency: ``--queries`` SciFact test queries encoded alone (``encode_queries([q])``, one thread), P50;
- quality: SciFact test nDCG@10 of dense retrieval (faiss flat) over the whole corpus (5,183 passages), passage
  vectors through the embedding cache (``--cache-dir``; each backend has its own keys), so a rerun pays only for
  what is not cached; when the corpus is encoded in this run, its passages/s is printed too.

The export (once per model and backend, cached) is timed apart and not counted in the speeds. The last lines name
the fastest backend whose nDCG@10 is within ``--tolerance`` (0.005) of torch's: the rule for the default backend.

    nice -n 10 .venv/bin/python benchmarks/encode_speed.py [--n 500] [--queries 100] [--backends torch onnx ...]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ALL = ("torch", "onnx", "onnx-int8", "openvino", "static")


def scifact_passages(corpus, n: int, seed: int = 0) -> list[str]:
    """``n`` SciFact passages (title + " " + text), a fixed random sample."""
    from lab.retrievers.dense import passage_text

    docs = list(corpus)
    pick = np.random.default_rng(seed).choice(len(docs), size=min(n, len(docs)), replace=False)
    return [passage_text(docs[i].title, docs[i].text) for i in pick]


def load(backend: str, cache_dir: str, batch_size: int):
    from lab.models.embedders import load_embedder

    if backend == "static":
        return load_embedder("minilm-static", cache_dir=cache_dir, progress=False)
    return load_embedder("all-MiniLM-L6-v2", cache_dir=cache_dir, batch_size=batch_size, progress=False,
                         backend=backend)


def measure(backend: str, args, ds) -> dict:
    from lab.metrics.ranking import evaluate
    from lab.retrievers.base import Context
    from lab.retrievers.dense import DenseRetriever

    t0 = time.perf_counter()
    emb = load(backend, args.cache_dir, args.batch_size)
    load_s = time.perf_counter() - t0
    texts = scifact_passages(ds.corpus, args.n)
    emb.encode_passages(texts[:16])
    best = min(_timed(lambda: emb.encode_passages(texts)) for _ in range(args.rounds))
    queries, qrels = ds.split("test")
    qtexts = [queries[q] for q in list(queries)[: args.queries]]
    emb.encode_queries(qtexts[:3])
    lat = [_timed(lambda q=q: emb.encode_queries([q])) for q in qtexts]
    dense = DenseRetriever(Context(cache_dir=Path(args.cache_dir), progress=False), embedder=emb)
    t0 = time.perf_counter()
    dense.index(ds.corpus)
    index_s = time.perf_counter() - t0
    encoded = dense.embeddings.encoded
    ndcg = evaluate(qrels, dense.search_batch(queries, k=100), ["ndcg@10"]).means["ndcg@10"]
    return {"backend": backend, "load_s": load_s, "pps": len(texts) / best, "q_p50_ms": 1000 * float(np.median(lat)),
            "q_p95_ms": 1000 * float(np.percentile(lat, 95)), "ndcg": ndcg,
            "corpus_pps": encoded / index_s if encoded > 1000 else None, "identity": emb.cache_identity("passage")}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500, help="passages for the throughput figure (default 500)")
    ap.add_argument("--rounds", type=int, default=1, help="throughput rounds per backend, best kept (default 1)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--queries", type=int, default=100, help="queries for the latency figure (default 100)")
    ap.add_argument("--backends", nargs="+", default=list(ALL), choices=ALL)
    ap.add_argument("--tolerance", type=float, default=0.005, help="nDCG@10 drop accepted for the default")
    ap.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", str(REPO / ".cache")))
    args = ap.parse_args(argv)

    from lab.data.beir import load_dataset
    from lab.models.embedders import default_threads

    ds = load_dataset(REPO / "data" / "scifact", splits=["test"], progress=False)
    print(f"SciFact: {len(ds.corpus)} passages, {len(ds.split('test')[0])} test queries; "
          f"{default_threads()} threads for batches, 1 for a single query; sample of {args.n} passages")
    rows = []
    for b in args.backends:
        r = measure(b, args, ds)
        rows.append(r)
        corpus = f"{r['corpus_pps']:7.1f}" if r["corpus_pps"] else "  (cached)"
        print(f"{b:10s} passages/s {r['pps']:7.1f}  corpus passages/s {corpus}  query P50 {r['q_p50_ms']:6.1f} ms  "
              f"P95 {r['q_p95_ms']:6.1f} ms  nDCG@10 {r['ndcg']:.4f}  (load/export {r['load_s']:.1f} s)", flush=True)
    by = {r["backend"]: r for r in rows}
    if "torch" in by:
        t = by["torch"]
        print("\n| backend | passages/s | x torch | query P50 ms | nDCG@10 | vs torch |\n|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['backend']} | {r['pps']:.1f} | {r['pps'] / t['pps']:.2f}x | {r['q_p50_ms']:.1f} | "
                  f"{r['ndcg']:.4f} | {r['ndcg'] - t['ndcg']:+.4f} |")
        ok = [r for r in rows if r["backend"] != "static" and r["ndcg"] >= t["ndcg"] - args.tolerance]
        win = max(ok, key=lambda r: r["pps"])
        print(f"\nfastest backend within {args.tolerance} nDCG@10 of torch: {win['backend']} "
              f"({win['pps'] / t['pps']:.2f}x torch's passages/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
