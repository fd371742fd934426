"""lab.testset.umbrela: the grade read back from an answer, and the prompt (UMBRELA, versioned, hashed)."""
from __future__ import annotations

from lab.testset.judge import GRAMMAR_TOKENS
from lab.testset.umbrela import PROMPT, PROMPT_VERSION, make_prompt, parse_grade, prompt_sha256


def test_parse_grade():
    assert parse_grade("##final score: 2") == 2
    assert parse_grade("M: 2, T: 1\n## Final Score: **3**") == 3
    assert parse_grade(" 1 ") == 1
    assert parse_grade("score 7") is None
    assert parse_grade("1. Determine the intent of the query.\n2. Measure") is None
    assert parse_grade("") is None and parse_grade(None) is None


def test_prompt_is_umbrela_and_versioned():
    p = make_prompt(" what is CTS? ", "Clock tree synthesis builds the clock network.")
    assert "Query: what is CTS?\nPassage: Clock tree synthesis" in p
    assert "0 to 3" in p and "##final score:" in p
    assert PROMPT_VERSION == "umbrela-v1" and len(prompt_sha256()) == 64
    assert "{query}" in PROMPT and "{passage}" in PROMPT
    assert GRAMMAR_TOKENS >= 10
