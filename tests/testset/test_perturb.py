"""lab.testset.perturb: seeded typo / synonym / distractor / unanswerable variants of real BEIR sets (ORD-QA, SciFact
queries, CMRC 2018 queries), written and read back through lab.data.beir."""
from __future__ import annotations

import json

import pytest

from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.data.beir import load_dataset, read_queries
from lab.data.types import Qrels
from lab.testset.perturb import (
    CHANGES_FILE,
    PROVENANCE_FILE,
    choose_unanswerable,
    load_variant,
    make_variant,
    read_provenance,
    unanswerable_ids,
)
from lab.testset.query_edits import Resources

ORD_QA = resolve_repo_path("data/ord-qa")


@pytest.fixture(scope="module")
def res():
    return Resources(cache_dir=resolve_repo_path(".") / ".cache")  # jieba's prefix cache shared with lab.text.tokenize


@pytest.fixture(scope="module")
def ordqa():
    return load_dataset(ORD_QA, progress=False)


# ------------------------------------------------------------------------------------------------ helpers


# ------------------------------------------------------------------------------------------------ typo


# ------------------------------------------------------------------------------------------------ synonym


# ------------------------------------------------------------------------------------------------ distractor


# ------------------------------------------------------------------------------------------------ variants on disk
def test_query_side_variant_preserves_ids_qrels_and_corpus(ordqa, res, tmp_path):
    prov = make_variant(ordqa, "typo", tmp_path / "v", seed=0, res=res)
    v = load_dataset(tmp_path / "v", progress=False)
    assert (tmp_path / "v" / "corpus.jsonl").is_symlink()
    assert list(v.queries) == list(ordqa.queries.subset(ordqa.qrels["test"].query_ids))
    assert v.qrels["test"].qrels == ordqa.qrels["test"].qrels
    assert v.corpus.ids == ordqa.corpus.ids
    changes = [json.loads(line) for line in (tmp_path / "v" / CHANGES_FILE).read_text().splitlines()]
    assert sum(c["changed"] for c in changes) == prov["n_changed"]
    assert all(v.queries[c["_id"]] == c["text"] for c in changes)
    assert prov["share_changed"] == pytest.approx(prov["n_changed"] / prov["n_queries"], abs=1e-6)
    assert read_provenance(tmp_path / "v")["seed"] == 0 and prov["source"]["name"] == "ord-qa"
    # the same seed gives byte-identical files; a copied corpus loads the same
    make_variant(ordqa, "typo", tmp_path / "w", seed=0, res=res, link_corpus=False)
    for name in ("queries.jsonl", CHANGES_FILE, "qrels/test.tsv"):
        assert (tmp_path / "v" / name).read_bytes() == (tmp_path / "w" / name).read_bytes()
    assert not (tmp_path / "w" / "corpus.jsonl").is_symlink()
    with pytest.raises(ConfigError, match="not empty"):
        make_variant(ordqa, "typo", tmp_path / "w", seed=0, res=res)


def test_unanswerable_queries_have_no_relevant_document_in_the_corpus(ordqa, tmp_path):
    prov = make_variant(ordqa, "unanswerable", tmp_path / "u", seed=0, params={"rate": 0.2})
    held = unanswerable_ids(tmp_path / "u")
    assert held and held == prov["unanswerable"]["query_ids"]
    v = load_dataset(tmp_path / "u", progress=False)  # strict load: every qrels row names a kept document
    source = ordqa.qrels["test"]
    for q in held:
        assert q in v.queries and q not in v.qrels["test"]
        assert not (source.relevant(q) & set(v.corpus.ids))
    kept = [q for q in source if q not in set(held)]
    for q in kept:
        assert source.relevant(q) <= set(v.corpus.ids)
        assert v.qrels["test"].qrels[q] == source.qrels[q]
    assert len(v.corpus) == len(ordqa.corpus) - prov["corpus"]["n_removed"]
    lv = load_variant(tmp_path / "u", progress=False)
    queries, qrels = lv.split("test")
    assert set(queries) == set(source) and all(qrels.qrels[q] == {} for q in held)
    meta = json.dumps(read_queries(tmp_path / "u" / "queries.jsonl", progress=False).metadata)
    assert "unanswerable" not in meta  # strategies cannot see which queries are held out


def test_choose_unanswerable_holds_out_queries_sharing_a_document_together():
    qrels = Qrels({"a": {"d1": 1}, "b": {"d1": 2, "d2": 1}, "c": {"d3": 1}, "d": {"d4": 1}, "e": {"d5": 0}})
    for seed in range(20):
        held, removed = choose_unanswerable(qrels, 0.25, seed)
        assert ("a" in held) == ("b" in held) and "e" not in held
        assert removed == set().union(*(qrels.relevant(q) for q in held))
    assert choose_unanswerable(qrels, 0.25, 5) == choose_unanswerable(qrels, 0.25, 5)
    with pytest.raises(ConfigError):
        choose_unanswerable(qrels, 1.5)


def test_cli_perturb_writes_each_variant(tmp_path, capsys):
    from lab.cli.main import build_parser

    ap = build_parser()
    args = ap.parse_args(["testset", "perturb", str(ORD_QA), "--variants", "typo,synonym,distractor,unanswerable",
                          "--out", str(tmp_path), "--seed", "0", "--set", "typo.rate=0.3", "--no-progress"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    for v in ("typo", "synonym", "distractor", "unanswerable"):
        assert (tmp_path / f"ord-qa-{v}" / PROVENANCE_FILE).is_file() and f"ord-qa-{v}" in printed
    assert read_provenance(tmp_path / "ord-qa-typo")["params"]["rate"] == 0.3
    bad = ap.parse_args(["testset", "perturb", str(ORD_QA), "--variants", "typo,smudge", "--out", str(tmp_path / "x")])
    with pytest.raises(ConfigError, match="--variants"):
        bad.func(bad)
    bad = ap.parse_args(["testset", "perturb", str(ORD_QA), "--variants", "typo", "--out", str(tmp_path / "y"),
                         "--set", "typo.speed=3"])
    with pytest.raises(ConfigError, match="unknown param"):
        bad.func(bad)
