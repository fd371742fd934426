"""lab.retrievers.dense: search_vectors (search the built index by already-encoded query vectors)."""
from __future__ import annotations

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document
from lab.retrievers import Context, build

DOCS = {
    "d1": "Global routing assigns nets to routing regions called gcells.",
    "d2": "Detailed routing draws the final wires and vias on each layer.",
    "d3": "Cats sleep between twelve and sixteen hours a day.",
    "d4": "Placement puts standard cells in rows before routing.",
    "d5": "Statins lower LDL cholesterol and cardiovascular events.",
}


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    ctx = Context(cache_dir=tmp_path_factory.mktemp("dense-vectors"), progress=False)
    r = build("dense", {}, ctx)
    r.index(Corpus({i: Document(i, t, "") for i, t in DOCS.items()}, name="tiny"))
    return r


def test_same_hits_as_search_one(dense):
    queries = ["how are nets assigned to gcells", "how long do cats sleep"]
    vecs = dense.embedder.encode_queries(queries)
    out = dense.search_vectors(vecs, 3)
    assert len(out) == 2 and out[0][0][0] == "d1" and out[1][0][0] == "d3"
    for q, hits in zip(queries, out, strict=False):
        expect = dense.search_one(q, 3)
        assert [d for d, _ in hits] == [d for d, _ in expect]
        assert np.allclose([s for _, s in hits], [s for _, s in expect], atol=1e-5)


def test_one_vector_empty_batch_and_k_cap(dense):
    v = dense.embedder.encode_queries(["cholesterol lowering drugs"])[0]
    (hits,) = dense.search_vectors(v, 100)  # a 1-d vector is one query; k capped at the 5 documents
    assert len(hits) == 5 and hits[0][0] == "d5"
    p = dense.embedder.encode_passages([DOCS["d5"]])[0]
    assert hits[0][1] == pytest.approx(float(v @ p), abs=1e-5)  # the score is the inner product (cosine)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert dense.search_vectors(np.zeros((0, v.shape[0]), dtype=np.float32), 3) == []


def test_wrong_shape_and_unindexed_fail_clearly(dense, tmp_path):
    with pytest.raises(ConfigError, match=r"shape \(n, 384\)"):
        dense.search_vectors(np.ones((1, 10), dtype=np.float32), 3)
    fresh = build("dense", {"embedder": dense.embedder}, Context(cache_dir=tmp_path, progress=False))
    with pytest.raises(ConfigError, match="before index"):
        fresh.search_vectors(np.ones((1, 384), dtype=np.float32), 3)
