"""FAQ import: FAQ or ticket logs (CSV or JSON Lines) linked to the units of a dataset, written as a BEIR set.

Input rows: ``question`` (required; also read from a column named query), ``answer`` (optional; also reply,
response, resolution), ``reference`` (optional document reference; also doc, doc_id, document, source, url,
chunk_id). Extra columns are kept in the query's metadata under ``extra``.

Linking (:func:`link_rows`), per row:
1. A reference that names a unit id links to that unit ("reference").
2. A reference that names a document id, or a section (the units' ``metadata.source`` / ``section``), or the
   last path component of a URL/path equal to one of those, narrows the candidates to that document's or
   section's units; the best of them by the fused score below is linked ("reference+match"), whatever its score
   (a person named the place).
3. Otherwise (no reference, or one that names nothing: noted in the row's report), the best unit by fused
   retrieval: BM25 and dense (packaged all-MiniLM-L6-v2) top ``depth`` each, fused by RRF (k 60,
   lab.retrievers.fusion.rrf). It is linked ("match") when its dense cosine with the row's text is at least
   ``link_threshold``; else the row stays unlinked and is listed with its best candidate and score.
The text searched is the question followed by the answer when there is one (an answer names the terms the
documentation uses). Rows are validated first: a row without a question, a JSON line that is not an object or
has a non-string field is a DataError naming file, line and field. Duplicate questions (same text after
whitespace and case folding) are linked once and reported.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.core.errors import DataError
from lab.data.io import iter_jsonl
from lab.data.types import Corpus, Queries, Run
from lab.retrievers.base import Context, build
from lab.retrievers.dense import passage_text
from lab.retrievers.fusion import rrf
from lab.testset.io import load_units, now_utc, read_csv, write_beir_set, write_jsonl, write_provenance
from lab.testset.track import log_testset_run

ALIASES = {
    "question": ("question", "query", "q"),
    "answer": ("answer", "reply", "response", "resolution"),
    "reference": ("reference", "ref", "doc", "doc_id", "document", "source", "url", "chunk_id"),
}
DEFAULT_LINK_THRESHOLD = 0.5


@dataclass
class LogRow:
    line: int
    question: str
    answer: str = ""
    reference: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return f"{self.question} {self.answer}".strip()


@dataclass
class Link:
    row: LogRow
    unit_id: str | None
    method: str  # "reference" | "reference+match" | "match" | "unlinked" | "duplicate"
    score: float
    best: str | None = None
    note: str = ""

    def record(self) -> dict:
        return {"line": self.row.line, "question": self.row.question, "reference": self.row.reference,
                "method": self.method, "unit_id": self.unit_id, "best_candidate": self.best,
                "score": round(self.score, 4), "note": self.note}


def _column(cols: list[str], kind: str) -> str | None:
    return next((c for c in ALIASES[kind] if c in cols), None)


def read_log_rows(path: str | Path) -> list[LogRow]:
    """Rows of a CSV (header line) or JSON Lines (``.jsonl``/``.json``) log; see the module docstring."""
    path = Path(path)
    rows = []
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson") or path.name.endswith(".jsonl.gz"):
        for line, obj in iter_jsonl(path, "log file"):
            cols = [k.lower() for k in obj]
            lowered = {k.lower(): v for k, v in obj.items()}
            got = {}
            for kind in ALIASES:
                col = _column(cols, kind)
                value = lowered.get(col) if col else None
                if value is not None and not isinstance(value, (str, int, float)):
                    raise DataError(path, f"must be a string, got {type(value).__name__}", line=line, field=col,
                                    hint="write questions, answers and references as JSON strings")
                got[kind] = "" if value is None else str(value)
            used = {_column(cols, k) for k in ALIASES}
            rows.append(_row(path, line, got, {k: v for k, v in lowered.items() if k not in used}))
    else:
        first = True
        for line, rec in read_csv(path, what="log file"):
            cols = list(rec)
            if first and _column(cols, "question") is None:
                raise DataError(path, f"no question column (columns: {cols})", line=1, field="question",
                                hint="name the column 'question' (or 'query')")
            first = False
            got = {kind: rec.get(_column(cols, kind) or "", "") for kind in ALIASES}
            used = {_column(cols, k) for k in ALIASES}
            rows.append(_row(path, line, got, {k: v for k, v in rec.items() if k not in used and v}))
    if not rows:
        raise DataError(path, "no rows", hint="the log needs a header and at least one question")
    return rows


def _row(path, line: int, got: dict, extra: dict) -> LogRow:
    q = got.get("question", "").strip()
    if not q:
        raise DataError(path, "empty or missing question", line=line, field="question",
                        hint="every row needs a question; delete the row or fill it in")
    return LogRow(line, " ".join(q.split()), got.get("answer", "").strip(), got.get("reference", "").strip(), extra)


def _reference_units(ref: str, corpus: Corpus) -> tuple[list[str], str]:
    """Unit ids a reference names, and how: "unit", "doc", "section", or ([], "") when it names nothing."""
    if ref in corpus:
        return [ref], "unit"
    keys = [ref, re.split(r"[/\\#?]", ref.rstrip("/"))[-1]]
    keys += [re.sub(r"\.(md|html?|rst|txt|pdf)$", "", k) for k in keys]
    for key in dict.fromkeys(k for k in keys if k):
        if key in corpus:
            return [key], "unit"
        by_doc = [d.id for d in corpus if str((d.metadata or {}).get("doc_id", "")) == key]
        if by_doc:
            return by_doc, "doc"
        by_section = [d.id for d in corpus if key in (str((d.metadata or {}).get("source", "")),
                                                      str((d.metadata or {}).get("section", "")))]
        if by_section:
            return by_section, "section"
    return [], ""


class Linker:
    """BM25 + dense over the units, fused by RRF; ``cosine`` scores a text against units."""

    def __init__(self, corpus: Corpus, cache_dir, progress: bool = True, seed: int = 0, depth: int = 20):
        ctx = Context(cache_dir=Path(cache_dir), progress=progress, seed=seed)
        self.corpus, self.depth = corpus, depth
        self.bm25 = build("bm25", {}, ctx)
        self.dense = build("dense", {}, ctx)
        self.bm25.index(corpus)
        self.dense.index(corpus)
        self._vec = {d: i for i, d in enumerate(corpus.ids)}

        self._passages = self.dense.embeddings.encode(self.dense.embedder,
                                                      [passage_text(d.title, d.text) for d in corpus], "passage")

    def fused(self, texts: dict[str, str]) -> Run:
        q = Queries(texts)
        runs = [self.bm25.search_batch(q, self.depth), self.dense.search_batch(q, self.depth)]
        return rrf(runs, k=60)

    def query_vectors(self, texts: list[str]):
        return self.dense.embeddings.encode(self.dense.embedder, texts, "query")

    def cosine(self, qvec, unit_ids: list[str]):
        return self._passages[[self._vec[u] for u in unit_ids]] @ qvec


def link_rows(rows: list[LogRow], linker: Linker, link_threshold: float = DEFAULT_LINK_THRESHOLD) -> list[Link]:
    """One Link per row (see module docstring)."""
    texts = {str(i): r.text for i, r in enumerate(rows)}
    fused = linker.fused(texts)
    qvecs = linker.query_vectors([r.text for r in rows])
    seen: dict[str, int] = {}
    links = []
    for i, r in enumerate(rows):
        key = " ".join(r.question.lower().split())
        if key in seen:
            links.append(Link(r, None, "duplicate", 0.0, note=f"same question as line {seen[key]}"))
            continue
        seen[key] = r.line
        note = ""
        if r.reference:
            ids, how = _reference_units(r.reference, linker.corpus)
            if how == "unit":
                links.append(Link(r, ids[0], "reference", float(linker.cosine(qvecs[i], ids)[0]), ids[0]))
                continue
            if ids:
                sims = linker.cosine(qvecs[i], ids)
                ranked = [d for d, _ in fused.ranked(str(i)) if d in set(ids)]
                best = ranked[0] if ranked else ids[int(sims.argmax())]
                links.append(Link(r, best, "reference+match", float(sims[ids.index(best)]), best,
                                  note=f"reference names a {how} of {len(ids)} unit(s)"))
                continue
            note = f"reference {r.reference!r} names no unit, document or section; matched instead"
        hits = fused.ranked(str(i), 1)
        if not hits:
            links.append(Link(r, None, "unlinked", 0.0, None, (note + "; " if note else "") + "no candidate"))
            continue
        best = hits[0][0]
        score = float(linker.cosine(qvecs[i], [best])[0])
        if score >= link_threshold:
            links.append(Link(r, best, "match", score, best, note))
        else:
            links.append(Link(r, None, "unlinked", score, best,
                              (note + "; " if note else "") + f"best match scores {score:.3f} < {link_threshold}"))
    return links


def import_logs(path: str | Path, dataset, out: str | Path, *, link_threshold: float = DEFAULT_LINK_THRESHOLD,
                chunking=None, grade: int = 1, cache_dir: str | Path = ".cache", progress: bool = True,
                tracking_root: str | Path | None = "mlruns", experiment: str = "testset", seed: int = 0) -> dict:
    """Read a log, link its rows to the units of ``dataset``, write the linked rows as a BEIR set to ``out`` (with
    ``unlinked.jsonl`` and ``links.jsonl``); returns the report (counts, unlinked rows, MLflow run id)."""
    t0 = time.perf_counter()
    path = Path(path)
    rows = read_log_rows(path)
    units = load_units(dataset, chunking, progress=progress)
    links = link_rows(rows, Linker(units.corpus, cache_dir, progress, seed), link_threshold)
    linked = [lk for lk in links if lk.unit_id is not None]
    queries, qrels = {}, {}
    for n, lk in enumerate(linked, 1):
        qid = f"log-{n:04d}"
        meta: dict[str, Any] = {"answer": lk.row.answer, "reference": lk.row.reference, "link_method": lk.method,
                                "link_score": round(lk.score, 4), "source_line": lk.row.line}
        if lk.row.extra:
            meta["extra"] = lk.row.extra
        queries[qid] = (lk.row.question, meta)
        qrels[qid] = {lk.unit_id: grade}
    counts = {"rows": len(rows), "linked": len(linked),
              "linked_by_reference": sum(lk.method == "reference" for lk in links),
              "linked_by_reference_match": sum(lk.method == "reference+match" for lk in links),
              "linked_by_match": sum(lk.method == "match" for lk in links),
              "unlinked": sum(lk.method == "unlinked" for lk in links),
              "duplicates": sum(lk.method == "duplicate" for lk in links),
              "references_not_found": sum("names no unit" in lk.note for lk in links)}
    report = {"counts": counts, "link_threshold": link_threshold,
              "unlinked": [lk.record() for lk in links if lk.method in ("unlinked", "duplicate")]}
    provenance = {"kind": "logs", "created": now_utc(), "source_file": str(path),
                  "source_sha256": _sha(path), "units": units.describe(),
                  "linking": {"fusion": "rrf k=60 of bm25 and dense (all-MiniLM-L6-v2) top 20",
                              "score": "dense cosine of question+answer with the linked unit",
                              "link_threshold": link_threshold, "grade": grade},
                  "report": counts, "seconds": round(time.perf_counter() - t0, 1)}
    folder = Path(out)
    if linked:
        write_beir_set(folder, units.corpus, queries, qrels, provenance)
    else:
        folder.mkdir(parents=True, exist_ok=True)
        write_provenance(folder, provenance)
    write_jsonl(folder / "links.jsonl", (lk.record() for lk in links))
    write_jsonl(folder / "unlinked.jsonl", report["unlinked"])
    if tracking_root is not None:
        run_id = log_testset_run("import-logs", f"import-logs {path.name} -> {units.dataset.name}",
                                 {"source_file": path.name, "dataset": units.dataset.name,
                                  "link_threshold": link_threshold, "chunking": units.chunking, "grade": grade},
                                 counts, {"dataset": units.dataset.name,
                                          "dataset_fingerprint": provenance["units"]["source_fingerprint"]},
                                 [folder], tracking_root=tracking_root, experiment=experiment)
        provenance["mlflow_run_id"] = report["mlflow_run_id"] = run_id
        write_provenance(folder, provenance)
    report["folder"] = str(folder)
    return report


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def format_report(report: dict) -> str:
    c = report["counts"]
    lines = [f"rows {c['rows']}: linked {c['linked']} (reference {c['linked_by_reference']}, reference+match "
             f"{c['linked_by_reference_match']}, match {c['linked_by_match']}), unlinked {c['unlinked']}, "
             f"duplicates {c['duplicates']}; references naming nothing: {c['references_not_found']}"]
    for r in report["unlinked"]:
        lines.append(f"  line {r['line']}: {r['method']}: {r['question'][:80]!r} ({r['note']}; best "
                     f"{r['best_candidate']})")
    return "\n".join(lines)


def to_json(report: dict) -> str:
    return json.dumps(report, indent=1, ensure_ascii=False)
