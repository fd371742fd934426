"""lab.data.evidence: evidence.jsonl spans and SQuAD-style (CMRC 2018) answer spans."""
from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path

import pytest

from lab.core.errors import DataError
from lab.data import DataWarning, cmrc_answer_spans, load_dataset, read_corpus, read_evidence, read_queries
from lab.data.evidence import read_evidence_report, squad_answer_spans_report

FIX = Path(__file__).parents[1] / "fixtures" / "data"
BAD = FIX / "bad"
DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def tiny():
    return load_dataset(FIX / "tiny")


# --- evidence.jsonl --------------------------------------------------------------------------------------------
def test_one_span_per_pair_and_text_at_offsets(tiny):
    spans = read_evidence(FIX / "tiny" / "evidence.jsonl", tiny.corpus, tiny.queries)
    text = tiny.corpus["d1"].text
    assert [text[s.start:s.end] for s in spans] == ["quick brown fox", "jumps"]
    assert all(s.tier == "core" and s.grade == 1 and s.label == "SUPPORT" for s in spans)


def test_span_past_the_end_of_the_document(tiny):
    with pytest.raises(DataError) as err:
        read_evidence(BAD / "evidence_past_end.jsonl", tiny.corpus)
    e = err.value
    assert (e.line, e.field) == (1, "spans") and "ends past the end of document 'd1' (44 characters)" in e.message


def test_malformed_span(tiny):
    with pytest.raises(DataError, match=r"line 1, field 'spans': span 0 must be \[start, end\].*got \[5, 2\]"):
        read_evidence(BAD / "evidence_bad_span.jsonl")


@pytest.mark.parametrize("line, field, message", [
    ('{"doc_id": "d1", "spans": [[0, 1]]}', "query_id", "missing id"),
    ('{"query_id": "q1", "doc_id": "d1"}', "spans", "missing or empty spans"),
    ('{"query_id": "q1", "doc_id": "d1", "spans": [[0, 1]], "tier": "gold"}', "tier", "tier must be one of"),
    ('{"query_id": "q1", "doc_id": "d1", "spans": [[0, 1]], "grade": 1.5}', "grade", "grade must be an integer"),
])
def test_bad_evidence_fields(tmp_path, line, field, message):
    p = tmp_path / "evidence.jsonl"
    p.write_text('{"query_id": "q1", "doc_id": "d1", "spans": [[0, 3]]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_evidence(p)
    assert (err.value.line, err.value.field) == (2, field) and message in err.value.message


def test_unknown_document_strict_and_counted(tiny):
    with pytest.raises(DataError, match=r"line 2, field 'doc_id': document 'nope' is not in the dataset"):
        read_evidence(BAD / "evidence_unknown_doc.jsonl", tiny.corpus)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spans = read_evidence(BAD / "evidence_unknown_doc.jsonl", tiny.corpus, strict=False)
    assert [(s.doc_id, s.start, s.end) for s in spans] == [("d1", 4, 9)]
    (w,) = [w for w in caught if issubclass(w.category, DataWarning)]
    assert "1 naming unknown documents" in str(w.message)


# --- SQuAD-style answers -----------------------------------------------------------------------------------------
def test_squad_answers_deduplicated_repaired_and_dropped():
    corpus = read_corpus(FIX / "squad" / "corpus.jsonl")
    spans, report = squad_answer_spans_report(FIX / "squad" / "raw", corpus)
    text = corpus["P1"].text
    assert [(s.query_id, text[s.start:s.end]) for s in spans] == [
        ("P1_QUERY_0", "北京"), ("P1_QUERY_1", "上海"), ("P1_QUERY_1", "上海是最大的城市")]
    assert all(s.doc_id == "P1" and s.label == "answer" for s in spans)
    assert (report.spans, report.duplicates, report.repaired, report.dropped, report.queries_without_span) == (
        3, 2, 2, 2, 1)
    notes = report.notes()
    assert len(notes) == 2 and "2 answer offset(s)" in notes[0] and "1 question(s) are left without a span" in notes[1]


def test_cmrc_answer_spans_warns_about_repairs():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spans = cmrc_answer_spans(FIX / "squad" / "raw")
    assert len(spans) == 3 and len([w for w in caught if issubclass(w.category, DataWarning)]) == 2


def test_squad_span_must_match_the_corpus_text(tmp_path):
    corpus_path = tmp_path / "corpus.jsonl"
    corpus_path.write_text('{"_id": "P1", "text": "南京是中国的首都。上海是最大的城市。"}\n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        squad_answer_spans_report(FIX / "squad" / "raw", read_corpus(corpus_path))
    e = err.value
    assert e.field == "data[0].paragraphs[0].qas[0].answers[0].answer_start"
    assert "not in the corpus text of document 'P1'" in e.message and "rebuild corpus.jsonl" in e.hint


def test_squad_layout_errors(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    with pytest.raises(DataError, match=r"no \*.json or \*.json.gz files"):
        cmrc_answer_spans(raw)
    (raw / "x.json.gz").write_bytes(gzip.compress(json.dumps({"data": [{"paragraphs": [{"id": "P", "qas": []}]}]})
                                                 .encode()))
    with pytest.raises(DataError, match=r"field 'data\[0\].paragraphs\[0\].context': expected str 'context'"):
        cmrc_answer_spans(raw)
    (raw / "x.json.gz").write_bytes(gzip.compress(b"{not json"))
    with pytest.raises(DataError, match="malformed JSON"):
        cmrc_answer_spans(raw)


def test_squad_unknown_query_in_a_dataset(tmp_path):
    folder = tmp_path / "squad"
    shutil.copytree(FIX / "squad", folder)
    lines = (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    (folder / "queries.jsonl").write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nP1_QUERY_0\tP1\t1\n", encoding="utf-8")
    with pytest.raises(DataError, match="query 'P1_QUERY_2' is not in the dataset"):
        load_dataset(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        ds = load_dataset(folder, strict=False)
    assert {s.query_id for s in ds.evidence} == {"P1_QUERY_0", "P1_QUERY_1"}


# --- the real data ---------------------------------------------------------------------------------------------
def test_cmrc2018_spans_hold_the_answers_at_the_corpus_offsets():
    corpus = read_corpus(DATA / "cmrc2018" / "corpus.jsonl")
    queries = read_queries(DATA / "cmrc2018" / "queries.jsonl")
    spans, report = squad_answer_spans_report(DATA / "cmrc2018" / "raw", corpus, queries)
    assert (report.spans, report.duplicates, report.repaired, report.dropped) == (5013, 5453, 12, 193)
    for s in spans:  # question id DEV_0_QUERY_0 -> paragraph DEV_0; the span's text is a gold answer
        assert s.query_id.startswith(s.doc_id + "_QUERY_")
        assert corpus[s.doc_id].text[s.start:s.end] in queries.metadata[s.query_id]["answers"]


def test_scifact_rationale_spans():
    corpus = read_corpus(DATA / "scifact" / "corpus.jsonl.gz")
    spans, report = read_evidence_report(DATA / "scifact" / "evidence.jsonl", corpus)
    assert report.spans == 1391 and report.queries == 693 and not report.notes()
    assert {s.label for s in spans} == {"SUPPORT", "CONTRADICT"}
    for s in spans:  # rationale sentences: whole sentences between the single spaces that join them
        text = corpus[s.doc_id].text
        assert text[s.start] != " " and text[s.end - 1] != " " and (s.end == len(text) or text[s.end] == " ")
