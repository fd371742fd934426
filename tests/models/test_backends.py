"""lab.models.backends: exported graphs give the torch vectors (to a stated tolerance), keys differ by backend and
precision, openvino (what the default runs below its int8 threshold, lab.models.int8) keeps a text's vector
independent of its batch, and the default falls back to torch, saying so, where the export fails."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from lab.core.cache import Cache, EmbeddingCache
from lab.core.errors import ConfigError
from lab.models import backends
from lab.models.backends import BACKENDS, DEFAULT_BACKEND, ExportedEmbedder, export_key
from lab.models.embedders import load_embedder

TEXTS = [
    "Aspirin lowers the risk of a first heart attack in men over fifty.",
    "BRCA1 mutations raise the lifetime risk of breast cancer; a cohort of 2,000 carriers was followed for twenty "
    "years, and the risk was highest before the age of fifty.",
    "x",
    "Vitamin D",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("backends-cache")


@pytest.fixture(scope="module")
def torch_emb(cache_dir):
    return load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="torch")


@pytest.fixture(scope="module")
def onnx_emb(cache_dir):
    return load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="onnx")


def test_onnx_vectors_match_torch(torch_emb, onnx_emb):
    ref = torch_emb.encode_passages(TEXTS)
    got = onnx_emb.encode_passages(TEXTS)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.abs(got - ref).max() < 1e-4  # same fp32 graph: float noise only
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    # a single query runs on its own one-thread session and gives the batch's vector
    assert np.abs(onnx_emb.encode_queries([TEXTS[1]])[0] - got[1]).max() < 1e-5


def test_export_is_cached_and_keyed(cache_dir, torch_emb, onnx_emb):
    again = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="onnx")
    assert again.path == onnx_emb.path and onnx_emb.path.is_file()
    assert onnx_emb.path.parent.parent == cache_dir / "models" / "exports"
    keys = {export_key(torch_emb.identity, b) for b in BACKENDS if b != "torch"}
    assert len(keys) == len(BACKENDS) - 1
    assert export_key("st:other@123", "onnx") != export_key(torch_emb.identity, "onnx")


def test_embedding_cache_key_differs_by_backend(cache_dir, torch_emb, onnx_emb):
    assert torch_emb.cache_identity("passage") != onnx_emb.cache_identity("passage")
    assert "backend=onnx@" in onnx_emb.cache_identity("query")
    store = EmbeddingCache(Cache(cache_dir), progress=False)
    store.encode(torch_emb, TEXTS[:2])
    store.encode(onnx_emb, TEXTS[:2])
    assert store.encoded == 4 and store.hits == 0  # no backend reads another's vectors
    store.encode(onnx_emb, TEXTS[:2])
    assert store.hits == 2


def test_bad_backend_is_one_line(cache_dir):
    with pytest.raises(ConfigError, match="backend must be one of torch, onnx, onnx-int8, openvino, openvino-int8, "
                                          "not 'tensorrt'"):
        load_embedder("minilm", cache_dir=cache_dir, backend="tensorrt")
    with pytest.raises(ConfigError, match="runs on its own engine"):
        load_embedder("minilm-static", cache_dir=cache_dir, backend="onnx")
    assert DEFAULT_BACKEND in BACKENDS


def test_dense_declares_backend():
    from lab.retrievers.base import param_problems

    assert param_problems("dense", {"backend": "onnx-int8"}) == []
    problems = param_problems("dense", {"backend": "cuda"})
    assert problems and "backend='cuda' is not valid" in problems[0] and "'openvino'" in problems[0]


def test_dense_logs_backend(cache_dir, onnx_emb):
    from lab.data.types import Corpus, Document
    from lab.retrievers.base import Context
    from lab.retrievers.dense import DenseRetriever

    corpus = Corpus({f"d{i}": Document(f"d{i}", t) for i, t in enumerate(TEXTS)})
    dense = DenseRetriever(Context(cache_dir=cache_dir, progress=False), embedder=onnx_emb)
    dense.index(corpus)
    assert dense.search_one("heart attack aspirin", 1)[0][0] == "d0"
    assert dense.describe()["backend"] == "onnx" and dense.describe()["inference_precision"] == "f32"
    by_default = DenseRetriever(Context(cache_dir=cache_dir, progress=False))  # backend None: the default
    by_default.index(corpus)
    d = by_default.describe()
    # the default (openvino-int8) quantises from 2,000 passages: on four it runs the openvino graph and says why
    assert DEFAULT_BACKEND == "openvino-int8" and d["backend"] == "openvino" and "2,000" in d["int8_skipped"]
    assert d["inference_precision"] and "backend_fallback" not in d


@pytest.fixture(scope="module")
def openvino_emb(cache_dir):
    return load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="openvino")


def test_openvino_keyed_apart_from_torch(torch_emb, openvino_emb):
    assert openvino_emb.backend == "openvino"
    assert openvino_emb.inference_precision in ("f32", "bf16", "f16")  # what the CPU plugin compiled
    for kind in ("query", "passage"):
        key = openvino_emb.cache_identity(kind)
        # torch's key is the pre-backend one (existing torch caches stay valid for backend=torch) and is never
        # what the default writes under: no torch vectors are read back as openvino ones, nor bf16 as f32
        assert key.startswith(torch_emb.cache_identity(kind) + "|backend=openvino@")
        assert key.endswith(f"|precision={openvino_emb.inference_precision}")
        assert "backend=" not in torch_emb.cache_identity(kind)
    d = openvino_emb.describe()
    assert d["backend"] == "openvino" and d["inference_precision"] == openvino_emb.inference_precision
    assert "backend_fallback" not in d and torch_emb.describe()["backend"] == "torch"


def test_openvino_vector_does_not_depend_on_the_batch(openvino_emb):
    """A text alone (one-thread compiled model) gives its vector in a batch (padded, two threads), to 1e-5."""
    batched = openvino_emb.encode_passages(TEXTS)
    alone = np.stack([openvino_emb.encode_passages([t])[0] for t in TEXTS])
    assert np.abs(alone - batched).max() < 1e-5
    reordered = openvino_emb.encode_passages(TEXTS[::-1] + ["another text in the batch, longer than most of them"])
    assert np.abs(reordered[: len(TEXTS)][::-1] - batched).max() < 1e-5


def test_openvino_f32_equals_torch(cache_dir, torch_emb, openvino_emb):
    """At f32 OpenVINO gives torch's vectors (2e-7 measured); the default's precision (bf16 on AMX/AVX512-BF16
    CPUs) is what makes it fast, and the key tells the two apart."""
    f32 = ExportedEmbedder(torch_emb, "openvino", cache_dir, precision="f32")
    assert f32.inference_precision == "f32"
    assert np.abs(f32.encode_passages(TEXTS) - torch_emb.encode_passages(TEXTS)).max() < 1e-5
    if openvino_emb.inference_precision != "f32":
        assert f32.cache_identity("passage") != openvino_emb.cache_identity("passage")
    with pytest.raises(ConfigError, match="OpenVINO precision must be one of f32, bf16, f16 or None, not 'fp8'"):
        ExportedEmbedder(torch_emb, "openvino", cache_dir, precision="fp8")
    with pytest.raises(ConfigError, match="precision applies to the openvino backend only"):
        ExportedEmbedder(torch_emb, "onnx", cache_dir, precision="f32")


def test_openvino_is_close_to_torch(torch_emb, openvino_emb):
    """bf16 keeps 8 significant bits (relative rounding 2**-9 ~ 2e-3 per operation): vectors moved by up to 1.5e-3
    and cosines by up to 2e-3 on SciFact passages, hence these bounds; f32 would be within 1e-5."""
    ref, got = torch_emb.encode_passages(TEXTS), openvino_emb.encode_passages(TEXTS)
    assert np.abs(got - ref).max() < 5e-3
    assert (got * ref).sum(axis=1).min() > 0.9999
    q_ref, q_got = torch_emb.encode_queries(TEXTS[:2]), openvino_emb.encode_queries(TEXTS[:2])
    assert np.abs(q_got @ got.T - q_ref @ ref.T).max() < 5e-3


def test_export_made_once_per_process_and_copied_to_another_cache(tmp_path, torch_emb, openvino_emb, monkeypatch):
    def no_export(*a, **k):
        raise AssertionError("exported again")

    monkeypatch.setattr(backends, "_export_onnx", no_export)
    other = ExportedEmbedder(torch_emb, "openvino", tmp_path / "other-cache")
    assert other.path.parent.parent == tmp_path / "other-cache" / "models" / "exports"
    assert other.path.name == openvino_emb.path.name and other.path.parent.name == openvino_emb.path.parent.name
    assert np.abs(other.encode_passages(TEXTS[:2]) - openvino_emb.encode_passages(TEXTS[:2])).max() < 1e-6


def test_default_falls_back_to_torch_and_says_so(tmp_path, monkeypatch):
    from lab.data.types import Corpus, Document
    from lab.retrievers.base import Context
    from lab.retrievers.dense import DenseRetriever

    def broken(*a, **k):
        raise RuntimeError("exporter missing an operator")

    monkeypatch.setattr(backends, "_EXPORTED", {})
    monkeypatch.setattr(backends, "_export_onnx", broken)
    with pytest.warns(RuntimeWarning, match="default backend is not available, openvino-int8 export/compile of "
                                            "all-MiniLM-L6-v2 failed .RuntimeError: exporter missing an operator"):
        emb = load_embedder("minilm", cache_dir=tmp_path, progress=False)
    assert emb.backend == "torch" and "running on torch" in emb.backend_fallback
    assert emb.describe()["backend_fallback"] == emb.backend_fallback
    assert "backend=" not in emb.cache_identity("passage")  # its vectors are torch's, keyed as torch's
    dense = DenseRetriever(Context(cache_dir=tmp_path, progress=False), embedder=emb)
    dense.index(Corpus({"d0": Document("d0", TEXTS[0])}))
    d = dense.describe()
    assert d["backend"] == "torch" and d["backend_fallback"] == emb.backend_fallback
    with pytest.raises(ConfigError, match="backend=openvino: openvino export/compile of all-MiniLM-L6-v2 failed "
                                          ".*pass backend=torch"):
        load_embedder("minilm", cache_dir=tmp_path, progress=False, backend="openvino")


@pytest.mark.slow
@pytest.mark.parametrize("backend, max_abs, min_cos", [("onnx-int8", 0.08, 0.97), ("openvino", 5e-3, 0.9999)])
def test_other_backends_close_to_torch(cache_dir, torch_emb, backend, max_abs, min_cos):
    emb = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend=backend)
    ref, got = torch_emb.encode_passages(TEXTS), emb.encode_passages(TEXTS)
    assert np.abs(got - ref).max() < max_abs
    assert (got * ref).sum(axis=1).min() > min_cos


@pytest.mark.slow
def test_int8_vectors_depend_on_the_batch_fp32_do_not(cache_dir, onnx_emb):
    """Why onnx-int8 is not the default: dynamic quantisation scales activations per batch (docs/results.md)."""
    int8 = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="onnx-int8")
    alone = int8.encode_passages([TEXTS[0]])[0]
    batched = int8.encode_passages(TEXTS)[0]
    assert np.abs(alone - batched).max() > 1e-4
    assert np.abs(onnx_emb.encode_passages([TEXTS[0]])[0] - onnx_emb.encode_passages(TEXTS)[0]).max() < 1e-5


def test_two_streams_give_the_one_stream_vectors(cache_dir, torch_emb):
    """Batches on two OpenVINO streams come back to their own texts: the vectors of one stream, to 1e-5."""
    texts = [f"{t} (version {k})" for k in range(6) for t in TEXTS]
    one = ExportedEmbedder(torch_emb, "openvino", cache_dir, streams=1)
    two = ExportedEmbedder(torch_emb, "openvino", cache_dir, streams=2)
    one.batch_size = two.batch_size = 3  # 8 batches: both requests in flight, in turn
    assert np.abs(two.encode_passages(texts) - one.encode_passages(texts)).max() < 1e-5
    assert np.abs(two.encode_passages(texts[:5]) - one.encode_passages(texts[:5])).max() < 1e-5  # fewer batches
    assert two.encode_passages([]).shape == (0, two.dim)


FREE_TWO_STREAM_MODELS = """
import gc, sys
from lab.models.backends import ExportedEmbedder
from lab.models.embedders import load_embedder
base = load_embedder("minilm", cache_dir=sys.argv[1], progress=False, backend="torch")
for _ in range(3):
    e = ExportedEmbedder(base, "openvino", sys.argv[1], streams=2)
    e.batch_size = 4
    e.encode_passages([f"passage {k} " + "protein folding " * (k % 9) for k in range(24)])
    del e
    gc.collect()
print("freed")
"""


def test_a_two_stream_model_is_freed_without_waiting(cache_dir, openvino_emb):
    """Freeing a compiled model while Python holds the GIL must not wait on a thread that needs it (Python
    callbacks on OpenVINO's threads did: the process hung at the first free, every time)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    got = subprocess.run([sys.executable, "-c", FREE_TWO_STREAM_MODELS, str(cache_dir)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0 and got.stdout.strip().endswith("freed"), got.stderr[-2000:]


def test_attention_is_exported_as_plain_matmuls(cache_dir, torch_emb):
    """The default export switches the model to eager attention: no sdpa IsNaN/Select pass in the graph (what
    made the export slow), the same vectors at f32, its own export key, and the torch model is switched back."""
    import openvino as ov

    def ops(path):
        return {op.get_type_name() for op in ov.Core().read_model(str(path)).get_ops()}

    eager = ExportedEmbedder(torch_emb, "openvino", cache_dir, precision="f32")
    sdpa = ExportedEmbedder(torch_emb, "openvino", cache_dir, precision="f32", attention="sdpa")
    assert "IsNaN" in ops(sdpa.path) and "IsNaN" not in ops(eager.path)
    assert eager.export_key != sdpa.export_key
    assert eager.cache_identity("passage") != sdpa.cache_identity("passage")
    assert np.abs(eager.encode_passages(TEXTS) - sdpa.encode_passages(TEXTS)).max() < 1e-5
    assert torch_emb.model[0].auto_model.config._attn_implementation == "sdpa"
    with pytest.raises(ConfigError, match="export attention must be one of eager, sdpa, not 'flash'"):
        export_key(torch_emb.identity, "openvino", "flash")
