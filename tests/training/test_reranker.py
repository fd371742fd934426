"""lab.training.reranker and `lab train-reranker`: pure helpers, a real (tiny) fine-tune, the leakage guard,
the losses, in-batch negatives, early stopping, training from a generated set plus extra sources, MLflow.

The tiny dataset is real SciFact text: 16 training and 4 test claims with their cited abstracts plus 40 other
abstracts; the tiny model is a real fine-tune of the packaged MiniLM (a few steps, short max_length). The tiny
generated set asks, over the same abstracts, one question per abstract (its title turned into a question, the
shape of an LLM-written doc2query question) and includes one question equal to a real test claim.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from builders import TINY_RERANKER, train_tiny, write_tiny_dataset

from lab.core.errors import ConfigError
from lab.core.paths import public_path
from lab.data.types import Qrels, Queries
from lab.training.reranker import (
    Group,
    TrainConfig,
    chance_loss,
    duplicate_texts,
    early_stop,
    group_loss,
    in_batch_extras,
    leakage,
    listwise_loss,
    lr_factor,
    mine_groups,
    parse_source,
    rerank_scores,
    split_validation,
    train_reranker,
)

REPO = Path(__file__).resolve().parents[2]
SCIFACT = REPO / "data" / "scifact"





def write_generated_set(folder: Path, real: Path, n: int = 12) -> Path:
    """A BEIR folder laid out as `lab testset generate` writes one (corpus = the real tiny corpus, queries
    ``gen-0001``.., qrels/test.tsv mapping each question to the abstract it was written for): questions made
    from the titles of the first ``n`` abstracts, plus ``gen-dup`` whose text is the first real test claim."""
    from lab.data.beir import load_dataset

    ds = load_dataset(real, progress=False)
    test_q, test_qrels = ds.split("test")
    first_test = next(iter(test_q))
    cited = next(iter(test_qrels.relevant(first_test)))  # relevant in the real test split: doc_overlap's case
    docs = [ds.corpus[cited]] + [d for d in ds.corpus if d.id != cited][: n - 1]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "corpus.jsonl").write_text((real / "corpus.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    qs = {f"gen-{i + 1:04d}": (f"What does the study '{d.title.rstrip('.')}' show?", d.id) for i, d in enumerate(docs)}
    qs["gen-dup"] = (test_q[first_test], docs[0].id)
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": t, "metadata": {"source_unit": d}}) + "\n"
                     for q, (t, d) in qs.items())
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, (_, d) in qs.items()), encoding="utf-8")
    return folder




@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    data = write_tiny_dataset(root / "data")
    meta = train_tiny(data, root / "model")
    return data, root / "model", meta


# --- pure helpers -------------------------------------------------------------------------------------------

def test_leakage_finds_shared_ids_and_pairs():
    train = Qrels({"1": {"a": 1}, "2": {"b": 1}, "3": {"c": 1}})
    test = Qrels({"2": {"x": 1}, "3": {"c": 1}, "9": {"a": 1}})
    out = leakage(train, test)
    assert out == {"query_ids": ["2", "3"], "pairs": [("3", "c")]}
    assert leakage(train, Qrels({"9": {"a": 1}})) == {"query_ids": [], "pairs": []}  # same doc, other query: fine


def test_duplicate_texts():
    assert duplicate_texts(Queries({"1": "Obesity decreases life quality. ", "2": "other"}),
                           Queries({"9": "Obesity decreases life quality."})) == ["1"]


def test_split_validation_is_seeded_and_disjoint():
    ids = [str(i) for i in range(50)]
    fit, val = split_validation(ids, 0.1, 60, seed=0)
    assert len(val) == 5 and not set(fit) & set(val) and sorted(fit + val, key=int) == ids
    assert split_validation(ids, 0.1, 60, seed=0) == (fit, val)
    assert split_validation(ids, 0.1, 60, seed=1)[1] != val
    assert len(split_validation(ids, 0.5, 3, seed=0)[1]) == 3
    assert split_validation(ids, 0.0, 60, seed=0) == (ids, [])


def test_mine_groups_excludes_judged_docs_and_respects_depth():
    qrels = Qrels({"q": {"p1": 1, "p2": 2, "n0": 0}, "r": {"p": 1}})
    ranked = {"q": ["p1", "x1", "n0", "x2", "p2", "x3", "x4"], "r": ["p"]}
    groups = mine_groups(qrels, ["q", "r"], ranked, negatives=2, depth=5, seed=0)
    assert [g.doc_id for g in groups] == ["p1", "p2"]  # "r" has no candidate negative: skipped
    for g in groups:
        assert len(g.negatives) == 2 and set(g.negatives) <= {"x1", "x2"}  # depth 5; judged n0 kept out
    assert mine_groups(qrels, ["q"], ranked, 2, 5, seed=0) == groups


def test_listwise_loss_equals_cross_entropy():
    import torch

    logits = torch.tensor([2.0, 0.5, -1.0, 0.3, 0.3])
    expected = (torch.nn.functional.cross_entropy(logits[:3].view(1, 3), torch.tensor([0]))
                + torch.nn.functional.cross_entropy(logits[3:].view(1, 2), torch.tensor([0]))) / 2
    assert listwise_loss(logits, [3, 2]).item() == pytest.approx(expected.item())
    assert listwise_loss(torch.zeros(4), [4]).item() == pytest.approx(math.log(4))  # chance


def test_lr_factor_warmup_then_decay():
    assert [round(lr_factor(s, 10, 2), 3) for s in range(10)] == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375,
                                                                  0.25, 0.125]


def test_rerank_scores_head_then_tail():
    first = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.5}
    out = rerank_scores(first, {"a": -1.0, "b": 4.0}, 1.0)
    assert [d for d, _ in sorted(out.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)] == ["b", "a", "c", "d"]
    assert rerank_scores(first, {"a": -1.0, "b": 4.0}, 0.0)["a"] > rerank_scores(first, {"a": -1.0, "b": 4.0}, 0.0)["b"]


# --- real training ------------------------------------------------------------------------------------------

def test_tiny_training_saves_a_loadable_model_with_metadata(tiny):
    from sentence_transformers import CrossEncoder

    _, out, meta = tiny
    assert (out / "config.json").is_file() and (out / "training.json").is_file()
    saved = json.loads((out / "training.json").read_text())
    assert saved == json.loads(json.dumps(meta, sort_keys=True))
    assert saved["dataset"] == "data" and saved["split"] == "train" and saved["params"]["negatives"] == 1
    assert len(saved["dataset_fingerprint"]) >= 12 and saved["seed"] == 0 and saved["started"]
    assert saved["n_groups"] >= 10 and saved["steps"] == math.ceil(saved["n_groups"] / 4)
    assert len(saved["loss_curve"]) == saved["steps"] and all(c["loss"] > 0 for c in saved["loss_curve"])
    assert saved["n_val_queries"] == 3 and 0 <= saved["val_rerank_ndcg@10"] <= 1
    assert set(saved["val_alpha_ndcg@10"]) >= {"0.0", "1.0"} and 0 <= saved["recommended_alpha"] <= 1
    assert len(saved["train_query_sha"]) == 16  # all training queries, fitted and held out
    m = CrossEncoder(str(out), max_length=64)
    s = m.predict([("vitamin d", "bones"), ("vitamin d", "bones")])
    assert s.shape == (2,) and s[0] == pytest.approx(s[1])


def test_training_changes_the_weights_and_is_seeded(tiny, tmp_path):
    data, _, meta = tiny
    from lab.models.crossencoder import load_crossencoder, packaged_minilm_path, weights_sha256

    base = load_crossencoder(packaged_minilm_path(), max_length=64, num_labels=1)
    assert meta["weights_sha256"] != weights_sha256(base)
    again = train_tiny(data, tmp_path / "again")
    assert again["weights_sha256"] == meta["weights_sha256"]  # same seed, same data: same weights
    assert [c["loss"] for c in again["loss_curve"]] == pytest.approx([c["loss"] for c in meta["loss_curve"]])


def test_leakage_guard_refuses_and_force_overrides(tmp_path):
    from lab.retrievers.base import Context

    data = write_tiny_dataset(tmp_path / "leaky", n_train=6, n_other=10, leak=True)
    cfg = TrainConfig(**{**TINY_RERANKER, "val_fraction": 0.0, "max_pairs": 2})
    ctx = Context(cache_dir=tmp_path / "cache", progress=False)
    with pytest.raises(ConfigError, match=r"shares 1 query ids and 1 \(query, doc\) pairs.*--force"):
        train_reranker(data, tmp_path / "m", cfg, ctx=ctx, log=lambda *a: None, tracking_root=None)
    assert not (tmp_path / "m").exists()
    meta = train_reranker(data, tmp_path / "m", cfg, ctx=ctx, log=lambda *a: None, force=True, tracking_root=None)
    assert meta["forced"] and meta["leakage"]["shared_pairs"] == 1 and (tmp_path / "m" / "config.json").is_file()


def test_training_on_the_evaluation_split_is_refused(tmp_path):
    data = write_tiny_dataset(tmp_path / "d", n_train=2, n_other=5)
    with pytest.raises(ConfigError, match="evaluation split"):
        train_reranker(data, tmp_path / "m", TrainConfig(**TINY_RERANKER), split="test", log=lambda *a: None,
                       tracking_root=None)


def test_cli_train_reranker_refuses_leak_and_names_the_fix(tmp_path, capsys):
    from lab.cli.main import build_parser, main

    data = write_tiny_dataset(tmp_path / "leaky", n_train=4, n_other=5, leak=True)
    args = build_parser().parse_args(["train-reranker", "--dataset", str(data), "--out", str(tmp_path / "m")])
    assert args.split == "train" and args.epochs == TrainConfig().epochs and args.base_model is None
    rc = main(["train-reranker", "--dataset", str(data), "--out", str(tmp_path / "m"), "--no-progress",
               "--cache-dir", str(tmp_path / "cache")])
    assert rc == 2 and "--force" in capsys.readouterr().err


def test_cli_default_out_is_the_rerank_default_for_scifact():
    from lab.cli.train import default_out
    from lab.models.crossencoder import DEFAULT_RERANKER

    assert default_out(str(SCIFACT)) == DEFAULT_RERANKER


# --- losses, in-batch negatives, early stopping, sources ---------------------------------------------------

def test_pairwise_and_pointwise_losses_and_chance():
    import torch

    logits = torch.tensor([2.0, 0.5, -1.0, 0.3, 0.3])
    sp = torch.nn.functional.softplus
    pairwise = ((sp(torch.tensor(0.5 - 2.0)) + sp(torch.tensor(-1.0 - 2.0))) / 2 + sp(torch.tensor(0.0))) / 2
    assert group_loss(logits, [3, 2], "pairwise").item() == pytest.approx(pairwise.item())
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    assert group_loss(logits, [3, 2], "pointwise").item() == pytest.approx(bce.item())
    for kind in ("listwise", "pairwise", "pointwise"):  # chance_loss is the loss of all-zero logits
        assert group_loss(torch.zeros(7), [4, 3], kind).item() == pytest.approx(chance_loss([4, 3], kind))
    # pairwise only cares about the positive's margin over each negative
    assert group_loss(torch.tensor([5.0, 0.0, 0.0]), [3], "pairwise").item() < 0.01
    with pytest.raises(ConfigError, match="loss must be one of"):
        group_loss(logits, [5], "hinge")


def test_in_batch_extras_skip_judged_and_duplicate_passages():
    import random

    passages = {"a": "A", "b": "B", "c": "C", "a2": "A", "n": "N"}
    text = {"q1": "Claim one", "q2": "claim one ", "q3": "Claim three", "q4": "Claim four"}
    judged = {"claim one": {"A", "B"}, "claim three": {"C"}, "claim four": {"A"}}
    batch = [Group("q1", "a", ["n"]), Group("q2", "b", []), Group("q3", "c", ["n"]), Group("q4", "a2", [])]
    out = in_batch_extras(batch, text, passages, judged, -1, random.Random(0))
    # q1 and q2 are one question (same text): each other's positives are judged for it; q4's passage is text A
    assert out == [["c"], ["c"], ["a", "b"], ["b", "c"]]
    one = in_batch_extras(batch, text, passages, judged, 1, random.Random(0))
    assert [len(x) for x in one] == [1, 1, 1, 1] and all(set(x) <= set(y) for x, y in zip(one, out, strict=False))
    assert in_batch_extras(batch, text, passages, judged, 0, random.Random(0)) == [[], [], [], []]


def test_early_stop_counts_epochs_without_gain():
    assert not early_stop([0.5], 1)
    assert early_stop([0.5, 0.5], 1) and not early_stop([0.5, 0.6], 1)
    assert not early_stop([0.5, 0.4], 2) and early_stop([0.5, 0.4, 0.45], 2)
    assert not early_stop([0.5, 0.4, 0.6], 2) and not early_stop([0.5, 0.4, 0.3], 0)


def test_parse_source():
    assert parse_source("data/gen:test", "train") == ("data/gen", "test")
    assert parse_source("data/gen", "train") == ("data/gen", "train")
    assert parse_source("C:/x/y", "train") == ("C:/x/y", "train")  # a colon inside a path is not a split


def test_generated_set_is_guarded_against_the_real_evaluation_split(tmp_path):
    real = write_tiny_dataset(tmp_path / "real")
    gen = write_generated_set(tmp_path / "gen", real)
    quiet = {"log": lambda *a: None, "tracking_root": None}
    with pytest.raises(ConfigError, match="evaluation split of .*--eval-dataset"):
        train_reranker(gen, tmp_path / "m", TrainConfig(**TINY_RERANKER), split="test", **quiet)
    with pytest.raises(ConfigError, match=r"2 of 13 training positives .*--doc-overlap drop.*--doc-overlap allow"):
        train_reranker(gen, tmp_path / "m", TrainConfig(**{**TINY_RERANKER, "doc_overlap": "refuse"}), split="test",
                       eval_dataset=real, **quiet)
    assert not (tmp_path / "m").exists()
    with pytest.raises(ConfigError, match="loss must be one of"):
        train_reranker(gen, tmp_path / "m", TrainConfig(**{**TINY_RERANKER, "loss": "hinge"}), split="test", **quiet)


def test_pairwise_in_batch_training_on_a_generated_set_plus_extra_source_logged_to_mlflow(tmp_path, pytestconfig):
    """A real tiny run of the generated-set variant: generated questions (guarded against the real test
    split, doc overlap dropped) plus the real training split, pairwise loss, all in-batch negatives, early
    stopping, an MLflow run."""
    from conftest import blank_store

    from lab.data.beir import load_dataset
    from lab.models.crossencoder import text_sha
    from lab.retrievers.base import Context
    from lab.tracking.store import client

    real = write_tiny_dataset(tmp_path / "real", n_train=8, n_other=20)
    gen = write_generated_set(tmp_path / "gen", real, n=10)
    root = blank_store(tmp_path, pytestconfig)
    cfg = TrainConfig(**{**TINY_RERANKER, "loss": "pairwise", "in_batch_negatives": -1, "epochs": 3, "patience": 1,
                         "doc_overlap": "drop", "val_fraction": 0.25, "max_pairs": 12})
    out = tmp_path / "models" / "rr"
    meta = train_reranker(gen, out, cfg, split="test", eval_dataset=real, extra=[(real, "train")],
                          ctx=Context(cache_dir=tmp_path / "cache", progress=False), log=lambda *a: None,
                          tracking_root=root)
    saved = json.loads((out / "training.json").read_text())
    assert saved["mlflow_run_id"] == meta["mlflow_run_id"] and saved["params"]["loss"] == "pairwise"
    gen_src, real_src = saved["sources"]
    assert (gen_src["dataset"], gen_src["split"], gen_src["prefix"]) == ("gen", "test", "")
    assert (real_src["dataset"], real_src["split"], real_src["prefix"]) == ("real", "train", "x1/")
    assert gen_src["dropped_duplicate_text_queries"] == ["gen-dup"] and gen_src["dropped_pairs"] == 1
    assert real_src["dropped_pairs"] >= 1  # SciFact train cites an abstract a test claim cites
    assert saved["leakage"]["doc_overlap"] == "drop" and saved["eval_dataset"] == public_path(real)
    assert gen_src["n_groups"] >= 5 and real_src["n_groups"] >= 5 and saved["n_groups"] == 12  # max_pairs
    assert saved["n_val_queries"] == 2 and saved["in_batch_negatives_per_epoch"] > saved["n_groups"]
    assert saved["chance_loss"] == pytest.approx(math.log(2))
    # the real test claim that was also a generated question was not trained on
    test_q, _ = load_dataset(real, progress=False).split("test")
    assert text_sha(test_q[next(iter(test_q))]) not in saved["train_query_sha"]
    # epochs is a maximum: stopped after the first epoch without validation gain, the best epoch kept
    vals = [e["val_ndcg@10"] for e in saved["epochs"]]
    assert saved["stopped_early"] == (len(vals) < 3) and saved["stopped_early"] == early_stop(vals[:2], 1)
    assert saved["selected_epoch"] == 1 + vals.index(max(vals)) and saved["val_rerank_ndcg@10"] == max(vals)
    assert saved["steps"] == len(vals) * math.ceil(saved["n_groups"] / 4) <= saved["max_steps"]
    cl = client(root)
    run = cl.get_run(saved["mlflow_run_id"])
    assert run.data.params["params.loss"] == "pairwise" and run.data.params["sources"] == "gen:test, real:train"
    assert run.data.tags["weights_sha256"] == saved["weights_sha256"] and run.info.status == "FINISHED"
    assert len(cl.get_metric_history(run.info.run_id, "train_loss")) == len(saved["loss_curve"])
    assert [m.value for m in cl.get_metric_history(run.info.run_id, "val_ndcg_at_10")] == pytest.approx(vals)
    assert run.data.metrics["train_seconds"] == saved["train_seconds"]


def test_cli_train_reranker_flags(tmp_path, capsys):
    from lab.cli.main import build_parser, main

    args = build_parser().parse_args(["train-reranker", "--dataset", "d", "--loss", "pairwise", "--in-batch-negatives",
                                      "--patience", "0", "--extra-dataset", "g:test", "--doc-overlap", "drop"])
    assert (args.loss, args.in_batch_negatives, args.patience, args.doc_overlap) == ("pairwise", -1, 0, "drop")
    assert args.extra_dataset == ["g:test"] and args.eval_dataset is None and args.tracking_root == "mlruns"
    assert build_parser().parse_args(["train-reranker", "--dataset", "d", "--in-batch-negatives", "2"]
                                     ).in_batch_negatives == 2
    real = write_tiny_dataset(tmp_path / "real", n_train=4, n_other=5)
    gen = write_generated_set(tmp_path / "gen", real, n=4)
    rc = main(["train-reranker", "--dataset", str(gen), "--split", "test", "--out", str(tmp_path / "m"),
               "--no-progress", "--no-mlflow"])
    assert rc == 2 and "--eval-dataset" in capsys.readouterr().err
