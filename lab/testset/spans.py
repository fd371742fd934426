"""Evidence spans of generated questions: where in the source document the answer's support lies.

Conventions
- A generated question's evidence is a character span of its source unit's ``text`` (code-point offsets, end
  exclusive), written to ``evidence.jsonl`` in the format lab.data.evidence reads (SciFact's: ``query_id``,
  ``doc_id``, ``spans``, ``label``, plus ``grade``, ``passage`` and ``method`` that the reader ignores).
- Narrowing (:func:`support_span`): the passage the LLM saw is split into paragraphs (blank lines) and those
  into sentences (lab.text.chunking.paragraphs, lab.text.chunking.sentences);
  1. when the answer (whitespace-normalised, case-folded, at least 3 characters) occurs verbatim in the passage,
     the evidence is the sentence(s) that hold that occurrence ("verbatim");
  2. else the shortest run of at most ``max_sentences`` consecutive sentences whose content terms (the
     tokenizer's: stop words removed, stemmed; jieba words for Chinese) cover the largest share of the answer's
     content terms is taken when that share reaches ``min_support`` ("sentences"); ties go to the earlier run;
  3. else the whole passage ("passage"): the answer's support was not found in fewer sentences.
  This is the sentence-level rationale idea of SciFact (Wadden et al., 2020) applied to the generator's own
  answer; a question is only as well-grounded as its answer, which the answerability gate checks first.
- Prose only (:func:`not_prose_span`, the prose_evidence gate of lab.testset.gates): a span that is only a
  heading (one line of at most 12 words without a sentence end that is a markdown heading, numbered like a
  section, or mostly capitalised words), only identifiers or options (every word an identifier, ``-flag`` or
  `code`), or only ids (lab.testset.passages.looks_like_id, e.g. "R-04042-24825", "Ticket [4c86b126f2]") does not
  hold an answer a reader can check, and its question is dropped.
- Span relevance then scores any chunking of the same documents by overlap with these spans (a chunk is relevant
  when it overlaps one), while the qrels stay at document level.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lab.testset.passages import looks_like_id
from lab.text.chunking import paragraphs, sentences

_WS = re.compile(r"\s+")
_SECTION_NUMBER = re.compile(r"^\s*(?:#{1,6}\s|\d+(?:\.\d+)*\.?\s)")
_SENTENCE_END = re.compile(r"[.!?。！？](?:\s|$)")
_WORD = re.compile(r"[^\s\[\](),;:\"'`]+")
_IDENT_WORD = re.compile(r"^(?:-{1,2}[\w-]+|[A-Za-z_]\w*(?:(?:::|->|\.|_)\w+)+(?:\(\))?|[a-z]+[A-Z]\w*|\w+\(\))$")


@dataclass(frozen=True)
class SupportSpan:
    start: int
    end: int
    method: str  # "verbatim" | "sentences" | "passage"
    coverage: float  # share of the answer's content terms inside [start, end)


def not_prose_span(text: str) -> str | None:
    """"heading", "identifier" or "id" when the span ``text`` is only that (see module conventions), else None."""
    t = text.strip()
    words = _WORD.findall(t)
    if not words:
        return "heading"
    if all(looks_like_id(w) or w.lower() in ("ticket", "id", "req") for w in words) and any(map(looks_like_id, words)):
        return "id"
    if "`" in t and not _WORD.findall(re.sub(r"`[^`]*`", " ", t)) or all(_IDENT_WORD.match(w) for w in words):
        return "identifier"
    if "\n" not in t and len(words) <= 12 and not _SENTENCE_END.search(_SECTION_NUMBER.sub("", t)):
        capitalised = sum(1 for w in words if w[:1].isupper() or not w[:1].isalpha())
        if _SECTION_NUMBER.match(t) or capitalised >= 0.6 * len(words):
            return "heading"
    return None


def _normalised(text: str) -> tuple[str, list[int]]:
    """``text`` with whitespace runs folded to one space and case-folded, and each output char's source offset."""
    out, where, prev_space = [], [], False
    for i, ch in enumerate(text):
        if ch.isspace():
            if prev_space:
                continue
            out.append(" ")
            prev_space = True
        else:
            out.append(ch.lower())
            prev_space = False
        where.append(i)
    return "".join(out), where


def _verbatim(text: str, start: int, end: int, answer: str) -> tuple[int, int] | None:
    needle = _WS.sub(" ", answer.strip().strip(".。")).lower()
    if len(needle) < 3:
        return None
    hay, where = _normalised(text[start:end])
    pos = hay.find(needle)
    if pos < 0:
        return None
    return start + where[pos], start + where[pos + len(needle) - 1] + 1


def support_span(text: str, start: int, end: int, answer: str, tokenizer, min_support: float = 0.5,
                 max_sentences: int = 3) -> SupportSpan:
    """The evidence span of ``answer`` within the passage ``text[start:end]`` (see module conventions)."""
    sents = [x for p0, p1 in paragraphs(text, start, end) for x in sentences(text, p0, p1)] or [(start, end)]
    answer_terms = set(tokenizer(answer))
    found = _verbatim(text, start, end, answer)
    if found is not None:
        a, b = found
        hit = [(s, e) for s, e in sents if s < b and e > a]
        s0, e0 = (hit[0][0], hit[-1][1]) if hit else (a, b)
        return SupportSpan(min(s0, a), max(e0, b), "verbatim", 1.0)
    if answer_terms:
        terms = [set(tokenizer(text[s:e])) for s, e in sents]
        best: tuple[float, int, int, int] | None = None  # (coverage, -length in sentences, -start index, end index)
        for i in range(len(sents)):
            covered: set[str] = set()
            for j in range(i, min(len(sents), i + max_sentences)):
                covered |= terms[j] & answer_terms
                key = (len(covered) / len(answer_terms), -(j - i), -i, j)
                if best is None or key > best:
                    best = key
        if best is not None and best[0] >= min_support:
            i, j = -best[2], best[3]
            return SupportSpan(sents[i][0], sents[j][1], "sentences", best[0])
    whole = set(tokenizer(text[start:end]))
    cov = len(whole & answer_terms) / len(answer_terms) if answer_terms else 0.0
    return SupportSpan(start, end, "passage", cov)


def evidence_record(query_id: str, doc_id: str, span: SupportSpan, passage: tuple[int, int], grade: int = 1) -> dict:
    """One line of ``evidence.jsonl`` (see module conventions)."""
    return {"query_id": query_id, "doc_id": doc_id, "label": "answer" if span.method != "passage" else "passage",
            "spans": [[span.start, span.end]], "grade": int(grade), "method": span.method,
            "coverage": round(span.coverage, 4), "passage": [int(passage[0]), int(passage[1])], "split": "test"}
