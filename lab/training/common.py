"""The skeleton lab.training's trainers share (bi-encoder: lab.training.embedder; cross-encoder:
lab.training.reranker); each trainer keeps only its own model, examples and loss.

1. Labels: the (query, relevant passage) pairs of a split's qrels (grade >= ``threshold``), of a real dataset or
   a generated test set (:func:`guard_split`).
2. Leakage guard against the evaluation split's qrels (:func:`guard_split`, the rules in the trainers' module
   docstrings): the evaluation split itself is refused as training split of the evaluation dataset; training
   query ids judged in the evaluation split are refused unless forced; training queries with an evaluation
   query's text (:func:`norm_query`) are dropped; pairs whose passage is relevant to an evaluation query are
   refused, dropped or allowed (``doc_overlap``). Each trainer words its messages (:class:`GuardTexts`).
3. Validation: a seeded slice of the training queries (:func:`split_validation`).
4. Hard negatives: passages among a first stage's top ``depth`` (:func:`first_stage`) that are not judged for the
   query (:func:`unjudged`); each trainer samples from them its own way.
5. Fitting (:func:`fit`): AdamW steps with linear warm-up then decay (:func:`lr_factor`), gradient norm clipped
   at 1, a loss curve of mean losses, validation after each epoch, the best epoch kept (:func:`restore_best`) and
   early stopping after ``patience`` epochs without a validation gain (the "patience" rule of Prechelt, "Early
   Stopping - But When?", 1998).
6. Output: the model folder and its ``training.json`` (:data:`TRAINING_FILE`), reused when its content key
   (:func:`content_key`, sha256 of what shapes the model) matches (:func:`reusable`), and one MLflow run per
   training (:func:`log_training_run`, run lifecycle of lab.tracking.lifecycle: FAILED with tag ``error`` when
   logging raises, never left RUNNING).
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from lab.core.errors import ConfigError
from lab.core.paths import public_paths_in
from lab.core.progress import progress
from lab.data.types import Dataset, Qrels, Queries
from lab.retrievers.base import build
from lab.tracking.lifecycle import tracked_run

TRAINING_FILE = "training.json"
DOC_OVERLAP = ("refuse", "drop", "allow")


# ------------------------------------------------------------------ pure helpers
@dataclass(frozen=True)
class Pair:
    """A (query, relevant passage) training pair, with an optional hard negative passage."""

    query_id: str
    doc_id: str
    negative: str | None = None


def norm_query(text: str) -> str:
    """The form in which query texts are compared (stripped, lower-case)."""
    return text.strip().lower()


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps to 1, then linear decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


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


def guard(train_q: Queries, train_qrels: Qrels, eval_q: Queries | None, eval_qrels: Qrels | None,
          pairs: list[Pair]) -> dict:
    """Overlap of the training data with the evaluation split: query ids judged there, training queries whose
    text equals an evaluation query's, and training pairs whose passage is relevant to an evaluation query."""
    if eval_qrels is None:
        return {"query_ids": [], "text_duplicates": [], "doc_pairs": [], "eval_docs": 0}
    shared = sorted(set(train_qrels.query_ids) & set(eval_qrels.query_ids))
    seen = {norm_query(eval_q[q]) for q in eval_q} if eval_q is not None else set()
    dups = sorted(q for q in train_q if norm_query(train_q[q]) in seen)
    eval_docs = {d for q in eval_qrels.query_ids for d in eval_qrels.relevant(q)}
    doc_pairs = [p for p in pairs if p.doc_id in eval_docs]
    return {"query_ids": shared, "text_duplicates": dups, "doc_pairs": doc_pairs, "eval_docs": len(eval_docs)}


def shared_pairs(train: Qrels, evaluation: Qrels) -> dict:
    """Overlap of a training split with an evaluation split: shared query ids and shared (query, doc) pairs."""
    shared_q = sorted(set(train.query_ids) & set(evaluation.query_ids))
    pairs = sorted((q, d) for q in shared_q for d in train[q] if d in evaluation[q])
    return {"query_ids": shared_q, "pairs": pairs}


def unjudged(ranked: Sequence[str], judged, depth: int) -> list[str]:
    """Hard-negative candidates: the first ``depth`` ranked docs that have no qrels entry (any grade) for the
    query (judged non-relevant ones are kept out too, as possibly relevant), in rank order."""
    return [d for d in ranked[:depth] if d not in judged]


def content_key(base_identity: str, data_fingerprint: str, split: str, params: dict, force: bool,
                eval_fingerprint: str | None) -> str:
    """sha256 naming one training: what it starts from, what it learns from, how (every param, seed included),
    and what it was guarded against. Equal keys mean the saved model can be reused."""
    doc = {"base": base_identity, "data": data_fingerprint, "split": split, "params": params,
           "force": bool(force), "eval": eval_fingerprint}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


# ------------------------------------------------------------------ first stage
def first_stage(strategy: str, params: dict, corpus, queries: Queries, depth: int, ctx) -> dict[str, dict[str, float]]:
    """``{query id: {doc id: score}}``, best first, of strategy ``strategy`` (lab.retrievers) over ``corpus``."""
    retriever = build(strategy, dict(params), ctx)
    retriever.index(corpus)
    run = retriever.search(queries, depth)
    return {q: dict(run.ranked(q)) for q in queries}


# ------------------------------------------------------------------ the leakage guard
@dataclass(frozen=True)
class GuardTexts:
    """How one trainer words its guard messages: ``str.format`` templates over the fields :func:`guard_split`
    passes (path, split, have, eval_split, ev_path, name, n_ids, first_id, example_query, n_shared_pairs,
    n_dups, n_doc_pairs, n_pairs, n_docs, first_doc)."""

    command: str  # "train-embedder"
    no_split: str
    shared_ids: str
    text_dups: str
    doc_overlap: str


@dataclass
class Guarded:
    """One training split after the guard."""

    queries: Queries  # the split's queries
    qrels: Qrels  # the split's qrels, whole
    pairs: list[Pair]  # every (query, relevant passage) pair in the corpus, qrels order
    kept: list[Pair]  # the pairs to train on
    leak: dict  # what :func:`guard` found
    shared_pairs: list  # (query id, doc id) pairs judged in both splits
    dropped: set  # (query id, doc id) left out by doc_overlap "drop" (queries left out by text not counted)


def require_split(ds: Dataset, split: str, texts: GuardTexts) -> None:
    """ConfigError unless ``ds`` has qrels for ``split``."""
    if split not in ds.qrels:
        raise ConfigError(texts.no_split.format(path=ds.path, split=split, have=sorted(ds.qrels)))


def guard_split(ds: Dataset, split: str, ev: Dataset, *, same_dataset: bool, eval_split: str, force: bool,
                doc_overlap: str, texts: GuardTexts, threshold: int = 1, log=print) -> Guarded:
    """The leakage guard (module docstring, step 2) on split ``split`` of ``ds``, against split ``eval_split``
    of ``ev``; ``same_dataset``: ``ev`` is the training dataset itself. ConfigError when it refuses."""
    require_split(ds, split, texts)
    if same_dataset and split == eval_split:
        raise ConfigError(f"{texts.command}: --split {split} is the evaluation split of {ds.path}; train on another "
                          "split (e.g. --split train), or on a generated set with --eval-dataset naming the real one")
    train_q, train_qrels = ds.split(split)
    pairs = [Pair(q, d) for q in train_qrels.query_ids for d in sorted(train_qrels.relevant(q, threshold))
             if d in ds.corpus]
    if eval_split in ev.qrels:
        eval_q, eval_qrels = ev.split(eval_split)
        leak = guard(train_q, train_qrels, eval_q, eval_qrels, pairs)
        shared = shared_pairs(train_qrels, eval_qrels)["pairs"]
    else:
        leak = guard(train_q, train_qrels, None, None, pairs)
        shared = []
        log(f"note: {ev.path} has no {eval_split!r} qrels; leakage guard skipped")
    fields = {"path": ds.path, "split": split, "eval_split": eval_split, "ev_path": ev.path, "name": ds.name,
              "n_pairs": len(pairs)}
    if leak["query_ids"] and not force:
        raise ConfigError(texts.shared_ids.format(
            **fields, n_ids=len(leak["query_ids"]), first_id=leak["query_ids"][0], n_shared_pairs=len(shared),
            example_query=shared[0][0] if shared else leak["query_ids"][0]))
    if leak["text_duplicates"]:
        log(texts.text_dups.format(**fields, n_dups=len(leak["text_duplicates"])))
    if leak["doc_pairs"] and doc_overlap == "refuse" and not force:
        raise ConfigError(texts.doc_overlap.format(
            **fields, n_doc_pairs=len(leak["doc_pairs"]), n_docs=len({p.doc_id for p in leak["doc_pairs"]}),
            first_doc=leak["doc_pairs"][0].doc_id))
    dups = set(leak["text_duplicates"])
    dropped = ({(p.query_id, p.doc_id) for p in leak["doc_pairs"] if p.query_id not in dups}
               if doc_overlap == "drop" else set())
    kept = [p for p in pairs if p.query_id not in dups and (p.query_id, p.doc_id) not in dropped]
    return Guarded(train_q, train_qrels, pairs, kept, leak, shared, dropped)


# ------------------------------------------------------------------ fitting
@dataclass
class Best:
    """The best epoch so far: its number (0: the starting model; None: none yet), validation figure, weights
    (a copy of the state dict; None: the model as it is) and whatever else the trainer's validation returned."""

    epoch: int | None
    score: float
    state: dict | None = None
    extra: Any = None


@dataclass
class Fit:
    """What :func:`fit` did: per-epoch entries (epoch, train_loss, seconds, val_ndcg@10), the loss curve (step,
    epoch, mean loss), the best epoch, optimiser steps, whether it stopped early, seconds spent."""

    history: list[dict] = field(default_factory=list)
    curve: list[dict] = field(default_factory=list)
    best: Best = field(default_factory=lambda: Best(None, -1.0))
    steps: int = 0
    stopped_early: bool = False
    train_seconds: float = 0.0


@dataclass(frozen=True)
class FitOptions:
    """The knobs of :func:`fit`'s loop, shared by both trainers.

    - epochs: at most this many passes (``batches(epoch)`` gives each one's batches).
    - total_steps: the steps of the whole run (the learning-rate schedule's length; the curve's last point).
    - warmup: share of ``total_steps`` spent warming up (``round(warmup x total_steps)`` steps, at least 1).
    - patience: epochs in a row without a validation gain before stopping (None: never).
    - log_every: the loss curve takes the mean of every ``log_every`` losses.
    - flush_each_epoch: also a curve point at each epoch's end for the losses left over.
    - show: a progress bar per epoch.
    """

    epochs: int
    total_steps: int
    warmup: float = 0.1
    patience: int | None = None
    log_every: int = 5
    flush_each_epoch: bool = True
    show: bool = False


def fit(model, opt, batches: Callable[[int], Sequence], loss_of: Callable[[Any, int], Any], options: FitOptions, *,
        clip_params: Iterable, best: Best, validate: Callable[[], tuple[float, Any]] | None = None, log=print,
        epoch_message: Callable[[dict], str] = lambda e: f"epoch {e['epoch']}",
        stop_message: Callable[[int, Best], str] = lambda stale, best: "early stop") -> Fit:
    """Train ``model`` for at most ``options.epochs`` epochs (module docstring, step 5) and return a :class:`Fit`.

    batches(epoch): that epoch's batches (epoch from 0). loss_of(batch, epoch): the batch's loss tensor. Each
    step sets every param group's lr to its initial lr x :func:`lr_factor` (warm-up: ``round(options.warmup x
    options.total_steps)`` steps, at least 1), back-propagates, clips the gradient norm of ``clip_params`` at 1
    and steps. The loss curve gets the mean of every ``options.log_every`` losses (and of the rest at the last
    step, and at each epoch's end when ``options.flush_each_epoch``); an epoch's ``train_loss`` is the mean of its
    curve points. validate(): (validation nDCG@10, extra) of the model now; an epoch that beats ``best.score``
    becomes the best (weights copied). Training stops after ``options.patience`` epochs in a row without a gain
    (None: never; counted from ``best``, so a start that no epoch beats counts too), except after the last epoch.
    The model is left as the last epoch made it: see :func:`restore_best`. ``log`` gets ``epoch_message(entry)``
    after each epoch and ``stop_message(stale epochs, best)`` when it stops early."""
    epochs, total_steps, warmup = options.epochs, options.total_steps, options.warmup
    patience, log_every, flush_each_epoch, show = (options.patience, options.log_every, options.flush_each_epoch,
                                                   options.show)
    import torch

    clip_params = list(clip_params)
    warmup_steps = max(1, round(warmup * total_steps))
    base_lrs = [g["lr"] for g in opt.param_groups]
    out = Fit(best=best)
    window: list[float] = []
    stale = 0
    t_train = time.time()
    for epoch in range(epochs):
        model.train()
        bar = progress(batches(epoch), desc=f"epoch {epoch + 1}/{epochs}", enabled=show)
        for batch in bar:
            for group, lr0 in zip(opt.param_groups, base_lrs, strict=True):
                group["lr"] = lr0 * lr_factor(out.steps, total_steps, warmup_steps)
            loss = loss_of(batch, epoch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(clip_params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            window.append(float(loss.item()))
            out.steps += 1
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{np.mean(window[-10:]):.3f}")
            if len(window) == log_every or out.steps == total_steps:
                out.curve.append({"step": out.steps, "epoch": epoch + 1, "loss": float(np.mean(window))})
                window = []
        if flush_each_epoch and window:
            out.curve.append({"step": out.steps, "epoch": epoch + 1, "loss": float(np.mean(window))})
            window = []
        entry = {"epoch": epoch + 1,
                 "train_loss": float(np.mean([c["loss"] for c in out.curve if c["epoch"] == epoch + 1]
                                             or [float("nan")])),
                 "seconds": round(time.time() - t_train, 1)}
        if validate is not None:
            score, extra = validate()
            entry["val_ndcg@10"] = score
            if score > out.best.score:
                out.best = Best(epoch + 1, score, {k: v.detach().clone() for k, v in model.state_dict().items()},
                                extra)
                stale = 0
            else:
                stale += 1
        out.history.append(entry)
        log(epoch_message(entry))
        if validate is not None and patience is not None and stale >= patience and epoch + 1 < epochs:
            log(stop_message(stale, out.best))
            out.stopped_early = True
            break
    out.train_seconds = time.time() - t_train
    return out


def restore_best(model, result: Fit) -> None:
    """Load the best epoch's weights into ``model`` unless the last epoch is the best (or none was copied)."""
    if result.best.state is not None and result.best.epoch != len(result.history):
        model.load_state_dict(result.best.state)


# ------------------------------------------------------------------ output
def reusable(out: str | Path, key: str, log=print) -> dict | None:
    """The metadata of the training saved in ``out`` when its content key is ``key`` (then nothing needs
    training), else None (saying so when ``out`` holds another training)."""
    meta_file = Path(out) / TRAINING_FILE
    if not meta_file.is_file():
        return None
    old = json.loads(meta_file.read_text(encoding="utf-8"))
    if old.get("content_key") == key:
        log(f"reusing {out}: same base model, data, params and seed (content key {key[:12]})")
        return old
    log(f"{out} holds another training (content key {str(old.get('content_key'))[:12]}); training anew")
    return None


def save_metadata(meta: dict, out: str | Path, tracking_root, experiment: str,
                  log_run: Callable[[dict, Path, Any, str], str]) -> dict:
    """Log the training to MLflow (``log_run``; skipped when ``tracking_root`` is None), record its run id as
    ``mlflow_run_id`` and write ``meta`` to ``out/training.json``; returns ``meta``. Absolute paths in ``meta``
    (the dataset's, the evaluation dataset's, the base model's) are made public first
    (:func:`lab.core.paths.public_paths_in`): no machine path is logged or written."""
    meta.update(public_paths_in(meta))
    if tracking_root is not None:
        meta["mlflow_run_id"] = log_run(meta, Path(out), tracking_root, experiment)
    (Path(out) / TRAINING_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    return meta


def log_training_run(meta: dict, out: Path, tracking_root, experiment: str, *, run_name: str, param_keys: Sequence[str],
                     figures: dict, tags: dict, extra_params: dict | None = None,
                     epoch_train_loss: bool = False) -> str:
    """One MLflow run for a training; returns its id. Params: ``params.<field>`` of every config field, the
    ``param_keys`` of ``meta``, ``extra_params``, ``leakage.<key>`` (lists as their length). Metrics:
    ``train_loss`` by step (the loss curve), ``val_ndcg_at_10`` by epoch (and ``epoch_train_loss`` by epoch when
    asked), ``figures`` (names mapped by lab.tracking.store). Tags: kind=training, trained_model (the folder),
    ``tags``, dataset_fingerprint, seed, and the environment. Ends FINISHED, or FAILED with tag ``error`` when a
    step raises (lab.tracking.lifecycle)."""
    with tracked_run(experiment, run_name=run_name, tracking_root=tracking_root, environment=True) as run:
        params = {f"params.{k}": v for k, v in meta["params"].items()}
        params.update({k: meta[k] for k in param_keys})
        params.update(extra_params or {})
        params.update({f"leakage.{k}": v if not isinstance(v, list) else len(v) for k, v in meta["leakage"].items()})
        run.log_params(params)
        for c in meta["loss_curve"]:
            run.log_metric("train_loss", c["loss"], step=c["step"])
        for e in meta["epochs"]:
            if "val_ndcg@10" in e:
                run.log_metric("val_ndcg_at_10", e["val_ndcg@10"], step=e["epoch"])
            if epoch_train_loss:
                run.log_metric("epoch_train_loss", e["train_loss"], step=e["epoch"])
        run.log_metrics(figures)
        run.set_tags({"kind": "training", "trained_model": str(out), **tags,
                      "dataset_fingerprint": meta["dataset_fingerprint"], "seed": meta["seed"]})
    return run.run_id
