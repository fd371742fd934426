"""Does a second stage help? SciFact test (300 queries): first stages against the same first stage reranked.

Rows (each a full `lab run`-equivalent on the same loaded dataset, in one process):
  bm25                          the first stage alone
  rerank  (alpha=1)             the cross-encoder alone orders BM25's top N
  rerank  (alpha=recommended)   cross-encoder and BM25 scores mixed with the weight the model's validation chose
  rerank  (alpha=A)             the same mix at fixed weights (--alpha A, repeatable; e.g. 0.6, the weight the
                                last README figure used), each paired against BM25
  rerank  baseline              another cross-encoder (--baseline-model, e.g. the previous training), alone and
                                at its own alpha, each paired against the new model's row of the same alpha kind
  rerank  biencoder             an embedding model's cosine over BM25's top N, pure and mixed 50/50 with BM25
                                (the 0.5 is a fixed prior, not tuned)   (--biencoder [--biencoder-model NAME])
  hybrid / hybrid_rerank        the same over the hybrid first stage (BM25 + MiniLM, RRF) (unless --no-hybrid)
Each reranked row gives nDCG@10, its difference to its own first stage (or to the row it names) with a paired
95 % bootstrap CI and a two-sided randomisation p-value, and the wall seconds (scores are cached: a rerun costs
little). The training summary of each trained model (training.json: loss, in-batch negatives, epochs run and kept,
validation, training time, MLflow run) is printed under the table.

    .venv/bin/python benchmarks/rerank_scifact.py [--model models/reranker-scifact] [--top-n 50] [--alpha 0.6]
        [--baseline-model models/OLD] [--max-queries N] [--biencoder] [--no-hybrid] [--threads 2] [--cache-dir .cache]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from lab.core.paths import resolve_repo_path
from lab.experiment.run import load, run_experiment
from lab.metrics import compare
from lab.retrievers import Context, available

METRICS = ["ndcg@10", "recall@10", "mrr@10", "recall@100"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/scifact")
    ap.add_argument("--split", default="test")
    ap.add_argument("--model", default=None, help="cross-encoder name or path (default: the trained default)")
    ap.add_argument("--top-n", type=int, default=50)
    ap.add_argument("--max-length", type=int, default=None, help="cross-encoder tokens (default: as trained)")
    ap.add_argument("--max-queries", type=int)
    ap.add_argument("--alpha", type=float, action="append", default=[],
                    help="also mix the cross-encoder with BM25 at this fixed weight (repeatable)")
    ap.add_argument("--baseline-model", help="a second cross-encoder to pair the model against (e.g. an older one)")
    ap.add_argument("--biencoder", action="store_true", help="add the bi-encoder second stage")
    ap.add_argument("--biencoder-model", default="all-mpnet-base-v2",
                    help="embedding model of the bi-encoder second stage (mpnet: ~1 h of encoding on 2 busy cores)")
    ap.add_argument("--no-hybrid", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    ap.add_argument("--smoke", action="store_true",
                    help="ORD-QA, 5 queries, top 5, no hybrid rows, the packaged MiniLM as an untrained "
                         "cross-encoder unless --model: checks that it runs (CI)")
    args = ap.parse_args()
    if args.smoke:  # the packaged MiniLM as an (untrained) cross-encoder: CI has no trained reranker
        from lab.models.crossencoder import packaged_minilm_path

        args.data, args.max_queries, args.top_n, args.no_hybrid = "data/ord-qa", 5, 5, True
        args.model = args.model or packaged_minilm_path()

    import torch

    torch.set_num_threads(args.threads)
    ctx = Context(cache_dir=resolve_repo_path(args.cache_dir), progress=True)
    ds = load(resolve_repo_path(args.data), progress=False)
    ce = {"model": args.model, "top_n": args.top_n, "max_length": args.max_length}
    plan = [("bm25", "bm25", {}, None),
            ("rerank ce alpha=1", "rerank", {**ce, "alpha": 1.0}, "bm25"),
            ("rerank ce alpha=auto", "rerank", ce, "bm25")]
    plan += [(f"rerank ce alpha={a:g}", "rerank", {**ce, "alpha": a}, "bm25") for a in args.alpha]
    if args.baseline_model:
        old = {**ce, "model": args.baseline_model}
        plan += [("baseline ce alpha=1", "rerank", {**old, "alpha": 1.0}, "rerank ce alpha=1"),
                 ("baseline ce alpha=auto", "rerank", old, "rerank ce alpha=auto")]
    if args.biencoder:
        bi = {"reranker": "biencoder", "model": args.biencoder_model, "top_n": args.top_n}
        short = args.biencoder_model.split("/")[-1][:16]
        plan += [(f"rerank bi {short} a=1", "rerank", {**bi, "alpha": 1.0}, "bm25"),
                 (f"rerank bi {short} a=0.5", "rerank", {**bi, "alpha": 0.5}, "bm25")]
    if not args.no_hybrid and "hybrid" in available():
        plan += [("hybrid", "hybrid", {}, None),
                 ("hybrid_rerank ce alpha=1", "hybrid_rerank", {**ce, "alpha": 1.0}, "hybrid"),
                 ("hybrid_rerank ce alpha=auto", "hybrid_rerank", ce, "hybrid")]

    results, rows = {}, []
    for label, strategy, params, base in plan:
        t0 = time.perf_counter()
        res = run_experiment(ds, strategy, params, split=args.split, k=100, metrics=METRICS, ctx=ctx,
                             max_queries=args.max_queries)
        seconds = time.perf_counter() - t0
        results[label] = res
        row = {"label": label, "seconds": seconds, **res.evaluation.means, "n": res.evaluation.n_queries}
        if base is not None:
            c = compare(res.evaluation, results[base].evaluation, "ndcg@10", seed=0)
            row.update(diff=c["diff"], lo=c["ci_low"], hi=c["ci_high"], p=c["p_permutation"], base=base)
            row["alpha"] = res.info["retriever"].get("alpha")
            rm = res.info["retriever"].get("reranker_model", {})
            row["model"] = (f"{rm.get('model')} weights sha256:{rm['weights_sha256'][:16]}" if "weights_sha256" in rm
                            else f"{rm.get('model')} {rm.get('identity', '')}")
        rows.append(row)
        print(f"  done {label}: nDCG@10 {res.evaluation.means['ndcg@10']:.4f} ({seconds:.0f} s)", flush=True)

    ml = args.max_length or "as trained"
    print(f"\nSciFact {args.split}, {rows[0]['n']} queries, rerank top {args.top_n}, cross-encoder max_length {ml}, "
          f"torch threads {args.threads}")
    print(f"{'run':<30} {'nDCG@10':>8} {'R@10':>7} {'MRR@10':>7} {'R@100':>7}   {'vs first stage (95% CI, p)':<34} "
          f"{'alpha':>5} {'s':>6}")
    for r in rows:
        vs = (f"{r['diff']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] p={r['p']:.3f}" if "diff" in r else "")
        if r.get("base", "").startswith("rerank"):
            vs += f" vs {r['base'].split()[-1]}"
        alpha = f"{r['alpha']:.1f}" if r.get("alpha") is not None else ""
        print(f"{r['label']:<30} {r['ndcg@10']:>8.4f} {r['recall@10']:>7.4f} {r['mrr@10']:>7.4f} "
              f"{r['recall@100']:>7.4f}   {vs:<34} {alpha:>5} {r['seconds']:>6.0f}")
    models = {r["model"] for r in rows if r.get("model")}
    for m in sorted(models):
        print(f"  second stage: {m}")
    for label, path in (("model", args.model), ("baseline", args.baseline_model)):
        if path is not None or label == "model":
            print(f"  {label}: {training_summary(path)}")


def training_summary(model: str | None) -> str:
    """One line from a trained model's training.json (or why there is none)."""
    from lab.core.errors import ConfigError
    from lab.models.crossencoder import read_training_metadata, resolve_model

    try:
        t = read_training_metadata(resolve_model(model))
    except (ConfigError, OSError) as exc:  # a missing or broken folder: say so, the table above stands
        return f"{model}: no training metadata ({exc})"
    if not t:
        return f"{model}: no training.json"
    p = t["params"]
    sources = ", ".join(f"{s['dataset']}:{s['split']}" for s in t.get("sources", [])) or f"{t['dataset']}:{t['split']}"
    vals = " ".join(f"{e['val_ndcg@10']:.3f}" for e in t["epochs"] if "val_ndcg@10" in e)
    in_batch = 'all' if p.get('in_batch_negatives') == -1 else p.get('in_batch_negatives', 0)
    return (f"{sources}; loss {p.get('loss', 'listwise')}, in-batch {in_batch}, "
            f"{p['negatives']} BM25 negatives, lr {p['lr']:g}/head {p['head_lr']:g}; {len(t['epochs'])} of "
            f"{p['epochs']} epochs run (stopped early: {t.get('stopped_early', False)}), epoch {t['selected_epoch']} "
            f"kept; validation nDCG@10 per epoch {vals} (BM25 {t['val_first_stage_ndcg@10'] or float('nan'):.3f}); "
            f"{t['train_seconds']:.0f} s training; alpha {t['recommended_alpha']:.1f}; "
            f"MLflow run {t.get('mlflow_run_id', '-')}")


if __name__ == "__main__":
    main()
