"""Small real datasets and tiny real trainings that tests in several folders build (kept out of test modules,
which pytest imports by file name)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from lab.data.types import Corpus, Dataset, Qrels

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO / "data" / "scifact"

#: a few optimiser steps on ~20 groups: real training, small enough for the fast suite
TINY_RERANKER = {"epochs": 1, "negatives": 1, "batch_groups": 4, "max_length": 64, "freeze_layers": 4,
        "val_fraction": 0.2,
        "val_max_queries": 3, "val_depth": 5, "mine_depth": 10, "lr": 1e-4, "log_every": 1,
        "doc_overlap": "allow"}  # real SciFact: a test claim cites an abstract a training claim cites too

def write_tiny_dataset(folder: Path, n_train: int = 16, n_test: int = 4, n_other: int = 40,
                       leak: bool = False) -> Path:
    """A BEIR folder of real SciFact rows (see the module docstring); ``leak`` copies one training
    (query, doc) pair into the test qrels."""
    from lab.data.beir import load_dataset

    ds = load_dataset(SCIFACT, progress=False)
    train_q, train_qrels = ds.split("train")
    test_q, test_qrels = ds.split("test")
    tr = [q for q in train_qrels.query_ids if train_qrels[q]][:n_train]
    te = [q for q in test_qrels.query_ids if test_qrels[q]][:n_test]
    keep = {d for q in tr for d in train_qrels[q]} | {d for q in te for d in test_qrels[q]}
    keep |= set([d for d in ds.corpus.ids if d not in keep][:n_other])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in ds.corpus:
            if d.id in keep:
                f.write(json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": train_q[q]}) + "\n" for q in tr)
        f.writelines(json.dumps({"_id": q, "text": test_q[q]}) + "\n" for q in te)
    rows = {"train": [(q, d, g) for q in tr for d, g in train_qrels[q].items()],
            "test": [(q, d, g) for q in te for d, g in test_qrels[q].items()]}
    if leak:
        rows["test"].append(rows["train"][0])
    for split, rs in rows.items():
        (folder / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rs), encoding="utf-8")
    return folder

def train_tiny(dataset: Path, out: Path, mlflow_root=None, **overrides) -> dict:
    from lab.retrievers.base import Context
    from lab.training.reranker import TrainConfig, train_reranker

    cfg = TrainConfig(**{**TINY_RERANKER, **overrides})
    return train_reranker(dataset, out, cfg, ctx=Context(cache_dir=out.parent / "cache", progress=False),
                          log=lambda *a: None, tracking_root=mlflow_root)


TINY_EMBEDDER = {"epochs": 1, "batch_size": 4, "max_seq_length": 48, "val_fraction": 0.25, "val_max_queries": 3,
        "val_pool_random": 5, "lr": 5e-5, "doc_overlap": "allow"}


# ------------------------------------------------------------------------------------------------ end to end
def ordqa_subset(n_extra: int = 0) -> Dataset:
    """ord-qa reduced to the relevant chunks of its first 3 test queries (by id), plus ``n_extra`` other chunks."""
    from lab.data.beir import load_dataset

    ds = load_dataset("data/ord-qa", progress=False)
    queries, qrels = ds.split("test")
    keep_q = sorted(queries)[:3]
    rel = [d for q in keep_q for d in sorted(qrels[q])]
    others = [d for d in ds.corpus.ids if d not in rel][:n_extra]
    corpus = Corpus({d: ds.corpus[d] for d in rel + others}, name="ord-qa-subset")
    return Dataset(ds.path, corpus, queries.subset(keep_q), {"test": Qrels({q: qrels[q] for q in keep_q})},
                   name="ord-qa-subset")


def mini_dataset(tmp_path, corpus_only: bool = False) -> Path:
    """Three real ord-qa passages as a BEIR folder (``corpus_only``: corpus.jsonl alone, as `lab ingest` writes)."""
    src = REPO / "data" / "ord-qa" / "corpus.jsonl"
    keep = {"restructure_0", "partition_manager_0", "antenna_rule_checker_0"}
    folder = tmp_path / "mini"
    (folder / "qrels").mkdir(parents=True)
    lines = [ln for ln in src.read_text(encoding="utf-8").splitlines() if json.loads(ln)["_id"] in keep]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if corpus_only:
        (folder / "qrels").rmdir()
        return folder
    (folder / "queries.jsonl").write_text('{"_id": "q", "text": "zoom"}\n', encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\trestructure_0\t1\n", encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------------ bad input
def assert_bad_file(read, path: Path, line: int | None, field: str | None, message: str):
    """``read(path)`` raises one DataError that names ``path``, ``line`` and ``field`` (first in its text, as
    "PATH, line N"), holds ``message`` and says what to do next (a hint); returns the error."""
    import pytest

    from lab.core.errors import DataError

    with pytest.raises(DataError) as err:
        read(path)
    e = err.value
    assert (e.path, e.line, e.field) == (str(path), line, field)
    assert message in e.message and e.hint  # every error says what to do next
    assert str(e).startswith(str(path) + (f", line {line}" if line else ""))
    return e


# ------------------------------------------------------------------------------------------------ sweeps
def ordqa_sweep_env(base: Path, spec_name: str, spec: str, pytestconfig, **fields) -> dict:
    """A sweep workspace in ``base``: ``kb``, a copy of data/ord-qa (a test may change it), ``spec``, the file
    ``base / spec_name`` holding ``spec.format(dataset=kb, **fields)``, and ``root``, a blank MLflow store."""
    from conftest import blank_store

    kb = base / "kb"
    shutil.copytree(REPO / "data" / "ord-qa", kb)
    path = base / spec_name
    path.write_text(spec.format(dataset=kb, **fields))
    return {"base": base, "kb": kb, "spec": path, "root": blank_store(base, pytestconfig)}
