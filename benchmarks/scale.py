"""How retrieval cost grows with corpus size: bm25s, faiss flat, HNSW and IVF-PQ at 10k, 100k and 1M passages.

Data (real text, varied; vectors derived, and said so):
- passages: SciFact and ORD-QA passages cut into sentences; passage ``i`` is 2-4 sentences drawn at random (seeded)
  from different source passages, so no two passages are the same text (the same sentence recurs, as in a real
  large corpus). bm25s (Snowball English stemmer, English stopwords, k1 0.9, b 0.4) indexes this text.
- vectors: the packaged all-MiniLM-L6-v2 (torch backend) encodes the 5,183 SciFact passages (the sample); vector
  ``i`` is one of them drawn at random plus Gaussian noise (sigma ``--noise`` per dimension), L2-normalised.
  Encoding 1M passages
  would take ~11 hours on 2 cores, so at every size the dense indexes search vectors *derived* from the encoder,
  not encodings of each passage. Queries: encoder vectors of SciFact test queries.
- each (method, size) runs in its own process: index time (wall), peak memory (the process's peak RSS during the
  build, reset through /proc/self/clear_refs, minus its RSS with the data in memory), single-query latency
  P50/P95 over ``--queries`` queries (one thread), and for ANN
  indexes recall@10 against flat (exact) search. HNSW: M 32, efConstruction 80, efSearch 64. IVF-PQ: nlist
  4*sqrt(N), 48 sub-quantisers x 8 bits, trained on min(N, 64*nlist) vectors, nprobe 16.
- growth exponent: slope of log(cost) against log(N) (least squares over the sizes).

    nice -n 10 .venv/bin/python benchmarks/scale.py [--sizes 10000 100000 1000000] [--png docs/img/scale.png]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
METHODS = ("bm25s", "flat", "hnsw", "ivfpq")


def sentences() -> tuple[list[str], list[int]]:
    """Sentences of the SciFact and ORD-QA passages, and the source passage of each."""
    from lab.data.beir import read_corpus

    out, src = [], []
    n = 0
    for name in ("scifact", "ord-qa"):
        folder = REPO / "data" / name
        path = next(p for p in (folder / "corpus.jsonl.gz", folder / "corpus.jsonl") if p.exists())
        for d in read_corpus(path, progress=False):
            for s in re.split(r"(?<=[.!?])\s+", f"{d.title}. {d.text}" if d.title else d.text):
                if len(s.split()) >= 4:
                    out.append(s.strip())
                    src.append(n)
            n += 1
    return out, src


def passages(n: int, seed: int = 0) -> list[str]:
    sents, src = sentences()
    rng = np.random.default_rng(seed)
    counts = rng.integers(2, 5, size=n)
    picks = rng.integers(0, len(sents), size=int(counts.sum()))
    out, j = [], 0
    for c in counts:
        out.append(" ".join(sents[p] for p in picks[j : j + c]))
        j += c
    return out


def vectors(n: int, base: np.ndarray, noise: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + 1)
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for s in range(0, n, 100_000):
        e = min(n, s + 100_000)
        v = base[rng.integers(0, len(base), size=e - s)] + rng.normal(0, noise, size=(e - s, base.shape[1]))
        out[s:e] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def base_vectors(cache_dir: str, limit: int | None = None) -> np.ndarray:
    """Encoder vectors of the SciFact corpus (5,183 passages, or the first ``limit``; through the embedding cache)."""
    from lab.core.cache import EmbeddingCache
    from lab.data.beir import read_corpus
    from lab.models.embedders import load_embedder
    from lab.retrievers.dense import passage_text

    corpus = read_corpus(REPO / "data" / "scifact" / "corpus.jsonl.gz", progress=False)
    emb = load_embedder("all-MiniLM-L6-v2", cache_dir=cache_dir, progress=False, backend="torch")
    docs = list(corpus)[:limit]
    return EmbeddingCache(cache_dir, progress=True).encode(emb, [passage_text(d.title, d.text) for d in docs])


def query_vectors(n: int, cache_dir: str) -> np.ndarray:
    from lab.core.cache import EmbeddingCache
    from lab.data.beir import read_queries
    from lab.models.embedders import load_embedder

    qs = read_queries(REPO / "data" / "scifact" / "queries.jsonl", progress=False)
    texts = [qs[q] for q in list(qs)[:n]]
    emb = load_embedder("all-MiniLM-L6-v2", cache_dir=cache_dir, progress=False, backend="torch")
    return EmbeddingCache(cache_dir, progress=False).encode(emb, texts, kind="query"), texts


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> float:
    """Give freed heap back to the OS (glibc ``malloc_trim``: else a build reuses freed pages and its growth is not
    seen), reset this process's peak RSS (Linux: ``echo 5 > /proc/self/clear_refs``) and return its RSS in MB."""
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss_mb()


def peak_mb() -> float:
    """Peak RSS (VmHWM) in MB since the last :func:`reset_peak`."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(method: str, n: int, args) -> dict:
    """One (method, size) measurement, in this process (encoder vectors read from ``args.work``)."""
    import faiss

    faiss.omp_set_num_threads(os.cpu_count() or 1)
    work = Path(args.work)
    qv, pool = np.load(work / "queries.npy"), np.load(work / "pool.npy")
    qtexts = json.loads((work / "queries.json").read_text())
    if method == "bm25s":
        import bm25s
        import Stemmer

        texts = passages(n, args.seed)
        base = reset_peak()
        stem = Stemmer.Stemmer("english")
        t0 = time.perf_counter()
        tok = bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False)
        model = bm25s.BM25(k1=0.9, b=0.4)
        model.index(tok, show_progress=False)
        index_s = time.perf_counter() - t0
        mem = peak_mb() - base
        lat = []
        for q in qtexts:
            t0 = time.perf_counter()
            qt = bm25s.tokenize([q], stopwords="en", stemmer=stem, show_progress=False)
            model.retrieve(qt, k=10, show_progress=False, n_threads=1)
            lat.append(time.perf_counter() - t0)
        return {"method": method, "n": n, "index_s": index_s, "peak_mb": mem, **_lat(lat)}
    xb = vectors(n, pool, args.noise, args.seed)
    base = reset_peak()
    d = xb.shape[1]
    t0 = time.perf_counter()
    if method == "flat":
        idx = faiss.IndexFlatIP(d)
    elif method == "hnsw":
        idx = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        idx.hnsw.efConstruction = 80
    else:
        nlist = int(4 * np.sqrt(n))
        idx = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, 48, 8, faiss.METRIC_INNER_PRODUCT)
        train = xb[np.random.default_rng(0).choice(n, size=min(n, 64 * nlist), replace=False)]
        idx.train(train)
    idx.add(xb)
    index_s = time.perf_counter() - t0
    mem = peak_mb() - base
    if method == "hnsw":
        idx.hnsw.efSearch = 64
    if method == "ivfpq":
        idx.nprobe = 16
    faiss.omp_set_num_threads(1)
    lat, found = [], []
    for q in qv:
        t0 = time.perf_counter()
        _, rows = idx.search(q[None, :], 10)
        lat.append(time.perf_counter() - t0)
        found.append(rows[0])
    out = {"method": method, "n": n, "index_s": index_s, "peak_mb": mem, **_lat(lat)}
    if method != "flat":
        exact = faiss.IndexFlatIP(d)
        exact.add(xb)
        _, truth = exact.search(qv, 10)
        out["recall@10_vs_flat"] = float(np.mean([len(set(f) & set(t)) / 10
                                                  for f, t in zip(found, truth, strict=False)]))
    return out


def _lat(lat: list[float]) -> dict:
    return {"p50_ms": 1000 * float(np.median(lat)), "p95_ms": 1000 * float(np.percentile(lat, 95))}


def exponent(ns, ys) -> float:
    ok = [(n, y) for n, y in zip(ns, ys, strict=False) if y and y > 0]
    if len(ok) < 2:
        return float("nan")
    return float(np.polyfit(np.log([n for n, _ in ok]), np.log([y for _, y in ok]), 1)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--work", default=str(REPO / "results" / "scale-work"), help="encoder vectors for the children")
    ap.add_argument("--noise", type=float, default=0.03, help="Gaussian sigma per dimension added to pool vectors")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", str(REPO / ".cache")))
    ap.add_argument("--json", default=str(REPO / "results" / "scale.json"))
    ap.add_argument("--png", default=str(REPO / "docs" / "img" / "scale.png"))
    ap.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true",
                    help="1,000 passages from a 300-passage encoder sample, 5 queries, outputs in a temporary "
                         "folder: checks that it runs (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="scale-smoke-"))
        args.sizes, args.queries = [1_000], 5
        args.work, args.json, args.png = str(tmp / "work"), str(tmp / "scale.json"), str(tmp / "scale.png")
    if args.child:
        print("RESULT " + json.dumps(child(args.child[0], int(args.child[1]), args)), flush=True)
        return 0

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "pool.npy", base_vectors(args.cache_dir, 300 if args.smoke else None))
    qv, qtexts = query_vectors(args.queries, args.cache_dir)
    np.save(work / "queries.npy", qv)
    (work / "queries.json").write_text(json.dumps(qtexts))
    rows, failed = [], False
    for n in args.sizes:
        for m in args.methods:
            cmd = [sys.executable, __file__, "--child", m, str(n), "--queries", str(args.queries), "--work",
                   args.work, "--noise", str(args.noise), "--seed", str(args.seed), "--cache-dir",
                   args.cache_dir]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if p.returncode or line is None:
                print(f"{m} at {n}: failed ({p.stderr.strip().splitlines()[-1:]})", flush=True)
                failed = True
                continue
            r = json.loads(line[7:])
            rows.append(r)
            rec = f"  recall@10 vs flat {r['recall@10_vs_flat']:.3f}" if "recall@10_vs_flat" in r else ""
            print(f"{m:6s} n={n:>9,}  index {r['index_s']:8.2f} s  peak +{r['peak_mb']:8.1f} MB  "
                  f"query P50 {r['p50_ms']:7.3f} ms  P95 {r['p95_ms']:7.3f} ms{rec}  "
                  f"({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| method | N | index s | peak MB | P50 ms | P95 ms | recall@10 vs flat |\n|---|---|---|---|---|---|---|")
    for r in rows:
        rec = f"{r['recall@10_vs_flat']:.3f}" if "recall@10_vs_flat" in r else "-"
        print(f"| {r['method']} | {r['n']:,} | {r['index_s']:.2f} | {r['peak_mb']:.0f} | {r['p50_ms']:.3f} | "
              f"{r['p95_ms']:.3f} | {rec} |")
    print("\ngrowth exponent (cost ~ N^e): | method | index time | peak memory | query P50 |\n|---|---|---|---|")
    for m in args.methods:
        rs = [r for r in rows if r["method"] == m]
        ns = [r["n"] for r in rs]
        print(f"| {m} | {exponent(ns, [r['index_s'] for r in rs]):.2f} | {exponent(ns, [r['peak_mb'] for r in rs]):.2f}"
              f" | {exponent(ns, [r['p50_ms'] for r in rs]):.2f} |")
    plot(rows, args.methods, args.png)
    return 1 if failed else 0


def plot(rows, methods, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, title in zip(axes, ("index_s", "p50_ms", "peak_mb"),
                              ("index time (s)", "single-query P50 (ms)", "peak memory added (MB)"), strict=False):
        for m in methods:
            rs = [r for r in rows if r["method"] == m and r[key] > 0]
            if rs:
                ax.plot([r["n"] for r in rs], [r[key] for r in rs], marker="o", label=m)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("passages")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle("cost vs corpus size (2 shared cores; dense vectors derived from encoder samples + noise)")
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
