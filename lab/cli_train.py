"""`lab train-reranker`: fine-tune the local cross-encoder reranker (a thin shell over lab.training.reranker)."""
from __future__ import annotations

import json
import os
from pathlib import Path


def default_out(dataset: str) -> str:
    """``models/reranker-<dataset folder name>`` (for data/scifact: the rerank strategy's default model)."""
    return f"models/reranker-{Path(dataset).resolve().name}"


def cmd_train_reranker(args) -> int:
    from lab.paths import resolve_repo_path
    from lab.retrievers.base import Context
    from lab.training.reranker import TrainConfig, train_reranker

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    defaults = TrainConfig()
    cfg = TrainConfig(
        base_model=args.base_model, epochs=args.epochs, negatives=args.negatives, max_pairs=args.max_pairs,
        mine_depth=args.mine_depth, batch_groups=args.batch_groups, lr=args.lr, head_lr=args.head_lr,
        max_length=args.max_length, freeze_layers=args.freeze_layers, val_fraction=args.val_fraction,
        val_max_queries=args.val_max_queries, val_depth=defaults.val_depth, eval_split=args.eval_split,
        seed=args.seed)
    out = resolve_repo_path(args.out or default_out(args.dataset))
    ctx = Context(cache_dir=Path(args.cache_dir), progress=not args.no_progress, seed=args.seed)
    quiet = args.json
    meta = train_reranker(args.dataset, out, cfg, split=args.split, force=args.force, ctx=ctx,
                          log=(lambda *a: None) if quiet else print)
    if args.json:
        keep = ("dataset", "split", "n_groups", "steps", "train_seconds", "val_first_stage_ndcg@10",
                "val_rerank_ndcg@10", "recommended_alpha", "selected_epoch", "weights_sha256", "metadata_sha256")
        print(json.dumps({"out": str(out), **{k: meta[k] for k in keep}}, indent=2))
    return 0


def add_parsers(sub) -> None:
    """Add the training subcommands to the `lab` parser's subparsers."""
    from lab.training.reranker import TrainConfig

    d = TrainConfig()
    t = sub.add_parser("train-reranker", help="fine-tune a cross-encoder reranker on a split's qrels (BM25 negatives)",
                       description="Fine-tune a CrossEncoder from the packaged all-MiniLM-L6-v2 weights (or --from "
                                   "MODEL) on the qrels of --split, with BM25 hard negatives; save it with a "
                                   "training.json under models/. Refuses when the split overlaps the evaluation "
                                   "split's qrels (--force overrides).")
    t.add_argument("--dataset", required=True, help="a BEIR-layout folder, e.g. data/scifact")
    t.add_argument("--split", default="train", help="split whose qrels are the training labels")
    t.add_argument("--from", dest="base_model", metavar="MODEL",
                   help="CrossEncoder name or path to start from (default: packaged all-MiniLM-L6-v2 + a new head)")
    t.add_argument("--epochs", type=int, default=d.epochs)
    t.add_argument("--negatives", type=int, default=d.negatives, help="BM25 hard negatives per positive")
    t.add_argument("--max-pairs", type=int, help="use at most N (query, positive) pairs (a quick run)")
    t.add_argument("--out", metavar="models/NAME", help="output folder (default: models/reranker-<dataset name>)")
    t.add_argument("--force", action="store_true", help="train even when the split overlaps the evaluation split")
    t.add_argument("--eval-split", default=d.eval_split, help="the split the leakage guard protects")
    t.add_argument("--lr", type=float, default=d.lr, help="learning rate of the encoder body")
    t.add_argument("--head-lr", type=float, default=d.head_lr, help="learning rate of the new scoring head")
    t.add_argument("--max-length", type=int, default=d.max_length, help="tokens of query + passage in training")
    t.add_argument("--freeze-layers", type=int, default=d.freeze_layers, help="bottom encoder layers kept fixed")
    t.add_argument("--batch-groups", type=int, default=d.batch_groups, help="(positive + negatives) groups per step")
    t.add_argument("--mine-depth", type=int, default=d.mine_depth, help="negatives are drawn from BM25's top N")
    t.add_argument("--val-fraction", type=float, default=d.val_fraction, help="training queries held out")
    t.add_argument("--val-max-queries", type=int, default=d.val_max_queries)
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--threads", type=int, default=2, help="torch CPU threads (0: torch's default)")
    t.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    t.add_argument("--json", action="store_true", help="print a JSON summary instead of the log")
    t.add_argument("--no-progress", action="store_true")
    t.set_defaults(func=cmd_train_reranker)

