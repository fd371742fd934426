"""Qrels (BEIR TSV or TREC) and TREC runs: read and write.

Conventions
- Qrels: the format is detected per file from its first line. BEIR: ``query-id<TAB>corpus-id<TAB>score``
  with a header line (a file without the header is read too). TREC: ``qid iter docid rel``, whitespace
  separated, no header; the ``iter`` column is ignored, as trec_eval does.
- Grades are integers, as trec_eval reads them: "1.0" is rejected, not rounded. Negative grades are kept
  (they count as not relevant). A (query, document) pair given twice is an error.
- Runs: ``qid Q0 docid rank score tag``. The order of a query's hits comes from the score, ties broken by
  doc id descending (:meth:`Run.ranked`, the trec_eval rule); the rank column is checked but not used.
- Ids are strings; they must not contain whitespace to be written in TREC format.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from lab.core.atomic import atomic_path
from lab.core.errors import DataError
from lab.core.progress import progress
from lab.data.io import DataWarning, as_int, numbered_lines, read_text
from lab.data.types import Qrels, Run

GRADE_HINT = "grades must be integers, as trec_eval reads them; write 1, not 1.0"
BEIR_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class QrelRow:
    """One judgement with the line it came from (for error messages)."""

    line: int
    query_id: str
    doc_id: str
    grade: int


def _split_qrels_line(line: str, fmt: str) -> list[str]:
    line = line.strip()
    if fmt == "beir" and "\t" in line:
        return [f.strip() for f in line.split("\t")]
    return line.split()


def detect_qrels_format(path: Path | str, first_line: str) -> tuple[str, bool]:
    """("beir" | "trec", whether the first line is a header) from a qrels file's first non-blank line."""
    fields = _split_qrels_line(first_line, "beir")
    if len(fields) == 4:
        return "trec", False
    if len(fields) == 3:
        grade = fields[2]
        try:
            float(grade)
            is_number = True
        except ValueError:
            is_number = False
        return "beir", not is_number
    raise DataError(path, f"cannot tell the qrels format: the first line has {len(fields)} columns", line=1,
                    hint="BEIR qrels have 3 tab-separated columns (query-id, corpus-id, score) under a header; "
                         "TREC qrels have 4 (qid 0 docid rel)")


def read_qrels_rows(path: Path | str) -> tuple[str, list[QrelRow]]:
    """The detected format ("beir" or "trec") and the rows of a qrels file, validated.

    Errors (DataError naming file, line, field): wrong number of columns, non-integer grade, a pair given twice,
    empty file, bad encoding, missing file.
    """
    text = read_text(path, "qrels file", hint="qrels live in qrels/<split>.tsv")
    lines = numbered_lines(path, text, "qrels file")
    fmt, header = detect_qrels_format(path, lines[0][1])
    width = 4 if fmt == "trec" else 3
    layout = "qid 0 docid rel" if fmt == "trec" else "query-id<TAB>corpus-id<TAB>score"
    rows: list[QrelRow] = []
    seen: dict[tuple[str, str], int] = {}
    for line_no, line in lines[1:] if header else lines:
        fields = _split_qrels_line(line, fmt)
        if len(fields) != width:
            raise DataError(path, f"expected {width} columns ({layout}), got {len(fields)}", line=line_no,
                            hint=f"this file was read as {fmt.upper()} qrels from its first line; "
                                 "fix the line or the format of the whole file")
        qid, did, grade = (fields[0], fields[2], fields[3]) if fmt == "trec" else fields
        grade_field = "rel" if fmt == "trec" else "score"
        value = as_int(path, line_no, grade, grade_field, hint=GRADE_HINT)
        key = (qid, did)
        if key in seen:
            raise DataError(path, f"judgement for query {qid!r} and document {did!r} given twice "
                                  f"(first on line {seen[key]})", line=line_no, field="corpus-id" if fmt == "beir"
                            else "docid", hint="keep one line per (query, document) pair")
        seen[key] = line_no
        rows.append(QrelRow(line_no, qid, did, value))
    if not rows:
        raise DataError(path, "qrels file has a header but no judgements",
                        hint="add judgement lines or remove the file")
    return fmt, rows


def qrels_from_rows(rows: Iterable[QrelRow], name: str = "") -> Qrels:
    """A Qrels value from rows, in file order."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        out.setdefault(row.query_id, {})[row.doc_id] = row.grade
    return Qrels(out, name=name)


def read_qrels(path: Path | str, name: str | None = None) -> Qrels:
    """Qrels of one file, BEIR TSV or TREC (detected); ``name`` defaults to the file stem (the split)."""
    path = Path(path)
    _, rows = read_qrels_rows(path)
    return qrels_from_rows(rows, name=path.name.split(".")[0] if name is None else name)


def _check_trec_id(value: str, what: str, path: Path) -> str:
    if not value or any(c.isspace() for c in value):
        raise DataError(path, f"{what} {value!r} is empty or contains whitespace, which TREC format cannot hold",
                        field=what, hint="use ids without spaces, tabs or newlines")
    return value


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write lines atomically (temporary file, then rename), creating the parent folder."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(lines)


def write_trec_qrels(qrels: Qrels, path: Path | str) -> Path:
    """Write ``qid 0 docid grade`` lines (TREC qrels, as trec_eval reads them); returns the path."""
    path = Path(path)

    def lines() -> Iterator[str]:
        for qid, docs in qrels.qrels.items():
            _check_trec_id(qid, "query id", path)
            for did, grade in docs.items():
                yield f"{qid} 0 {_check_trec_id(did, 'doc id', path)} {int(grade)}\n"

    _write_lines(path, lines())
    return path


def read_trec_run(path: Path | str, name: str | None = None) -> Run:
    """A TREC run file (``qid Q0 docid rank score tag``, ``.gz`` allowed) as a Run.

    ``name`` defaults to the run tag when all lines share one, else the file stem. A document repeated for a
    query keeps its first line; repeats are counted and reported in one DataWarning naming the file.
    Errors: wrong number of columns, rank not an integer, score not a number or NaN, empty or missing file.
    """
    path = Path(path)
    text = read_text(path, "run file", hint="a TREC run has lines `qid Q0 docid rank score tag`")
    lines = numbered_lines(path, text, "run file")
    scores: dict[str, dict[str, float]] = {}
    tags: set[str] = set()
    repeats = 0
    first_repeat = None
    for line_no, line in progress(lines, desc=f"read {path.name}", enabled=len(lines) >= 1_000_000):
        fields = line.split()
        if len(fields) != 6:
            raise DataError(path, f"expected 6 columns (qid Q0 docid rank score tag), got {len(fields)}", line=line_no,
                            hint="TREC runs are whitespace separated; ids must not contain spaces")
        qid, _, did, rank, score_text, tag = fields
        as_int(path, line_no, rank, "rank", hint="the 4th column is the integer rank")
        try:
            score = float(score_text)
        except ValueError:
            score = math.nan
        if math.isnan(score):
            raise DataError(path, f"score is not a number: {score_text!r}", line=line_no, field="score",
                            hint="the 5th column is the score (higher is better); NaN cannot be ranked")
        tags.add(tag)
        hits = scores.setdefault(qid, {})
        if did in hits:
            repeats += 1
            first_repeat = first_repeat or line_no
            continue
        hits[did] = score
    if repeats:
        warnings.warn(f"{path}: {repeats} repeated (query, document) line(s), first on line {first_repeat}; "
                      "kept the first occurrence of each", DataWarning, stacklevel=2)
    if name is None:
        name = next(iter(tags)) if len(tags) == 1 else path.name.split(".")[0]
    return Run(scores, name=name)


def write_trec_run(run: Run, path: Path | str, tag: str | None = None, k: int | None = None) -> Path:
    """Write a run as plain TREC (``qid Q0 docid rank score tag``) that trec_eval reads; returns the path.

    Hits are written in :meth:`Run.ranked` order with ranks 1..n (the top ``k`` only when given); queries in
    the run's order. ``tag`` defaults to the run name. Scores are written in full precision (``repr``).
    """
    path = Path(path)
    tag = _check_trec_id(tag if tag is not None else (run.name or "run"), "tag", path)

    def lines() -> Iterator[str]:
        for qid in run.scores:
            _check_trec_id(qid, "query id", path)
            for rank, (did, score) in enumerate(run.ranked(qid, k), 1):
                score = float(score)
                if math.isnan(score):
                    raise DataError(path, f"score of document {did!r} for query {qid!r} is NaN", field="score",
                                    hint="NaN cannot be ranked; fix the retriever's scores")
                yield f"{qid} Q0 {_check_trec_id(did, 'doc id', path)} {rank} {score!r} {tag}\n"

    _write_lines(path, lines())
    return path
