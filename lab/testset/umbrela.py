"""The UMBRELA relevance prompt (Upadhyay et al. 2024) the judge grades with, its version and hash, and the grade
read back from an answer: ``##final score: N``, or a lone digit 0-3."""
from __future__ import annotations

import hashlib
import re

PROMPT_VERSION = "umbrela-v1"


GRADES = (0, 1, 2, 3)


#: GBNF grammar for constrained answers (llama.cpp): the answer is ``##final score: N`` with N in 0-3.
SCORE_GRAMMAR = 'root ::= "##final score: " [0-3]'


PROMPT = """Given a query and a passage, you must provide a score on an integer scale of 0 to 3 with the following meanings:
0 = represent that the passage has nothing to do with the query,
1 = represents that the passage seems related to the query but does not answer it,
2 = represents that the passage has some answer for the query, but the answer may be a bit unclear, or hidden amongst extraneous information and
3 = represents that the passage is dedicated to the query and contains the exact answer.

Important Instruction: Assign category 1 if the passage is somewhat related to the topic but not completely, category 2 if passage presents something very important related to the entire topic but also has some extra information and category 3 if the passage only and entirely refers to the topic. If none of the above satisfies give it category 0.

Query: {query}
Passage: {passage}

Split this problem into steps:
Consider the underlying intent of the search.
Measure how well the content matches a likely intent of the query (M).
Measure how trustworthy the passage is (T).
Consider the aspects above and the relative importance of each, and decide on a final score (O). Final score must be an integer value only.
Do not provide any code in result. Provide each score in the format of: ##final score: score without providing any reasoning."""  # noqa: E501 (the published prompt, verbatim)


_FINAL_RE = re.compile(r"final\s*score\s*[:=]?\s*\**\s*([0-3])\b", re.IGNORECASE)


_LONE_RE = re.compile(r"^\W*([0-3])\W*$")


def prompt_sha256() -> str:
    """sha256 (hex) of the prompt template."""
    return hashlib.sha256(PROMPT.encode("utf-8")).hexdigest()


def make_prompt(query: str, passage: str) -> str:
    return PROMPT.format(query=query.strip(), passage=passage.strip())


def parse_grade(text: str | None) -> int | None:
    """The grade in an answer (see the module docstring), or None when there is none."""
    if not text:
        return None
    m = _FINAL_RE.search(text)
    if m:
        return int(m.group(1))
    m = _LONE_RE.match(text.strip())
    return int(m.group(1)) if m else None
