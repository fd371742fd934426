"""Which static int8 calibration holds quality: SmoothQuant's alpha and the calibration size, per set.

For each ``--sets`` set (data/<set>, its test split) and each (size, alpha) of ``--sizes`` x ``--alphas``: draw
``size`` passages of the corpus (lab.models.int8.calibration_sample, seed 0), quantise the packaged MiniLM's
openvino graph with NNCF on them (lab.models.int8.quantize, in a temporary folder), encode the whole corpus with it
and score dense retrieval (faiss flat, nDCG@10); torch and the unquantised openvino graph are scored once per set
as the references. Prints the quantisation seconds, nDCG@10, its difference to torch, and the share of test
queries whose top 10 is the same with the query encoded alone as in one batch.

    .venv/bin/python benchmarks/int8_calibration.py [--sets scifact ord-qa] [--sizes 64 128] [--alphas 0.5 0.95]
        [--smoke]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def score(emb, ds, cache_dir: Path) -> tuple[float, float]:
    """(test nDCG@10, share of queries whose top 10 is the same encoded alone as in a batch)."""
    from lab.metrics.ranking import evaluate
    from lab.retrievers.base import Context
    from lab.retrievers.dense import DenseRetriever

    dense = DenseRetriever(Context(cache_dir=cache_dir, progress=False), embedder=emb)
    dense.index(ds.corpus)
    queries, qrels = ds.split("test")
    ndcg = evaluate(qrels, dense.search_batch(queries, k=100), ["ndcg@10"]).means["ndcg@10"]
    texts = [queries[q] for q in queries]
    batch = dense.search_vectors(emb.encode_queries(texts), 10)
    alone = [dense.search_one(t, 10) for t in texts]
    same = float(np.mean([[d for d, _ in a] == [d for d, _ in b] for a, b in zip(alone, batch, strict=True)]))
    return ndcg, same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=["scifact", "ord-qa"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.5, 0.95])
    ap.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", str(REPO / ".cache")))
    ap.add_argument("--smoke", action="store_true", help="ORD-QA, 32 passages, alpha 0.95: checks that it runs (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sets, args.sizes, args.alphas = ["ord-qa"], [32], [0.95]

    from lab.data.beir import load_dataset
    from lab.models.backends import ExportedEmbedder
    from lab.models.embedders import load_embedder
    from lab.models.int8 import calibration_sample, quantize
    from lab.retrievers.dense import passage_text

    torch_emb = load_embedder("minilm", cache_dir=args.cache_dir, progress=False, backend="torch")
    fp = ExportedEmbedder(torch_emb, "openvino", args.cache_dir)
    print("| set | calibration | alpha | quantise s | nDCG@10 | vs torch | alone = batch |\n"
          "|---|---|---|---|---|---|---|")
    for name in args.sets:
        ds = load_dataset(REPO / "data" / name, splits=["test"], progress=False)
        passages = [passage_text(d.title, d.text) for d in ds.corpus]
        with tempfile.TemporaryDirectory(prefix="int8-cal-") as tmp:
            ref, _ = score(torch_emb, ds, Path(args.cache_dir))
            print(f"| {name} | torch (reference) | - | - | {ref:.4f} | - | - |", flush=True)
            ov, same = score(fp, ds, Path(args.cache_dir))
            print(f"| {name} | openvino, not quantised | - | - | {ov:.4f} | {ov - ref:+.4f} | {same:.0%} |", flush=True)
            for size in args.sizes:
                for alpha in args.alphas:
                    xml = Path(tmp) / f"{size}-{alpha}" / "model.xml"
                    xml.parent.mkdir()
                    t0 = time.perf_counter()
                    quantize(fp, calibration_sample(passages, size), xml, alpha=alpha)
                    secs = time.perf_counter() - t0
                    emb = ExportedEmbedder(torch_emb, "openvino", args.cache_dir, graph=xml)
                    ndcg, same = score(emb, ds, Path(tmp) / f"cache-{size}-{alpha}")
                    print(f"| {name} | {size} passages | {alpha} | {secs:.1f} | {ndcg:.4f} | {ndcg - ref:+.4f} | "
                          f"{same:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
