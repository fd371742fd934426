"""Encoding speed and quality of every embedding backend, side by side in one run.

For each backend of the packaged all-MiniLM-L6-v2 (torch, onnx, onnx-int8, openvino; see lab.models.backends), for
openvino compiled at f32 (``openvino-f32``: the precision torch computes in, to separate bf16's speed from the
runtime's) and for the static model distilled from it (minilm-static, model2vec recipe), in one process:

- corpus throughput: ``--n`` SciFact passages (a fixed random sample) encoded by ``encode_passages`` (length-sorted
  batches of ``--batch-size``, threads = cores this process may use), uncached, after a 16-passage warm-up;
  ``--rounds`` rounds, the backends taking turns within a round (so a change of machine load hits all of them),
  best round kept; passages/s;
- single-query latency: ``--queries`` SciFact test queries encoded alone (``encode_queries([q])``, one thread),
  P50 and P95;
- quality: SciFact test nDCG@10 of dense retrieval (faiss flat) over the whole corpus (5,183 passages), passage
  vectors through the embedding cache (``--cache-dir``; each backend, and openvino each precision, has its own
  keys), so a rerun pays only for what is not cached. Backends named in ``--corpus`` encode the whole corpus
  uncached (a fresh embedding cache) and their corpus passages/s is printed; otherwise it is printed only when the
  corpus was not cached. Backends in ``--speed-only`` skip this (no nDCG; not candidates for the default).

- the gap to the limit: each encoding's FLOPs (lab.models.flops: the sample's own tokens through the transformer's
  matmuls and attention), its achieved GFLOP/s in the best round, and the CPU's peak at the precision it computes
  in (torch and onnx f32, onnx-int8 int8, openvino its compiled precision), measured in the same run by a large
  MiniLM-shaped matmul (``--peak-shape``: tokens x hidden @ hidden x feed-forward) on the same threads, the best of
  torch's and OpenVINO's kernels (int8: ``torch._int_mm``); the share of that peak each backend reaches.

The export (once per model and backend, cached) is timed apart and not counted in the speeds. The last lines name
the fastest backend whose nDCG@10 is within ``--tolerance`` (0.005) of torch's: the rule for the default backend
(lab.models.backends.DEFAULT_BACKEND), and the default's precision on this CPU.

    nice -n 5 .venv/bin/python benchmarks/encode_speed.py [--n 500] [--queries 100] [--backends torch onnx ...]
        [--corpus torch openvino] [--speed-only openvino-f32]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ALL = ("torch", "onnx", "onnx-int8", "openvino", "openvino-f32", "static")


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
    if backend == "openvino-f32":
        from lab.models.backends import ExportedEmbedder

        base = load_embedder("all-MiniLM-L6-v2", cache_dir=cache_dir, batch_size=batch_size, progress=False,
                             backend="torch")
        return ExportedEmbedder(base, "openvino", cache_dir, precision="f32")
    return load_embedder("all-MiniLM-L6-v2", cache_dir=cache_dir, batch_size=batch_size, progress=False,
                         backend=backend)


def quality(emb, ds, cache_dir: str, fresh: bool) -> tuple[float, float | None]:
    """(SciFact test nDCG@10, corpus passages/s or None when fewer than 1,000 passages were encoded)."""
    from lab.metrics.ranking import evaluate
    from lab.retrievers.base import Context
    from lab.retrievers.dense import DenseRetriever

    with tempfile.TemporaryDirectory(prefix="encode-speed-") as tmp:
        dense = DenseRetriever(Context(cache_dir=Path(tmp if fresh else cache_dir), progress=False), embedder=emb)
        t0 = time.perf_counter()
        dense.index(ds.corpus)
        index_s = time.perf_counter() - t0
        encoded = dense.embeddings.encoded
        queries, qrels = ds.split("test")
        ndcg = evaluate(qrels, dense.search_batch(queries, k=100), ["ndcg@10"]).means["ndcg@10"]
    return ndcg, (encoded / index_s if encoded > 1000 else None)


def _best_gflops(fn, flops: float, reps: int = 5) -> float:
    fn()
    return flops / min(_timed(fn) for _ in range(reps)) / 1e9


def matmul_peaks(threads: int, shape: tuple[int, int, int], precisions) -> dict[str, float]:
    """GFLOP/s of an ``M x K @ K x N`` matmul at each precision (f32, bf16, int8) on ``threads`` threads, the best
    of torch's and OpenVINO's kernels where both have one (see the module docstring)."""
    import torch

    m, k, n = shape
    flops = 2.0 * m * k * n
    out: dict[str, float] = {}
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ta, tb = torch.from_numpy(a32), torch.from_numpy(b32)
        for p in precisions:
            if p == "f32":
                out[p] = _best_gflops(lambda: ta @ tb, flops)
            elif p == "bf16":
                ha, hb = ta.bfloat16(), tb.bfloat16()
                out[p] = _best_gflops(lambda x=ha, y=hb: x @ y, flops)
            elif p == "int8":
                ia = torch.randint(-127, 127, (m, k), dtype=torch.int8)
                ib = torch.randint(-127, 127, (k, n), dtype=torch.int8)
                try:
                    out[p] = _best_gflops(lambda x=ia, y=ib: torch._int_mm(x, y), flops)
                except RuntimeError:  # no int8 matmul kernel on this CPU build
                    pass
    finally:
        torch.set_num_threads(before)
    try:
        import openvino as ov
        from openvino import opset13 as ops

        x = ops.parameter([m, k], np.float32)
        model = ov.Model([ops.matmul(x, ops.constant(b32), False, False)], [x])
        for p in [q for q in precisions if q in ("f32", "bf16")]:
            compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": p,
                                                              "INFERENCE_NUM_THREADS": threads})
            if str(compiled.get_property("INFERENCE_PRECISION_HINT")).lower().endswith(p.replace("f32", "float32")
                                                                                       .replace("bf16", "bfloat16")):
                req = compiled.create_infer_request()
                out[p] = max(out.get(p, 0.0), _best_gflops(lambda r=req: r.infer({0: a32}), flops))
    except ImportError:
        pass
    return out


def compute_precision(backend: str, row: dict) -> str | None:
    """The precision a backend's matmuls run in (None: no transformer, the static model)."""
    if backend == "static":
        return None
    if backend == "onnx-int8":
        return "int8"
    if backend.startswith("openvino"):
        return {"bf16": "bf16", "bfloat16": "bf16", "f16": "f16"}.get(str(row.get("precision")).lower(), "f32")
    return "f32"


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500, help="passages for the throughput figure (default 500)")
    ap.add_argument("--rounds", type=int, default=2, help="throughput rounds, best kept per backend (default 2)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--queries", type=int, default=100, help="queries for the latency figure (default 100)")
    ap.add_argument("--backends", nargs="+", default=list(ALL), choices=ALL)
    ap.add_argument("--corpus", nargs="*", default=[], choices=ALL,
                    help="backends that encode the whole corpus uncached for a corpus passages/s figure")
    ap.add_argument("--speed-only", nargs="*", default=[], choices=ALL,
                    help="backends measured for speed only (no nDCG@10; not candidates for the default)")
    ap.add_argument("--tolerance", type=float, default=0.005, help="nDCG@10 drop accepted for the default")
    ap.add_argument("--peak-shape", nargs=3, type=int, default=[4096, 384, 1536], metavar=("M", "K", "N"),
                    help="the matmul that measures the peak (default: 4096 tokens through MiniLM's feed-forward)")
    ap.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", str(REPO / ".cache")))
    ap.add_argument("--smoke", action="store_true",
                    help="torch only, 32 passages, 5 queries, speed only: checks that it runs (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.backends, args.speed_only, args.corpus = ["torch"], ["torch"], []
        args.n, args.rounds, args.queries = 32, 1, 5
        args.peak_shape = [256, 384, 1536]

    from lab.data.beir import load_dataset
    from lab.models.backends import DEFAULT_BACKEND
    from lab.models.embedders import default_threads
    from lab.models.flops import encoder_shape

    ds = load_dataset(REPO / "data" / "scifact", splits=["test"], progress=False)
    texts = scifact_passages(ds.corpus, args.n)
    print(f"SciFact: {len(ds.corpus)} passages, {len(ds.split('test')[0])} test queries; "
          f"{default_threads()} threads for batches, 1 for a single query; sample of {len(texts)} passages, "
          f"{args.rounds} round(s); load average at start {os.getloadavg()[0]:.1f}", flush=True)
    rows: dict[str, dict] = {}
    embs = {}
    for b in args.backends:
        t0 = time.perf_counter()
        embs[b] = load(b, args.cache_dir, args.batch_size)
        rows[b] = {"backend": b, "load_s": time.perf_counter() - t0, "pps": [],
                   "precision": getattr(embs[b], "inference_precision", None)}
        embs[b].encode_passages(texts[:16])
    for r in range(args.rounds):
        for b, emb in embs.items():
            rows[b]["pps"].append(len(texts) / _timed(lambda emb=emb: emb.encode_passages(texts)))
        print(f"round {r + 1}: " + ", ".join(f"{b} {rows[b]['pps'][-1]:.1f}" for b in embs)
              + f" passages/s; load average {os.getloadavg()[0]:.1f}", flush=True)
    for b, emb in embs.items():
        r, shape = rows[b], encoder_shape(emb)
        r["compute"] = compute_precision(b, r)
        r["flops"] = shape.flops(emb.token_lengths(texts, emb.passage_prefix)) if shape and r["compute"] else None
    needed = sorted({r["compute"] for r in rows.values() if r["compute"]})
    peaks = matmul_peaks(default_threads(), tuple(args.peak_shape), needed)
    print("peak (" + " x ".join(map(str, args.peak_shape)) + " matmul, same threads): "
          + ", ".join(f"{p} {g:.1f} GFLOP/s" for p, g in peaks.items()) + f"; load average {os.getloadavg()[0]:.1f}",
          flush=True)
    for b in embs:
        r = rows[b]
        best = max(r["pps"])
        r["gflops"] = r["flops"] * best / len(texts) / 1e9 if r["flops"] else None
        r["peak"] = peaks.get(r["compute"] or "")
        r["share"] = r["gflops"] / r["peak"] if r["gflops"] and r["peak"] else None
        if r["flops"]:
            share = f", {r['share']:.0%} of the {r['compute']} peak" if r["share"] else ""
            print(f"{b:12s} {r['flops'] / 1e12:.3f} TFLOP for the sample, {r['gflops']:.1f} GFLOP/s{share}", flush=True)
    queries, _ = ds.split("test")
    qtexts = [queries[q] for q in list(queries)[: args.queries]]
    for b, emb in embs.items():
        emb.encode_queries(qtexts[:3])
        lat = [_timed(lambda q=q, emb=emb: emb.encode_queries([q])) for q in qtexts]
        rows[b].update(q_p50_ms=1000 * float(np.median(lat)), q_p95_ms=1000 * float(np.percentile(lat, 95)))
    for b, emb in embs.items():
        r = rows[b]
        r["pps"] = max(r["pps"])
        r["ndcg"], r["corpus_pps"] = (None, None) if b in args.speed_only else \
            quality(emb, ds, args.cache_dir, fresh=b in args.corpus)
        corpus = f"{r['corpus_pps']:7.1f}" if r["corpus_pps"] else "      -"
        ndcg = f"{r['ndcg']:.4f}" if r["ndcg"] is not None else "     -"
        prec = f" [{r['precision']}]" if r["precision"] else ""
        print(f"{b:12s} passages/s {r['pps']:7.1f}  corpus passages/s {corpus}  query P50 {r['q_p50_ms']:6.1f} ms  "
              f"P95 {r['q_p95_ms']:6.1f} ms  nDCG@10 {ndcg}  (load/export {r['load_s']:.1f} s){prec}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    if "torch" in rows:
        t = rows["torch"]
        print("\n| backend | precision | passages/s | x torch | GFLOP/s | share of peak | corpus passages/s | "
              "query P50 ms | query P95 ms | nDCG@10 | vs torch |\n|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows.values():
            corpus = f"{r['corpus_pps']:.1f}" if r["corpus_pps"] else "-"
            ndcg = f"{r['ndcg']:.4f} | {r['ndcg'] - t['ndcg']:+.4f}" if r["ndcg"] is not None else "- | -"
            gf = f"{r['gflops']:.1f}" if r["gflops"] else "-"
            share = f"{r['share']:.0%} of {r['compute']} {r['peak']:.0f}" if r["share"] else "-"
            print(f"| {r['backend']} | {r['precision'] or '-'} | {r['pps']:.1f} | {r['pps'] / t['pps']:.2f}x | "
                  f"{gf} | {share} | {corpus} | {r['q_p50_ms']:.1f} | {r['q_p95_ms']:.1f} | {ndcg} |")
        ok = [r for r in rows.values() if r["backend"] != "static" and r["ndcg"] is not None
              and r["ndcg"] >= t["ndcg"] - args.tolerance]
        if ok:
            win = max(ok, key=lambda r: r["pps"])
            print(f"\nfastest backend within {args.tolerance} nDCG@10 of torch: {win['backend']} "
                  f"({win['pps'] / t['pps']:.2f}x torch's passages/s)")
        d = rows.get(DEFAULT_BACKEND)
        if d and d["corpus_pps"] and t["corpus_pps"]:
            print(f"default backend ({DEFAULT_BACKEND}, {d['precision']}) encoded the SciFact corpus at "
                  f"{d['corpus_pps'] / t['corpus_pps']:.2f}x torch's passages/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
