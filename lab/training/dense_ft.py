"""``dense_ft``: dense retrieval with an embedder fine-tuned on a dataset's training pairs.

The strategy trains (or reuses: same base model, data, params and seed give the same content key, see
lab.training.embedder) a sentence-transformers model with :func:`lab.training.embedder.train_embedder` when it is
indexed, then is exactly ``dense`` with that model. Index time therefore includes training the first time and only
the lookup afterwards; ``describe()`` says which (``trained.reused``) and names the training's MLflow run, so an
evaluation run links to the run that made its model.

Params: ``train_dataset`` (required: BEIR folder or a generated set), ``train_split`` ("train"),
``eval_dataset`` (the dataset whose evaluation split the leakage guard protects; default ``train_dataset``),
``train`` (dict of :class:`lab.training.embedder.EmbedderConfig` fields: base_model, epochs, batch_size, lr,
hard_negatives, doc_overlap, ...), ``force`` (bool), ``out`` (model folder; default models/embedder-<data>-<key>),
``tracking_root`` (where the training run is logged, default "mlruns"; None: not logged), and any ``dense`` param
(index, batch_size, ...; ``model`` is the trained folder and cannot be set).
"""
from __future__ import annotations

from dataclasses import fields

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Queries, Run
from lab.retrievers.base import BaseRetriever, Context, build, register
from lab.training.embedder import EmbedderConfig, train_embedder


@register("dense_ft", extra="dense")
class FineTunedDense(BaseRetriever):
    name = "dense_ft"

    def __init__(self, ctx: Context | None = None, *, train_dataset: str | None = None, train_split: str = "train",
                 eval_dataset: str | None = None, train: dict | None = None, force: bool = False,
                 out: str | None = None, tracking_root: str | None = "mlruns", **dense_params):
        if not train_dataset:
            raise ConfigError("dense_ft needs train_dataset (e.g. --set train_dataset=data/scifact); it fine-tunes "
                              "the embedder on that dataset's train_split before indexing")
        if "model" in dense_params:
            raise ConfigError("dense_ft: set the starting model with train.base_model; 'model' is the trained folder")
        known = {f.name for f in fields(EmbedderConfig)}
        unknown = sorted(set(train or {}) - known)
        if unknown:
            raise ConfigError(f"dense_ft: unknown train fields {unknown}; allowed: {sorted(known)}")
        super().__init__(ctx, train_dataset=train_dataset, train_split=train_split, eval_dataset=eval_dataset,
                         force=force, out=out, tracking_root=tracking_root, **dense_params)
        self.config = EmbedderConfig(**{"seed": self.ctx.seed, **(train or {})})
        self.dense_params = dense_params
        self.training: dict = {}
        self.dense = None

    def index(self, corpus: Corpus) -> None:
        p = self.params
        self.training = train_embedder(p["train_dataset"], p["out"], self.config, split=p["train_split"],
                                       eval_dataset=p["eval_dataset"], force=p["force"], ctx=self.ctx,
                                       log=print if self.ctx.progress else (lambda *a: None),
                                       tracking_root=p["tracking_root"])
        self.dense = build("dense", {**self.dense_params, "model": self.training["out"]}, self.ctx)
        self.dense.index(corpus)

    def search(self, queries: Queries, k: int = 100) -> Run:
        if self.dense is None:
            raise ConfigError("dense_ft: call index(corpus) before search")
        run = self.dense.search(queries, k)
        run.name = self.name
        return run

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.dense.search_one(text, k)

    def describe(self) -> dict:
        out = {**super().describe(), **{f"train.{k}": v for k, v in vars(self.config).items()}}
        if self.dense is not None:
            out.update({k: v for k, v in self.dense.describe().items() if k != "strategy"})
        t = self.training
        if t:
            out.update({"trained.model": t["out"], "trained.reused": t.get("reused", False),
                        "trained.content_key": t.get("content_key"), "trained.model_sha256": t.get("model_sha256"),
                        "trained.mlflow_run_id": t.get("mlflow_run_id"),
                        "trained.train_seconds": t.get("train_seconds"),
                        "trained.n_pairs": t.get("n_pairs"), "trained.selected_epoch": t.get("selected_epoch"),
                        "trained.doc_overlap": t.get("leakage", {}).get("doc_overlap"),
                        "trained.forced": t.get("forced")})
        return out
