"""`lab train-reranker` and `lab train-embedder`: fine-tune the local models (thin shells over lab.training)."""
from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

from lab.cli.options import add_tracking_root, non_negative_int, positive_int
from lab.core.paths import resolve_repo_path
from lab.retrievers.base import Context
from lab.training.embedder import HARD_NEGATIVES, EmbedderConfig, train_embedder
from lab.training.reranker import DOC_OVERLAP, LOSSES, TrainConfig, parse_source, train_reranker


def default_out(dataset: str) -> str:
    """``models/reranker-<dataset folder name>`` (for data/scifact: the rerank strategy's default model)."""
    return f"models/reranker-{Path(dataset).resolve().name}"


def cmd_train_reranker(args) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)})
    out = resolve_repo_path(args.out or default_out(args.dataset))
    ctx = Context(cache_dir=Path(args.cache_dir), progress=not args.no_progress, seed=args.seed)
    extra = [parse_source(spec, args.split) for spec in args.extra_dataset or []]
    meta = train_reranker(args.dataset, out, cfg, split=args.split, eval_dataset=args.eval_dataset, extra=extra,
                          force=args.force, ctx=ctx, log=(lambda *a: None) if args.json else print,
                          tracking_root=None if args.no_mlflow else args.tracking_root, experiment=args.experiment)
    if args.json:
        keep = ("dataset", "split", "n_groups", "steps", "train_seconds", "val_first_stage_ndcg@10",
                "val_rerank_ndcg@10", "recommended_alpha", "selected_epoch", "stopped_early", "weights_sha256",
                "metadata_sha256", "mlflow_run_id", "leakage")
        print(json.dumps({"out": str(out), **{k: meta.get(k) for k in keep}}, indent=2))
    else:
        print(f"use it: lab run --dataset DATA --strategy rerank --set model={out}")
    return 0


def add_parsers(sub) -> None:
    """Add the training subcommands to the `lab` parser's subparsers."""
    d = TrainConfig()
    t = sub.add_parser("train-reranker",
                       help="fine-tune a cross-encoder reranker on a split's qrels or a generated set",
                       description="Fine-tune a CrossEncoder from the packaged all-MiniLM-L6-v2 weights (or --from "
                                   "MODEL) on the qrels of --split (a real split, or a generated test set with "
                                   "--eval-dataset naming the real one), with BM25 hard negatives, optional in-batch "
                                   "negatives, a listwise/pairwise/pointwise loss and early stopping on held-out "
                                   "training queries; save it with a training.json under models/ and log the run to "
                                   "MLflow. Refuses queries (and, by default, positives) of the evaluation split's "
                                   "qrels (--force / --doc-overlap override).")
    _add_data_options(t, "labels")
    t.add_argument("--extra-dataset", action="append", metavar="DIR[:SPLIT]",
                   help="another training source (repeatable; SPLIT defaults to --split), e.g. a generated set "
                        "next to the real training split")
    t.add_argument("--from", dest="base_model", metavar="MODEL",
                   help="CrossEncoder name or path to start from (default: packaged all-MiniLM-L6-v2 + a new head)")
    t.add_argument("--loss", choices=LOSSES, default=d.loss,
                   help="listwise softmax, pairwise RankNet, or pointwise BCE (the naive recipe that collapsed)")
    t.add_argument("--in-batch-negatives", type=int, nargs="?", const=-1, default=d.in_batch_negatives, metavar="N",
                   help="score the other groups' positives of a step as extra negatives (alone: all; N: at most N "
                        "per group); each costs one more forward pass")
    t.add_argument("--epochs", type=positive_int, default=d.epochs, help="maximum epochs (see --patience)")
    t.add_argument("--patience", type=non_negative_int, default=d.patience,
                   help="stop after N epochs without validation gain (0: run all epochs); the best epoch is kept")
    t.add_argument("--negatives", type=non_negative_int, default=d.negatives, help="BM25 hard negatives per positive")
    t.add_argument("--max-pairs", type=positive_int, help="use at most N (query, positive) pairs (a quick run)")
    t.add_argument("--out", metavar="models/NAME", help="output folder (default: models/reranker-<dataset name>)")
    t.add_argument("--force", action="store_true", help="train even when the split overlaps the evaluation split")
    t.add_argument("--eval-split", default=d.eval_split, help="the split the leakage guard protects")
    t.add_argument("--doc-overlap", choices=DOC_OVERLAP, default=d.doc_overlap,
                   help="training positives relevant in the evaluation split: refuse, drop or allow (standard BEIR)")
    t.add_argument("--lr", type=float, default=d.lr, help="learning rate of the encoder body")
    t.add_argument("--head-lr", type=float, default=d.head_lr, help="learning rate of the new scoring head")
    t.add_argument("--max-length", type=positive_int, default=d.max_length,
                   help="tokens of query + passage in training")
    t.add_argument("--freeze-layers", type=non_negative_int, default=d.freeze_layers,
                   help="bottom encoder layers kept fixed")
    t.add_argument("--batch-groups", type=positive_int, default=d.batch_groups,
                   help="(positive + negatives) groups per step")
    t.add_argument("--mine-depth", type=positive_int, default=d.mine_depth,
                   help="negatives are drawn from BM25's top N")
    t.add_argument("--val-fraction", type=float, default=d.val_fraction, help="training queries held out")
    t.add_argument("--val-max-queries", type=positive_int, default=d.val_max_queries)
    _add_run_options(t, d.seed)
    t.set_defaults(func=cmd_train_reranker)
    _add_train_embedder(sub)


def cmd_train_embedder(args) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = EmbedderConfig(**{f.name: getattr(args, f.name) for f in fields(EmbedderConfig) if hasattr(args, f.name)})
    ctx = Context(cache_dir=Path(args.cache_dir), progress=not args.no_progress, seed=args.seed)
    meta = train_embedder(args.dataset, args.out, cfg, split=args.split, eval_dataset=args.eval_dataset,
                          force=args.force, reuse=not args.retrain, ctx=ctx,
                          log=(lambda *a: None) if args.json else print,
                          tracking_root=None if args.no_mlflow else args.tracking_root, experiment=args.experiment)
    if args.json:
        keep = ("out", "reused", "dataset", "split", "n_pairs", "steps", "train_seconds", "selected_epoch",
                "val_base_ndcg@10", "val_best_ndcg@10", "model_sha256", "content_key", "mlflow_run_id", "leakage")
        print(json.dumps({k: meta.get(k) for k in keep}, indent=2))
    else:
        print(f"use it: lab run --dataset DATA --strategy dense --set model={meta['out']}")
    return 0


def _add_train_embedder(sub) -> None:
    d = EmbedderConfig()
    t = sub.add_parser("train-embedder", help="fine-tune a bi-encoder on a split's qrels or a generated test set",
                       description="Fine-tune a sentence-transformers model (default: the packaged all-MiniLM-L6-v2) "
                                   "with in-batch negatives (MultipleNegativesRankingLoss) on the (query, relevant "
                                   "passage) pairs of --split; early stopping on held-out training queries; saved "
                                   "under models/ with training.json and reused when asked again. Refuses queries "
                                   "(and, by default, passages) of the evaluation split's qrels.")
    _add_data_options(t, "pairs")
    t.add_argument("--eval-split", default=d.eval_split, help="the split the leakage guard protects")
    t.add_argument("--from", dest="base_model", default=d.base_model, metavar="MODEL",
                   help="sentence-transformers name or path to start from")
    t.add_argument("--epochs", type=positive_int, default=d.epochs)
    t.add_argument("--batch-size", type=positive_int, default=d.batch_size, help="pairs per batch (in-batch negatives)")
    t.add_argument("--lr", type=float, default=d.lr)
    t.add_argument("--max-seq-length", type=positive_int, default=d.max_seq_length)
    t.add_argument("--hard-negatives", choices=HARD_NEGATIVES, default=d.hard_negatives,
                   help="one mined negative per pair from BM25 or the base model")
    t.add_argument("--mine-depth", type=positive_int, default=d.mine_depth)
    t.add_argument("--max-pairs", type=positive_int, help="use at most N training pairs (a quick run)")
    t.add_argument("--val-fraction", type=float, default=d.val_fraction)
    t.add_argument("--val-max-queries", type=positive_int, default=d.val_max_queries)
    t.add_argument("--val-pool-random", type=non_negative_int, default=d.val_pool_random)
    t.add_argument("--patience", type=non_negative_int, default=d.patience,
                   help="epochs without validation gain before stopping")
    t.add_argument("--doc-overlap", choices=DOC_OVERLAP, default=d.doc_overlap,
                   help="training pairs whose passage is relevant in the evaluation split: refuse, drop or allow")
    t.add_argument("--force", action="store_true", help="train even when queries overlap the evaluation split")
    t.add_argument("--out", metavar="models/NAME", help="output folder (default: models/embedder-<data>-<key>)")
    t.add_argument("--retrain", action="store_true", help="train even when the same training is saved")
    _add_run_options(t, d.seed)
    t.set_defaults(func=cmd_train_embedder)


def _add_data_options(t, what: str) -> None:
    """--dataset, --split, --eval-dataset: what both trainers learn from and what they guard."""
    t.add_argument("--dataset", required=True, help="a BEIR-layout folder: data/scifact, or a generated set")
    t.add_argument("--split", default="train", help=f"split whose qrels are the training {what}")
    t.add_argument("--eval-dataset", help="dataset whose evaluation split is guarded (default: --dataset); give "
                                          "the real dataset when training on a generated set")


def _add_run_options(t, seed: int) -> None:
    """Seed, threads, caches, MLflow and output options both trainers share."""
    t.add_argument("--seed", type=int, default=seed)
    t.add_argument("--threads", type=non_negative_int, default=2, help="torch CPU threads (0: torch's default)")
    t.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    add_tracking_root(t)
    t.add_argument("--experiment", default="training")
    t.add_argument("--no-mlflow", action="store_true")
    t.add_argument("--json", action="store_true", help="print a JSON summary instead of the log")
    t.add_argument("--no-progress", action="store_true")
