"""Evidence spans: character spans of a document's text that hold the answer to a query.

Two sources:
- ``evidence.jsonl`` (SciFact rationales, see data/scifact/SOURCE.md): one JSON object per line with
  ``query_id``, ``doc_id``, ``spans`` ([[start, end], ...]) and optionally ``label``, ``tier``, ``grade``
  (other fields such as ``sentences`` and ``split`` are ignored). One EvidenceSpan per span.
- SQuAD-style answer files (CMRC 2018 ``raw/*.json.gz``): each answer's ``answer_start`` + ``len(text)`` in
  its paragraph's ``context`` gives EvidenceSpan(question id, paragraph id, start, end, label="answer").

Conventions
- Offsets are Python string (code point) offsets, end exclusive: ``text[start:end]``.
- The same span of a query given twice (several annotators) is kept once.
- A SQuAD answer whose text is not at ``answer_start`` but does occur in the context is moved to the
  occurrence nearest ``answer_start`` ("repaired"); one whose text does not occur is dropped. Both are counted.
- Spans naming a query or document that is not loaded are an error when ``strict``, else dropped and counted.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.core.errors import DataError
from lab.data.io import DataWarning, JSONError, as_id, iter_jsonl, json_loads, read_text
from lab.data.types import Corpus, EvidenceSpan, Queries

TIERS = ("core", "auxiliary", "edge")


@dataclass
class SpanReport:
    """Counts of what reading evidence found; ``notes()`` says it in words."""

    source: str
    spans: int = 0
    duplicates: int = 0
    repaired: int = 0
    dropped: int = 0
    unknown_queries: int = 0
    unknown_docs: int = 0
    queries: int = 0
    queries_without_span: int = 0
    examples: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """One line per count that needs attention (empty when all spans were read as given)."""
        out = []
        eg = f" (e.g. {', '.join(self.examples[:3])})" if self.examples else ""
        if self.repaired:
            out.append(f"{self.source}: {self.repaired} answer offset(s) did not match the answer text; "
                       "moved to the nearest occurrence of the text in the context")
        if self.dropped:
            out.append(f"{self.source}: {self.dropped} answer(s) whose text does not occur in the context "
                       f"were dropped; {self.queries_without_span} question(s) are left without a span{eg}")
        if self.unknown_queries or self.unknown_docs:
            out.append(f"{self.source}: dropped {self.unknown_queries} span record(s) naming unknown queries and "
                       f"{self.unknown_docs} naming unknown documents (strict=False)")
        return out


def _unknown(path: Path, line: int | None, what: str, value: str, fieldname: str, strict: bool,
             report: SpanReport) -> None:
    if strict:
        raise DataError(path, f"{what} {value!r} is not in the dataset", line=line, field=fieldname,
                        hint="fix the id, or load with strict=False to drop such spans and count them")
    if what == "query":
        report.unknown_queries += 1
    else:
        report.unknown_docs += 1


def _span(path: Path, line: int, value: Any, index: int) -> tuple[int, int]:
    ok = (isinstance(value, (list, tuple)) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value))
    if not ok or not 0 <= value[0] < value[1]:
        raise DataError(path, f"span {index} must be [start, end] with integers 0 <= start < end, got {value!r}",
                        line=line, field="spans", hint="offsets are character offsets into the document text")
    return value[0], value[1]


def read_evidence_report(path: Path | str, corpus: Corpus | None = None, queries: Queries | None = None,
                         strict: bool = True) -> tuple[list[EvidenceSpan], SpanReport]:
    """Spans of an evidence JSON Lines file and the counts of what was dropped (no warnings)."""
    path = Path(path)
    report = SpanReport(path.name)
    out: list[EvidenceSpan] = []
    seen: set[tuple[str, str, int, int, str]] = set()
    for line, obj in iter_jsonl(path, "evidence file", hint="evidence.jsonl is optional; remove it or fix the path"):
        qid = as_id(path, line, obj.get("query_id"), "query_id")
        did = as_id(path, line, obj.get("doc_id"), "doc_id")
        label = obj.get("label") or ""
        tier = obj.get("tier", "core")
        grade = obj.get("grade", 1)
        if not isinstance(label, str):
            raise DataError(path, "label must be a string", line=line, field="label")
        if tier not in TIERS:
            raise DataError(path, f"tier must be one of {TIERS}, got {tier!r}", line=line, field="tier")
        if not isinstance(grade, int) or isinstance(grade, bool):
            raise DataError(path, f"grade must be an integer, got {grade!r}", line=line, field="grade",
                            hint="grades are integers, as in qrels")
        spans = obj.get("spans")
        if not isinstance(spans, list) or not spans:
            raise DataError(path, "missing or empty spans" if not spans else "spans must be a list", line=line,
                            field="spans", hint="write spans as [[start, end], ...]")
        pairs = [_span(path, line, s, i) for i, s in enumerate(spans)]
        if queries is not None and qid not in queries:
            _unknown(path, line, "query", qid, "query_id", strict, report)
            continue
        if corpus is not None:
            if did not in corpus:
                _unknown(path, line, "document", did, "doc_id", strict, report)
                continue
            size = len(corpus[did].text)
            for start, end in pairs:
                if end > size:
                    raise DataError(path, f"span [{start}, {end}] ends past the end of document {did!r} "
                                          f"({size} characters)", line=line, field="spans",
                                    hint="offsets must index the document's text in the corpus; "
                                         "was the corpus changed after the spans were made?")
        for start, end in pairs:
            key = (qid, did, start, end, label)
            if key in seen:
                report.duplicates += 1
                continue
            seen.add(key)
            out.append(EvidenceSpan(qid, did, start, end, label=label, tier=tier, grade=grade))
    report.spans = len(out)
    report.queries = len({s.query_id for s in out})
    return out, report


def read_evidence(path: Path | str, corpus: Corpus | None = None, queries: Queries | None = None,
                  strict: bool = True) -> list[EvidenceSpan]:
    """Spans of an evidence JSON Lines file; checked against ``corpus``/``queries`` when given.

    Errors (DataError naming file, line, field): malformed JSON, missing ids or spans, spans that are not
    [start, end] with 0 <= start < end, spans past the end of the document; unknown ids when ``strict``
    (else dropped, counted and warned about once).
    """
    spans, report = read_evidence_report(path, corpus, queries, strict)
    for note in report.notes():
        warnings.warn(note, DataWarning, stacklevel=2)
    return spans


def _squad_files(raw: Path) -> list[Path]:
    if raw.is_file():
        return [raw]
    if not raw.is_dir():
        raise DataError(raw, "SQuAD-style answer folder not found",
                        hint="expected a folder of *.json or *.json.gz files (e.g. data/cmrc2018/raw)")
    files = sorted(p for p in raw.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not files:
        raise DataError(raw, "no *.json or *.json.gz files in the folder",
                        hint="expected SQuAD-style files such as cmrc2018_dev.json.gz")
    return files


def _need(path: Path, obj: Any, key: str, kind: type, where: str) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DataError(path, f"expected {kind.__name__} '{key}' at {where}", field=f"{where}.{key}",
                        hint="the file must follow the SQuAD layout: data[].paragraphs[].{id, context, qas[]}")
    return value


def _locate(context: str, text: str, start: int) -> int:
    """Start of the occurrence of ``text`` in ``context`` nearest ``start``; -1 when it does not occur."""
    best, pos = -1, context.find(text)
    while pos != -1:
        if best == -1 or abs(pos - start) < abs(best - start):
            best = pos
        pos = context.find(text, pos + 1)
    return best


def squad_answer_spans_report(raw: Path | str, corpus: Corpus | None = None, queries: Queries | None = None,
                              strict: bool = True) -> tuple[list[EvidenceSpan], SpanReport]:
    """Answer spans of SQuAD-style files (a folder of them, or one file) and the counts of repairs (no warnings).

    When ``corpus`` is given, each span must select the same text in the corpus document (the paragraph id is
    the doc id) as in the raw context, else a DataError: the corpus and the raw files disagree.
    """
    raw = Path(raw)
    report = SpanReport(raw.name)
    out: list[EvidenceSpan] = []
    for path in _squad_files(raw):
        try:
            doc = json_loads(read_text(path, "SQuAD-style file"))
        except JSONError as exc:
            raise DataError(path, f"malformed JSON: {exc}",
                            hint="the file must be one JSON document (SQuAD layout)") from None
        for a, article in enumerate(_need(path, doc, "data", list, "top level")):
            for p, para in enumerate(_need(path, article, "paragraphs", list, f"data[{a}]")):
                where = f"data[{a}].paragraphs[{p}]"
                pid = as_id(path, None, para.get("id") if isinstance(para, dict) else None, f"{where}.id")
                context = _need(path, para, "context", str, where)
                known_doc = corpus is None or pid in corpus
                for q, qa in enumerate(_need(path, para, "qas", list, where)):
                    qwhere = f"{where}.qas[{q}]"
                    qid = as_id(path, None, qa.get("id") if isinstance(qa, dict) else None, f"{qwhere}.id")
                    if queries is not None and qid not in queries:
                        _unknown(path, None, "query", qid, f"{qwhere}.id", strict, report)
                        continue
                    if not known_doc:
                        _unknown(path, None, "document", pid, f"{where}.id", strict, report)
                        continue
                    report.queries += 1
                    seen: set[tuple[int, int]] = set()
                    for n, ans in enumerate(_need(path, qa, "answers", list, qwhere)):
                        awhere = f"{qwhere}.answers[{n}]"
                        text = _need(path, ans, "text", str, awhere)
                        start = _need(path, ans, "answer_start", int, awhere)
                        if not text or context[max(start, 0):max(start, 0) + len(text)] != text or start < 0:
                            found = _locate(context, text, start) if text else -1
                            if found == -1:
                                report.dropped += 1
                                if len(report.examples) < 3:
                                    report.examples.append(qid)
                                continue
                            report.repaired += 1
                            start = found
                        end = start + len(text)
                        if (start, end) in seen:
                            report.duplicates += 1
                            continue
                        if corpus is not None and corpus[pid].text[start:end] != text:
                            raise DataError(path, f"answer {text!r} of question {qid!r} is at [{start}, {end}) in "
                                                  f"the raw context but not in the corpus text of document {pid!r}",
                                            field=f"{awhere}.answer_start",
                                            hint="the corpus must hold each paragraph's context unchanged; "
                                                 "rebuild corpus.jsonl from the raw files")
                        seen.add((start, end))
                        out.append(EvidenceSpan(qid, pid, start, end, label="answer"))
                    if not seen:
                        report.queries_without_span += 1
    report.spans = len(out)
    return out, report


def cmrc_answer_spans(raw_dir: Path | str, corpus: Corpus | None = None, queries: Queries | None = None,
                      strict: bool = True) -> list[EvidenceSpan]:
    """CMRC 2018 answer spans from its raw SQuAD-style files (``data/cmrc2018/raw``).

    Question id -> query id and paragraph id -> doc id unchanged (``DEV_0_QUERY_0`` -> ``DEV_0``). Repaired
    and dropped answers are counted and warned about once (see the module conventions).
    """
    spans, report = squad_answer_spans_report(raw_dir, corpus, queries, strict)
    for note in report.notes():
        warnings.warn(note, DataWarning, stacklevel=2)
    return spans
