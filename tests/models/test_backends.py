"""lab.models.backends: exported graphs give the torch vectors (to a stated tolerance), keys differ by backend."""
from __future__ import annotations

import numpy as np
import pytest

from lab.core.cache import Cache, EmbeddingCache
from lab.core.errors import ConfigError
from lab.models.backends import BACKENDS, DEFAULT_BACKEND, export_key
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
    with pytest.raises(ConfigError, match="backend must be one of torch, onnx, onnx-int8, openvino, not 'tensorrt'"):
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
    assert dense.describe()["backend"] == "onnx"


@pytest.mark.slow
@pytest.mark.parametrize("backend, max_abs, min_cos", [("onnx-int8", 0.08, 0.97), ("openvino", 5e-3, 0.9999)])
def test_other_backends_close_to_torch(cache_dir, torch_emb, backend, max_abs, min_cos):
    emb = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend=backend)
    ref, got = torch_emb.encode_passages(TEXTS), emb.encode_passages(TEXTS)
    assert np.abs(got - ref).max() < max_abs
    assert (got * ref).sum(axis=1).min() > min_cos


@pytest.mark.slow
def test_int8_vectors_depend_on_the_batch_fp32_do_not(cache_dir, onnx_emb):
    """Why onnx-int8 is not the default: dynamic quantisation scales activations per batch (README)."""
    int8 = load_embedder("minilm", cache_dir=cache_dir, progress=False, backend="onnx-int8")
    alone = int8.encode_passages([TEXTS[0]])[0]
    batched = int8.encode_passages(TEXTS)[0]
    assert np.abs(alone - batched).max() > 1e-4
    assert np.abs(onnx_emb.encode_passages([TEXTS[0]])[0] - onnx_emb.encode_passages(TEXTS)[0]).max() < 1e-5
