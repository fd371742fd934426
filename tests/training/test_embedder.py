"""lab.training.embedder, `lab train-embedder` and the dense_ft strategy: pure helpers, the leakage guard, a real
(tiny) fine-tune of the packaged MiniLM on real SciFact rows, reuse by content key, and use by name."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from builders import TINY_EMBEDDER, write_tiny_dataset

from lab.core.errors import ConfigError
from lab.data.types import Qrels, Queries
from lab.training.embedder import (
    EmbedderConfig,
    Pair,
    content_key,
    guard,
    mnrl_loss,
    no_duplicate_batches,
    train_embedder,
)


def quiet(*a):
    return None


# --- pure helpers -------------------------------------------------------------------------------------------

def test_no_duplicate_batches_use_every_pair_once_without_collisions():
    text = {"q1": "a", "q2": "b", "q3": "A", "q4": "c", "q5": "d", "q6": "e"}
    pairs = [Pair("q1", "d1"), Pair("q2", "d1"), Pair("q3", "d2"), Pair("q4", "d3"), Pair("q5", "d4", "d3"),
             Pair("q6", "d5"), Pair("q1", "d6")]
    batches = no_duplicate_batches(pairs, 3, text, seed=0)
    used = [p for b in batches for p in b]
    assert len(used) == len(pairs) and set(used) == set(pairs)
    for b in batches:
        assert len(b) <= 3
        texts = [text[p.query_id].lower() for p in b]
        docs = [d for p in b for d in (p.doc_id, p.negative) if d]
        assert len(set(texts)) == len(texts) and len(set(docs)) == len(docs)
    assert no_duplicate_batches(pairs, 3, text, seed=0) == batches
    assert no_duplicate_batches(pairs, 3, text, seed=5) != batches


def test_mnrl_loss_is_cross_entropy_over_scaled_cosines():
    import torch

    torch.manual_seed(0)
    q, p = torch.randn(3, 8), torch.randn(5, 8)  # 3 positives + 2 hard negatives
    sims = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(p, dim=-1).T * 20
    expected = sum(-torch.log_softmax(sims[i], 0)[i] for i in range(3)) / 3
    assert mnrl_loss(q, p, 20.0).item() == pytest.approx(expected.item(), rel=1e-5)
    same = torch.eye(4)
    assert mnrl_loss(same, same, 20.0).item() < 1e-6  # each query closest to its own passage
    assert mnrl_loss(torch.ones(4, 3), torch.ones(4, 3), 20.0).item() == pytest.approx(math.log(4))  # chance


def test_guard_finds_ids_texts_and_eval_relevant_docs():
    train_q = Queries({"1": "Obesity kills.", "2": "Other claim"})
    train = Qrels({"1": {"a": 1}, "2": {"b": 1}, "7": {"z": 1}})
    eval_q = Queries({"7": "x", "9": "obesity kills."})
    ev = Qrels({"7": {"c": 1}, "9": {"b": 2, "n": 0}})
    pairs = [Pair("1", "a"), Pair("2", "b")]
    out = guard(train_q, train, eval_q, ev, pairs)
    assert out["query_ids"] == ["7"] and out["text_duplicates"] == ["1"]
    assert out["doc_pairs"] == [Pair("2", "b")] and out["eval_docs"] == 2  # grade-0 "n" is not relevant
    assert guard(train_q, train, None, None, pairs)["doc_pairs"] == []


def test_content_key_changes_with_what_shapes_the_model():
    cfg = EmbedderConfig()
    k = content_key("st:m@1", "fp", "train", cfg, False, None)
    assert k == content_key("st:m@1", "fp", "train", EmbedderConfig(), False, None)
    for other in (content_key("st:m@2", "fp", "train", cfg, False, None),
                  content_key("st:m@1", "fp2", "train", cfg, False, None),
                  content_key("st:m@1", "fp", "dev", cfg, False, None),
                  content_key("st:m@1", "fp", "train", replace(cfg, seed=1), False, None),
                  content_key("st:m@1", "fp", "train", replace(cfg, doc_overlap="drop"), False, None),
                  content_key("st:m@1", "fp", "train", cfg, True, None)):
        assert other != k


def test_content_key_is_the_one_saved_models_carry():
    """Keys computed before the trainers shared lab.training.common: a model saved then is still reused."""
    cfg = EmbedderConfig()
    assert content_key("st:m@1", "fp", "train", cfg, False, None) == \
        "ffbbb9b496b72b0752895cb07c2b5dee95dbd8788ab14266cbd06d98753004e4"
    assert content_key("st:all-MiniLM@abc", "fp2", "dev", replace(cfg, seed=3, hard_negatives="bm25"), True, "efp") == \
        "487368f410b23e20130ecf34bdab91e96479acc1b41cd2f9f855547988b91945"


# --- the guard on real data ----------------------------------------------------------------------------------

def test_refuses_training_on_the_evaluation_split(tmp_path):
    data = write_tiny_dataset(tmp_path / "data")
    with pytest.raises(ConfigError, match="evaluation split"):
        train_embedder(data, tmp_path / "m", EmbedderConfig(**TINY_EMBEDDER), split="test", log=quiet,
                       tracking_root=None)


def test_relative_dataset_paths_resolve_from_the_repo_root(tmp_path, monkeypatch):
    """Notebooks and sweeps run in notebooks/ and name data/...: such a path is read from the repo root."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    write_tiny_dataset(tmp_path / "repo" / "data" / "tiny")
    (tmp_path / "repo" / "notebooks").mkdir()
    (tmp_path / "repo" / "lab").mkdir()
    monkeypatch.setenv("LAB_REPO_ROOT", str(tmp_path / "repo"))
    monkeypatch.chdir(tmp_path / "repo" / "notebooks")
    with pytest.raises(ConfigError, match="evaluation split"):  # raised after both datasets were loaded
        train_embedder("data/tiny", tmp_path / "m", EmbedderConfig(**TINY_EMBEDDER), split="test",
                       eval_dataset="data/tiny", log=quiet, tracking_root=None)


def test_refuses_shared_query_ids_unless_forced(tmp_path):
    data = write_tiny_dataset(tmp_path / "data", leak=True)
    with pytest.raises(ConfigError, match="shares 1 query ids.*--force"):
        train_embedder(data, tmp_path / "m", EmbedderConfig(**TINY_EMBEDDER), log=quiet, tracking_root=None)


def test_doc_overlap_refused_by_default_with_the_way_out(tmp_path):
    data = write_tiny_dataset(tmp_path / "data")
    # real SciFact: a test claim cites abstract 31715818, which a training claim cites too
    with pytest.raises(ConfigError, match="--doc-overlap drop.*--doc-overlap allow"):
        train_embedder(data, tmp_path / "m", EmbedderConfig(**{**TINY_EMBEDDER, "doc_overlap": "refuse"}), log=quiet,
                       tracking_root=None)


# --- a real tiny fine-tune, reuse, and dense_ft ------------------------------------------------------------

def test_tiny_finetune_saves_reuses_and_serves_dense_ft(tmp_path, pytestconfig):
    from conftest import blank_store

    from lab.experiment.run import run_experiment
    from lab.models.embedders import load_embedder
    from lab.retrievers.base import Context
    from lab.tracking.store import client

    data = write_tiny_dataset(tmp_path / "data")
    root = blank_store(tmp_path, pytestconfig)
    ctx = Context(cache_dir=tmp_path / "cache", progress=False)
    out = tmp_path / "models" / "emb"
    meta = train_embedder(data, out, EmbedderConfig(**TINY_EMBEDDER), ctx=ctx, log=quiet, tracking_root=root)
    saved = json.loads((out / "training.json").read_text())
    assert saved["content_key"] == meta["content_key"] and not meta["reused"]
    assert saved["n_pairs"] > 0 and saved["steps"] >= 1 and saved["loss_curve"]
    assert saved["leakage"]["doc_overlap"] == "allow" and saved["val_base_ndcg@10"] is not None
    assert set(saved["trained_query_ids"]).isdisjoint(set((data / "qrels" / "test.tsv").read_text().split()))
    run = client(root).get_run(saved["mlflow_run_id"])
    assert run.data.tags["trained_model_sha256"] == saved["model_sha256"]
    assert len(client(root).get_metric_history(run.info.run_id, "train_loss")) >= 1
    # the saved folder loads as a sentence-transformers model and differs from the base unless epoch 0 was kept
    emb = load_embedder(str(out), cache_dir=tmp_path / "cache", progress=False)
    assert emb.encode_queries(["a claim"]).shape == (1, 384)

    again = train_embedder(data, out, EmbedderConfig(**TINY_EMBEDDER), ctx=ctx, log=quiet, tracking_root=root)
    assert again["reused"] and again["content_key"] == meta["content_key"]

    res = run_experiment(data, "dense_ft", {"train_dataset": str(data), "out": str(out), "train": TINY_EMBEDDER},
                         split="test", k=10, ctx=ctx)
    d = res.info["retriever"]
    assert d["trained.reused"] is True and d["trained.content_key"] == meta["content_key"]
    assert d["trained.mlflow_run_id"] == saved["mlflow_run_id"] and "ndcg@10" in res.summary()
    with pytest.raises(ConfigError, match="train_dataset"):
        run_experiment(data, "dense_ft", {}, split="test", ctx=ctx)


def test_when_no_epoch_beats_the_base_model_the_base_weights_are_saved(tmp_path):
    """A learning rate far too high wrecks the model in one epoch; validation keeps epoch 0, and the saved folder
    then holds the base model's weights (not the wrecked last epoch's), as the log says."""
    import numpy as np

    from lab.models.embedders import load_embedder
    from lab.retrievers.base import Context

    data = write_tiny_dataset(tmp_path / "data")
    ctx = Context(cache_dir=tmp_path / "cache", progress=False)
    out = tmp_path / "models" / "wrecked"
    lines = []
    meta = train_embedder(data, out, EmbedderConfig(**{**TINY_EMBEDDER, "lr": 0.5, "warmup": 0.0}), ctx=ctx,
                          log=lines.append, tracking_root=None)
    assert meta["selected_epoch"] == 0 and any("saved model is the base model" in ln for ln in lines)
    texts = ["Vitamin D deficiency is linked to depression.", "a claim"]
    saved = load_embedder(str(out), cache_dir=tmp_path / "cache", progress=False).encode_queries(texts)
    base = load_embedder("all-MiniLM-L6-v2", cache_dir=tmp_path / "cache", progress=False).encode_queries(texts)
    assert np.allclose(saved, base, atol=1e-5)
