"""lab.core.cache: keys, bytes/JSON/array values, per-text vectors, two concurrent writers, EmbeddingCache counts."""
from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3

import numpy as np
import pytest

from lab.core.cache import INLINE_MAX, Cache, EmbeddingCache, Memo, clear_memos, content_key


# ------------------------------------------------------------------------------------------------ keys
def test_key_is_sha256_hex_and_deterministic():
    k = content_key("embed:passage", "st:m@1", "hello")
    assert len(k) == 64 and int(k, 16) >= 0
    assert k == content_key("embed:passage", "st:m@1", "hello")
    assert k == content_key("embed:passage", "st:m@1", b"hello")  # str parts are UTF-8


def test_key_parts_are_length_prefixed_so_boundaries_matter():
    assert content_key("a", "bc", "d") != content_key("ab", "c", "d")
    assert content_key("ns", "id", "x") != content_key("ns", "id2", "x")
    assert content_key("embed:query", "id", "x") != content_key("embed:passage", "id", "x")


# ------------------------------------------------------------------------------------------------ blobs
def test_bytes_json_array_roundtrip(tmp_path):
    c = Cache(tmp_path / "c")
    kb, kj, ka = (c.key("t", "id", s) for s in "bja")
    assert c.get_bytes(kb) is None and c.get_json(kj) is None and c.get_array(ka) is None
    c.put_bytes(kb, b"\x00\x01raw")
    c.put_json(kj, {"b": [1, 2.5, "中文"], "a": None})
    arr = np.arange(12, dtype=np.int64).reshape(3, 4)
    c.put_array(ka, arr)
    assert c.get_bytes(kb) == b"\x00\x01raw"
    assert c.get_json(kj) == {"a": None, "b": [1, 2.5, "中文"]}
    got = c.get_array(ka)
    assert got.dtype == np.int64 and np.array_equal(got, arr)
    assert c.has(kb) and not c.has(c.key("t", "id", "absent"))


def test_large_blob_goes_to_a_file_and_reads_back(tmp_path):
    c = Cache(tmp_path)
    data = os.urandom(INLINE_MAX + 1)
    k = c.key("index:faiss", "id", "big")
    c.put_bytes(k, data)
    path = tmp_path / "blobs" / k[:2] / k
    assert path.is_file() and path.stat().st_size == len(data)
    assert c.get_bytes(k) == data
    assert not list(path.parent.glob("*.tmp"))  # temp file moved into place


def test_values_survive_reopen_and_pickle(tmp_path):
    import pickle

    c = Cache(tmp_path)
    k = c.key("llm:chat", "model", "prompt")
    c.put_json(k, {"text": "answer"})
    c.close()
    assert Cache(tmp_path).get_json(k) == {"text": "answer"}
    assert pickle.loads(pickle.dumps(c)).get_json(k) == {"text": "answer"}


# ------------------------------------------------------------------------------------------------ vectors
def test_vectors_hits_misses_and_repeated_keys(tmp_path):
    c = Cache(tmp_path)
    rng = np.random.default_rng(0)
    m = rng.standard_normal((5, 8)).astype(np.float32)
    keys = [c.key("embed:passage", "id", f"t{i}") for i in range(5)]
    found, got = c.get_vectors(keys)
    assert not found.any() and got is None
    c.put_vectors(keys[:3], m[:3])
    ask = [keys[4], keys[0], keys[2], keys[0], keys[3]]
    found, got = c.get_vectors(ask)
    assert found.tolist() == [False, True, True, True, False]
    assert np.array_equal(got[1], m[0]) and np.array_equal(got[2], m[2]) and np.array_equal(got[3], m[0])
    assert not got[0].any() and not got[4].any()
    c.put_vectors(keys[:1], np.zeros((1, 8), np.float32))  # a key is never overwritten
    assert np.array_equal(c.get_vectors(keys[:1])[1][0], m[0])
    assert c.count("vectors") == 3


def test_vector_lookup_crosses_the_chunk_size(tmp_path):
    c = Cache(tmp_path)
    n = 1234  # > 2 lookup chunks of 500
    m = np.random.default_rng(1).standard_normal((n, 4)).astype(np.float32)
    keys = [c.key("embed:passage", "id", str(i)) for i in range(n)]
    c.put_vectors(keys, m)
    found, got = c.get_vectors(keys[::-1])
    assert found.all() and np.array_equal(got, m[::-1])


def test_put_vectors_checks_shapes(tmp_path):
    with pytest.raises(ValueError, match="2 keys"):
        Cache(tmp_path).put_vectors(["00" * 32, "11" * 32], np.zeros((3, 4), np.float32))


# ------------------------------------------------------------------------------------------------ concurrency
def _writer(root, seed, n_keys, rounds, big, out_q):
    """One process: writes overlapping vectors, small JSON and one large blob, many small transactions."""
    try:
        c = Cache(root)
        rng = np.random.default_rng(seed)
        for r in range(rounds):
            idx = rng.permutation(n_keys)[: n_keys // 2]
            keys = [c.key("embed:passage", "w", str(i)) for i in idx]
            vals = np.stack([np.full(16, i, np.float32) for i in idx])  # value is a function of the key
            c.put_vectors(keys, vals)
            c.put_json(c.key("json", "w", str(r % 7)), {"r": r % 7})
            c.put_bytes(c.key("big", "w", "one"), big)
        out_q.put(("ok", seed))
    except BaseException as e:  # noqa: BLE001 - any failure in the child is reported to the parent, which fails the test
        out_q.put(("error", repr(e)))


def test_two_concurrent_writer_processes_do_not_corrupt(tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    big = bytes(range(256)) * ((INLINE_MAX // 256) + 10)
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), s, 300, 25, big, q)) for s in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    results = [q.get(timeout=10) for _ in procs]
    assert all(r[0] == "ok" for r in results), results
    assert all(p.exitcode == 0 for p in procs)

    c = Cache(tmp_path)
    keys = [c.key("embed:passage", "w", str(i)) for i in range(300)]
    found, got = c.get_vectors(keys)
    for i in np.flatnonzero(found):
        assert (got[i] == i).all()
    assert found.sum() >= 150 and c.count("vectors") == found.sum()
    assert all(c.get_json(c.key("json", "w", str(r))) == {"r": r} for r in range(7))
    assert c.get_bytes(c.key("big", "w", "one")) == big
    assert not list((tmp_path / "blobs").rglob("*.tmp"))
    db = sqlite3.connect(tmp_path / "store.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


# ------------------------------------------------------------------------------------------------ EmbeddingCache
class CountingEmbedder:
    """A real embedder (the packaged MiniLM) that counts the texts it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.calls, self.texts = inner, 0, []
        self.name, self.identity, self.dim = inner.name, inner.identity, inner.dim

    def cache_identity(self, kind):
        return self.inner.cache_identity(kind)

    def encode_passages(self, texts):
        self.calls += 1
        self.texts += list(texts)
        return self.inner.encode_passages(texts)

    def encode_queries(self, texts):
        self.calls += 1
        self.texts += list(texts)
        return self.inner.encode_queries(texts)


def test_embedding_cache_encodes_only_misses_and_rerun_encodes_nothing(tmp_path, minilm):
    emb = CountingEmbedder(minilm)
    ec = EmbeddingCache(tmp_path, chunk_size=2, progress=False)
    first = ["Aspirin lowers fever.", "Cats sleep a lot.", "Aspirin lowers fever."]
    v1 = ec.encode(emb, first)
    assert sorted(emb.texts) == ["Aspirin lowers fever.", "Cats sleep a lot."]  # duplicates encoded once
    assert (ec.hits, ec.misses, ec.encoded) == (0, 3, 2)
    assert np.array_equal(v1[0], v1[2]) and np.allclose(np.linalg.norm(v1, axis=1), 1, atol=1e-5)

    emb.texts.clear()
    second = ["Cats sleep a lot.", "Vitamin D and bone density.", "Aspirin lowers fever."]
    v2 = ec.encode(emb, second)
    assert emb.texts == ["Vitamin D and bone density."]  # only the new text
    assert np.array_equal(v2[0], v1[1]) and np.array_equal(v2[2], v1[0])

    calls = emb.calls
    rerun = EmbeddingCache(tmp_path, progress=False)  # a new process would see the same store
    v3 = rerun.encode(emb, first + second)
    assert emb.calls == calls and rerun.encoded == 0 and rerun.hits == 6
    assert np.array_equal(v3[:3], v1) and np.array_equal(v3[3:], v2)
    # cached rows equal a fresh encode of the same texts
    assert np.allclose(v3, minilm.encode_passages(first + second), atol=1e-5)


def test_embedding_cache_keys_depend_on_kind_and_prefix(tmp_path, minilm):
    emb = CountingEmbedder(minilm)
    ec = EmbeddingCache(tmp_path, progress=False)
    ec.encode(emb, ["same text"], kind="passage")
    ec.encode(emb, ["same text"], kind="query")
    assert emb.calls == 2  # a query and a passage are different entries
    with pytest.raises(ValueError, match="kind"):
        ec.encode(emb, ["x"], kind="doc")


def test_memo_keeps_the_most_recently_used_and_clears():
    m = Memo(max_items=2)
    m.put_many(["a", "b"], [1, 2])
    assert m.get_many(["a", "x"]) == [1, None]  # "a" is now the most recent
    m.put_many(["c", "skipped"], [3, None])
    assert m.get_many(["a", "b", "c"]) == [1, None, 3] and len(m) == 2
    assert (m.hits, m.misses) == (3, 2)
    clear_memos()
    assert len(m) == 0 and m.get_many(["a"]) == [None]
