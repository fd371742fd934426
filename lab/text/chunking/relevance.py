"""Relevance at the chunk level: span overlap with evidence (:func:`span_qrels`), or a chunk run aggregated
back to documents (:func:`aggregate_to_docs`); :func:`relevance_for` picks by mode."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from lab.core.errors import ConfigError
from lab.data.types import Dataset, EvidenceSpan, Qrels, Run
from lab.text.chunking.chunker import chunk_to_doc
from lab.text.chunking.chunks import RELEVANCE_MODES, Chunk, doc_id_of, parse_chunk_id


def span_qrels(chunks: Iterable[Chunk], evidence: Iterable[EvidenceSpan], doc_qrels: Qrels | None = None,
               tiers: Iterable[str] | None = None) -> Qrels:
    """Chunk-level qrels: a chunk is relevant to a query when it overlaps one of the query's evidence spans.

    Overlap: ``chunk.start < span.end and span.start < chunk.end`` (half-open; empty spans match nothing).
    Grade: the document qrels grade of (query, doc) when it is positive, else the span's grade; the highest over
    the spans a chunk overlaps. With ``doc_qrels``, only its queries are kept (evidence of other splits is
    ignored). ``tiers`` keeps only spans of those tiers ("core", "auxiliary", "edge"). Queries without evidence
    get no entry: they are out of span-mode evaluation (see :class:`Relevance`).
    """
    evidence = list(evidence)
    cited = {sp.doc_id for sp in evidence}
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        if c.doc_id in cited:  # only the documents evidence points into (a few hundred of thousands)
            by_doc.setdefault(c.doc_id, []).append(c)
    for lst in by_doc.values():
        lst.sort(key=lambda c: (c.start, c.end))
    keep = set(tiers) if tiers is not None else None
    out: dict[str, dict[str, int]] = {}
    for sp in evidence:
        if doc_qrels is not None and sp.query_id not in doc_qrels:
            continue
        if keep is not None and sp.tier not in keep:
            continue
        qgrade = doc_qrels[sp.query_id].get(sp.doc_id, 0) if doc_qrels is not None else 0
        grade = qgrade if qgrade > 0 else sp.grade
        for c in by_doc.get(sp.doc_id, ()):
            if c.start >= sp.end:
                break
            if sp.start < c.end and c.start < sp.end:
                row = out.setdefault(sp.query_id, {})
                row[c.id] = max(row.get(c.id, grade), grade)
    base = doc_qrels.name if doc_qrels is not None else ""
    return Qrels(out, name=f"{base}/span" if base else "span")


def aggregate_to_docs(run: Run, chunk_to_doc: dict[str, str] | None = None, how: str = "max",
                      k: int | None = None) -> Run:
    """A chunk run turned into a document run: each document scores its best chunk (``how="max"``).

    Chunks are read in rank order (``Run.ranked``), so a document's score is that of its first-ranked chunk and
    the document order follows first appearance; ties between documents are then broken by the Run rule (doc id
    descending). ``how="sum"`` adds the scores of a document's retrieved chunks instead. ``chunk_to_doc`` maps
    chunk ids to document ids; when None, ids are parsed (``doc@start-end``); an id outside the mapping that is a
    span of one of its documents (a window a strategy returned) is parsed too. ``k`` keeps the top k documents.
    Search chunks deeper than the document cut-off you evaluate: k chunks hold at most k documents.
    Latency is carried over unchanged.
    """
    if how not in ("max", "sum"):
        raise ConfigError(f"unknown aggregation {how!r}; choose 'max' or 'sum'")
    scores: dict[str, dict[str, float]] = {}
    known: set[str] = set()
    for qid in run:
        docs: dict[str, float] = {}
        for cid, s in run.ranked(qid):
            if chunk_to_doc is not None and cid not in chunk_to_doc and _known_span(cid, chunk_to_doc, known):
                doc = doc_id_of(cid)  # a span made by the strategy (a window of chunks): its id names its document
            elif chunk_to_doc is not None:
                if cid not in chunk_to_doc:
                    raise ConfigError(f"run {run.name!r}, query {qid!r}: chunk id {cid!r} is not in the chunk mapping"
                                      " (was the run made on another chunking?)")
                doc = chunk_to_doc[cid]
            else:
                doc = doc_id_of(cid)
            if doc not in docs:
                docs[doc] = float(s)
            elif how == "sum":
                docs[doc] += float(s)
        scores[qid] = docs
    out = Run(scores, name=run.name, latency=dict(run.latency))
    if k is not None:
        out = Run({q: dict(out.ranked(q, k)) for q in out}, name=out.name, latency=out.latency)
    return out


def _known_span(cid: str, chunk_to_doc: dict[str, str], known: set[str]) -> bool:
    """True when ``cid`` is a span id ``doc@start-end`` of a document of the mapping (``known`` caches its docs)."""
    try:
        doc = doc_id_of(cid)
    except ValueError:
        return False
    if not known:
        known.update(chunk_to_doc.values())
    return doc in known


def _span_of(cid: str) -> tuple[str, int, int]:
    """(document id, start, end) of a chunk id; ValueError when ``cid`` is not one."""
    parsed = parse_chunk_id(cid)
    if parsed is None:
        raise ValueError(f"{cid!r} is not a chunk id (expected 'doc_id@start-end')")
    return parsed


def span_chunks(ids: Iterable[str]) -> list[Chunk]:
    """Chunks (no text) parsed from span ids ``doc@start-end``; ids that are not span ids are skipped."""
    out = []
    for cid in ids:
        parsed = parse_chunk_id(cid)
        if parsed is not None:
            out.append(Chunk(cid, *parsed, ""))
    return out


@dataclass
class Relevance:
    """Qrels at the level a chunk run is evaluated at, with the mode that made them.

    mode "span": ``qrels`` are chunk-level (:func:`span_qrels`) and a chunk run is evaluated as is; ``dropped``
    lists the split's queries without evidence, left out. mode "doc": ``qrels`` are the document qrels and a
    chunk run must go through :meth:`prepare` (aggregation to documents). Unpacks as ``qrels, chunk_to_doc``.
    """

    mode: str
    qrels: Qrels
    chunk_to_doc: dict[str, str]
    dropped: list[str] = field(default_factory=list)
    n_split_queries: int = 0
    evidence: tuple[EvidenceSpan, ...] = ()
    doc_qrels: Qrels | None = None
    tiers: tuple[str, ...] | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.qrels, self.chunk_to_doc))

    @property
    def query_ids(self) -> list[str]:
        """The queries to evaluate in this mode."""
        return self.qrels.query_ids

    def prepare(self, run: Run, how: str = "max", k: int | None = None) -> Run:
        """A chunk run made ready for these qrels: aggregated to documents in "doc" mode, unchanged in "span"."""
        return aggregate_to_docs(run, self.chunk_to_doc, how, k) if self.mode == "doc" else run

    def judge(self, run: Run, qrels: Qrels | None = None) -> Qrels:
        """Qrels that also judge the spans a strategy returned that are not chunks of this chunking (a window of
        neighbouring chunks, a parent span): in "span" mode each such span id ``doc@start-end`` is relevant when it
        overlaps an evidence span, with the grades of :func:`span_qrels`, and the relevant chunks a relevant
        returned span overlaps leave the relevant set (it stands for them), so recall and the ideal DCG are not
        held down by chunks the strategy never returns; in "doc" mode the qrels unchanged. Caveat: two returned
        windows over the same evidence each count as relevant.
        ``qrels``: the span qrels to extend (default this relevance's own; e.g. a subset of its queries)."""
        base = qrels if qrels is not None else self.qrels
        if self.mode != "span":
            return base
        extra = {cid for q in run for cid in run.scores[q] if cid not in self.chunk_to_doc}
        if not extra:
            return base
        judged = span_qrels(span_chunks(sorted(extra)), self.evidence, self.doc_qrels, self.tiers)
        merged = {q: dict(rows) for q, rows in base.qrels.items()}
        for q, rows in judged.qrels.items():
            if q not in merged:
                continue
            # the run's relevant spans stand for the chunks they overlap: those chunks leave the relevant set,
            # so recall and ideal DCG count each piece of evidence once, not as a chunk the run never returns
            mine = [c for c in span_chunks(rows) if c.id in run.scores.get(q, {})]
            for cid in [c for c in merged[q] if c in self.chunk_to_doc]:
                doc, s0, e0 = _span_of(cid)
                if any(m.doc_id == doc and m.start < e0 and s0 < m.end for m in mine):
                    del merged[q][cid]
            merged[q].update(rows)
        return Qrels(merged, name=base.name)

    def describe(self) -> dict[str, Any]:
        return {"relevance": self.mode, "queries_evaluated": len(self.qrels),
                "queries_dropped_no_evidence": len(self.dropped), "queries_in_split": self.n_split_queries}


def relevance_for(dataset: Dataset, chunks: Sequence[Chunk], split: str = "test", mode: str = "span",
                  tiers: Iterable[str] | None = None) -> Relevance:
    """Relevance of ``split`` for a chunk run, in ``mode`` "span" or "doc" (see :class:`Relevance`).

    "span" needs evidence spans; a dataset without any raises ConfigError (use mode "doc").
    """
    if mode not in RELEVANCE_MODES:
        raise ConfigError(f"unknown relevance mode {mode!r}; choose one of {', '.join(RELEVANCE_MODES)}")
    _, doc_qrels = dataset.split(split)
    mapping = chunk_to_doc(chunks)
    if mode == "doc":
        return Relevance("doc", doc_qrels, mapping, [], len(doc_qrels))
    if not dataset.evidence:
        raise ConfigError(f"{dataset.path}: no evidence spans, so no span-level relevance; use relevance mode 'doc'")
    qrels = span_qrels(chunks, dataset.evidence, doc_qrels, tiers)
    dropped = [q for q in doc_qrels.query_ids if q not in qrels]
    return Relevance("span", qrels, mapping, dropped, len(doc_qrels), tuple(dataset.evidence), doc_qrels,
                     tuple(tiers) if tiers is not None else None)
