"""lab.testset.gates: each gate on real-looking candidates, the funnel report, greedy near-duplicates."""
from __future__ import annotations

import numpy as np
import pytest

from lab.core.errors import ConfigError
from lab.testset.gates import (GATES, GateConfig, GateReport, answer_after_echo, check_text_gates, non_answer, greedy_duplicates, is_question,
                               identifiers, length_ok, markup_in, repeated_in_token, repetition, same_language,
                               term_coverage, unknown_identifiers)
from lab.text.tokenize import Tokenizer

PASSAGE = ("The set_wire_rc command sets the resistance and capacitance used to estimate delay of routing wires. "
           "Separate values can be specified for clock and data nets with the -signal and -clock flags.")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer(language="auto", stem=True, stopwords="nltk")


def test_is_question():
    assert is_question("Which flag gives clock nets their own wire parasitics?")
    assert is_question("How do I zoom in on a region")  # interrogative start, no question mark
    assert not is_question("Macro Placement")
    assert not is_question("The restructure module is based on ABC.")
    assert not is_question("")
    assert not is_question("How to use this tool: 1. Run the command. 2. Print the output of ?")  # a list, cut off
    assert not is_question("What does the command print the output of the ?")
    assert is_question("What is the macro placement module in OpenROAD (`mpl`) based on?")
    assert not is_question("What is a macro? What is a pin?")  # two questions
    assert is_question("What does gen.py write, e.g. for dbNet?")
    assert is_question("如何为时钟网络单独设置线电阻？", "zh") and is_question("这个命令的作用是什么", "zh")
    assert not is_question("设置线电阻。", "zh")


def test_length_bounds():
    cfg = GateConfig()
    assert length_ok("Which flag sets clock parasitics?", "-clock", cfg)
    assert not length_ok("Which flag?", "-clock", cfg)  # 2 words < 4
    assert not length_ok("Which flag sets clock parasitics?", "   ", cfg)  # empty answer
    assert not length_ok("Which flag sets clock parasitics?", "word " * 121, cfg)
    assert length_ok("如何设置时钟线电阻？", "用 set_wire_rc", cfg, "zh")
    assert not length_ok("电阻？", "用 set_wire_rc", cfg, "zh")


def test_repetition_detects_loops():
    assert repetition("The answer is: " * 8) > 0.6
    assert repetition("Use set_wire_rc with the -clock flag for clock nets.") == 0.0
    assert repetition("two words") == 0.0


def test_overlap_and_support_use_content_terms(tok):
    terms = set(tok(PASSAGE))
    copied = "What does the set_wire_rc command set for routing wires?"
    reworded = "Which setting gives clock and data nets different parasitic estimates?"
    assert term_coverage(copied, terms, tok) > 0.75 > term_coverage(reworded, terms, tok)
    assert term_coverage("What is it?", terms, tok) == 1.0  # no content term: nothing new, fails low_overlap
    res, meas = check_text_gates(reworded, "Use the -signal and -clock flags of set_wire_rc.", terms, GateConfig(), tok)
    assert all(res.values()) and set(res) == {"is_question", "not_quiz", "no_passage_reference", "same_language",
                                              "length", "no_repetition", "no_markup", "low_overlap", "answerable"}
    res, meas = check_text_gates(copied, "It is 1000 on a 3D map tile.", terms, GateConfig(), tok)
    assert not res["low_overlap"] and not res["answerable"] and meas["answer_support"] < 0.5
    for empty in ("a", ":{", "the"):  # answers seen from Gemma 3 270M that once passed: no content term
        res, meas = check_text_gates(reworded, empty, terms, GateConfig(), tok)
        assert not res["answerable"] and meas["answer_support"] == 0.0, empty
    res, _ = check_text_gates(reworded, "x", terms, GateConfig(answerability="llm"), tok)
    assert "answerable" not in res  # the LLM judge decides it


@pytest.mark.parametrize(("question", "answer", "why"), [
    # seen from SmolLM2-135M on the SQLite docs, accepted before this check
    ("Why is the table named 'table-1'?", "Why is the table named 'table-1'?", "echo"),
    ("What is the purpose of sqlite3_mprintf() and sqlite3_vmprintf()?",
     "What? What is the purpose of the sqlite3_mprintf() and sqlite3_vmprintf() functions? What is the", "question"),
    ("How can I get the number of rows in a table using SQLite?",
     "How can I get the number of rows in a table using SQLite? How can I optimize the performance of a function?",
     "echo"),
    ("What is the difference between X and Y?", "Is it faster to store each BLOB in a separate file?", "question"),
    ("如何关闭连接？", "用什么函数？", "question"),
    ("What does sqlite3_blob_close() do?", "It closes an open BLOB handle, even when it returns an error.", None),
    ("Which flag inverts a changeset?", "SQLITE_CHANGESETSTART_INVERT (0x0002): what? no, it inverts it.", None),
    # the answer cut at 120 characters holds only the question's opening
    ("How to fix a SQLite database that can be corrupted by a single VACUUM operation, which can lead to data loss?",
     "How to fix a SQLite database that can be corrupted by a single VACUUM operation, which can", "echo"),
    ("What is the correct way to delete a table expression in MySQL?", "How to delete table expression in MySQL",
     "question"),
    ("How do you determine the best choice between external and internal blob storage?",
     "Do you get better read performance when you store the complete BLOB in the database", "question"),
    ("How to create an OS interface layer?", "Question: How do you create an OS interface layer", "question"),
    ("How does WAL mode differ on Unix?", "1. How do WAL mode implementations on Unix and Windows differ", "question"),
    ("如何关闭连接？", "为什么要关闭连接", "question"),
    ("How to fix the SQLite_MAX_ALLOCATION_SIZE compilation error?", "2022-12-28", "number"),
    ("Why can the SQLite server not be used?", "3.0", "number"),
    # a number is an answer to a question that asks for one
    ("How many columns can a table have?", "2000", None),
    ("When was sqlite3_trace_v2() added?", "2016-08-08", None),
    ("Which version added window functions?", "3.25.0", None),
    # an answer may start like the question's subject, and may begin with "when" or "do not"
    ("When should I run VACUUM?", "When many rows have been deleted and the file should shrink.", None),
    ("How do I avoid SQLITE_BUSY?", "Do not hold a read transaction open while another connection writes.", None),
])
def test_an_answer_that_repeats_the_question_or_asks_one_is_no_answer(tok, question, answer, why):
    assert non_answer(question, answer) == why
    terms = set(tok(question + " " + answer))  # every term in the passage: only the non-answer can fail answerable
    res, meas = check_text_gates(question, answer, terms, GateConfig(), tok)
    assert res["answerable"] is (why is None) and meas["non_answer"] == float(why is not None)


@pytest.mark.parametrize(("question", "answer", "kept"), [
    # Qwen2.5-Coder-0.5B on ORD-QA: the question copied, then the answer
    ("What is the default bump pitch used in the absence of a vsrc file?",
     "What is the default bump pitch used in the absence of a vsrc file? The default bump pitch is 140um.",
     "The default bump pitch is 140um."),
    ("How do I erase route guides?", "how do I erase route guides: pass an empty list.", "pass an empty list."),
    # nothing after the copy: left as it is, for non_answer to call an echo
    ("What is the default output file for CTS reports?", "What is the default output file for CTS reports?",
     "What is the default output file for CTS reports?"),
    ("Why X?", "It is Y.", "It is Y."),
])
def test_a_copy_of_the_question_before_the_answer_is_dropped(question, answer, kept):
    assert answer_after_echo(question, answer) == kept


def test_greedy_duplicates_keep_the_first():
    v = np.eye(3, dtype=np.float32)
    near = (v[0] + 0.1 * v[1]) / np.linalg.norm(v[0] + 0.1 * v[1])
    assert greedy_duplicates(np.stack([v[0], near, v[1], v[0]]), 0.9) == [False, True, False, True]
    assert greedy_duplicates(v[1:2], 0.9, kept=v[1:2]) == [True]


def test_report_funnel_counts():
    r = GateReport(config={})
    assert r.add({"valid_json": False}) == "valid_json"
    assert r.add({g: True for g in GATES}) is None
    assert r.add({**{g: True for g in GATES[:-1]}, "low_overlap": False, "on_topic": False}) == "low_overlap"
    assert (r.candidates, r.accepted, r.dropped_at["low_overlap"], r.failed["on_topic"]) == (3, 1, 1, 1)
    m = r.metrics()
    assert m["yield"] == pytest.approx(1 / 3) and m["gate_valid_json_dropped"] == 1
    table = r.table()
    assert "low_overlap" in table and "accepted 1" in table


def test_config_validation():
    with pytest.raises(ConfigError):
        GateConfig(answerability="oracle")
    with pytest.raises(ConfigError):
        GateConfig(max_overlap=1.5)


def test_repetition_inside_a_token_or_identifier(tok):
    """What SmolLM2 wrote on a real folder: the trigram measure saw nothing (0.0), the token loop is caught."""
    q = "What is the purpose of the libffi_cif_cif_cif_ structure?"
    assert repetition(q) == 0.0 and repeated_in_token(q) is not None
    assert repeated_in_token("What is cif_cif?") == "cif_cif" and repeated_in_token("abababab x") == "abababab"
    for fine in ("What does set_wire_rc do?", "How does murmur hashing work?", "Why 1000000 cells?",
                 "What is www.example.com?", "Which --verbose flag?"):
        assert repeated_in_token(fine) is None, fine
    assert repeated_in_token("What is foo_bar_bar?", allowed="the foo_bar_bar type") is None  # the passage's own
    terms = set(tok(PASSAGE))
    res, meas = check_text_gates(q, "The libffi_cif_cif_cif_ struct.", terms, GateConfig(), tok, "en", PASSAGE)
    assert not res["no_repetition"] and meas["repetition"] == 1.0 and meas["token_repetition"] == 1.0


@pytest.mark.parametrize("text,kind", [
    ("What does ![build](https://img.shields.io/x.svg) show?", "markdown image or badge"),
    ("What is [the guide](https://example.org)?", "markdown link"),
    ("## Install\nHow?", "markdown heading"), ("What is **bold** here?", "emphasis"),
    ("What does <div class='x'> hold?", "html tag"), ("Why ```python?", "code fence"),
    ("| a | b | c |", "table"), ("What does :ref:`install` link?", "reStructuredText"),
    (".. note:: read this", "reStructuredText"), ("What is ========?", "rule line"),
])
def test_markup_is_caught(text, kind):
    assert markup_in(text) == kind


@pytest.mark.parametrize("text", ["What does `--strict` do?", "What does std::vector<int> hold?",
                                  "Which value of a-b is #1?", "What is 3 * 4?"])
def test_plain_text_is_not_markup(text):
    assert markup_in(text) is None


def test_question_follows_the_passage_language(tok):
    assert same_language("如何为时钟网络单独设置线电阻？", "zh") and same_language("Which flag sets clock RC?", "en")
    assert not same_language("How do I set the clock wire resistance?", "zh")
    assert not same_language("如何设置线电阻？", "en")
    zh_passage = "set_wire_rc 命令设置用于估计布线延迟的电阻和电容。时钟网络和数据网络可以分别设置。"
    res, _ = check_text_gates("Which command sets wire resistance?", "set_wire_rc", set(tok(zh_passage)),
                              GateConfig(), tok, "zh", zh_passage)
    assert res["same_language"] is False


def test_a_question_may_not_name_identifiers_the_passage_does_not_hold(tok):
    """The SQLite trial's question about a function that does not exist fails known_identifiers; one about
    functions the passage names (any case, `code` spans word by word) passes; "e.g." is not an identifier."""
    passage = "Call sqlite3_open_v2() to open a database; `PRAGMA journal_mode` sets the journal. See db.close."
    assert identifiers("Why use sqlite3_open_v2() or `PRAGMA journal_mode`, e.g. with db.close?") == [
        "sqlite3_open_v2", "PRAGMA journal_mode", "db.close"]
    assert unknown_identifiers("How does sqlite3_frobnicate() differ from SQLITE3_OPEN_V2?", passage) == [
        "sqlite3_frobnicate"]
    assert unknown_identifiers("When is `journal_mode PRAGMA` used?", passage) == []
    res, meas = check_text_gates("How does sqlite3_frobnicate() open a database?", "With sqlite3_open_v2().",
                                 set(tok(passage)), GateConfig(), tok, "en", passage)
    assert res["known_identifiers"] is False and meas["unknown_identifiers"] == 1.0
    assert GATES.index("known_identifiers") < GATES.index("low_overlap") < GATES.index("prose_evidence")
