"""Read a BEIR-layout dataset folder into typed, validated values.

Layout (``.gz`` variants of the JSON Lines files are read too)::

    <name>/corpus.jsonl      {"_id", "title"?, "text", "metadata"?}   one document per line
    <name>/queries.jsonl     {"_id", "text", "metadata"?}             one query per line
    <name>/qrels/<split>.tsv BEIR TSV with header, or TREC qrels (detected per file; .txt/.qrels names too)
    <name>/evidence.jsonl    optional evidence spans (see lab.data.evidence)
    <name>/raw/*.json[.gz]   optional SQuAD-style files whose answers give evidence spans (CMRC 2018)

Conventions
- Ids are strings (JSON integer ids become their decimal text). ``title`` is optional, ``text`` is required
  (it may be empty). Extra top-level fields of a record go into its metadata (``metadata`` keys win).
- Duplicate ids are errors. Qrels naming an unknown query or document are errors when ``strict`` (default).
  With ``strict=False`` they are counted in the :class:`LoadReport` and warned about once per file:
  rows of unknown queries are dropped (no query text to search with); rows of unknown documents are kept
  (a relevant document missing from the corpus can never be retrieved and counts against recall, as in
  BEIR and trec_eval).
- Every failure is one :class:`lab.core.errors.DataError` naming file, line, field and what to do next.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from lab.core.errors import DataError
from lab.core.progress import progress as _progress
from lab.data.evidence import SpanReport, read_evidence_report, squad_answer_spans_report
from lab.data.io import DataWarning, as_id, as_text, numbered_lines, parse_json_object, read_text
from lab.data.trec import QrelRow, qrels_from_rows, read_qrels, read_qrels_rows  # noqa: F401  read_qrels re-exported
from lab.data.types import Corpus, Dataset, Document, EvidenceSpan, Qrels, Queries

LAYOUT_HINT = ("a BEIR dataset folder holds corpus.jsonl (or corpus.jsonl.gz), queries.jsonl and "
               "qrels/<split>.tsv; optional: evidence.jsonl, raw/*.json.gz")
QRELS_SUFFIXES = (".tsv", ".txt", ".qrels")
PROGRESS_MIN_LINES = 100_000  # a progress bar only where reading may take seconds


@dataclass
class LoadReport:
    """What :func:`load_dataset_report` read, and what it dropped, kept or repaired (``strict=False``)."""

    path: str
    files: list[str] = field(default_factory=list)
    unknown_queries: dict[str, int] = field(default_factory=dict)  # split -> qrels rows dropped
    unknown_docs: dict[str, int] = field(default_factory=dict)  # split -> qrels rows kept, doc not in corpus
    evidence: list[SpanReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        """True when nothing was dropped, kept despite being unknown, or repaired."""
        return not self.notes


def _pick(folder: Path, stem: str, required: bool = True) -> Path | None:
    """``<stem>.jsonl`` or ``<stem>.jsonl.gz`` in ``folder``; an error when both exist or a required one is missing."""
    found = [p for p in (folder / f"{stem}.jsonl", folder / f"{stem}.jsonl.gz") if p.is_file()]
    if len(found) == 2:
        raise DataError(found[1], f"both {found[0].name} and {found[1].name} exist",
                        hint="keep one of them, so it is clear which is read")
    if not found and required:
        corpus_only = stem == "queries" and any((folder / n).is_file() for n in ("corpus.jsonl", "corpus.jsonl.gz"))
        hint = (f"a corpus without questions, as `lab ingest` writes: make a test set from it with `lab testset "
                f"generate --dataset {folder} --out {folder}-generated`, then use that folder" if corpus_only
                else LAYOUT_HINT)
        raise DataError(folder / f"{stem}.jsonl", f"{stem} file not found (looked for {stem}.jsonl and "
                                                  f"{stem}.jsonl.gz)", hint=hint)
    return found[0] if found else None


def _metadata(path: Path, line: int, obj: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict):
        raise DataError(path, f"metadata must be a JSON object, got {type(meta).__name__}", line=line,
                        field="metadata", hint="write metadata as {...} or leave it out")
    if len(obj) <= len(known) and known.issuperset(obj):  # the common case: no extra fields
        return meta
    extra = {k: v for k, v in obj.items() if k not in known}
    return {**extra, **meta} if extra else meta


def _records(path: Path, what: str, show: bool) -> Iterable[tuple[int, str]]:
    text = read_text(path, what, hint=LAYOUT_HINT)
    lines = numbered_lines(path, text, what)
    return _progress(lines, desc=f"read {path.name}", enabled=show and len(lines) >= PROGRESS_MIN_LINES)


def _duplicate(path: Path, line: int, kind: str, key: str, first: int) -> DataError:
    return DataError(path, f"duplicate {kind} id {key!r} (first on line {first})", line=line, field="_id",
                     hint=f"{kind} ids must be unique; remove or rename one of them")


def _objects(path: Path, what: str, kind: str, show: bool) -> Iterator[tuple[int, dict[str, Any], str]]:
    """(line, JSON object, ``_id``) of each record of a JSON Lines file, in file order; a DataError for a line
    that is no JSON object, has no valid ``_id``, or repeats the ``_id`` of an earlier line (both lines named)."""
    lines_of: dict[str, int] = {}
    for line, raw in _records(path, what, show):
        obj = parse_json_object(path, line, raw)
        key = as_id(path, line, obj.get("_id"), "_id")
        if key in lines_of:
            raise _duplicate(path, line, kind, key, lines_of[key])
        lines_of[key] = line
        yield line, obj, key


def read_corpus(path: Path | str, name: str = "", progress: bool = True) -> Corpus:
    """Documents of a corpus JSON Lines file (``.gz`` allowed), in file order.

    Errors: malformed JSON, missing/non-string ``_id``, absent or non-string ``text``, non-string ``title``,
    non-object ``metadata``, duplicate ids, empty file, bad UTF-8, missing file.
    """
    path = Path(path)
    docs: dict[str, Document] = {}
    known = frozenset(("_id", "title", "text", "metadata"))
    for line, obj, did in _objects(path, "corpus file", "document", progress):
        docs[did] = Document(did, as_text(path, line, obj, "text"), as_text(path, line, obj, "title", required=False),
                             _metadata(path, line, obj, known))
    return Corpus(docs, name=name)


def read_queries(path: Path | str, progress: bool = True) -> Queries:
    """Queries of a JSON Lines file (``_id``, ``text``, optional ``metadata``), in file order.

    Queries.metadata holds an entry for each query that has metadata. Errors as for :func:`read_corpus`.
    """
    path = Path(path)
    texts: dict[str, str] = {}
    metadata: dict[str, dict[str, Any]] = {}
    known = frozenset(("_id", "text", "metadata"))
    for line, obj, qid in _objects(path, "queries file", "query", progress):
        texts[qid] = as_text(path, line, obj, "text")
        meta = _metadata(path, line, obj, known)
        if meta or "metadata" in obj:
            metadata[qid] = meta
    return Queries(texts, metadata)


def qrels_files(folder: Path | str) -> dict[str, Path]:
    """split name -> qrels file in ``<folder>/qrels`` (``test.tsv`` -> "test"), sorted by split name."""
    qdir = Path(folder) / "qrels"
    if not qdir.is_dir():
        raise DataError(qdir, "qrels folder not found", hint=LAYOUT_HINT)
    found: dict[str, Path] = {}
    for p in sorted(qdir.iterdir()):
        if not p.is_file() or p.name.startswith(".") or not p.name.endswith(QRELS_SUFFIXES):
            continue
        split = p.name.split(".")[0]
        if split in found:
            raise DataError(p, f"split {split!r} has two qrels files ({found[split].name} and {p.name})",
                            hint="keep one qrels file per split")
        found[split] = p
    if not found:
        raise DataError(qdir, "no qrels files (qrels/<split>.tsv)", hint=LAYOUT_HINT)
    return dict(sorted(found.items()))


def _check_qrels(path: Path, split: str, rows: list[QrelRow], corpus: Corpus, queries: Queries, strict: bool,
                 report: LoadReport) -> list[QrelRow]:
    """Rows whose query is known; unknown ids raise when strict, else are counted (see module conventions)."""
    bad_q = [r for r in rows if r.query_id not in queries]
    bad_d = [r for r in rows if r.doc_id not in corpus]
    if strict:
        for bad, what, fieldname in ((bad_q, "query", "query-id"), (bad_d, "document", "corpus-id")):
            if bad:
                r = bad[0]
                value = r.query_id if what == "query" else r.doc_id
                source = "queries file" if what == "query" else "corpus"
                raise DataError(path, f"{what} id {value!r} is not in the {source} ({len(bad)} row(s) of this file "
                                      f"name unknown {what} ids)", line=r.line, field=fieldname,
                                hint=f"fix the ids, or load with strict=False to count them "
                                     f"({'rows dropped' if what == 'query' else 'rows kept'})")
        return rows
    if bad_q:
        report.unknown_queries[split] = len(bad_q)
        report.notes.append(f"{path}: dropped {len(bad_q)} qrels row(s) naming queries not in the queries file "
                            f"(first on line {bad_q[0].line})")
    if bad_d:
        report.unknown_docs[split] = len(bad_d)
        report.notes.append(f"{path}: kept {len(bad_d)} qrels row(s) naming documents not in the corpus "
                            f"(first on line {bad_d[0].line}); they can never be retrieved")
    return [r for r in rows if r.query_id in queries] if bad_q else rows


def load_dataset_report(path: Path | str, splits: Iterable[str] | None = None, strict: bool = True,
                        progress: bool = True) -> tuple[Dataset, LoadReport]:
    """Load a BEIR-layout folder (see module docstring); returns the Dataset and a LoadReport.

    ``splits`` limits the qrels read (default: every file in qrels/). Evidence spans are loaded from
    ``evidence.jsonl[.gz]`` and from SQuAD-style ``raw/*.json[.gz]`` when present, checked against the corpus
    and queries. Everything the report notes is also warned about (DataWarning), once per file and kind.
    """
    t0 = time.perf_counter()
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(folder, "dataset folder not found", hint=LAYOUT_HINT)
    name = folder.resolve().name
    report = LoadReport(str(folder))
    corpus_path, queries_path = _pick(folder, "corpus"), _pick(folder, "queries")
    available = qrels_files(folder)
    wanted = list(available) if splits is None else list(dict.fromkeys(splits))
    missing = [s for s in wanted if s not in available]
    if missing:
        raise DataError(folder / "qrels", f"no qrels for split(s) {missing}; available: {sorted(available)}",
                        hint="choose one of the available splits")
    assert corpus_path is not None and queries_path is not None  # required: _pick raised when missing
    corpus = read_corpus(corpus_path, name=name, progress=progress)
    queries = read_queries(queries_path, progress=progress)
    report.files += [str(corpus_path), str(queries_path)]
    qrels: dict[str, Qrels] = {}
    for split in wanted:
        _, rows = read_qrels_rows(available[split])
        rows = _check_qrels(available[split], split, rows, corpus, queries, strict, report)
        qrels[split] = qrels_from_rows(rows, name=split)
        report.files.append(str(available[split]))
    evidence: list[EvidenceSpan] = []
    evidence_path = _pick(folder, "evidence", required=False)
    if evidence_path is not None:
        spans, span_report = read_evidence_report(evidence_path, corpus, queries, strict)
        evidence += spans
        report.evidence.append(span_report)
        report.files.append(str(evidence_path))
    raw = folder / "raw"
    if raw.is_dir() and any(p.name.endswith((".json", ".json.gz")) for p in raw.iterdir()):
        spans, span_report = squad_answer_spans_report(raw, corpus, queries, strict)
        evidence += spans
        report.evidence.append(span_report)
        report.files.append(str(raw))
    for span_report in report.evidence:
        report.notes += span_report.notes()
    for note in report.notes:
        warnings.warn(note, DataWarning, stacklevel=2)
    report.seconds = time.perf_counter() - t0
    return Dataset(str(folder), corpus, queries, qrels, evidence, name=name), report


def load_dataset(path: Path | str, splits: Iterable[str] | None = None, strict: bool = True,
                 progress: bool = True) -> Dataset:
    """Load a BEIR-layout dataset folder; ``name`` is the folder name. See :func:`load_dataset_report`."""
    return load_dataset_report(path, splits, strict, progress)[0]
