"""lab.data.beir: BEIR folders load into typed values; bad input gives one DataError naming file, line, field."""
from __future__ import annotations

import gzip
import shutil
import warnings
from pathlib import Path

import pytest
from builders import assert_bad_file

from lab.core.errors import DataError
from lab.data import DataWarning, load_dataset, load_dataset_report, read_corpus, read_queries

FIX = Path(__file__).parents[1] / "fixtures" / "data"
BAD = FIX / "bad"
DATA = Path(__file__).resolve().parents[2] / "data"


def copy_tiny(tmp_path: Path) -> Path:
    dst = tmp_path / "tiny"
    shutil.copytree(FIX / "tiny", dst)
    return dst


# --- good input ----------------------------------------------------------------------------------------------
def test_tiny_dataset_loads_with_types_and_conventions():
    ds, report = load_dataset_report(FIX / "tiny")
    assert ds.name == "tiny" and ds.corpus.name == "tiny"
    assert ds.corpus.ids == ["d1", "d2", "4", "d3"]  # file order; JSON integer id read as text
    assert ds.corpus["d2"].title == "" and ds.corpus["4"].title == "" and ds.corpus["4"].text == ""
    assert ds.corpus["d1"].metadata == {"source": "a"}
    assert ds.corpus["d2"].metadata == {"url": "http://example.org/d2"}  # extra fields kept in metadata
    assert ds.corpus["d3"].text == "Zhōngwén 中文 text is fine."
    assert list(ds.queries) == ["q1", "q2", "q3"]
    assert ds.queries.metadata == {"q1": {"answer": "jumps"}, "q3": {}}
    assert sorted(ds.qrels) == ["dev", "test"]
    assert ds.qrels["test"].qrels == {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 0}}  # graded, ints
    assert ds.qrels["dev"].qrels == {"q3": {"d3": 1, "4": -1}}  # TREC format detected in dev.txt
    assert all(isinstance(g, int) for q in ds.qrels.values() for d in q.qrels.values() for g in d.values())
    assert [(e.query_id, e.doc_id, e.start, e.end, e.label) for e in ds.evidence] == [
        ("q1", "d1", 4, 19, "SUPPORT"), ("q1", "d1", 20, 25, "SUPPORT")]
    assert report.clean and report.unknown_queries == {} and len(report.files) == 5
    queries, qrels = ds.split("test")
    assert list(queries) == ["q1", "q2"] and qrels.relevant("q1", threshold=2) == {"d1"}


def test_splits_limit_the_qrels_read_and_unknown_split_is_an_error():
    assert list(load_dataset(FIX / "tiny", splits=["dev"]).qrels) == ["dev"]
    with pytest.raises(DataError, match=r"no qrels for split\(s\) \['train'\]; available: \['dev', 'test'\]"):
        load_dataset(FIX / "tiny", splits=["train"])


def test_gz_corpus_and_queries_read_like_plain(tmp_path):
    folder = copy_tiny(tmp_path)
    for stem in ("corpus", "queries"):
        plain = folder / f"{stem}.jsonl"
        (folder / f"{stem}.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    a, b = load_dataset(FIX / "tiny"), load_dataset(folder)
    assert a.corpus.docs == b.corpus.docs and a.queries.texts == b.queries.texts


def test_crlf_and_bom_are_accepted(tmp_path):
    p = tmp_path / "corpus.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"_id": "a", "text": "x"}\r\n{"_id": "b", "text": "y"}\r\n')
    assert read_corpus(p).ids == ["a", "b"]


# --- bad input: one DataError naming file, line and field --------------------------------------------------------
@pytest.mark.parametrize("name, line, field, message", [
    ("corpus_malformed.jsonl", 2, None, "malformed JSON"),
    ("corpus_no_id.jsonl", 2, "_id", "missing id"),
    ("corpus_no_text.jsonl", 2, "text", "missing text"),
    ("corpus_text_not_string.jsonl", 1, "text", "must be a string, got int"),
    ("corpus_duplicate.jsonl", 3, "_id", "duplicate document id 'd1' (first on line 1)"),
    ("corpus_not_object.jsonl", 2, None, "expected a JSON object, got list"),
    ("corpus_latin1.jsonl", 2, None, "not valid UTF-8: byte 0xe9 at column 27"),
    ("empty.jsonl", None, None, "corpus file is empty"),
])
def test_bad_corpus_files(name, line, field, message):
    assert_bad_file(read_corpus, BAD / name, line, field, message)


def test_bad_queries_file_names_the_queries_file(tmp_path):
    p = tmp_path / "queries.jsonl"
    p.write_text('{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"queries.jsonl, line 2, field '_id': duplicate query id 'q1'"):
        read_queries(p)
    p.write_text('{"_id": "q1", "text": ["a"]}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 1, field 'text': must be a string, got list"):
        read_queries(p)


def test_non_object_metadata_and_non_string_title_are_errors(tmp_path):
    p = tmp_path / "corpus.jsonl"
    p.write_text('{"_id": "a", "text": "x", "metadata": [1]}\n', encoding="utf-8")
    with pytest.raises(DataError, match="field 'metadata': metadata must be a JSON object"):
        read_corpus(p)
    p.write_text('{"_id": "a", "text": "x", "title": 3}\n', encoding="utf-8")
    with pytest.raises(DataError, match="field 'title': must be a string"):
        read_corpus(p)
    p.write_text('{"_id": 1.5, "text": "x"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="field '_id': id must be a string, got float"):
        read_corpus(p)


def test_missing_files_name_what_was_expected(tmp_path):
    with pytest.raises(DataError, match="dataset folder not found.*corpus.jsonl"):
        load_dataset(tmp_path / "nope")
    folder = copy_tiny(tmp_path)
    (folder / "corpus.jsonl").rename(folder / "docs.jsonl")
    with pytest.raises(DataError, match=r"corpus file not found \(looked for corpus.jsonl and corpus.jsonl.gz\)"):
        load_dataset(folder)
    (folder / "docs.jsonl").rename(folder / "corpus.jsonl")
    shutil.rmtree(folder / "qrels")
    with pytest.raises(DataError, match="qrels folder not found"):
        load_dataset(folder)
    (folder / "qrels").mkdir()
    with pytest.raises(DataError, match=r"no qrels files \(qrels/<split>.tsv\)"):
        load_dataset(folder)


def test_plain_and_gz_side_by_side_is_ambiguous(tmp_path):
    folder = copy_tiny(tmp_path)
    (folder / "corpus.jsonl.gz").write_bytes(gzip.compress((folder / "corpus.jsonl").read_bytes()))
    with pytest.raises(DataError, match="both corpus.jsonl and corpus.jsonl.gz exist"):
        load_dataset(folder)


def test_damaged_gz_is_a_data_error(tmp_path):
    folder = copy_tiny(tmp_path)
    (folder / "corpus.jsonl").unlink()
    (folder / "corpus.jsonl.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataError, match="cannot read corpus file"):
        load_dataset(folder)


def test_two_qrels_files_for_one_split(tmp_path):
    folder = copy_tiny(tmp_path)
    shutil.copy(folder / "qrels" / "test.tsv", folder / "qrels" / "test.txt")
    with pytest.raises(DataError, match=r"split 'test' has two qrels files \(test.tsv and test.txt\)"):
        load_dataset(folder)


# --- qrels naming unknown ids: error by default, counted with strict=False ---------------------------------------
def add_unknown_rows(folder: Path) -> None:
    with open(folder / "qrels" / "test.tsv", "a", encoding="utf-8") as fh:
        fh.write("q9\td1\t1\nq1\tzz\t1\nq8\tzz\t1\n")  # lines 5, 6, 7


def test_unknown_ids_in_qrels_are_errors_by_default(tmp_path):
    folder = copy_tiny(tmp_path)
    add_unknown_rows(folder)
    with pytest.raises(DataError) as err:
        load_dataset(folder)
    e = err.value
    assert (Path(e.path).name, e.line, e.field) == ("test.tsv", 5, "query-id")
    assert "query id 'q9' is not in the queries file (2 row(s)" in e.message and "strict=False" in e.hint


def test_unknown_ids_with_strict_false_are_counted_and_warned_once(tmp_path):
    folder = copy_tiny(tmp_path)
    add_unknown_rows(folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds, report = load_dataset_report(folder, strict=False)
    messages = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert len(messages) == 2 and "dropped 2 qrels row(s)" in messages[0] and "kept 2 qrels row(s)" in messages[1]
    assert report.unknown_queries == {"test": 2} and report.unknown_docs == {"test": 2} and not report.clean
    assert ds.qrels["test"].qrels == {"q1": {"d1": 2, "d2": 1, "zz": 1}, "q2": {"d3": 0}}


def test_unknown_docs_alone_error_names_the_doc_field(tmp_path):
    folder = copy_tiny(tmp_path)
    with open(folder / "qrels" / "dev.txt", "a", encoding="utf-8") as fh:
        fh.write("q3 0 zz 1\n")
    with pytest.raises(DataError, match=r"dev.txt, line 3, field 'corpus-id': document id 'zz' is not in the corpus"):
        load_dataset(folder)


# --- the real datasets ---------------------------------------------------------------------------------------
def test_scifact_loads_with_published_counts():
    ds, report = load_dataset_report(DATA / "scifact", progress=False)
    assert ds.name == "scifact" and len(ds.corpus) == 5183 and len(ds.queries) == 1109
    test = ds.qrels["test"]
    assert len(test) == 300 and sum(len(d) for d in test.qrels.values()) == 339
    assert sum(len(d) for d in ds.qrels["train"].qrels.values()) == 919
    assert len(ds.evidence) == 1391 and len({e.query_id for e in ds.evidence if e.query_id in test}) == 188
    assert report.clean


def test_cmrc2018_loads_with_answer_spans():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds, report = load_dataset_report(DATA / "cmrc2018", progress=False)
    assert len(ds.corpus) == 1104 and len(ds.queries) == 4221
    assert {k: sum(len(d) for d in v.qrels.values()) for k, v in ds.qrels.items()} == {"dev": 1002, "test": 3219}
    (spans,) = report.evidence
    assert (spans.spans, spans.repaired, spans.dropped, spans.queries_without_span) == (5013, 12, 193, 0)
    assert len(ds.evidence) == 5013 and {e.query_id for e in ds.evidence} == set(ds.queries)
    assert len([w for w in caught if issubclass(w.category, DataWarning)]) == 2


def test_ord_qa_loads():
    ds, report = load_dataset_report(DATA / "ord-qa", progress=False)
    assert len(ds.corpus) == 290 and len(ds.queries) == 90 and report.clean
    assert sum(len(d) for d in ds.qrels["test"].qrels.values()) == 161 and ds.evidence == []


def test_a_corpus_without_queries_says_to_generate_them(tmp_path):
    """A folder `lab ingest` wrote (corpus.jsonl alone) names the command that makes questions for it."""
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "hello"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"queries file not found .*lab testset generate --dataset "):
        load_dataset(tmp_path, progress=False)
