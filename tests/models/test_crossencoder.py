"""lab.models.crossencoder: what a cross-encoder reads, which model folder is loaded, the weights' identity and the
training metadata beside a fine-tuned model (the scoring itself: tests/retrievers/test_rerank.py)."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from lab.core.errors import ConfigError
from lab.models.crossencoder import (
    DEFAULT_MAX_LENGTH,
    TRAINING_FILE,
    default_max_length,
    passage_text,
    read_training_metadata,
    resolve_model,
    text_sha,
    weights_sha256,
)


def test_passage_text_is_title_then_text_stripped():
    assert passage_text("Title", " body ") == "Title  body"
    assert passage_text("", "  body ") == "body"


def test_text_sha_is_16_hex_of_the_sha256_of_utf8():
    assert text_sha("é") == hashlib.sha256("é".encode("utf-8")).hexdigest()[:16]


def test_resolve_model_takes_existing_folders_and_passes_other_names_on(tmp_path, monkeypatch):
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert resolve_model(str(folder)) == str(folder.resolve())
    monkeypatch.setenv("LAB_REPO_ROOT", str(tmp_path / "repo"))
    (tmp_path / "repo" / "lab").mkdir(parents=True)
    (tmp_path / "repo" / "pyproject.toml").write_text("")
    (tmp_path / "repo" / "models" / "ft").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model("models/ft") == str(tmp_path / "repo" / "models" / "ft")  # relative to the repo root
    assert resolve_model("cross-encoder/ms-marco-MiniLM-L6-v2") == "cross-encoder/ms-marco-MiniLM-L6-v2"


def test_a_missing_local_folder_or_default_says_how_to_train(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_REPO_ROOT", str(tmp_path))
    (tmp_path / "lab").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    with pytest.raises(ConfigError, match=r"models/nope: no such model folder; run `lab train-reranker"):
        resolve_model("models/nope")
    with pytest.raises(ConfigError, match=r"no trained reranker there, and no model was named"):
        resolve_model(None)


def test_weights_sha256_follows_the_weights_not_the_object():
    torch.manual_seed(0)
    a = torch.nn.Linear(3, 2)
    b = torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert weights_sha256(a) == weights_sha256(b) and len(weights_sha256(a)) == 64
    with torch.no_grad():
        b.bias[0] += 1e-6
    assert weights_sha256(a) != weights_sha256(b)


def test_training_metadata_and_the_max_length_it_implies(tmp_path):
    assert read_training_metadata(tmp_path) is None and default_max_length(None) == DEFAULT_MAX_LENGTH
    (tmp_path / TRAINING_FILE).write_text(json.dumps({"params": {"max_length": 128}}))
    meta = read_training_metadata(tmp_path)
    assert meta == {"params": {"max_length": 128}} and default_max_length(meta) == 128
    assert default_max_length({"params": {}}) == DEFAULT_MAX_LENGTH
    (tmp_path / TRAINING_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match=f"{TRAINING_FILE}: not valid JSON"):
        read_training_metadata(tmp_path)
