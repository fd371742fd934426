"""Inference backends for sentence-transformers embedders: torch, ONNX Runtime (fp32, int8) and OpenVINO.

Conventions
- ``torch`` runs the sentence-transformers model as loaded. The others run a graph exported locally from the same
  weights, once, and stored under ``<cache_dir>/models/exports/<key>/``; ``key`` is a sha256 over the model identity
  (a content hash of its weight, config and tokenizer files), the backend and every export setting (opset,
  quantisation mode, exporter versions), so new weights or settings export anew. Nothing is downloaded.
- The exported graph is the whole sentence-transformers pipeline (transformer, pooling, normalisation) with
  inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (batch and sequence axes dynamic) and one output,
  the sentence embedding; texts are tokenised by the model's own tokenizer with its ``max_seq_length``.
- Attention is exported as plain matmuls and a softmax (the transformers model switched to its ``eager``
  attention for the export, :data:`EXPORT_ATTENTION`): the exported ``sdpa`` attention carries an IsNaN/Select
  pass and a mask add over every attention score, and OpenVINO's conversion turns the eager pattern into one
  ScaledDotProductAttention operation, which the CPU plugin runs as a fused kernel. Measured on MiniLM at f32
  (Intel Xeon, AVX512-VNNI): 1.31x the sdpa export's passages/s, vectors equal to 2e-7. Models whose attention
  cannot be switched are exported as they are.
- ``onnx`` is ``torch.onnx.export`` (TorchScript exporter, opset 17) run by onnxruntime with all graph
  optimisations. ``onnx-int8`` is onnxruntime's dynamic quantisation (``quantize_dynamic``: int8 weights,
  activations quantised per batch at run time) of that graph, per output channel, after onnxruntime's
  pre-processing (shape inference and graph optimisation); see the ONNX Runtime "Quantize ONNX models" guide.
  ``openvino`` is the fp32 ONNX graph converted by ``openvino.convert_model`` and compiled for the CPU at an
  inference precision (``INFERENCE_PRECISION_HINT``): by default the CPU plugin's own choice, which is bf16 on CPUs
  with AVX512-BF16/AMX and f32 elsewhere (OpenVINO "CPU device: floating-point inference precision"). The precision
  actually compiled is read back, logged (``inference_precision``) and part of the embedding cache key, so bf16
  and f32 vectors never mix. bf16 keeps 8 significant bits: measured on SciFact passages, vectors differ from
  torch's by up to 1.5e-3 and query-passage cosines by up to 2e-3 (f32: 2e-7).
- Threads: batches run on ``num_threads`` intra-op threads; a single text (a query as it arrives) runs on a
  second session/compiled model with ``single_text_threads`` threads (default 1), as the torch path does.
- Vectors are L2-normalised float32 whatever the backend. ``onnx-int8`` vectors depend slightly on the batch a text
  is encoded in (activations are quantised with one scale per batch); the other backends' do not (OpenVINO bf16
  included: a text alone and in a batch give the same vector to 1e-7 here).
- ``openvino-int8`` (:mod:`lab.models.int8`) quantises the ``openvino`` graph to static int8 with NNCF, calibrated on
  the corpus's own passages; it is the default (:data:`DEFAULT_BACKEND`, used when ``backend`` is None) for corpora
  of at least 2,000 passages, and smaller ones run on the ``openvino`` graph. Batch encodes on OpenVINO keep
  :data:`OPENVINO_STREAMS` asynchronous requests in flight. Where a model cannot be exported or compiled,
  :func:`lab.models.embedders.load_embedder` warns and runs it on torch, and the embedder's ``describe()`` says so
  (``backend: torch``, ``backend_fallback: <why>``). An explicitly requested backend that fails is an error instead.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.models.batching import PROGRESS_MIN_TEXTS, length_batches

#: Backends a sentence-transformers embedder can run on.
BACKENDS = ("torch", "onnx", "onnx-int8", "openvino", "openvino-int8")
#: The backend used when none is given: the fastest whose nDCG@10 is within 0.005 of torch's on SciFact and ORD-QA
#: and whose query encoded alone ranks as in a batch (benchmarks/encode_speed.py; figures in docs/results.md,
#: "Encoding backends"). openvino-int8 (lab.models.int8: static int8 scales calibrated on the corpus) quantises
#: corpora of at least 2,000 passages and runs smaller ones on the openvino graph at the CPU's precision (bf16 on
#: CPUs with AVX512-BF16/AMX). onnx-int8 also met the quality rule, but its dynamic quantisation scales
#: activations per batch, so a text's vector depends on the texts batched with it.
DEFAULT_BACKEND = "openvino-int8"
#: OpenVINO inference precision asked for: None lets the CPU plugin choose (see the module conventions).
OPENVINO_PRECISION: str | None = None
OPENVINO_PRECISIONS = ("f32", "bf16", "f16")
#: OpenVINO streams (requests in flight) for a batch encode; the cores are shared between them, and the next batch
#: is tokenised while they run. One text (a query as it arrives) runs on one stream. Two streams measured 1.02-1.08x
#: on a sample and 1.26x on the SciFact corpus (benchmarks/encode_speed.py; docs/results.md, "Encoding backends").
OPENVINO_STREAMS = 2
#: Export settings that are part of the export key.
ONNX_OPSET = 17
#: The transformers attention implementation the graph is exported with (see the module conventions).
EXPORT_ATTENTION = "eager"
EXPORT_ATTENTIONS = ("eager", "sdpa")
INT8_SETTINGS = {"weight_type": "QInt8", "per_channel": True, "reduce_range": False,
                 "preprocess": "onnx-shapes+ort-optimize"}


def check_backend(backend: str) -> str:
    """``backend`` itself when it is one of :data:`BACKENDS`; else a ConfigError naming the choices."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    return backend


def export_settings(backend: str, attention: str = EXPORT_ATTENTION) -> dict:
    """Everything besides the weights that shapes an export of ``backend`` (part of its cache key); ``attention``:
    one of :data:`EXPORT_ATTENTIONS` (``sdpa``: the export as it was before :data:`EXPORT_ATTENTION`, kept for
    benchmarks/encode_speed.py's baseline)."""
    import torch

    if attention not in EXPORT_ATTENTIONS:
        raise ConfigError(f"export attention must be one of {', '.join(EXPORT_ATTENTIONS)}, not {attention!r}")
    s = {"backend": backend, "opset": ONNX_OPSET, "torch": torch.__version__, "graph": "st-pipeline-v1"}
    if attention != "sdpa":  # the sdpa export keeps the keys (and caches) it had before the setting existed
        s["attention"] = attention
    if backend == "onnx-int8":
        import onnxruntime

        s.update(INT8_SETTINGS, onnxruntime=onnxruntime.__version__)
    if backend == "openvino":
        import openvino

        s["openvino"] = openvino.__version__
    return s


def export_key(model_identity: str, backend: str, attention: str = EXPORT_ATTENTION) -> str:
    """sha256 (hex) of the model identity, the backend and its export settings."""
    payload = json.dumps({"model": model_identity, **export_settings(backend, attention)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------- export
@contextlib.contextmanager
def _attention(st_model, attention: str):
    """The pipeline's transformers models switched to ``attention`` inside the block, then back."""
    switched = []
    for module in st_model:
        model = getattr(module, "auto_model", None)
        before = getattr(getattr(model, "config", None), "_attn_implementation", None)
        if model is None or before in (None, attention) or not hasattr(model, "set_attn_implementation"):
            continue
        try:
            model.set_attn_implementation(attention)
        except (ValueError, ImportError, NotImplementedError):  # this model cannot switch: exported as it is
            continue
        switched.append((model, before))
    try:
        yield
    finally:
        for model, before in switched:
            model.set_attn_implementation(before)


def _export_onnx(st_model, path: Path, attention: str = EXPORT_ATTENTION) -> None:
    """The sentence-transformers pipeline as one ONNX graph (fp32), its attention exported as ``attention``."""

    import torch

    class Pipeline(torch.nn.Module):
        def __init__(self, st):
            super().__init__()
            self.st = st

        def forward(self, input_ids, attention_mask, token_type_ids):
            feats = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            return self.st(feats)["sentence_embedding"]

    # the example batch has padding, so the traced graph keeps the attention-mask path
    example = st_model.tokenizer(["a short text", "a somewhat longer text to pad the first one against"],
                                 padding=True, return_tensors="pt", return_token_type_ids=True)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["sentence_embedding"] = {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings(), _attention(st_model, attention):
        warnings.simplefilter("ignore")
        torch.onnx.export(Pipeline(st_model).eval(), tuple(example[n] for n in names), str(path),
                          input_names=names, output_names=["sentence_embedding"], dynamic_axes=axes,
                          opset_version=ONNX_OPSET, dynamo=False)


def _quantize_int8(src: Path, dst: Path, work: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, dst, work = src.resolve(), dst.resolve(), work.resolve()
    pre = work / "pre.onnx"
    # the pre-processing writes temporary files into the working directory: run it inside ``work``
    with contextlib.chdir(work):
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # symbolic inference fails on this graph
    quantize_dynamic(str(pre), str(dst), weight_type=QuantType.QInt8, per_channel=INT8_SETTINGS["per_channel"],
                     reduce_range=INT8_SETTINGS["reduce_range"])


def _convert_openvino(src: Path, dst: Path) -> None:
    import openvino as ov

    ov.save_model(ov.convert_model(str(src)), str(dst), compress_to_fp16=False)


#: export folders made or found in this process, by export key: another cache folder with the same key gets a
#: (hard-linked) copy instead of a second export (an export takes ~15 s; tests use many cache folders).
_EXPORTED: dict[str, Path] = {}


def _copy_export(src: Path, out: Path) -> bool:
    """Fill ``out`` with the files of the export folder ``src`` (hard links where possible); False if it is gone."""
    try:
        for f in src.iterdir():
            try:
                os.link(f, out / f.name)
            except OSError:
                shutil.copy2(f, out / f.name)
        return True
    except OSError:
        return False


def exported_model(st_model, model_identity: str, backend: str, cache_dir: str | Path,
                   attention: str = EXPORT_ATTENTION) -> Path:
    """Path of the exported graph for ``backend`` (``model.onnx`` or ``model.xml``), exporting it once.

    The export is written to a temporary folder and moved into place with one rename, so concurrent processes
    never read half a file; one that loses the race keeps the winner's copy. An export already made in this
    process under another cache folder (same key, so the same files) is copied rather than made again.
    """
    check_backend(backend)
    if backend == "torch":
        raise ConfigError("the torch backend runs the model as loaded; there is nothing to export")
    key = export_key(model_identity, backend, attention)
    root = Path(cache_dir) / "models" / "exports"
    target = root / f"{backend}-{key[:16]}"
    name = "model.xml" if backend == "openvino" else "model.onnx"
    if (target / name).is_file():
        _EXPORTED.setdefault(key, target)
        return target / name
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=".export-"))
    try:
        out = work / "out"
        out.mkdir()
        known = _EXPORTED.get(key)
        if not (known is not None and (known / name).is_file() and _copy_export(known, out)):
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            fp32 = work / "fp32.onnx"
            _export_onnx(st_model, fp32, attention)
            if backend == "onnx":
                shutil.move(str(fp32), out / name)
            elif backend == "onnx-int8":
                _quantize_int8(fp32, out / name, work)
            else:
                _convert_openvino(fp32, out / name)
            settings = {"model": model_identity, **export_settings(backend, attention)}
            (out / "export.json").write_text(json.dumps(settings, indent=1, sort_keys=True))
        try:
            os.rename(out, target)
        except OSError:
            if not (target / name).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _EXPORTED.setdefault(key, target)
    return target / name


# ------------------------------------------------------------------------------------------------- runners
def run_in_turn(runner: Callable[[dict], np.ndarray], feeds: Iterable[dict],
                done: Callable[[int, np.ndarray], None]) -> None:
    """Run every feed through ``runner`` one after the other, ``done(i, vectors)`` after each."""
    for i, f in enumerate(feeds):
        done(i, runner(f))


class OnnxRunner:
    """One onnxruntime session: feeds -> sentence embeddings."""

    def __init__(self, path: Path, threads: int, precision: str | None = None):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.precision = precision or "f32"

    def __call__(self, feeds: dict) -> np.ndarray:
        return self.session.run(None, {k: v for k, v in feeds.items() if k in self.inputs})[0]

    def run_all(self, feeds: Iterable[dict], done: Callable[[int, np.ndarray], None]) -> None:
        """Run every feed in turn, ``done(i, vectors)`` after each."""
        run_in_turn(self, feeds, done)


class OpenVinoRunner:
    """One OpenVINO compiled model on the CPU: feeds -> sentence embeddings.

    ``precision`` (``INFERENCE_PRECISION_HINT``: "f32", "bf16", "f16"; None: the plugin's default); ``self.precision``
    is the precision the compiled model reports, which is what ran. ``streams`` > 1 compiles for throughput
    (``PERFORMANCE_HINT`` THROUGHPUT, ``NUM_STREAMS`` streams sharing ``threads``) and :meth:`run_all` keeps that
    many asynchronous requests in flight; 1 compiles for latency (one stream, ``threads`` threads).
    ``fused_attention`` False turns off the CPU plugin's fused attention kernels (``SNIPPETS_MODE`` DISABLE): they
    are faster, but a row's result then depends on the batch's padding by about 2e-7, which an int8 graph's
    activation rounding turns into 3e-3 (see :mod:`lab.models.int8`).
    """

    def __init__(self, path: Path, threads: int, precision: str | None = None, streams: int = 1,
                 fused_attention: bool = True):
        import openvino as ov

        if precision is not None and precision not in OPENVINO_PRECISIONS:
            raise ConfigError(f"OpenVINO precision must be one of {', '.join(OPENVINO_PRECISIONS)} or None, "
                              f"not {precision!r}")
        self.streams = max(1, min(int(streams), int(threads)))
        core = ov.Core()
        cfg = {"INFERENCE_NUM_THREADS": int(threads), "NUM_STREAMS": self.streams,
               "PERFORMANCE_HINT": "THROUGHPUT" if self.streams > 1 else "LATENCY"}
        if precision is not None:
            cfg["INFERENCE_PRECISION_HINT"] = precision
        if not fused_attention:
            cfg["SNIPPETS_MODE"] = "DISABLE"
        self.compiled = core.compile_model(str(path), "CPU", cfg)
        self.inputs = {i.get_any_name() for i in self.compiled.inputs}
        got = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        self.precision = got.to_string() if hasattr(got, "to_string") else str(got)

    def __call__(self, feeds: dict) -> np.ndarray:
        res = self.compiled({k: v for k, v in feeds.items() if k in self.inputs})
        return np.asarray(res[self.compiled.outputs[0]])

    def run_all(self, feeds: Iterable[dict], done: Callable[[int, np.ndarray], None]) -> None:
        """Run every feed (``done(i, vectors)`` after each, in feed order), ``self.streams`` at a time.

        The requests are plain infer requests driven round-robin from the caller's thread: no Python code ever
        runs on OpenVINO's threads (an ``AsyncInferQueue`` callback does), so freeing the compiled model never
        waits on a thread that needs the GIL.
        """
        if self.streams == 1:
            run_in_turn(self, feeds, done)
            return
        requests = [self.compiled.create_infer_request() for _ in range(self.streams)]
        in_flight: list[int | None] = [None] * len(requests)

        def finish(slot: int) -> None:
            i, in_flight[slot] = in_flight[slot], None
            if i is not None:
                requests[slot].wait()
                done(i, np.array(requests[slot].get_output_tensor(0).data, dtype=np.float32))

        started = 0
        try:
            for i, f in enumerate(feeds):
                slot = i % len(requests)
                finish(slot)
                requests[slot].start_async({k: v for k, v in f.items() if k in self.inputs})
                in_flight[slot] = i
                started = i + 1
            for k in range(len(requests)):  # the oldest first, so ``done`` sees feed order
                finish((started + k) % len(requests))
        finally:
            for r in requests:  # an error left requests running: let them end before they are freed
                r.wait()


class ExportedEmbedder:
    """A sentence-transformers embedder run on an exported graph (``onnx``, ``onnx-int8``, ``openvino``).

    Wraps a torch :class:`lab.models.embedders.STEmbedder` (for its tokenizer, prefixes and settings) and keeps
    its interface; ``cache_identity`` adds ``backend=NAME@<export key>`` (and for openvino ``|precision=P``, the
    precision compiled), so each backend has its own vectors. The batch runner is compiled here, so a graph that
    does not load fails at construction. ``precision``: openvino only (None: :data:`OPENVINO_PRECISION`);
    ``streams``: OpenVINO streams for a batch encode (None: :data:`OPENVINO_STREAMS`; 1: one synchronous request).
    ``attention``: how the graph's attention is exported (:data:`EXPORT_ATTENTION`; part of the export key).
    ``fused_attention``: openvino's fused attention kernels (see :class:`OpenVinoRunner`).
    """

    def __init__(self, base, backend: str, cache_dir: str | Path, precision: str | None = None,
                 graph: Path | None = None, streams: int | None = None, attention: str = EXPORT_ATTENTION,
                 fused_attention: bool = True):
        self.base = base
        self.backend = check_backend(backend)
        self.name = base.name
        self.identity = base.identity
        self.dim = base.dim
        self.query_prefix, self.passage_prefix = base.query_prefix, base.passage_prefix
        self.max_seq_length = base.max_seq_length
        self.batch_size, self.num_threads = base.batch_size, base.num_threads
        self.single_text_threads, self.progress = base.single_text_threads, base.progress
        # ``graph``: an OpenVINO graph made from this export elsewhere (lab.models.int8's quantised one)
        self.path = (graph if graph is not None
                     else exported_model(base.model, base.identity, backend, cache_dir, attention))
        self.export_key = export_key(base.identity, backend, attention)
        if precision is not None and backend != "openvino":
            raise ConfigError(f"precision applies to the openvino backend only, not {backend!r}")
        asked = (precision or OPENVINO_PRECISION) if backend == "openvino" else ("int8" if backend == "onnx-int8"
                                                                                  else "f32")
        self.streams = OPENVINO_STREAMS if streams is None else int(streams)  # batch encodes on openvino
        self.fused_attention = fused_attention
        self._runners: dict[tuple[int, int], object] = {}
        # compile once now: the precision it reports is what every other runner is compiled with
        self.precision = self._runner(self.num_threads, asked).precision

    def _runner(self, threads: int, precision: str | None = None):
        """The runner on ``threads`` threads: the batch one (``num_threads``, OpenVINO on
        :data:`OPENVINO_STREAMS` streams) or a single text's (one stream)."""
        streams = self.streams if self.backend == "openvino" and threads == self.num_threads else 1
        if (threads, streams) not in self._runners:
            prec = precision or getattr(self, "precision", None)
            ov = self.backend == "openvino"
            self._runners[(threads, streams)] = (OpenVinoRunner(self.path, threads, prec, streams, self.fused_attention)
                                                 if ov
                                                 else OnnxRunner(self.path, threads, prec))
        return self._runners[(threads, streams)]

    @property
    def inference_precision(self) -> str:
        """The precision the graph runs at ("f32", "bf16", "f16"; "int8" for onnx-int8's weights)."""
        return self.precision

    def cache_identity(self, kind: str) -> str:
        key = f"{self.base.cache_identity(kind)}|backend={self.backend}@{self.export_key[:12]}"
        return f"{key}|precision={self.precision}" if self.backend == "openvino" else key

    def describe(self) -> dict:
        return {**self.base.describe(), "backend": self.backend, "export_key": self.export_key[:12],
                "inference_precision": self.precision}

    def token_lengths(self, texts: Sequence[str], prefix: str = "") -> list[int]:
        return self.base.token_lengths(texts, prefix)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, self.query_prefix)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, self.passage_prefix)

    def encode(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        """Normalised float32 vectors of ``prefix + text``, in input order (batches longest first)."""
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        if len(texts) == 1:
            batches = [np.zeros(1, dtype=np.int64)]
        else:
            _, batches = length_batches(self.token_lengths(texts, prefix), self.batch_size)
        run = self._runner(self.single_text_threads if len(texts) == 1 else self.num_threads)
        tok = self.base.model.tokenizer
        show = self.progress and len(texts) >= PROGRESS_MIN_TEXTS

        def feeds():
            for b in progress(batches, desc=f"encode {self.name} ({self.backend})", enabled=show, unit="batch"):
                f = tok([prefix + texts[i] for i in b], padding=True, truncation=True, max_length=self.max_seq_length,
                        return_tensors="np", return_token_type_ids=True)
                yield {k: np.asarray(v, dtype=np.int64) for k, v in f.items()}

        def done(i: int, vecs: np.ndarray) -> None:
            vecs = np.asarray(vecs, dtype=np.float32)
            out[batches[i]] = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)

        run.run_all(feeds(), done)
        return out
