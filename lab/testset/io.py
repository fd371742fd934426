"""What the test-set commands share: the retrieval units of a dataset, writing a BEIR-layout set with its
provenance, spreadsheet-friendly CSV in and out, and evidence tiers as a side file.

Conventions
- Units: a test set's corpus is the set of *retrieval units* its questions are judged against. Without chunking
  (``chunking=None`` or chunker "none") the units are the dataset's documents, ids unchanged (ord-qa's corpus is
  already chunked: its 290 documents are the units). With chunking they are :func:`lab.text.chunking.chunk_corpus`
  chunks (ids ``doc@start-end``), each carrying its document's metadata plus ``doc_id``, ``start``, ``end``.
- A written set is a BEIR folder that :func:`lab.data.beir.load_dataset` reads unchanged: ``corpus.jsonl`` (all
  units), ``queries.jsonl`` (``_id``, ``text``, ``metadata``), ``qrels/<split>.tsv`` (header ``query-id corpus-id
  score``), plus ``provenance.json`` (what made it: source dataset and fingerprint, units, models, prompt,
  params, seed, reports) and command-specific side files (``candidates.jsonl``, ``unlinked.jsonl``,
  ``tiers.json``) that the reader ignores.
- CSV for people: written UTF-8 *with* a byte-order mark (Excel then opens it as UTF-8), comma-separated, every
  field quoted when needed, ``\\r\\n`` line ends (the csv module's default). Read back with or without the BOM;
  the delimiter (comma, semicolon, tab: Excel's localised saves) is detected from the header line. Line numbers
  in errors are the physical line where the record starts (a quoted field may span lines).
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from lab.core.atomic import open_atomic, write_text_atomic
from lab.core.errors import ConfigError, DataError
from lab.core.paths import existing_or_repo_path, public_path
from lab.data.beir import load_dataset, read_corpus, read_queries
from lab.data.fingerprint import fingerprint, fingerprint_texts
from lab.data.io import decode, read_bytes
from lab.data.types import Corpus, Dataset, Document, Queries
from lab.text.chunking import chunk_corpus, describe_chunking

PROVENANCE = "provenance.json"
TIERS_FILE = "tiers.json"
TIERS = ("core", "auxiliary", "edge")
#: Excel refuses cells longer than this; longer passages are cut in sheets (and marked).
EXCEL_CELL_MAX = 32_000


# ------------------------------------------------------------------------------------------------ units
@dataclass
class Units:
    """The retrieval units of a dataset: ``corpus`` (one Document per unit) and how they were made."""

    dataset: Dataset
    corpus: Corpus
    chunking: dict  # lab.text.chunking.describe_chunking(...) or {"chunker": "none"}

    def describe(self) -> dict:
        return {"source_dataset": self.dataset.name, "source_path": public_path(self.dataset.path),
                "source_fingerprint": fingerprint(self.dataset.path), "chunking": dict(self.chunking),
                "n_units": len(self.corpus),
                "units_fingerprint": fingerprint_texts(f"{d.id}\0{d.text}" for d in self.corpus)}


def parse_chunking(spec: str | Mapping | None) -> dict | None:
    """Chunking kwargs from a CLI string: ``"none"`` -> None; ``"recursive"``; ``"recursive,size=256,overlap=32"``;
    ``"fixed,size=128,size_unit=words"``. Integers are parsed; a dict is returned as a copy."""
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        out = dict(spec)
        return None if out.get("chunker", "recursive") == "none" else out
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if not parts or parts[0] == "none":
        return None
    out: dict[str, Any] = {}
    for i, part in enumerate(parts):
        if "=" not in part:
            if i:
                raise ConfigError(f"chunking {spec!r}: {part!r} is not key=value; e.g. 'recursive,size=256,overlap=32'")
            out["chunker"] = part
            continue
        key, value = (s.strip() for s in part.split("=", 1))
        out[key] = int(value) if re.fullmatch(r"-?\d+", value) else {"true": True, "false": False}.get(value.lower(),
                                                                                                       value)
    return out


def load_source(path: str | Path, progress: bool = True) -> Dataset:
    """A dataset folder as a source of units: ``corpus.jsonl`` is required; ``queries.jsonl`` and ``qrels/`` are
    optional (a folder that ``lab ingest`` wrote holds only the corpus). When both are present the folder is
    loaded as a BEIR dataset, checked as usual; a folder with queries but no qrels gives queries without
    splits; without queries, no queries and no splits."""
    folder = existing_or_repo_path(path)
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(folder, "dataset folder not found",
                        hint="give a folder holding corpus.jsonl (e.g. one written by `lab ingest`)")
    have = lambda stem: any((folder / f"{stem}.jsonl{gz}").is_file() for gz in ("", ".gz"))  # noqa: E731
    qrels_dir = folder / "qrels"
    has_qrels = qrels_dir.is_dir() and any(p.is_file() and not p.name.startswith(".") for p in qrels_dir.iterdir())
    if have("queries") and has_qrels:
        return load_dataset(folder, progress=progress)
    if not have("corpus"):
        raise DataError(folder / "corpus.jsonl", "corpus file not found (looked for corpus.jsonl and "
                                                  "corpus.jsonl.gz)",
                        hint="a folder of documents becomes one with `lab ingest SRC --out DIR`")
    corpus_path = next(folder / f"corpus.jsonl{gz}" for gz in ("", ".gz") if (folder / f"corpus.jsonl{gz}").is_file())
    name = folder.resolve().name
    corpus = read_corpus(corpus_path, name=name, progress=progress)

    queries = Queries({}, {})
    if have("queries"):
        qpath = next(folder / f"queries.jsonl{gz}" for gz in ("", ".gz") if (folder / f"queries.jsonl{gz}").is_file())
        queries = read_queries(qpath, progress=progress)
    return Dataset(str(folder), corpus, queries, {}, [], name=name)


def load_units(dataset: str | Path | Dataset, chunking: str | Mapping | None = None, progress: bool = True) -> Units:
    """The units of ``dataset`` (see module conventions); a folder needs only ``corpus.jsonl``
    (:func:`load_source`)."""
    ds = dataset if isinstance(dataset, Dataset) else load_source(dataset, progress=progress)
    spec = parse_chunking(chunking)
    if spec is None:
        return Units(ds, ds.corpus, {"chunker": "none"})

    args = {k: v for k, v in spec.items() if k != "depth_factor"}
    chunks = chunk_corpus(ds.corpus, progress=progress, **args)
    docs = {}
    for c in chunks:
        meta = {**dict(ds.corpus[c.doc_id].metadata), "doc_id": c.doc_id, "start": c.start, "end": c.end,
                "title": c.title}
        docs[c.id] = Document(c.id, c.text, "", meta)
    return Units(ds, Corpus(docs, name=ds.name), describe_chunking(**args))


def unit_text(doc: Document) -> str:
    """The text a person (and the LLM) reads for a unit: title line (when any) and text."""
    return f"{doc.title}\n{doc.text}" if doc.title.strip() else doc.text


# ------------------------------------------------------------------------------------------------ writing a set
def write_jsonl(path: Path, records: Iterable[Mapping]) -> Path:
    """JSON Lines, UTF-8 (no BOM), non-ASCII kept as is; written atomically (temporary file, then rename)."""
    with open_atomic(path) as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def write_beir_set(folder: str | Path, corpus: Corpus, queries: Mapping[str, tuple[str, Mapping]],
                   qrels: Mapping[str, Mapping[str, int]], provenance: Mapping, split: str = "test") -> Path:
    """Write a BEIR folder: ``corpus.jsonl`` (all of ``corpus``), ``queries.jsonl`` (qid -> (text, metadata)),
    ``qrels/<split>.tsv`` (qid -> {unit id: grade}, in query order) and ``provenance.json``. Files of an earlier
    set in ``folder`` are replaced; other files are left alone. Returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "corpus.jsonl", ({"_id": d.id, "title": d.title, "text": d.text,
                                           **({"metadata": dict(d.metadata)} if d.metadata else {})} for d in corpus))
    write_jsonl(folder / "queries.jsonl", ({"_id": q, "text": t, **({"metadata": dict(m)} if m else {})}
                                           for q, (t, m) in queries.items()))
    (folder / "qrels").mkdir(exist_ok=True)
    rows = ["query-id\tcorpus-id\tscore\n"]
    for q, docs in qrels.items():
        for d, g in docs.items():
            if "\t" in q or "\t" in d:
                raise ConfigError(f"ids may not contain tabs: {q!r} / {d!r}")
            rows.append(f"{q}\t{d}\t{int(g)}\n")
    write_text_atomic(folder / "qrels" / f"{split}.tsv", "".join(rows))
    write_provenance(folder, provenance)
    return folder


def write_provenance(folder: str | Path, provenance: Mapping) -> Path:
    return write_text_atomic(Path(folder) / PROVENANCE,
                             json.dumps(provenance, indent=1, ensure_ascii=False, default=str) + "\n")


def read_provenance(folder: str | Path) -> dict:
    """``provenance.json`` of a set, or {} when the folder has none (an imported BEIR set)."""
    path = Path(folder) / PROVENANCE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as e:
        raise DataError(path, f"malformed JSON: {e}", line=e.lineno,
                        hint="restore the file from the run's MLflow artifacts, or delete it") from None


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------ tiers
def write_tiers(folder: str | Path, tiers: Mapping[str, Mapping[str, str]]) -> Path:
    """``tiers.json``: {query id: {unit id: "core" | "auxiliary" | "edge"}} for the relevant rows."""
    path = Path(folder) / TIERS_FILE
    path.write_text(json.dumps(tiers, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_tiers(folder_or_file: str | Path) -> dict[str, dict[str, str]]:
    """Tiers of a set, ready for ``lab.metrics.evaluate(qrels, run, tiers=...)`` (weighted_recall@k)."""
    path = Path(folder_or_file)
    path = path / TIERS_FILE if path.is_dir() else path
    if not path.is_file():
        raise DataError(path, "no tiers file", hint="tiers come from `lab testset import-annotation`")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as e:
        raise DataError(path, f"malformed JSON: {e}", line=e.lineno) from None
    for q, docs in data.items():
        for d, t in docs.items():
            if t not in TIERS:
                raise DataError(path, f"query {q!r}, unit {d!r}: tier {t!r} is not one of {TIERS}", field="tier")
    return data


# ------------------------------------------------------------------------------------------------ CSV
def write_csv(path: str | Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """A spreadsheet-friendly CSV (UTF-8 with BOM, comma, quoted as needed); long cells cut to EXCEL_CELL_MAX."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8-sig", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([_cell(r.get(c, "")) for c in columns])
    return path


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= EXCEL_CELL_MAX else text[:EXCEL_CELL_MAX] + " [...cut]"


def read_csv(path: str | Path, required: Sequence[str] = (), what: str = "sheet") -> Iterator[tuple[int, dict]]:
    """(line number, {column: value}) of each non-empty record; header names are lower-cased and stripped.

    A DataError names the file (line 1, the field) when a ``required`` column is missing, and the line of a
    record with more cells than the header."""
    path = Path(path)
    text = decode(path, read_bytes(path, what, hint="check the path"))
    first = text.split("\n", 1)[0]
    delimiter = max((",", ";", "\t"), key=first.count) if first else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        raise DataError(path, f"{what} is empty", line=1, hint="the first line must name the columns") from None
    cols = [h.strip().lower() for h in header]
    for name in required:
        if name not in cols:
            raise DataError(path, f"no column {name!r} in the header (columns: {cols})", line=1, field=name,
                            hint=f"the first line must name the columns, including {', '.join(required)}")
    line = reader.line_num + 1
    for cells in reader:
        start, line = line, reader.line_num + 1
        if not any(c.strip() for c in cells):
            continue
        if len(cells) > len(cols):
            raise DataError(path, f"{len(cells)} cells for {len(cols)} columns", line=start,
                            hint="a cell holding the delimiter must be quoted; save the sheet as CSV again")
        yield start, {c: (cells[i] if i < len(cells) else "") for i, c in enumerate(cols)}
