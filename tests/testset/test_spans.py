"""lab.testset.spans: the evidence span of a generated answer (verbatim sentence, best sentences, whole passage),
written in the evidence.jsonl format lab.data.evidence reads."""
from __future__ import annotations

import json

import pytest

from lab.data.evidence import read_evidence
from lab.data.types import Corpus, Document, Queries
from lab.testset.spans import evidence_record, not_prose_span, support_span
from lab.text.tokenize import Tokenizer

TEXT = ("## Build\n\nRun cmake and make in a build folder. The default install directory is `/usr/local`.\n\n"
        "To install elsewhere, pass CMAKE_INSTALL_PREFIX to cmake. Alternatively, use the DESTDIR variable with "
        "make. Tests run with ctest.")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(language="auto", stem=True, stopwords="nltk")


def test_verbatim_answer_gives_its_sentence(tok):
    sp = support_span(TEXT, 0, len(TEXT), "the default install directory is `/usr/local`", tok)
    assert sp.method == "verbatim" and TEXT[sp.start:sp.end] == "The default install directory is `/usr/local`."


def test_paraphrased_answer_gives_the_sentences_holding_its_terms(tok):
    sp = support_span(TEXT, 0, len(TEXT), "Use DESTDIR with make", tok)
    assert sp.method == "sentences" and TEXT[sp.start:sp.end] == "Alternatively, use the DESTDIR variable with make."
    assert sp.coverage == 1.0


def test_unsupported_answer_falls_back_to_the_passage(tok):
    s = TEXT.index("To install")
    sp = support_span(TEXT, s, len(TEXT), "Bananas are yellow", tok)
    assert (sp.start, sp.end, sp.method) == (s, len(TEXT), "passage")


def test_record_is_read_back_by_the_evidence_reader(tok, tmp_path):
    sp = support_span(TEXT, 0, len(TEXT), "Use DESTDIR with make", tok)
    rec = evidence_record("gen-0001", "guide", sp, (0, len(TEXT)))
    path = tmp_path / "evidence.jsonl"
    path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    (span,) = read_evidence(path, Corpus({"guide": Document("guide", TEXT)}), Queries({"gen-0001": "q"}))
    assert (span.query_id, span.doc_id, span.start, span.end, span.label) == ("gen-0001", "guide", sp.start, sp.end,
                                                                              "answer")


@pytest.mark.parametrize("text, reason", [
    ("1. Overview", "heading"), ("Table Of Contents", "heading"), ("## Build using the support script", "heading"),
    ("R-04042-24825-31546", "id"), ("Ticket [4c86b126f2]", "id"), ("sqlite3_open_v2()", "identifier"),
    ("`set_wire_rc -clock`", "identifier"), ("-verbose", "identifier"),
    ("The tool reads the design and writes a DEF file.", None), ("Use the -verbose flag to print more", None),
    ("Small. Fast. Reliable.", None)])
def test_evidence_that_is_only_a_heading_an_identifier_or_an_id_is_not_prose(text, reason):
    assert not_prose_span(text) == reason
