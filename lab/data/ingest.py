"""Ingest a folder of documents into a BEIR corpus: ``DIR/corpus.jsonl`` plus ``DIR/ingest_report.json``.

Conventions
- Files are found recursively under SRC; hidden files and folders (name starting with ".") are ignored, as is
  DIR when it lies inside SRC. Formats by extension (case-insensitive): .md/.markdown, .rst, .txt, .html/.htm,
  .pdf, .docx (extraction rules in :mod:`lab.data.extract`).
- Document id: the file's path relative to SRC without its extension, "/" as separator
  (``guides/install.md`` -> ``guides/install``). Two files with the same id are an error naming both, raised
  before any file is read.
- Each document: ``_id``, ``title`` (first heading, else HTML/PDF title, else the file stem), ``text`` (the
  normalised text) and ``metadata``: ``source`` (path relative to SRC), ``format``, ``sha256``, ``size``
  (bytes), ``headings`` (level, title, start, end: offsets into ``text``), plus ``pages`` and ``page_offsets``
  for PDF and ``encoding`` for text and HTML. corpus.jsonl is sorted by id, one JSON object per line.
- A file that cannot be read (unknown extension, empty, binary, undecodable, corrupt, encrypted, without text)
  is skipped and listed with its reason in the report; nothing a file contains stops the ingest.
- Rerun: a file whose sha256 equals the one recorded for its path in DIR is reused without being read again
  (skipped ones too); files no longer in SRC are dropped. A change of extractor version re-reads everything.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.data.extract import EXTRACTOR_VERSION, FORMATS, Unreadable, extract
from lab.core.errors import DataError

REPORT = "ingest_report.json"
CORPUS = "corpus.jsonl"


@dataclass
class IngestReport:
    """What one ingest did; ``summary()`` says it in words, ``to_dict()`` is ingest_report.json."""

    src: str
    out: str
    documents: int = 0
    by_format: dict = field(default_factory=dict)  # format -> {"files", "documents", "skipped"}
    skipped: list = field(default_factory=list)  # {"path", "format", "kind", "reason", "sha256"}
    reused: int = 0
    changed: int = 0
    new: int = 0
    dropped: list = field(default_factory=list)  # source paths no longer in SRC
    hidden_ignored: int = 0
    excluded: int = 0
    exclude: list = field(default_factory=list)
    seconds: float = 0.0
    libraries: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"src": self.src, "out": self.out, "extractor_version": EXTRACTOR_VERSION,
                "libraries": self.libraries, "documents": self.documents, "by_format": self.by_format,
                "skipped": self.skipped, "rerun": {"reused": self.reused, "changed": self.changed, "new": self.new,
                                                   "dropped": len(self.dropped)},
                "dropped": self.dropped, "hidden_ignored": self.hidden_ignored, "exclude": self.exclude,
                "excluded": self.excluded, "seconds": round(self.seconds, 2)}

    def summary(self, examples: int = 3) -> str:
        lines = [f"ingested {self.documents} documents from {self.src} into {self.out}/{CORPUS} "
                 f"in {self.seconds:.1f} s",
                 f"  {'format':<10}{'files':>7}{'documents':>11}{'skipped':>9}"]
        for fmt, c in sorted(self.by_format.items(), key=lambda kv: (kv[0] == "other", kv[0])):
            lines.append(f"  {fmt:<10}{c['files']:>7}{c['documents']:>11}{c['skipped']:>9}")
        lines.append(f"  rerun: {self.reused} files reused, {self.changed} changed, {self.new} new, "
                     f"{len(self.dropped)} dropped (no longer in the folder)")
        if self.hidden_ignored:
            lines.append(f"  {self.hidden_ignored} hidden files or folders ignored (names starting with '.')")
        if self.excluded:
            lines.append(f"  {self.excluded} files excluded by --exclude {' '.join(self.exclude)}")
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)} files:")
            groups: dict[str, list[str]] = {}
            for s in self.skipped:
                groups.setdefault(_group(s), []).append(s["path"])
            for reason, paths in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                shown = ", ".join(paths[:examples]) + (", ..." if len(paths) > examples else "")
                lines.append(f"    {len(paths)} x {reason}: {shown}")
        lines.append(f"  report: {Path(self.out) / REPORT}")
        return "\n".join(lines)


def _group(skip: dict) -> str:
    if skip["kind"] == "unknown_extension":
        return f"unknown extension {Path(skip['path']).suffix or '(none)'}"
    return skip["reason"] if skip["kind"] in ("binary", "empty", "no_text") else skip["kind"].replace("_", " ")


def document_id(rel: str) -> str:
    """``guides/install.md`` -> ``guides/install`` (POSIX relative path without its last extension)."""
    path = Path(rel)
    return (path.parent / path.stem).as_posix() if path.suffix else path.as_posix()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _walk(src: Path, out: Path, exclude: tuple[str, ...] = ()) -> tuple[list[str], int, int]:
    """Relative POSIX paths of the files under ``src`` (sorted), how many hidden files or folders were ignored
    (a hidden folder counts once) and how many files matched an ``exclude`` glob."""
    files, hidden, excluded = [], 0, 0
    out_abs = out.resolve()
    for root, dirs, names in os.walk(src):
        root_path = Path(root)
        kept = []
        for d in dirs:
            full = (root_path / d)
            if d.startswith("."):
                hidden += 1
            elif full.resolve() != out_abs:
                kept.append(d)
        dirs[:] = sorted(kept)
        for n in names:
            if n.startswith("."):
                hidden += 1
            elif (root_path / n).is_file():
                rel = (root_path / n).relative_to(src).as_posix()
                if any(fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(n, g) for g in exclude):
                    excluded += 1
                else:
                    files.append(rel)
    return sorted(files), hidden, excluded


def check_ids(src: Path, files: list[str]) -> None:
    """DataError naming both files when two readable files give the same document id."""
    seen: dict[str, str] = {}
    for rel in files:
        if Path(rel).suffix.lower() not in FORMATS:
            continue
        did = document_id(rel)
        if did in seen:
            raise DataError(src / rel, f"same document id {did!r} as {src / seen[did]}",
                            hint="ids are paths without extension; rename or remove one of the two files")
        seen[did] = rel


def _previous(out: Path) -> tuple[dict, dict]:
    """Documents and skip records of the last ingest into ``out``, by source path (empty when none or stale)."""
    report_path, corpus_path = out / REPORT, out / CORPUS
    if not report_path.is_file():
        return {}, {}
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, {}
    if report.get("extractor_version") != EXTRACTOR_VERSION:
        return {}, {}
    docs = {}
    if corpus_path.is_file():
        with corpus_path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    try:
                        doc = json.loads(line)
                        docs[doc["metadata"]["source"]] = doc
                    except (ValueError, KeyError, TypeError):
                        return {}, {}
    skips = {s["path"]: s for s in report.get("skipped", []) if isinstance(s, dict) and "path" in s}
    return docs, skips


def check_out(src: Path, out: Path) -> None:
    """DataError unless SRC is a folder and DIR can hold an ingest (not SRC itself, not someone else's corpus)."""
    if not src.is_dir():
        raise DataError(src, "folder not found" if not src.exists() else "not a folder",
                        hint="lab ingest SRC --out DIR reads the documents under the folder SRC")
    if out.exists() and not out.is_dir():
        raise DataError(out, "--out exists and is not a folder", hint="give a folder for corpus.jsonl")
    if out.resolve() == src.resolve():
        raise DataError(out, "--out is the source folder", hint="write the corpus to another folder")
    if (out / CORPUS).exists() and not (out / REPORT).exists():
        raise DataError(out / CORPUS, "exists and was not written by lab ingest (no ingest_report.json beside it)",
                        hint="choose another --out, or remove the file if it may be replaced")


def library_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("pypdf", "python-docx", "lxml", "charset-normalizer"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def ingest(src: Path | str, out: Path | str, exclude: list[str] | tuple[str, ...] = (),
           progress: bool = True) -> IngestReport:
    """Ingest the documents under ``src`` into ``out`` (see the module conventions); returns the report.
    ``exclude``: glob patterns (fnmatch) matched against each file's path relative to SRC and its name, e.g.
    ``SOURCE.md`` or ``drafts/*``; excluded files are counted, not read, and not listed as skipped.
    Raises DataError (before reading any document) for a missing SRC, an unusable DIR or duplicate ids."""
    from lab.core.progress import progress as bar

    t0 = time.perf_counter()
    src, out = Path(src), Path(out)
    check_out(src, out)
    files, hidden, excluded = _walk(src, out, tuple(exclude))
    check_ids(src, files)
    old_docs, old_skips = _previous(out)
    report = IngestReport(src=src.as_posix(), out=out.as_posix(), hidden_ignored=hidden, excluded=excluded,
                         exclude=list(exclude), libraries=library_versions())
    docs, by_format = [], {}
    for rel in bar(files, desc="ingest", unit="file", enabled=progress):
        fmt = FORMATS.get(Path(rel).suffix.lower())
        counts = by_format.setdefault(fmt or "other", {"files": 0, "documents": 0, "skipped": 0})
        counts["files"] += 1
        if fmt is None:
            suffix = Path(rel).suffix or "(none)"
            report.skipped.append({"path": rel, "format": None, "kind": "unknown_extension", "sha256": None,
                                   "reason": f"unknown extension {suffix} (lab ingest reads "
                                             f"{' '.join(sorted(FORMATS))})"})
            counts["skipped"] += 1
            continue
        try:
            data = (src / rel).read_bytes()
        except OSError as exc:
            report.skipped.append({"path": rel, "format": fmt, "kind": "unreadable", "sha256": None,
                                   "reason": f"cannot be opened ({exc.strerror or exc})"})
            counts["skipped"] += 1
            continue
        digest = _sha256(data)
        before = old_docs.get(rel) or old_skips.get(rel)
        if before is not None:
            old_sha = before["metadata"]["sha256"] if "metadata" in before else before.get("sha256")
            if old_sha == digest:
                report.reused += 1
                if "metadata" in before:
                    docs.append(before)
                    counts["documents"] += 1
                else:
                    report.skipped.append(before)
                    counts["skipped"] += 1
                continue
            report.changed += 1
        else:
            report.new += 1
        try:
            doc = _document(rel, fmt, data, digest)
        except Unreadable as exc:
            report.skipped.append({"path": rel, "format": fmt, "kind": exc.kind, "reason": exc.reason,
                                   "sha256": digest})
            counts["skipped"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - a library failing on one odd file must not stop the ingest
            report.skipped.append({"path": rel, "format": fmt, "kind": "extraction_failed", "sha256": digest,
                                   "reason": f"extraction failed ({type(exc).__name__}: {exc})"[:300]})
            counts["skipped"] += 1
            continue
        docs.append(doc)
        counts["documents"] += 1
    present = set(files)
    report.dropped = sorted(p for p in set(old_docs) | set(old_skips) if p not in present)
    docs.sort(key=lambda d: d["_id"])
    report.documents = len(docs)
    report.by_format = by_format
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_atomic(out / CORPUS, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
        report.seconds = time.perf_counter() - t0
        _write_atomic(out / REPORT, json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise DataError(exc.filename or out, f"cannot write the corpus: {exc.strerror or exc}",
                        hint="check that --out is writable and the disk has space") from None
    return report


def _document(rel: str, fmt: str, data: bytes, digest: str) -> dict:
    got = extract(data, fmt)
    meta = {"source": rel, "format": fmt, "sha256": digest, "size": len(data), **got.meta,
            "headings": got.headings}
    meta = {k: v for k, v in meta.items() if v is not None}
    return {"_id": document_id(rel), "title": got.title or Path(rel).stem, "text": got.text, "metadata": meta}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)

