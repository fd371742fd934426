"""The cheap gates hand grades asked for: quiz-shaped questions, questions about "the given passage", names the
corpus never mentions, and stub evidence ("See also:" lines, one-line summaries); each counted by the report."""
from __future__ import annotations

import pytest

from lab.testset.gates import (
    GATES,
    GateConfig,
    GateReport,
    check_text_gates,
    corpus_vocabulary,
    names,
    passage_reference,
    quiz_shaped,
    stub_evidence,
    unknown_names,
)
from lab.text.tokenize import Tokenizer


@pytest.mark.parametrize("q", ["Which of the following is a valid PRAGMA?", "Which of the options sets the page size?",
                               "True or false: VACUUM rebuilds the file?", "Choose the correct journal mode for WAL?",
                               "What does it return? A) a row B) a column", "以下哪个选项是正确的？"])
def test_quiz_shaped_questions_are_caught(q):
    assert quiz_shaped(q)


@pytest.mark.parametrize("q", ["Which journal mode keeps readers and writers apart?",
                               "What follows a failed transaction?", "如何设置页面大小？"])
def test_ordinary_questions_are_not_quizzes(q):
    assert not quiz_shaped(q)


@pytest.mark.parametrize("q,words", [("According to the given passage, what does VACUUM do?", "the given passage"),
                                     ("What is described in the above passage?", "the above passage"),
                                     ("What does the text say about locking?", None),
                                     ("According to the text, when is a lock taken?", "According to the text"),
                                     ("根据上文，WAL 模式有什么好处？", "上文")])
def test_references_to_the_source_text(q, words):
    assert passage_reference(q) == words or (words is None and passage_reference(q) is None)


def test_names_the_corpus_never_mentions():
    vocab = corpus_vocabulary(["SQLite stores a database in one file.", "Unlike PostgreSQL, it needs no server."])
    assert names("How does SQLite compare with MongoDB for Oracle users?") == ["SQLite", "MongoDB", "Oracle"]
    assert unknown_names("How does SQLite compare with MongoDB for Oracle users?", vocab) == ["MongoDB", "Oracle"]
    assert unknown_names("Why does PostgreSQL need a server but SQLite not?", vocab) == []
    assert names("What is a page?") == []  # the first word is not a name


@pytest.mark.parametrize("span,why", [("See also: PRAGMA journal_mode, VACUUM", "see also"),
                                      ("Overview of the query planner", "summary"),
                                      ("The query planner picks an index for each loop of a join.", None),
                                      ("Indexes\nspeed up lookups on large tables and joins between them", None)])
def test_stub_evidence(span, why):
    assert stub_evidence(span) == why


def test_text_gates_report_the_new_gates_and_the_report_counts_them():
    tok = Tokenizer(language="en", stem=True, stopwords="nltk")
    passage = "The VACUUM command rebuilds the database file, repacking it into a minimal amount of disk space."
    res, _ = check_text_gates("Which of the following rebuilds the database file?", "VACUUM rebuilds it",
                              set(tok(passage)), GateConfig(max_overlap=1.0), tok, "en", passage)
    assert res["not_quiz"] is False and res["no_passage_reference"] is True
    res2, _ = check_text_gates("What does the given passage say VACUUM repacks?", "the database file",
                               set(tok(passage)), GateConfig(max_overlap=1.0), tok, "en", passage)
    assert res2["no_passage_reference"] is False and res2["not_quiz"] is True
    for g in ("not_quiz", "no_passage_reference", "known_names", "evidence_not_stub"):
        assert g in GATES
    r = GateReport(config={})
    assert r.add({**dict.fromkeys(GATES, True), "not_quiz": False}) == "not_quiz"
    assert r.add({**dict.fromkeys(GATES, True), "known_names": False}) == "known_names"
    assert r.add({**dict.fromkeys(GATES, True), "evidence_not_stub": False}) == "evidence_not_stub"
    m = r.metrics()
    assert m["gate_not_quiz_dropped"] == 1 and m["gate_known_names_dropped"] == 1
    assert m["gate_evidence_not_stub_failed"] == 1 and r.to_dict()["dropped_at"]["no_passage_reference"] == 0
    assert "known_names" in r.table()
