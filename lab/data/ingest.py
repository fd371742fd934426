"""Ingest a folder of documents into a BEIR corpus: ``DIR/corpus.jsonl`` plus ``DIR/ingest_report.json``.

Conventions
- Files are found recursively under SRC; hidden files and folders (name starting with ".") are ignored, as is
  DIR when it lies inside SRC. Formats by extension (case-insensitive): .md/.markdown, .rst, .txt, .html/.htm,
  .pdf, .docx (extraction rules in :mod:`lab.data.extract`). Web-server files that are not documents
  (:data:`NOT_DOCUMENTS`: robots.txt, humans.txt, security.txt, ads.txt, app-ads.txt, by name in any folder) are
  skipped as ``not_a_document``.
- Links and special files: a symbolic link is never followed out of SRC. A link to a file inside SRC is read
  (under the link's own path); links pointing outside SRC, links to folders (not descended: their files are read
  under their own path), broken links, link loops, FIFOs, sockets and devices are not read and are listed in
  ``skipped`` with their kind (``link_outside``, ``link_to_folder``, ``broken_link``, ``link_loop``, ``fifo``,
  ``socket``, ``device``) and reason. Files are opened non-blocking and checked to be regular, and (on Linux,
  through /proc) to lie inside SRC, before reading: a file swapped for a FIFO or a link since the walk is not read.
- Limits (:class:`lab.data.extract.Limits`): a file above its format's size limit is skipped (``too_large``)
  from its size alone, before it is read; zip-based formats, PDF pages and extracted text are bounded as
  extract.py states.
- Document id: the file's path relative to SRC without its extension, "/" as separator, each run of whitespace
  replaced by "_" so ids fit TREC run files (``guides/install.md`` -> ``guides/install``; ``my notes.md`` ->
  ``my_notes``); the original path stays in ``metadata.source``. Files whose ids would be equal and whose
  extensions differ (``a.html`` and ``a.pdf``) all keep their extension in the id (``a.html``, ``a.pdf``); ids
  still equal (``a b.md`` and ``a_b.md``) get ``~2``, ``~3`` in path order after the first. Every collision is
  listed in ``id_collisions``. A file name that is not valid UTF-8 is read under a safe name: each byte that is
  not UTF-8 written as ``\\xNN`` (``caf\\xe9.md`` -> id ``caf\\xe9``), listed in ``names_escaped``.
- Each document: ``_id``, ``title``, ``text`` (the normalised text) and ``metadata``: ``source`` (path relative to
  SRC), ``format``, ``sha256``, ``size`` (bytes), ``headings`` (level, title, start, end: offsets into
  ``text``), plus ``pages`` and ``page_offsets`` for PDF, ``encoding`` for text and HTML, ``html_title``.
  corpus.jsonl is sorted by id, one JSON object per line.
- After extraction the whole set is cleaned (rules in :mod:`lab.data.cleanup`): site-wide boilerplate blocks
  are dropped from HTML pages, titles follow the title rule, near-duplicates and documents under 50 words are
  reported; ``min_words`` skips short documents and ``dedupe`` drops one of each near-duplicate pair.
- A file that cannot be read (unknown extension, empty, binary, undecodable, corrupt, encrypted, without text,
  too large) is skipped and listed with its reason in the report; nothing a file contains stops the ingest.
- Rerun: a file whose sha256 equals the one recorded for its path in DIR is reused without being read again
  (skipped ones too); files no longer in SRC are dropped. The extraction before clean-up is kept in
  ``DIR/.extracted.jsonl`` (hidden: not part of the dataset's fingerprint) for this. A change of extractor
  version re-reads everything.
"""
from __future__ import annotations

import copy
import errno
import fnmatch
import hashlib
import json
import os
import re
import stat
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from lab.core.atomic import write_text_atomic
from lab.core.errors import DataError
from lab.core.progress import progress as bar
from lab.data import cleanup
from lab.data.cleanup import Record
from lab.data.extract import EXTRACTOR_VERSION, FORMATS, Limits, Unreadable, extract

REPORT = "ingest_report.json"
CORPUS = "corpus.jsonl"
EXTRACTED = ".extracted.jsonl"
NOT_DOCUMENTS = frozenset({"robots.txt", "humans.txt", "security.txt", "ads.txt", "app-ads.txt"})
#: skip kinds decided by the walk or the clean-up, not by reading the file: never reused from a previous report
_NOT_CACHED = {"link_outside", "link_to_folder", "broken_link", "link_loop", "fifo", "socket", "device",
               "special", "too_large", "not_a_document", "too_short", "duplicate", "only_boilerplate"}

@dataclass
class IngestReport:
    """What one ingest did; ``summary()`` says it in words, ``to_dict()`` is ingest_report.json."""

    src: str
    out: str
    documents: int = 0
    by_format: dict[str, dict[str, int]] = field(default_factory=dict)  # format -> {"files", "documents", "skipped"}
    skipped: list[Record] = field(default_factory=list)  # {"path", "format", "kind", "reason", "sha256"}
    reused: int = 0
    changed: int = 0
    new: int = 0
    dropped: list[str] = field(default_factory=list)  # source paths no longer in SRC
    hidden_ignored: int = 0
    excluded: int = 0
    exclude: list[str] = field(default_factory=list)
    seconds: float = 0.0
    libraries: dict[str, str | None] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    ids_rewritten: list[Record] = field(default_factory=list)  # {"path", "id"}: whitespace replaced in the id
    names_escaped: list[str] = field(default_factory=list)  # paths whose non-UTF-8 bytes are written as \xNN
    id_collisions: list[Record] = field(default_factory=list)  # {"id", "paths", "ids"}
    encoding_guesses: list[Record] = field(default_factory=list)  # {"path", "encoding", "reads", "alternatives"}
    boilerplate: dict[str, Any] = field(default_factory=dict)  # {"share", "blocks", "dropped", "documents", "top"}
    titles_from_page_title: int = 0
    near_duplicates: list[Record] = field(default_factory=list)  # {"a", "b", "containment", "jaccard"}
    short_documents: list[Record] = field(default_factory=list)  # {"id", "words"} under cleanup.SHORT_WORDS words
    min_words: int = 0
    dedupe: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "out": self.out, "extractor_version": EXTRACTOR_VERSION,
                "libraries": self.libraries, "documents": self.documents, "by_format": self.by_format,
                "skipped": self.skipped, "rerun": {"reused": self.reused, "changed": self.changed, "new": self.new,
                                                   "dropped": len(self.dropped)},
                "dropped": self.dropped, "hidden_ignored": self.hidden_ignored, "exclude": self.exclude,
                "excluded": self.excluded, "seconds": round(self.seconds, 2), "limits": self.limits,
                "ids_rewritten": self.ids_rewritten, "names_escaped": self.names_escaped,
                "id_collisions": self.id_collisions,
                "encoding_guesses": self.encoding_guesses, "boilerplate": self.boilerplate,
                "titles_from_page_title": self.titles_from_page_title, "near_duplicates": self.near_duplicates,
                "short_documents": self.short_documents, "short_words": cleanup.SHORT_WORDS,
                "min_words": self.min_words, "dedupe": self.dedupe}

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
        lines += self._cleanup_lines(examples)
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)} files:")
            groups: dict[str, list[str]] = {}
            for s in self.skipped:
                groups.setdefault(_group(s), []).append(_shown(s["path"]))
            for reason, paths in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                shown = ", ".join(paths[:examples]) + (", ..." if len(paths) > examples else "")
                lines.append(f"    {len(paths)} x {reason}: {shown}")
        lines.append(f"  report: {Path(self.out) / REPORT}")
        return "\n".join(lines)

    def _cleanup_lines(self, examples: int) -> list[str]:
        lines = []
        if self.names_escaped:
            lines.append(f"  {len(self.names_escaped)} file names not valid UTF-8, read with their bytes written as "
                         f"\\xNN: {', '.join(self.names_escaped[:examples])}")
        if self.ids_rewritten:
            shown = ", ".join(f"{_shown(r['path'])} -> {r['id']}" for r in self.ids_rewritten[:examples])
            lines.append(f"  {len(self.ids_rewritten)} ids with whitespace replaced by '_': {shown}")
        for c in self.id_collisions[:examples]:
            lines.append(f"  id collision {c['id']!r}: " + ", ".join(
                f"{_shown(p)} -> {i}" for p, i in zip(c["paths"], c["ids"], strict=True)))
        if len(self.id_collisions) > examples:
            lines.append(f"  ... {len(self.id_collisions) - examples} more id collisions (id_collisions in the report)")
        for g in self.encoding_guesses[:examples]:
            alts = ", ".join(f"{a['encoding']} {a['reads']!r}" for a in g["alternatives"])
            lines.append(f"  low-confidence encoding: {_shown(g['path'])} decoded as {g['encoding']} "
                         f"({g['reads']!r}); also fits {alts}")
        if len(self.encoding_guesses) > examples:
            lines.append(f"  ... {len(self.encoding_guesses) - examples} more low-confidence encodings "
                         "(encoding_guesses in the report)")
        bp = self.boilerplate
        if bp.get("dropped"):
            lines.append(f"  boilerplate: {bp['blocks']} blocks repeated in >= {bp['share']:.0%} of the HTML pages, "
                         f"{bp['dropped']} dropped from {bp['documents']} documents; most frequent:")
            lines += [f"    {t['documents']} x {t['text']!r}" for t in bp["top"][:examples]]
        if self.titles_from_page_title:
            lines.append(f"  {self.titles_from_page_title} titles from the page's <title> (first heading generic "
                         f"or shared by {cleanup.SHARED_TITLE_DOCS}+ documents)")
        if self.near_duplicates:
            inside = Counter(p["b"] for p in self.near_duplicates).most_common(examples)
            shown = ", ".join(f"{n} inside {b}" if n > 1 else next(f"{p['a']} ~ {b}" for p in self.near_duplicates
                                                                   if p["b"] == b) for b, n in inside)
            lines.append(f"  {len(self.near_duplicates)} near-duplicate pairs (a document at least "
                         f"{cleanup.CONTAINMENT:.0%} inside another; "
                         f"{'--dedupe dropped one of each' if self.dedupe else '--dedupe keeps one'}): {shown}")
        if self.short_documents:
            shown = ", ".join(f"{d['id']} ({d['words']})" for d in self.short_documents[:examples])
            action = (f"--min-words {self.min_words} skipped those under {self.min_words}" if self.min_words
                      else "--min-words N skips them")
            lines.append(f"  {len(self.short_documents)} documents under {cleanup.SHORT_WORDS} words ({action}): "
                         f"{shown}")
        return lines


def _shown(path: str) -> str:
    """A path for one summary line: control characters (a newline in a file name) escaped."""
    return path if path.isprintable() else ascii(path)[1:-1]


def _group(skip: Record) -> str:
    if skip["kind"] == "unknown_extension":
        return f"unknown extension {Path(skip['path']).suffix or '(none)'}"
    kind = str(skip["kind"])
    return str(skip["reason"]) if kind in ("binary", "empty", "no_text") else kind.replace("_", " ")


_WHITESPACE = re.compile(r"\s+")


def escaped_name(path: str) -> str:
    """``path`` as valid UTF-8 text: the bytes of a file name that is not UTF-8 (which Python holds as surrogate
    escapes) written as ``\\xNN``; any other path unchanged."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def document_id(rel: str) -> str:
    """``guides/install.md`` -> ``guides/install`` (POSIX relative path without its last extension, whitespace
    runs replaced by "_")."""
    path = Path(rel)
    return _WHITESPACE.sub("_", (path.parent / path.stem).as_posix() if path.suffix else path.as_posix())


def assign_ids(files: list[str]) -> tuple[dict[str, str], list[Record]]:
    """Relative path -> document id for the files of a known format, and the collisions (module conventions)."""
    groups: dict[str, list[str]] = {}
    for rel in files:
        if Path(rel).suffix.lower() in FORMATS and Path(rel).name.lower() not in NOT_DOCUMENTS:
            groups.setdefault(document_id(rel), []).append(rel)
    ids: dict[str, str] = {}
    clashes: list[tuple[str, list[str]]] = []
    for did, rels in groups.items():
        by_extension = len(rels) > 1 and len({Path(r).suffix for r in rels}) == len(rels)
        if by_extension:
            clashes.append((did, rels))
        for rel in rels:
            ids[rel] = _WHITESPACE.sub("_", rel) if by_extension else did
    by_id: dict[str, list[str]] = {}
    for rel, did in sorted(ids.items()):
        by_id.setdefault(did, []).append(rel)
    for did, rels in by_id.items():
        if len(rels) > 1:
            clashes.append((did, rels))
            for k, rel in enumerate(rels[1:], start=2):
                ids[rel] = f"{did}~{k}"
    collisions = [{"id": did, "paths": sorted(rels), "ids": [ids[r] for r in sorted(rels)]}
                  for did, rels in sorted(clashes)]
    return ids, collisions


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _walk(src: Path, out: Path, exclude: tuple[str, ...] = ()) -> tuple[list[str], list[Record], int, int]:
    """Relative POSIX paths of the files under ``src`` to read (sorted), the skip records of links and special
    files not read, how many hidden files or folders were ignored (a hidden folder counts once) and how many
    files matched an ``exclude`` glob. Links are not followed (module conventions)."""
    files: list[str] = []
    special: list[Record] = []
    hidden, excluded = 0, 0
    out_abs, src_real = out.resolve(), Path(os.path.realpath(src))
    def unreadable(exc: OSError) -> None:
        rel = Path(exc.filename).relative_to(src).as_posix() if exc.filename else "."
        special.append({"path": rel, "format": None, "kind": "unreadable", "sha256": None,
                        "reason": f"folder cannot be listed ({exc.strerror or exc})"})

    for root, dirs, names in os.walk(src, onerror=unreadable):
        root_path = Path(root)
        kept = []
        for d in dirs:
            full = root_path / d
            if d.startswith("."):
                hidden += 1
            elif full.is_symlink():
                rel = full.relative_to(src).as_posix()
                if _excluded(rel, d, exclude):
                    excluded += 1
                elif (record := _special(full, rel, src_real)) is not None:  # None only if it changed meanwhile
                    special.append(record)
            elif full.resolve() != out_abs:
                kept.append(d)
        dirs[:] = sorted(kept)
        for n in names:
            full = root_path / n
            rel = full.relative_to(src).as_posix()
            if n.startswith("."):
                hidden += 1
            elif _excluded(rel, n, exclude):
                excluded += 1
            else:
                record = _special(full, rel, src_real)
                if record is None:
                    files.append(rel)
                else:
                    special.append(record)
    return sorted(files), sorted(special, key=lambda s: s["path"]), hidden, excluded


def _excluded(rel: str, name: str, exclude: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(name, g) for g in exclude)


def _special(path: Path, rel: str, src_real: Path) -> Record | None:
    """None for a regular file (or a link to one inside SRC), else the skip record saying what it is."""
    def record(kind: str, reason: str) -> Record:
        return {"path": rel, "format": None, "kind": kind, "reason": reason, "sha256": None}

    if path.is_symlink():
        link = os.readlink(path)
        try:
            target = Path(os.path.realpath(path, strict=True))
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return record("link_loop", f"symbolic link loop ({link}): not followed")
            return record("broken_link", f"broken symbolic link ({link}: no such file)")
        if not target.is_relative_to(src_real):
            return record("link_outside", f"symbolic link to {link}, outside SRC: not followed")
        if target.is_dir():
            return record("link_to_folder", f"symbolic link to the folder {link}: not followed (its files are "
                          "read under their own path)")
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return record("unreadable", f"cannot be opened ({exc.strerror or exc})")
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return record("fifo", "a FIFO (named pipe), not a file: not read")
    if stat.S_ISSOCK(mode):
        return record("socket", "a socket, not a file: not read")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return record("device", "a device, not a file: not read")
    return record("special", "not a regular file: not read")


def _read(path: Path, limit: int, fmt: str, src_real: Path) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; opened non-blocking so a file swapped for a FIFO
    since the walk cannot hang the ingest, and (where /proc tells) refused when what was opened lies outside SRC,
    so a file swapped for a link since the walk is not read either. Unreadable (``too_large``) from the size
    alone, before reading."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        opened = Path(f"/proc/self/fd/{fd}")
        if opened.is_symlink() and not Path(os.readlink(opened)).is_relative_to(src_real):
            raise Unreadable("link_outside", "became a link outside SRC after the folder was listed: not read")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable("special", "not a regular file: not read")
        if st.st_size > limit:
            option = {"pdf": "--max-pdf-mb", "docx": "--max-docx-mb"}.get(fmt, "--max-text-mb")
            raise Unreadable("too_large", f"{st.st_size / 2**20:,.1f} MiB (limit {limit / 2**20:g} MiB for {fmt}, "
                             f"{option})")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Unreadable("too_large", f"grew past {limit / 2**20:g} MiB while being read")
    return data


def _previous(out: Path) -> tuple[dict[str, Record], dict[str, Record]]:
    """Extracted documents (before clean-up) and skip records of the last ingest into ``out``, by source path
    (empty when none or stale)."""
    report_path, cache_path = out / REPORT, out / EXTRACTED
    if not report_path.is_file():
        return {}, {}
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, {}
    if report.get("extractor_version") != EXTRACTOR_VERSION:
        return {}, {}
    docs: dict[str, Record] = {}
    if cache_path.is_file():
        with cache_path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    try:
                        doc = json.loads(line)
                        docs[doc["metadata"]["source"]] = doc
                    except (ValueError, KeyError, TypeError):
                        return {}, {}
    skips = {s["path"]: s for s in report.get("skipped", [])
             if isinstance(s, dict) and "path" in s and s.get("kind") not in _NOT_CACHED}
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


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("pypdf", "python-docx", "lxml", "charset-normalizer"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def ingest(src: Path | str, out: Path | str, exclude: list[str] | tuple[str, ...] = (),
           progress: bool = True, limits: Limits | None = None, min_words: int = 0, dedupe: bool = False,
           boilerplate_share: float = cleanup.BOILERPLATE_SHARE) -> IngestReport:
    """Ingest the documents under ``src`` into ``out`` (see the module conventions); returns the report.
    ``exclude``: glob patterns (fnmatch) matched against each file's path relative to SRC and its name, e.g.
    ``SOURCE.md`` or ``drafts/*``; excluded files are counted, not read, and not listed as skipped.
    ``limits``: file, zip, page and text bounds (default :class:`Limits`); ``min_words``: skip documents with
    fewer words (0: keep all); ``dedupe``: drop one document of each near-duplicate pair; ``boilerplate_share``:
    share of the HTML pages a block must recur in to be dropped as boilerplate (0: keep every block).
    Raises DataError (before reading any document) for a missing SRC or an unusable DIR."""
    t0 = time.perf_counter()
    src, out, limits = Path(src), Path(out), limits or Limits()
    check_out(src, out)
    found, special, hidden, excluded = _walk(src, out, tuple(exclude))
    on_disk = {escaped_name(rel): rel for rel in found}  # the name used in ids and the report -> the real name
    files = sorted(on_disk)
    for record in special:
        record["path"] = escaped_name(record["path"])
    ids, collisions = assign_ids(files)
    old_docs, old_skips = _previous(out)
    report = IngestReport(src=src.as_posix(), out=out.as_posix(), hidden_ignored=hidden, excluded=excluded,
                         exclude=list(exclude), libraries=library_versions(), limits=vars(limits).copy(),
                         id_collisions=collisions, min_words=min_words, dedupe=dedupe,
                         names_escaped=[rel for rel, real in on_disk.items() if rel != real])
    report.skipped += special
    docs: list[Record] = []
    by_format: dict[str, dict[str, int]] = {}
    for rel in bar(files, desc="ingest", unit="file", enabled=progress):
        fmt = FORMATS.get(Path(rel).suffix.lower())
        counts = by_format.setdefault(fmt or "other", {"files": 0, "documents": 0, "skipped": 0})
        counts["files"] += 1
        doc = _one_file(src, rel, fmt, limits, old_docs, old_skips, report, on_disk[rel])
        if doc is None:
            counts["skipped"] += 1
            continue
        doc["_id"] = ids[rel]
        docs.append(doc)
        counts["documents"] += 1
    present = set(files) | {s["path"] for s in special}
    report.dropped = sorted(p for p in set(old_docs) | set(old_skips) if p not in present)
    extracted = sorted(docs, key=lambda d: d["_id"])
    docs = _clean([copy.deepcopy(d) for d in extracted], report, by_format, boilerplate_share)
    report.ids_rewritten = [{"path": d["metadata"]["source"], "id": d["_id"]} for d in docs
                            if _WHITESPACE.search(d["metadata"]["source"])]
    report.encoding_guesses = [{"path": d["metadata"]["source"], **d["metadata"]["encoding_guess"]} for d in docs
                               if d["metadata"].get("encoding_guess")]
    report.documents = len(docs)
    report.by_format = by_format
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / EXTRACTED, _jsonl(extracted))
        write_text_atomic(out / CORPUS, _jsonl(docs))
        report.seconds = time.perf_counter() - t0
        write_text_atomic(out / REPORT, json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise DataError(exc.filename or out, f"cannot write the corpus: {exc.strerror or exc}",
                        hint="check that --out is writable and the disk has space") from None
    return report


def _one_file(src: Path, rel: str, fmt: str | None, limits: Limits, old_docs: dict[str, Record],
              old_skips: dict[str, Record], report: IngestReport, real: str | None = None) -> Record | None:
    """The extracted document of one file (reused when its sha256 is unchanged), or None after adding its skip
    record to ``report``. ``rel``: the name in the report (see :func:`escaped_name`), ``real``: the name on disk."""
    def skip(kind: str, reason: str, digest: str | None = None) -> None:
        report.skipped.append({"path": rel, "format": fmt, "kind": kind, "reason": reason, "sha256": digest})

    if fmt is None:
        suffix = Path(rel).suffix or "(none)"
        skip("unknown_extension", f"unknown extension {suffix} (lab ingest reads {' '.join(sorted(FORMATS))})")
        return None
    if Path(rel).name.lower() in NOT_DOCUMENTS:
        skip("not_a_document", f"{Path(rel).name} is a web-server file, not a document")
        return None
    try:
        data = _read(src / (real or rel), limits.max_bytes(fmt), fmt, Path(os.path.realpath(src)))
    except Unreadable as exc:
        skip(exc.kind, exc.reason)
        return None
    except OSError as exc:
        skip("unreadable", f"cannot be opened ({exc.strerror or exc})")
        return None
    digest = _sha256(data)
    before = old_docs.get(rel) or old_skips.get(rel)
    if before is not None:
        old_sha = before["metadata"]["sha256"] if "metadata" in before else before.get("sha256")
        if old_sha == digest:
            report.reused += 1
            if "metadata" in before:
                return before
            report.skipped.append(before)
            return None
        report.changed += 1
    else:
        report.new += 1
    try:
        return _document(rel, fmt, data, digest, limits)
    except Unreadable as exc:
        skip(exc.kind, exc.reason, digest)
        return None
    except MemoryError:
        skip("too_large", "ran out of memory while extracting (lower the --max-* limits, or split the file)",
             digest)
        return None
    except Exception as exc:  # noqa: BLE001 - a library failing on one odd file must not stop the ingest
        skip("extraction_failed", f"extraction failed ({type(exc).__name__}: {exc})"[:300], digest)
        return None


def _clean(docs: list[Record], report: IngestReport, by_format: dict[str, dict[str, int]], share: float
           ) -> list[Record]:
    """The corpus-wide clean-up (:mod:`lab.data.cleanup`) of the extracted documents, recorded in ``report``;
    documents removed by it move from ``documents`` to ``skipped`` in ``by_format``."""
    def remove(doc: Record, kind: str, reason: str) -> None:
        meta = doc["metadata"]
        report.skipped.append({"path": meta["source"], "format": meta["format"], "kind": kind, "reason": reason,
                               "sha256": meta["sha256"]})
        by_format[meta["format"]]["documents"] -= 1
        by_format[meta["format"]]["skipped"] += 1

    blocks = cleanup.boilerplate(docs, share)
    dropped = {d["_id"]: cleanup.drop_blocks(d, blocks) for d in docs if d["metadata"]["format"] == "html"}
    report.boilerplate = {"share": share, "blocks": len(blocks), "dropped": sum(dropped.values()),
                          "documents": sum(1 for n in dropped.values() if n),
                          "top": [{"text": k[:200], "documents": c} for k, c in blocks.most_common(10)]}
    kept: list[Record] = []
    for d in docs:
        if d["text"].strip():
            kept.append(d)
        else:
            remove(d, "only_boilerplate", "nothing left once the site's repeated blocks are dropped")
    report.titles_from_page_title = cleanup.retitle(kept)
    words = {d["_id"]: cleanup.word_count(d["text"]) for d in kept}
    report.short_documents = [{"id": i, "words": n} for i, n in words.items() if n < cleanup.SHORT_WORDS]
    docs, kept = kept, []
    for d in docs:
        if words[d["_id"]] < report.min_words:
            remove(d, "too_short", f"{words[d['_id']]} words (--min-words {report.min_words})")
        else:
            kept.append(d)
    report.near_duplicates = cleanup.near_duplicates(kept)
    if not report.dedupe:
        return kept
    drop = cleanup.dedupe_choice(report.near_duplicates, kept)
    for d in kept:
        if d["_id"] in drop:
            remove(d, "duplicate", f"near-duplicate of {drop[d['_id']]} (--dedupe keeps text formats first)")
    return [d for d in kept if d["_id"] not in drop]


def _document(rel: str, fmt: str, data: bytes, digest: str, limits: Limits | None = None) -> Record:
    got = extract(data, fmt, limits)
    meta = {"source": rel, "format": fmt, "sha256": digest, "size": len(data), **got.meta,
            "headings": got.headings}
    meta = {k: v for k, v in meta.items() if v is not None}
    return {"_id": document_id(rel), "title": got.title or Path(rel).stem, "text": got.text, "metadata": meta}


def _jsonl(docs: list[Record]) -> str:
    return "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)


