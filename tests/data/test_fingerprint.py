"""lab.data.fingerprint: content hashes stable across copies, re-compression and line ends."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from lab.core.errors import DataError
from lab.data import dataset_files, fingerprint, fingerprint_texts, load_dataset

FIX = Path(__file__).parents[1] / "fixtures" / "data"
DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture
def tiny(tmp_path) -> Path:
    dst = tmp_path / "a" / "tiny"
    shutil.copytree(FIX / "tiny", dst)
    return dst


def test_short_and_full_digest(tiny):
    full = fingerprint(tiny, full=True)
    assert len(full) == 64 and int(full, 16) >= 0 and fingerprint(tiny) == full[:16]


def test_same_content_elsewhere_gives_the_same_fingerprint(tiny, tmp_path):
    other = tmp_path / "b" / "renamed"
    shutil.copytree(tiny, other)
    assert fingerprint(other) == fingerprint(tiny) == fingerprint(FIX / "tiny")


def test_compression_and_line_ends_do_not_matter(tiny):
    before = fingerprint(tiny)
    corpus = tiny / "corpus.jsonl"
    data = corpus.read_bytes()
    (tiny / "corpus.jsonl.gz").write_bytes(gzip.compress(data, compresslevel=1, mtime=1))
    corpus.unlink()
    assert fingerprint(tiny) == before
    (tiny / "corpus.jsonl.gz").write_bytes(gzip.compress(data, compresslevel=9, mtime=2))
    assert fingerprint(tiny) == before
    qrels = tiny / "qrels" / "test.tsv"
    qrels.write_bytes(qrels.read_bytes().replace(b"\n", b"\r\n"))
    assert fingerprint(tiny) == before


def test_docs_and_hidden_files_are_ignored(tiny):
    before = fingerprint(tiny)
    (tiny / "SOURCE.md").write_text("changed notes")
    (tiny / ".DS_Store").write_bytes(b"\0")
    (tiny / ".cache").mkdir()
    (tiny / ".cache" / "x.npy").write_bytes(b"\1")
    assert fingerprint(tiny) == before
    assert [p.relative_to(tiny).as_posix() for p in dataset_files(tiny)] == [
        "corpus.jsonl", "evidence.jsonl", "qrels/dev.txt", "qrels/test.tsv", "queries.jsonl"]  # code-point order


@pytest.mark.parametrize("change", ["edit", "rename", "add"])
def test_any_content_change_changes_it(tiny, change):
    before = fingerprint(tiny)
    if change == "edit":
        p = tiny / "qrels" / "test.tsv"
        p.write_text(p.read_text().replace("q1\td1\t2", "q1\td1\t1"))
    elif change == "rename":
        (tiny / "qrels" / "dev.txt").rename(tiny / "qrels" / "train.txt")
    else:
        (tiny / "qrels" / "extra.tsv").write_text("q1\td1\t1\n")
    assert fingerprint(tiny) != before


def test_dataset_value_and_errors(tiny):
    assert fingerprint(load_dataset(tiny)) == fingerprint(tiny)
    with pytest.raises(DataError, match="dataset folder not found"):
        fingerprint(tiny / "missing")
    (tiny / "queries.jsonl.gz").write_bytes(gzip.compress((tiny / "queries.jsonl").read_bytes()))
    with pytest.raises(DataError, match="both queries.jsonl and queries.jsonl.gz exist"):
        fingerprint(tiny)


def test_fingerprint_texts_is_order_sensitive_and_framed():
    assert fingerprint_texts(["ab", "c"]) != fingerprint_texts(["a", "bc"])
    assert fingerprint_texts(["a", "b"]) != fingerprint_texts(["b", "a"])
    assert fingerprint_texts(iter(["中文", "x"])) == fingerprint_texts(["中文", "x"])
    assert len(fingerprint_texts([], full=True)) == 64


def test_real_datasets_have_pinned_fingerprints():
    """The committed data: a change of these values means the data changed (update SOURCE.md and this test)."""
    assert {name: fingerprint(DATA / name) for name in ("scifact", "cmrc2018", "ord-qa")} == {
        "scifact": "27a7536ca7dc3ad8", "cmrc2018": "2f1ccf9dfcaba584", "ord-qa": "9750503c857574c1"}
