"""Encoding speed and quality of every embedding backend, side by side in one run.

For each backend of a sentence-transformers model (``--model``, default the packaged all-MiniLM-L6-v2: torch, onnx,
onnx-int8, openvino, openvino-int8; see lab.models.backends and lab.models.int8), for openvino compiled at f32
(``openvino-f32``: the precision torch computes in, to separate bf16's speed from the runtime's), openvino as it
ran before (``openvino-sync``: its attention exported as sdpa, not eager, and one synchronous request instead of
two streams), the int8 graph on static shapes (``openvino-int8-static``: batches padded to 32-token buckets and
full batches, one compiled model per shape; a benchmark variant, not a backend) and for the static model distilled
from MiniLM (minilm-static, model2vec recipe), on a set of data/ (``--dataset``, default scifact),
in one process:

- calibration: openvino-int8 is first calibrated (quantised) on the corpus's own passages; the time is printed and
  counted apart (a model and corpus are quantised once, then cached);
- corpus throughput: ``--n`` passages of the corpus (a fixed random sample) encoded by ``encode_passages``
  (length-sorted batches of ``--batch-size``, threads = cores this process may use), uncached, after a 16-passage
  warm-up; ``--rounds`` rounds, the backends taking turns within a round (so a change of machine load hits all of
  them), best round kept; passages/s;
- single-query latency: ``--queries`` test queries encoded alone (``encode_queries([q])``, one thread), P50 and
  P95; "alone = batch": the share of those queries whose top 10 of the sample is the same encoded alone as in one
  batch (1.0 when a text's vector does not depend on its batch);
- quality: test nDCG@10 of dense retrieval (faiss flat) over the whole corpus, passage vectors through the
  embedding cache (``--cache-dir``; each backend, and openvino each precision, has its own keys), so a rerun pays
  only for what is not cached. Backends named in ``--corpus`` encode the whole corpus uncached (a fresh embedding
  cache) and their corpus passages/s is printed; otherwise it is printed only when the corpus was not cached.
  Backends in ``--speed-only`` skip this (no nDCG; not candidates for the default);
- the gap to the limit: each encoding's FLOPs (lab.models.flops: the sample's own tokens through the transformer's
  matmuls and attention), its achieved GFLOP/s in the best round, and the CPU's peak at the precision it computes
  in (torch and onnx f32, onnx-int8 and openvino-int8 int8, openvino its compiled precision), measured in the same
  run by a large MiniLM-shaped matmul (``--peak-shape``: tokens x hidden @ hidden x feed-forward) on the same
  threads, the best of torch's and OpenVINO's kernels (int8: ``torch._int_mm`` and the matmul quantised by NNCF);
  the share of that peak each backend reaches.

The export (once per model and backend, cached) is timed apart and not counted in the speeds. The last lines name
the fastest backend whose nDCG@10 is within ``--tolerance`` (0.005) of torch's and whose query alone ranks as in a
batch: the rule for the default backend (lab.models.backends.DEFAULT_BACKEND); and the default's corpus speed
against torch and openvino, with and without its calibration. ``--json F`` writes every figure.

    nice -n 5 .venv/bin/python benchmarks/encode_speed.py [--dataset scifact] [--model all-MiniLM-L6-v2] [--n 500]
        [--queries 100] [--backends torch onnx ...] [--corpus torch openvino] [--speed-only openvino-f32] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ALL = ("torch", "onnx", "onnx-int8", "openvino", "openvino-int8", "openvino-int8-static", "openvino-sync",
       "openvino-f32", "static")


def scifact_passages(corpus, n: int, seed: int = 0) -> list[str]:
    """``n`` passages of the corpus (title + " " + text), a fixed random sample."""
    from lab.retrievers.dense import passage_text

    docs = list(corpus)
    pick = np.random.default_rng(seed).choice(len(docs), size=min(n, len(docs)), replace=False)
    return [passage_text(docs[i].title, docs[i].text) for i in pick]


class StaticShapes:
    """The openvino-int8 graph run on static shapes (a benchmark variant, not a backend): each batch padded to
    ``batch_size`` rows and its length rounded up to a multiple of ``bucket`` tokens, one compiled model per shape,
    two asynchronous requests per shape, as the streamed backend runs dynamic shapes."""

    def __init__(self, int8, bucket: int = 32):
        self.int8, self.bucket, self.compiled = int8, bucket, {}
        self.dim, self.passage_prefix, self.query_prefix = int8.dim, int8.passage_prefix, int8.query_prefix
        self.base, self.inference_precision = int8.base, "int8"

    def describe(self) -> dict:
        return {**self.int8.describe(), "shape_buckets": self.bucket}

    def calibrate(self, passages) -> None:
        self.int8.calibrate(passages)

    def token_lengths(self, texts, prefix: str = ""):
        return self.int8.token_lengths(texts, prefix)

    def encode_queries(self, texts):
        return self.int8.encode_queries(texts)

    def _compiled(self, graph, rows: int, length: int):
        """The graph compiled for ``rows x length`` inputs (once per shape) and its input names."""
        import openvino as ov

        if length not in self.compiled:
            core = ov.Core()
            model = core.read_model(str(graph.path))
            model.reshape({i.get_any_name(): ov.PartialShape([rows, length]) for i in model.inputs})
            compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": graph.num_threads,
                                                         "PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": 2})
            self.compiled[length] = (compiled, {i.get_any_name() for i in compiled.inputs})
        return self.compiled[length]

    def encode_passages(self, texts):
        import openvino as ov

        from lab.models.batching import length_batches

        graph, texts = self.int8.graph, list(texts)
        rows, tok = graph.batch_size, graph.base.model.tokenizer
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        _, batches = length_batches(self.token_lengths(texts, self.passage_prefix), rows)

        def done(request, members):
            vecs = np.array(request.get_output_tensor(0).data[: len(members)], dtype=np.float32)
            out[members] = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)

        queues = {}
        for b in batches:
            f = tok([self.passage_prefix + texts[i] for i in b], padding=True, truncation=True,
                    max_length=graph.max_seq_length, return_tensors="np", return_token_type_ids=True)
            length = min(-(-f["input_ids"].shape[1] // self.bucket) * self.bucket, graph.max_seq_length)
            compiled, names = self._compiled(graph, rows, length)
            if length not in queues:
                queues[length] = ov.AsyncInferQueue(compiled, 2)
                queues[length].set_callback(done)
            feeds = {}
            for k, v in f.items():
                if k in names:
                    feeds[k] = np.zeros((rows, length), dtype=np.int64)
                    feeds[k][: v.shape[0], : v.shape[1]] = v
            queues[length].start_async(feeds, b)
        for q in queues.values():
            q.wait_all()
        return out


def load(backend: str, cache_dir: str, batch_size: int, model: str = "all-MiniLM-L6-v2"):
    from lab.models.embedders import load_embedder

    if backend == "openvino-int8-static":
        return StaticShapes(load_embedder(model, cache_dir=cache_dir, batch_size=batch_size, progress=False,
                                          backend="openvino-int8"))
    if backend == "static":
        return load_embedder("minilm-static", cache_dir=cache_dir, progress=False)
    if backend == "openvino-f32":
        from lab.models.backends import ExportedEmbedder

        base = load_embedder(model, cache_dir=cache_dir, batch_size=batch_size, progress=False, backend="torch")
        return ExportedEmbedder(base, "openvino", cache_dir, precision="f32")
    if backend == "openvino-sync":
        from lab.models.backends import ExportedEmbedder

        base = load_embedder(model, cache_dir=cache_dir, batch_size=batch_size, progress=False, backend="torch")
        return ExportedEmbedder(base, "openvino", cache_dir, streams=1, attention="sdpa")
    return load_embedder(model, cache_dir=cache_dir, batch_size=batch_size, progress=False, backend=backend)


def quality(emb, ds, cache_dir: str, fresh: bool) -> tuple[float, float | None]:
    """(test nDCG@10, corpus passages/s or None when fewer than 1,000 passages (or half the corpus) were encoded)."""
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
    return ndcg, (encoded / index_s if encoded >= min(1000, len(ds.corpus) // 2) else None)


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
        if "int8" in precisions:  # the same matmul quantised by NNCF, as openvino-int8 quantises the encoder's
            import nncf

            q = nncf.quantize(model, nncf.Dataset([a32, a32 * 0.5]), subset_size=2, fast_bias_correction=False)
            req = ov.Core().compile_model(q, "CPU", {"INFERENCE_NUM_THREADS": threads}).create_infer_request()
            out["int8"] = max(out.get("int8", 0.0), _best_gflops(lambda r=req: r.infer({0: a32}), flops))
    except ImportError:
        pass
    return out


def compute_precision(backend: str, row: dict) -> str | None:
    """The precision a backend's matmuls run in (None: no transformer, the static model)."""
    if backend == "static":
        return None
    if backend in ("onnx-int8", "openvino-int8", "openvino-int8-static"):
        return "int8"
    if backend.startswith("openvino"):
        return {"bf16": "bf16", "bfloat16": "bf16", "f16": "f16"}.get(str(row.get("precision")).lower(), "f32")
    return "f32"


def report(rows: dict, tolerance: float, dataset: str) -> None:
    """The markdown table and the lines that decide the default backend."""
    from lab.models.backends import DEFAULT_BACKEND
    from lab.models.int8 import INT8_MIN_PASSAGES

    t, ov = rows["torch"], rows.get("openvino")
    print("\n| backend | precision | passages/s | x torch | x openvino | GFLOP/s | share of peak | corpus passages/s "
          "| query P50 ms | query P95 ms | alone = batch | nDCG@10 | vs torch |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows.values():
        corpus = f"{r['corpus_pps']:.1f}" if r["corpus_pps"] else "-"
        ndcg = f"{r['ndcg']:.4f} | {r['ndcg'] - t['ndcg']:+.4f}" if r["ndcg"] is not None else "- | -"
        gf = f"{r['gflops']:.1f}" if r["gflops"] else "-"
        share = f"{r['share']:.0%} of {r['compute']} {r['peak']:.0f}" if r["share"] else "-"
        x_ov = f"{r['pps'] / ov['pps']:.2f}x" if ov else "-"
        print(f"| {r['backend']} | {r['precision'] or '-'} | {r['pps']:.1f} | {r['pps'] / t['pps']:.2f}x | {x_ov} | "
              f"{gf} | {share} | {corpus} | {r['q_p50_ms']:.1f} | {r['q_p95_ms']:.1f} | {r['alone_as_batch']:.0%} | "
              f"{ndcg} |")
    ok = [r for r in rows.values() if r["backend"] != "static" and r["ndcg"] is not None
          and r["ndcg"] >= t["ndcg"] - tolerance and r["alone_as_batch"] == 1.0]
    if ok:
        win = max(ok, key=lambda r: r["pps"])
        print(f"\nfastest backend within {tolerance} nDCG@10 of torch whose query alone ranks as in a batch: "
              f"{win['backend']} ({win['pps'] / t['pps']:.2f}x torch's passages/s)")
    d = rows.get(DEFAULT_BACKEND)
    if d and d["corpus_pps"]:
        peers = (("torch", t), ("openvino", ov), ("openvino-sync", rows.get("openvino-sync")))
        vs = [f"{d['corpus_pps'] / r['corpus_pps']:.2f}x {name}" for name, r in peers if r and r["corpus_pps"]]
        cal = f"; with its calibration ({d['calibrate_s']:.0f} s) counted: " + ", ".join(
            f"{name} {(r['corpus_n'] / r['corpus_pps']) / (d['corpus_n'] / d['corpus_pps'] + d['calibrate_s']):.2f}x"
            for name, r in peers if r and r["corpus_pps"]) if "calibrate_s" in d else ""
        print(f"default backend ({DEFAULT_BACKEND}, {d['precision']}) encoded the {dataset} corpus at "
              + ", ".join(vs) + "'s passages/s" + cal)
        if d["corpus_n"] < INT8_MIN_PASSAGES:
            print(f"(a corpus under {INT8_MIN_PASSAGES:,} passages: the default itself runs the openvino graph there; "
                  "the openvino-int8 row is int8 asked for by name)")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def same_top10(alone: np.ndarray, batch: np.ndarray, passages: np.ndarray) -> float:
    """Share of queries whose top 10 of ``passages`` (in order) is the same encoded alone as in one batch."""
    top = lambda q: np.argsort(-(q @ passages.T), axis=1, kind="stable")[:, :10]  # noqa: E731
    return float(np.mean(np.all(top(alone) == top(batch), axis=1)))


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
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="the sentence-transformers model (default MiniLM)")
    ap.add_argument("--json", help="write every figure to this JSON file")
    ap.add_argument("--dataset", default="scifact", help="a set under data/ with a test split (default scifact)")
    ap.add_argument("--smoke", action="store_true",
                    help="torch only, 32 passages, 5 queries, speed only: checks that it runs (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.backends, args.speed_only, args.corpus = ["torch"], ["torch"], []
        args.n, args.rounds, args.queries = 32, 1, 5
        args.peak_shape = [256, 384, 1536]

    from lab.data.beir import load_dataset
    from lab.models.embedders import default_threads
    from lab.models.flops import encoder_shape
    from lab.retrievers.dense import passage_text

    ds = load_dataset(REPO / "data" / args.dataset, splits=["test"], progress=False)
    texts = scifact_passages(ds.corpus, args.n)
    corpus_texts = [passage_text(d.title, d.text) for d in ds.corpus]
    print(f"{args.dataset}, {args.model}: {len(ds.corpus)} passages, {len(ds.split('test')[0])} test queries; "
          f"{default_threads()} threads for batches, 1 for a single query; sample of {len(texts)} passages, "
          f"{args.rounds} round(s); load average at start {os.getloadavg()[0]:.1f}", flush=True)
    rows: dict[str, dict] = {}
    embs = {}
    for b in args.backends:
        t0 = time.perf_counter()
        embs[b] = load(b, args.cache_dir, args.batch_size, args.model)
        rows[b] = {"backend": b, "load_s": time.perf_counter() - t0, "pps": []}
        if hasattr(embs[b], "calibrate"):  # static int8: calibrated (quantised) on the corpus's own passages
            t0 = time.perf_counter()
            embs[b].calibrate(corpus_texts)
            rows[b]["calibrate_s"] = time.perf_counter() - t0
            print(f"{b}: calibrated on the corpus in {rows[b]['calibrate_s']:.1f} s "
                  f"({embs[b].describe().get('calibration_passages', '-')} passages)", flush=True)
        rows[b]["precision"] = getattr(embs[b], "inference_precision", None)
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
        lat, alone = [], []
        for q in qtexts:
            t0 = time.perf_counter()
            alone.append(emb.encode_queries([q])[0])
            lat.append(time.perf_counter() - t0)
        rows[b].update(q_p50_ms=1000 * float(np.median(lat)), q_p95_ms=1000 * float(np.percentile(lat, 95)),
                       alone_as_batch=same_top10(np.asarray(alone), emb.encode_queries(qtexts),
                                                 emb.encode_passages(texts)))
    for b, emb in embs.items():
        r = rows[b]
        r["pps"] = max(r["pps"])
        r["ndcg"], r["corpus_pps"] = (None, None) if b in args.speed_only else \
            quality(emb, ds, args.cache_dir, fresh=b in args.corpus)
        r["corpus_n"] = len(ds.corpus)
        corpus = f"{r['corpus_pps']:7.1f}" if r["corpus_pps"] else "      -"
        ndcg = f"{r['ndcg']:.4f}" if r["ndcg"] is not None else "     -"
        prec = f" [{r['precision']}]" if r["precision"] else ""
        print(f"{b:12s} passages/s {r['pps']:7.1f}  corpus passages/s {corpus}  query P50 {r['q_p50_ms']:6.1f} ms  "
              f"P95 {r['q_p95_ms']:6.1f} ms  nDCG@10 {ndcg}  (load/export {r['load_s']:.1f} s){prec}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    if "torch" in rows:
        report(rows, args.tolerance, args.dataset)
    if args.json:
        Path(args.json).write_text(json.dumps({"dataset": args.dataset, "model": args.model, "cpu": cpu_name(),
                                               "peaks": peaks, "rows": rows}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
