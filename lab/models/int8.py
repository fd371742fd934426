"""Static int8 encoding (backend ``openvino-int8``): NNCF post-training quantisation of the exported OpenVINO graph,
calibrated on a seeded sample of the corpus's own passages.

Conventions
- The graph quantised is the ``openvino`` export of :mod:`lab.models.backends`. ``nncf.quantize`` (model type
  transformer, SmoothQuant on MatMuls with alpha :data:`SMOOTHQUANT_ALPHA`, fast bias correction) inserts int8
  quantise/dequantise pairs whose activation scales are **static**, measured once on the calibration sample; the
  CPU plugin runs those MatMuls in int8 and the rest at its default precision (bf16 on CPUs with AVX512-BF16/AMX).
  Static scales mean a text's vector does not depend on the texts batched with it: a query alone gives the same
  vector as in a batch (benchmarks/encode_speed.py checks the rankings). NNCF: "Post-training Quantization",
  docs.openvino.ai; SmoothQuant: Xiao et al., ICML 2023.
- Calibration: :data:`CALIBRATION_SIZE` distinct passages drawn with seed :data:`CALIBRATION_SEED` from the first
  passages the embedder encodes (a retriever's corpus), fed longest first in batches of :data:`CALIBRATION_BATCH`.
  The quantised graph is cached under ``<cache_dir>/models/exports/openvino-int8-<key>/``; ``key`` is a sha256 over
  the fp export's key, these settings, the nncf and openvino versions and the sample's texts, so a model and corpus
  are quantised once. The embedding cache keys carry the key (``|backend=openvino-int8@<key>``).
- An embedder is calibrated once and keeps that calibration, so all the vectors it gives are comparable.
- As the default (``backend`` None): calibration costs 20-30 s on 2 cores and pays back from about
  :data:`INT8_MIN_PASSAGES` passages, so a smaller corpus, or texts encoded before any passages, run on the
  ``openvino`` graph at the CPU's precision, with the vectors and cache keys of ``backend=openvino``; ``describe()``
  says why (``int8_skipped``). ``backend="openvino-int8"`` asks for int8 on any corpus of at least
  :data:`MIN_CALIBRATION_TEXTS` distinct passages, and encoding before any passages is then an error.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np

from lab.core.atomic import atomic_folder
from lab.core.errors import ConfigError
from lab.core.phases import PhaseReporter
from lab.models.backends import ExportedEmbedder

#: Passages the scales are measured on, their seed and how many go through the graph at a time.
CALIBRATION_SIZE = 128
CALIBRATION_SEED = 0
CALIBRATION_BATCH = 8
#: SmoothQuant's migration strength for MatMuls (NNCF's default for transformers).
SMOOTHQUANT_ALPHA = 0.95
#: The int8 graph runs without the CPU plugin's fused attention kernels: with them, a text's int8 vector moved by up
#: to 3e-3 with the padding of its batch (2 of 100 SciFact queries ranked their top 10 differently alone), without
#: them by 0; they were 1.27x faster (74 against 59 passages/s, Intel Xeon with AVX512-VNNI).
FUSED_ATTENTION = False
#: Fewest distinct passages ``backend="openvino-int8"`` calibrates on.
MIN_CALIBRATION_TEXTS = 32
#: Smallest corpus on which the default quantises (below it the default runs the openvino graph unquantised).
INT8_MIN_PASSAGES = 2000


def calibration_settings() -> dict:
    """Everything besides the graph and the sample that shapes the quantised graph (part of its key)."""
    return {"method": "nncf.quantize", "model_type": "transformer", "smooth_quant_alpha": SMOOTHQUANT_ALPHA,
            "fast_bias_correction": True, "size": CALIBRATION_SIZE, "seed": CALIBRATION_SEED,
            "batch": CALIBRATION_BATCH, "nncf": _version("nncf"), "openvino": _version("openvino"),
            "fused_attention": FUSED_ATTENTION}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def calibration_sample(texts: Sequence[str], size: int = CALIBRATION_SIZE, seed: int = CALIBRATION_SEED) -> list[str]:
    """``size`` distinct texts of ``texts`` drawn uniformly with ``seed`` (all of them when there are fewer), in
    the order drawn."""
    distinct = list(dict.fromkeys(texts))
    pick = np.random.default_rng(seed).choice(len(distinct), size=min(size, len(distinct)), replace=False)
    return [distinct[i] for i in pick]


def calibration_key(fp_export_key: str, sample: Sequence[str]) -> str:
    """sha256 (hex) of the fp export's key, :func:`calibration_settings` and the sample's texts."""
    h = hashlib.sha256(json.dumps({"export": fp_export_key, **calibration_settings()}, sort_keys=True).encode())
    for t in sample:
        h.update(b"\0" + t.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def quantized_model(fp: ExportedEmbedder, sample: Sequence[str], key: str, cache_dir: str | Path) -> Path:
    """Path of the int8 graph of ``fp`` (an ``openvino`` embedder) calibrated on ``sample``, quantised once per
    ``key`` and moved into its cache folder in one step."""
    target = Path(cache_dir) / "models" / "exports" / f"openvino-int8-{key[:16]}"
    if (target / "model.xml").is_file():
        return target / "model.xml"
    phase = PhaseReporter("calibrating int8 on", len(sample), unit="passage")  # the sweep's bar shows it
    try:
        with atomic_folder(target) as out:
            quantize(fp, sample, out / "model.xml")
            (out / "calibration.json").write_text(json.dumps({"key": key, "passages": len(sample),
                                                              **calibration_settings()}, indent=1, sort_keys=True))
        phase.update(len(sample))
    finally:
        phase.close()
    return target / "model.xml"


def quantize(fp: ExportedEmbedder, sample: Sequence[str], dst: Path, alpha: float = SMOOTHQUANT_ALPHA,
             batch: int = CALIBRATION_BATCH) -> None:
    """NNCF post-training quantisation of ``fp``'s graph on ``sample`` (see the module conventions), saved at
    ``dst`` (OpenVINO IR). ``alpha``: SmoothQuant's strength for MatMuls; ``batch``: passages per calibration
    input (benchmarks/int8_calibration.py compares settings)."""
    try:
        import nncf
        from nncf.quantization.advanced_parameters import (
            AdvancedQuantizationParameters,
            AdvancedSmoothQuantParameters,
        )
    except ImportError as e:
        raise ConfigError("backend=openvino-int8 needs nncf: pip install -c constraints.txt nncf") from e
    import openvino as ov

    tok = fp.base.model.tokenizer
    ordered = sorted(sample, key=len, reverse=True)
    batches = [ordered[s : s + batch] for s in range(0, len(ordered), batch)]
    model = ov.Core().read_model(str(fp.path))
    inputs = {i.get_any_name() for i in model.inputs}  # e.g. mpnet's graph takes no token_type_ids
    feeds = []
    for b in batches:
        f = tok([fp.passage_prefix + t for t in b], padding=True, truncation=True, max_length=fp.max_seq_length,
                return_tensors="np", return_token_type_ids=True)
        feeds.append({k: np.asarray(v, dtype=np.int64) for k, v in f.items() if k in inputs})
    advanced = AdvancedQuantizationParameters(
        smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha))
    quantized = nncf.quantize(model, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(feeds), fast_bias_correction=True, advanced_parameters=advanced)
    ov.save_model(quantized, str(dst))


class Int8Embedder:
    """An ``openvino`` embedder that quantises itself to static int8 on the first passages it encodes (see the
    module conventions). ``auto``: the default's rule (int8 from :data:`INT8_MIN_PASSAGES` passages, else the
    openvino graph as it is); False: int8 was asked for by name."""

    backend_fallback: str | None = None

    def __init__(self, fp: ExportedEmbedder, cache_dir: str | Path, auto: bool = True):
        if fp.backend != "openvino":
            raise ConfigError(f"openvino-int8 quantises the openvino graph, not {fp.backend!r}")
        self.fp, self.base, self.cache_dir, self.auto = fp, fp.base, Path(cache_dir), auto
        self.name, self.identity, self.dim = fp.name, fp.identity, fp.dim
        self.query_prefix, self.passage_prefix = fp.query_prefix, fp.passage_prefix
        self.max_seq_length, self.batch_size, self.num_threads = fp.max_seq_length, fp.batch_size, fp.num_threads
        self.single_text_threads, self.progress = fp.single_text_threads, fp.progress
        self.calibration: str | None = None  # the calibration key once calibrated
        self.int8_skipped: str | None = None  # why the default runs unquantised
        self._sample: list[str] = []
        self._int8: ExportedEmbedder | None = None

    # ------------------------------------------------------------------ which graph runs
    def calibrate(self, passages: Sequence[str]) -> None:
        """Calibrate on ``passages`` (the corpus), once: draw the sample and quantise (or load the graph quantised
        before on the same sample), before any vector or cache key depends on it."""
        if self.calibration or self.int8_skipped:
            return
        distinct = list(dict.fromkeys(passages))
        if self.auto and len(distinct) < INT8_MIN_PASSAGES:
            self.int8_skipped = (f"{len(distinct):,} passages: int8 calibration pays back from {INT8_MIN_PASSAGES:,}; "
                                 "pass backend=openvino-int8 to quantise anyway")
            return
        if len(distinct) < MIN_CALIBRATION_TEXTS:
            raise ConfigError(f"backend=openvino-int8 calibrates on the corpus and needs at least "
                              f"{MIN_CALIBRATION_TEXTS} distinct passages, got {len(distinct)}; use backend=openvino")
        self._sample = calibration_sample(distinct)
        self.calibration = calibration_key(self.fp.export_key, self._sample)
        self._active()

    def _decided(self) -> None:
        if self.calibration or self.int8_skipped:
            return
        if not self.auto:
            raise ConfigError("backend=openvino-int8 is calibrated on the corpus's passages: encode (index) the "
                              "passages before any query")
        self.int8_skipped = "texts were encoded before any passages, so there was no corpus to calibrate on"

    def _active(self) -> ExportedEmbedder:
        self._decided()
        if not self.calibration:
            return self.fp
        if self._int8 is None:
            try:
                xml = quantized_model(self.fp, self._sample, self.calibration, self.cache_dir)
                self._int8 = ExportedEmbedder(self.base, "openvino", self.cache_dir, graph=xml,
                                              fused_attention=FUSED_ATTENTION)
            except Exception as e:  # noqa: BLE001 - the default falls back, named; int8 asked for by name raises
                why = f"int8 quantisation of {self.name} failed ({type(e).__name__}: {str(e).strip()[:300]})"
                if not self.auto:
                    raise ConfigError(f"backend=openvino-int8: {why}; pass backend=openvino") from e
                warnings.warn(f"{self.name}: {why}; running the openvino graph unquantised", RuntimeWarning,
                              stacklevel=3)
                self.calibration, self.int8_skipped = None, why
                return self.fp
        return self._int8

    @property
    def graph(self) -> ExportedEmbedder:
        """The embedder that runs: the int8 graph once calibrated, else the openvino one."""
        return self._active()

    # ------------------------------------------------------------------ the embedder interface
    @property
    def backend(self) -> str:
        return "openvino" if self.int8_skipped else "openvino-int8"

    @property
    def inference_precision(self) -> str:
        """"int8" once quantised (the MatMuls; other operations at the openvino graph's precision), else that."""
        return self.fp.precision if self.int8_skipped else "int8"

    def cache_identity(self, kind: str) -> str:
        self._decided()
        if not self.calibration:
            return self.fp.cache_identity(kind)
        return f"{self.base.cache_identity(kind)}|backend=openvino-int8@{self.calibration[:12]}"

    def describe(self) -> dict:
        d = {**self.fp.describe(), "backend": self.backend, "inference_precision": self.inference_precision}
        if self.calibration:
            d.update(calibration_key=self.calibration[:12], calibration_passages=len(self._sample),
                     precision_elsewhere=self.fp.precision)
        if self.int8_skipped:
            d["int8_skipped"] = self.int8_skipped
        return d

    def token_lengths(self, texts: Sequence[str], prefix: str = "") -> list[int]:
        return self.base.token_lengths(texts, prefix)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._active().encode(texts, self.query_prefix)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        self.calibrate(texts)
        return self._active().encode(texts, self.passage_prefix)

    def encode(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        return self._active().encode(texts, prefix)
