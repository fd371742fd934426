"""A static (model2vec-style) embedder distilled offline from a sentence-transformers model.

Recipe (Tulkens and van Dongen, "Model2Vec: fast state-of-the-art static embeddings", 2024; the ``distill`` of the
model2vec package): every token of the model's vocabulary is embedded alone (``[CLS] token [SEP]``, mean over the
three positions) by the transformer, the token vectors are reduced by PCA to ``pca_dims`` dimensions and scaled by
SIF weights ``a / (a + p(token))`` with ``p`` a Zipf estimate from the token's rank (``a`` = ``sif_coefficient``).
A text's vector is the mean of its tokens' vectors (no special tokens), L2-normalised; inference is model2vec's
``StaticModel``. model2vec's own ``distill`` needs its ``distill`` extra, which pins transformers < 5.4 and so
conflicts with our sentence-transformers; the recipe is a few lines and runs here on the packaged weights only.

The distilled model is stored once under ``<cache_dir>/models/static-<key>/`` (``key``: sha256 of the teacher's
identity and the distillation settings). Conventions as :mod:`lab.models.embedders`: float32 rows, L2-normalised.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from lab.core.progress import progress

DISTILL_SETTINGS = {"pca_dims": 256, "sif_coefficient": 1e-4, "pooling": "mean-with-special-tokens", "recipe": "v1"}


def _token_vectors(st_model, batch_size: int = 512) -> np.ndarray:
    """One vector per vocabulary id: the transformer's mean over ``[CLS] id [SEP]``."""
    import torch

    tok = st_model.tokenizer
    bert = st_model[0].auto_model.eval()
    n = len(tok)
    cls, sep = tok.cls_token_id, tok.sep_token_id
    out = np.zeros((n, bert.config.hidden_size), dtype=np.float32)
    with torch.no_grad():
        for s in progress(range(0, n, batch_size), desc="distil static vectors", unit="batch"):
            ids = torch.arange(s, min(n, s + batch_size))
            inp = torch.stack([torch.full_like(ids, cls), ids, torch.full_like(ids, sep)], dim=1)
            hidden = bert(input_ids=inp, attention_mask=torch.ones_like(inp)).last_hidden_state
            out[s : s + len(ids)] = hidden.mean(dim=1).numpy()
    return out


def distill(st_model, pca_dims: int = 256, sif_coefficient: float = 1e-4):
    """A model2vec ``StaticModel`` distilled from a loaded sentence-transformers model (see the module docstring)."""
    from model2vec import StaticModel

    vecs = _token_vectors(st_model)
    vecs = vecs - vecs.mean(axis=0, keepdims=True)
    _, _, vt = np.linalg.svd(vecs, full_matrices=False)
    vecs = vecs @ vt[:pca_dims].T
    rank = np.arange(2, len(vecs) + 2, dtype=np.float64)
    proba = (1 / rank) / (1 / rank).sum()
    vecs = (vecs * (sif_coefficient / (sif_coefficient + proba))[:, None]).astype(np.float32)
    config = {"model_type": "model2vec", "architectures": ["StaticModel"], "hidden_dim": int(vecs.shape[1]),
              "normalize": True, **DISTILL_SETTINGS, "pca_dims": pca_dims, "sif_coefficient": sif_coefficient}
    return StaticModel(vectors=vecs, tokenizer=st_model.tokenizer.backend_tokenizer, config=config, normalize=True)


def static_folder(teacher, cache_dir: str | Path) -> Path:
    """Folder of the static model distilled from ``teacher`` (an STEmbedder), distilling it once (atomic)."""
    key = hashlib.sha256(json.dumps({"teacher": teacher.identity, **DISTILL_SETTINGS},
                                    sort_keys=True).encode()).hexdigest()
    root = Path(cache_dir) / "models"
    target = root / f"static-{key[:16]}"
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=".distil-"))
    try:
        model = distill(teacher.model, DISTILL_SETTINGS["pca_dims"], DISTILL_SETTINGS["sif_coefficient"])
        model.save_pretrained(str(work / "model"))
        (work / "model" / "teacher.json").write_text(json.dumps({"teacher": teacher.identity, **DISTILL_SETTINGS}))
        try:
            os.rename(work / "model", target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


class StaticEmbedder:
    """model2vec ``StaticModel`` inference (mean of token vectors; no transformer at query time)."""

    backend = "static"
    query_prefix = passage_prefix = ""

    def __init__(self, folder: Path, name: str, teacher_identity: str, max_seq_length: int | None = 512):
        from model2vec import StaticModel

        self.model = StaticModel.from_pretrained(str(folder))
        self.name = name
        self.identity = f"model2vec:{name}@{folder.name.split('-')[-1][:12]}<{teacher_identity}"
        self.dim = int(self.model.dim)
        self.max_seq_length = max_seq_length

    def cache_identity(self, kind: str) -> str:
        return f"{self.identity}|max_seq_length={self.max_seq_length}"

    def describe(self) -> dict:
        return {"model": self.name, "model_identity": self.identity, "dim": self.dim, "backend": self.backend,
                "max_seq_length": self.max_seq_length}

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        vecs = np.asarray(self.model.encode(texts, max_length=self.max_seq_length, use_multiprocessing=False),
                          dtype=np.float32)
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
