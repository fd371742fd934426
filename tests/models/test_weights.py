"""lab.models.weights: models found in strategy descriptions, weights hashed from the files on disk."""
from __future__ import annotations

import hashlib

from lab.core.cache import Cache
from lab.models.weights import fingerprint_folder, models_in, weights_record, weights_sha256


def test_models_are_found_at_any_depth_once_each(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 32)
    describe = {  # a hybrid (parts in a list) with a dense part, an LLM strategy and a remote LLM
        "strategy": "hybrid", "parts": [
            {"strategy": "bm25", "k1": 0.9},
            {"strategy": "dense", "model": "all-MiniLM-L6-v2", "model_identity": "st:all-MiniLM-L6-v2@abc",
             "model_path": str(tmp_path)}],
        "rerank": {"reranker_model": {"kind": "biencoder", "model": "all-MiniLM-L6-v2",
                                      "identity": "st:all-MiniLM-L6-v2@abc", "model_path": str(tmp_path)}},
        "llm": {"backend": "gguf", "identity": "gguf:m.gguf@sha256:1", "model": "m.gguf", "path": str(gguf)},
        "judge": {"backend": "openai", "identity": "openai:gpt-x@https://api.example", "model": "gpt-x"},
    }
    found = models_in(describe)
    assert [(m["name"], m["path"]) for m in found] == [("all-MiniLM-L6-v2", str(tmp_path)), ("m.gguf", str(gguf)),
                                                        ("gpt-x", None)]
    rec = weights_record(describe)
    assert rec[1]["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert rec[0]["sha256"] == fingerprint_folder(tmp_path) and rec[2]["sha256"] is None  # remote: name only
    assert models_in({"strategy": "bm25", "k1": 0.9}) == []


def test_weights_hash_follows_the_content_and_is_memoised(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "README.md").write_text("docs do not count")
    memo = Cache(tmp_path / "cache")
    a = weights_sha256(folder, memo)
    (folder / "README.md").write_text("other docs")
    assert weights_sha256(folder, memo) == a
    (folder / "config.json").write_text('{"hidden": 8}')
    assert weights_sha256(folder, memo) != a
    assert weights_sha256(tmp_path / "gone") is None
