"""Passages per second: our batched, token-length-sorted encoding against the naive default call.

Peer (same process, same model object, same texts): ``model.encode(texts)`` with sentence-transformers'
defaults (batch 32; it sorts by character length internally). Ours: :meth:`STEmbedder.encode_passages`
(texts sorted by token count, batches of ``--batch-size``, torch threads = cores this process may use).
The two are run alternately (``--rounds``; the order flips each round) so a load change on a shared machine
hits both; the best round of each is reported, with the ratio and the largest difference between the two
outputs (the same vectors up to float noise: the comparison is of speed only).

Second figure, single-query latency (a query as it arrives, ``--queries`` SciFact test queries): ours
(``encode_queries([q])``, one torch thread) against ``model.encode(q)`` on torch's default thread count.

    .venv/bin/python benchmarks/encode_speed.py [--n 1000] [--rounds 1] [--batch-size 32] [--queries 50]
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


def scifact_passages(n: int, seed: int = 0) -> list[str]:
    """``n`` SciFact passages (title + " " + text), a fixed random sample."""
    from lab.data.beir import read_corpus
    from lab.retrievers.dense import passage_text

    corpus = read_corpus(REPO / "data" / "scifact" / "corpus.jsonl.gz", progress=False)
    docs = list(corpus)
    pick = np.random.default_rng(seed).choice(len(docs), size=min(n, len(docs)), replace=False)
    return [passage_text(docs[i].title, docs[i].text) for i in pick]


def scifact_queries(n: int) -> list[str]:
    """The first ``n`` SciFact queries in file order."""
    from lab.data.beir import read_queries

    queries = read_queries(REPO / "data" / "scifact" / "queries.jsonl", progress=False)
    return [queries[q] for q in list(queries)[:n]]


def query_latency(emb, queries: list[str], rounds: int) -> dict[str, float]:
    """Median seconds per single-query encode: ours vs model.encode(q) on torch's default threads."""
    import torch

    model, times = emb.model, {"naive": [], "ours": []}
    default_threads = torch.get_num_threads()
    for r in range(rounds):
        for name in (("naive", "ours") if r % 2 == 0 else ("ours", "naive")):
            for q in queries:
                t0 = time.perf_counter()
                if name == "naive":
                    model.encode(q)
                else:
                    emb.encode_queries([q])
                times[name].append(time.perf_counter() - t0)
    assert torch.get_num_threads() == default_threads
    return {k: float(np.median(v)) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="passages (default 1000)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds per method (default 1)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--queries", type=int, default=50, help="queries for the latency figure (0: skip)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--cache-dir", default=str(REPO / ".cache"))
    args = ap.parse_args(argv)

    from lab.models.embedders import load_embedder

    texts = scifact_passages(args.n)
    emb = load_embedder(args.model, cache_dir=args.cache_dir, batch_size=args.batch_size, progress=False)
    if not hasattr(emb, "model"):
        raise SystemExit(f"{args.model}: not a sentence-transformers model; this benchmark compares ST calls")
    model = emb.model
    lengths = emb.token_lengths(texts)
    print(f"model {emb.identity}  threads {emb.num_threads}  max_seq_length {emb.max_seq_length}")
    print(f"{len(texts)} SciFact passages: mean {np.mean(lengths):.0f} tokens, "
          f"{np.mean(np.array(lengths) == emb.max_seq_length):.0%} truncated at max_seq_length")

    emb.encode_passages(texts[:16])  # warm-up both paths
    model.encode(texts[:16])

    runs = {"naive": [], "ours": []}
    out = {}
    for r in range(args.rounds):
        order = ("naive", "ours") if r % 2 == 0 else ("ours", "naive")
        for name in order:
            t0 = time.perf_counter()
            if name == "naive":
                out[name] = model.encode(texts)  # default call: batch 32, no normalisation
            else:
                out[name] = emb.encode_passages(texts)
            runs[name].append(time.perf_counter() - t0)
            print(f"  round {r + 1} {name:5s}: {len(texts) / runs[name][-1]:7.1f} passages/s", flush=True)

    naive_n = out["naive"] / np.linalg.norm(out["naive"], axis=1, keepdims=True)
    diff = float(np.abs(naive_n - out["ours"]).max())
    best = {k: len(texts) / min(v) for k, v in runs.items()}
    print(f"naive model.encode(texts)         : {best['naive']:7.1f} passages/s")
    print(f"ours  encode_passages (sorted, bs={args.batch_size}): {best['ours']:7.1f} passages/s")
    print(f"ratio ours/naive                  : {best['ours'] / best['naive']:.2f}x   "
          f"(max |difference| of normalised vectors {diff:.1e})")

    if args.queries:
        import torch

        lat = query_latency(emb, scifact_queries(args.queries), args.rounds)
        print(f"single query, naive model.encode(q) ({torch.get_num_threads()} threads): "
              f"{lat['naive'] * 1000:7.1f} ms median")
        print(f"single query, ours encode_queries([q]) ({emb.single_text_threads} thread): "
              f"{lat['ours'] * 1000:7.1f} ms median")
        print(f"ratio naive/ours latency          : {lat['naive'] / lat['ours']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
