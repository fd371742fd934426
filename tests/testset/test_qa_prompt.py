"""lab.testset.qa_prompt: the prompt in both languages, the passage as shown, parsing answers (strict, one lenient
repair) and yes/no verdicts."""
from __future__ import annotations

import pytest

from lab.testset.qa_prompt import (
    build_prompt,
    parse_qa,
    parse_yes_no,
    shown_passage,
)


def test_prompt_in_both_languages():
    en = build_prompt("The gzip command compresses files.", "en")
    assert "must not directly contain the key words" in en and en.endswith("The gzip command compresses files.")
    assert '{"question": "...", "answer": "..."}' in en
    zh = build_prompt("段落", "zh")
    assert zh.startswith("给定以下文档段落，生成一个用户可能会问的、恰好需要这段信息才能回答的问题")
    assert "问题不能直接包含段落中的关键词" in zh


def test_shown_passage_cuts_at_a_boundary():
    text = "word " * 300
    cut = shown_passage(text, 100)
    assert len(cut) <= 100 and not cut.endswith("wor") and shown_passage("short", 100) == "short"


@pytest.mark.parametrize("text,expected,repaired", [
    ('{"question": "Which flag?", "answer": "-clock"}', {"question": "Which flag?", "answer": "-clock"}, False),
    ('  {"answer": "-clock", "question": "Which flag?"}\n', {"question": "Which flag?", "answer": "-clock"}, False),
    ('```json\n{"question": "Which flag?", "answer": "-clock",}\n```', {"question": "Which flag?", "answer": "-clock"},
     True),
    ('Sure! {\u201cquestion\u201d: \u201cWhich flag?\u201d, \u201canswer\u201d: \u201c-clock\u201d}',
     {"question": "Which flag?", "answer": "-clock"}, True),
    ('{"question": "Which flag?", "answer": "the -clock fl', {"question": "Which flag?", "answer": "the -clock fl"},
     True),
    ("Question: Which flag sets clock RC?\nAnswer: -clock", {"question": "Which flag sets clock RC?",
                                                             "answer": "-clock"}, True),
])
def test_parse_qa_strict_then_one_lenient_repair(text, expected, repaired):
    assert parse_qa(text) == (expected, repaired)


@pytest.mark.parametrize("text", ["", "Macro Placement", '{"question": "", "answer": "x"}', '{"question": 3}',
                                  "[1, 2]"])
def test_parse_qa_gives_up(text):
    assert parse_qa(text) == (None, False)


def test_parse_yes_no():
    assert parse_yes_no("Yes.") is True and parse_yes_no(" no") is False and parse_yes_no("是") is True
    assert parse_yes_no("Maybe") is None
