"""Typed values of the data layer: Corpus, Queries, Qrels, Run, EvidenceSpan, Dataset.

Conventions
- Ids are strings everywhere (BEIR and TREC ids are read as text, never as numbers).
- Qrels hold integer grades; a document is relevant when grade >= the relevance threshold (1 by default).
- A Run maps query id -> {doc id: score}. Ranking order is score descending, ties broken by doc id
  descending (the trec_eval rule), see :meth:`Run.ranked`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from lab.core.errors import UnknownSplitError


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Corpus:
    """Documents by id. ``source``: for a corpus of chunks (:func:`lab.text.chunking.chunks_to_corpus`), the corpus
    whose documents' texts they are spans of (a retriever may read a chunk's tokens off its document's); else None."""

    docs: dict[str, Document]
    name: str = ""
    source: "Corpus | None" = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.docs)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.docs.values())

    def __getitem__(self, doc_id: str) -> Document:
        return self.docs[doc_id]

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.docs

    @property
    def ids(self) -> list[str]:
        return list(self.docs)


@dataclass
class Queries:
    texts: dict[str, str]
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)

    def __getitem__(self, qid: str) -> str:
        return self.texts[qid]

    def __contains__(self, qid: object) -> bool:
        return qid in self.texts

    def subset(self, ids: Iterable[str]) -> "Queries":
        ids = [i for i in ids if i in self.texts]
        return Queries({i: self.texts[i] for i in ids}, {i: self.metadata[i] for i in ids if i in self.metadata})


@dataclass
class Qrels:
    """query id -> {doc id: integer grade}."""

    qrels: dict[str, dict[str, int]]
    name: str = ""

    def __len__(self) -> int:
        return len(self.qrels)

    def __iter__(self) -> Iterator[str]:
        return iter(self.qrels)

    def __getitem__(self, qid: str) -> dict[str, int]:
        return self.qrels[qid]

    def __contains__(self, qid: object) -> bool:
        return qid in self.qrels

    @property
    def query_ids(self) -> list[str]:
        return list(self.qrels)

    def relevant(self, qid: str, threshold: int = 1) -> set[str]:
        return {d for d, g in self.qrels.get(qid, {}).items() if g >= threshold}


@dataclass
class Run:
    """query id -> {doc id: score}; optional per-query latency in seconds."""

    scores: dict[str, dict[str, float]]
    name: str = "run"
    latency: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.scores)

    def __iter__(self) -> Iterator[str]:
        return iter(self.scores)

    def __getitem__(self, qid: str) -> dict[str, float]:
        return self.scores[qid]

    def __contains__(self, qid: object) -> bool:
        return qid in self.scores

    def ranked(self, qid: str, k: int | None = None) -> list[tuple[str, float]]:
        """Hits of one query in rank order: score descending, ties by doc id descending (trec_eval)."""
        hits = sorted(self.scores.get(qid, {}).items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        return hits if k is None else hits[:k]


@dataclass(frozen=True)
class EvidenceSpan:
    """A character span [start, end) of a document's text that holds the evidence for a query.

    tier: "core", "auxiliary" or "edge" (lab.metrics.ranking.DEFAULT_TIER_WEIGHTS); grade: relevance grade of the span.
    """

    query_id: str
    doc_id: str
    start: int
    end: int
    label: str = ""
    tier: str = "core"
    grade: int = 1


@dataclass
class Dataset:
    """A BEIR-layout dataset folder, loaded: corpus, queries, qrels by split, evidence spans."""

    path: str
    corpus: Corpus
    queries: Queries
    qrels: dict[str, Qrels]
    evidence: list[EvidenceSpan] = field(default_factory=list)
    name: str = ""
    #: the content hash of the folder (lab.data.fingerprint), set by the first experiment result that needs it, so
    #: every config of a sweep that shares this loaded dataset hashes its files once; "" until then
    fingerprint: str = field(default="", compare=False, repr=False)

    def split(self, name: str = "test") -> tuple[Queries, Qrels]:
        """Queries and qrels of one split (only the queries the split's qrels name)."""
        if name not in self.qrels:
            raise UnknownSplitError(f"{self.path}: no qrels for split {name!r}; available: {sorted(self.qrels)}"
                                    " (--split)")
        qrels = self.qrels[name]
        return self.queries.subset(qrels.query_ids), qrels
