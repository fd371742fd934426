"""The chunker: its params, and one call over a corpus (:func:`chunk_corpus`) that gives :class:`Chunk` objects,
with their prefix (title, markdown heading path); chunks back to a corpus (:func:`chunks_to_corpus`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from lab.core.alloc import gc_paused
from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.data.types import Corpus, Document
from lab.text.chunking.chunks import CHUNKERS, SIZE_UNITS, Chunk, chunk_id
from lab.text.chunking.spans import fixed_spans, recursive_spans
from lab.text.chunking.structure import heading_paths, markdown_headings
from lab.text.chunking.units import shared_tokenizer, tokenizer_name, unit_offsets


@dataclass
class Chunker:
    """Chunking params and the chunking itself; ``describe()`` gives the params to log.

    ``tokenizer``: None (the packaged all-MiniLM-L6-v2's), a Hugging Face name or local path, or a loaded fast
    tokenizer; used only when ``size_unit == "tokens"``.
    """

    chunker: str = "recursive"
    size: int = 256
    overlap: int = 32
    size_unit: str = "tokens"
    tokenizer: object = None
    title_prefix: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        if self.chunker not in CHUNKERS:
            raise ConfigError(f"unknown chunker {self.chunker!r}; choose one of {', '.join(CHUNKERS)}")
        if self.size_unit not in SIZE_UNITS:
            raise ConfigError(f"unknown size_unit {self.size_unit!r}; choose one of {', '.join(SIZE_UNITS)}")
        if not isinstance(self.size, int) or self.size < 1:
            raise ConfigError(f"chunk size must be a positive integer, got {self.size!r}")
        if not isinstance(self.overlap, int) or not 0 <= self.overlap < self.size:
            raise ConfigError(f"overlap must be an integer in [0, size={self.size}), got {self.overlap!r}")

    def describe(self) -> dict[str, Any]:
        """The chunking params, JSON-serialisable, for logging."""
        none = self.chunker == "none"
        return {
            "chunker": self.chunker,
            "chunk_size": None if none else self.size,
            "chunk_overlap": None if none else self.overlap,
            "chunk_unit": None if none else self.size_unit,
            "chunk_tokenizer": tokenizer_name(self.tokenizer) if self.size_unit == "tokens" and not none else None,
            "title_prefix": self.title_prefix,
        }

    def spans(self, text: str, units: np.ndarray | None) -> list[tuple[int, int]]:
        """The chunk spans of one text, given its unit offsets (ignored by the "none" chunker)."""
        if self.chunker == "none" or units is None:
            return [(0, len(text))]
        if self.chunker == "fixed":
            return fixed_spans(text, units, self.size, self.overlap)
        return recursive_spans(text, units, self.size, self.overlap)

    def chunk_documents(self, docs: Sequence[Document], batch_size: int = 512) -> list[Chunk]:
        """Chunks of ``docs``, in document order then by start offset (texts are tokenized in batches)."""
        docs = list(docs)
        backend = shared_tokenizer(self.tokenizer) if self.size_unit == "tokens" and self.chunker != "none" else None
        out: list[Chunk] = []
        batches = range(0, len(docs), batch_size)
        with gc_paused():  # many small acyclic objects (lab.core.alloc)
            for b in progress(batches, desc=f"chunk ({self.chunker}, {self.size} {self.size_unit})",
                              enabled=self.progress and len(docs) > batch_size):
                batch = docs[b:b + batch_size]
                if self.chunker == "none":
                    units: list[Any] = [None] * len(batch)
                else:
                    units = unit_offsets([d.text for d in batch], self.size_unit, backend)
                for doc, u in zip(batch, units, strict=True):
                    out.extend(self._make_chunks(doc, self.spans(doc.text, u)))
        return out

    def _make_chunks(self, doc: Document, spans: list[tuple[int, int]]) -> list[Chunk]:
        prefixes = [""] * len(spans)
        if self.title_prefix:
            headings = markdown_headings(doc.text) if "#" in doc.text else []
            title = doc.title.strip()
            if not headings:  # the same prefix for every chunk: the title line
                prefixes = [title + "\n" if title else ""] * len(spans)
            else:
                for k, path in enumerate(heading_paths(headings, [s for s, _ in spans])):
                    lines = ([title] if title else []) + ([" > ".join(path)] if path else [])
                    prefixes[k] = "".join(line + "\n" for line in lines)
        return [Chunk(chunk_id(doc.id, s, e), doc.id, s, e, prefixes[k] + doc.text[s:e], doc.title, prefixes[k])
                for k, (s, e) in enumerate(spans)]


def chunk_corpus(corpus: Corpus | Iterable[Document], chunker: str = "recursive", size: int = 256, overlap: int = 32,
                 size_unit: str = "tokens", tokenizer: Any = None, title_prefix: bool = True,
                 progress: bool = True) -> list[Chunk]:
    """Chunks of every document of ``corpus`` (see the module docstring for the conventions)."""
    docs = list(corpus)
    return Chunker(chunker, size, overlap, size_unit, tokenizer, title_prefix, progress).chunk_documents(docs)


def describe_chunking(chunker: str = "recursive", size: int = 256, overlap: int = 32, size_unit: str = "tokens",
                      tokenizer: Any = None, title_prefix: bool = True, progress: bool = True) -> dict[str, Any]:
    """The params of :func:`chunk_corpus` as a dict to log (validated the same way; ``progress`` is not logged)."""
    return Chunker(chunker, size, overlap, size_unit, tokenizer, title_prefix).describe()


def chunks_to_corpus(chunks: Iterable[Chunk], name: str = "", source: Corpus | None = None) -> Corpus:
    """A Corpus with one Document per chunk, so any retriever indexes chunks like documents.

    Document id = chunk id; text = chunk text (prefix included); title = "" (the title, when wanted, is already
    in the prefix: a retriever that joins title and text must not get it twice); metadata holds doc_id, start,
    end and the document title. ``source``: the corpus the chunks were cut from, kept as ``Corpus.source`` (BM25
    reads a chunk's tokens off its document's tokens, tokenised once for every chunking of a sweep).
    """
    docs = {}
    with gc_paused():  # one Document and one dict per chunk (lab.core.alloc)
        for c in chunks:
            docs[c.id] = Document(c.id, c.text, "", {"doc_id": c.doc_id, "start": c.start, "end": c.end,
                                                     "title": c.title})
    return Corpus(docs, name=name, source=source)


def chunk_to_doc(chunks: Iterable[Chunk]) -> dict[str, str]:
    """chunk id -> document id."""
    return {c.id: c.doc_id for c in chunks}
