"""Chunkers, and relevance at the chunk level (span overlap, or aggregation back to documents).

Conventions
- A :class:`Chunk` is a character span ``[start, end)`` of one document's ``Document.text``. Its id is always
  ``f"{doc_id}@{start}-{end}"``, also when the document is a single chunk (``f"{doc_id}@0-{len(text)}"``): the
  id depends only on the span, so the same span gets the same id in every sweep, whatever the size. The document
  id is kept in ``Chunk.doc_id`` (and :func:`doc_id_of` parses it back from an id: the last ``@`` splits).
- ``Chunk.text`` is the text that gets indexed: an optional prefix (title and/or markdown heading path, one per
  line, see ``title_prefix``) followed by the body ``Document.text[start:end]``. The prefix is not counted in the
  offsets nor in the size. ``Chunk.body`` gives the body back.
- Sizes are counted in units of ``size_unit``: "tokens" of a Hugging Face fast tokenizer (no special tokens, no
  truncation; by default the packaged all-MiniLM-L6-v2 tokenizer, i.e. the embedding model's own), "words"
  (whitespace-separated), or "chars" (every character, whitespace included: the sensible unit for Chinese).
  A unit belongs to the chunk where it starts. A chunk holds at most ``size`` units; ``overlap`` units at most
  are shared between neighbours.
- A document of at most ``size`` units is exactly one chunk spanning its whole text (whitespace included). A
  longer document is cut into chunks whose spans are stripped of surrounding whitespace. A document with empty
  text is one chunk ``doc@0-0`` (its prefix keeps the title searchable).
- Chunkers: "none" (one chunk per document); "fixed" (windows of ``size`` units, stride ``size - overlap``, never
  cut inside a word: a cut that would fall between two word pieces or two letters moves back to the word start,
  shrinking the window by half at most); "recursive" (paragraphs, then sentences, then lines, then words: a piece
  is cut into the next level only when it alone is longer than ``size``, and adjacent pieces are merged up to
  ``size``; so a sentence is cut only when it alone is longer than a chunk; the overlap is made of whole trailing
  pieces, so it is at most ``overlap`` units and may be less, or none when the last sentence alone is longer).

Relevance modes (results must name the mode they used):
- "span": a chunk is relevant to a query when ``[start, end)`` overlaps an evidence span of that query in that
  document. Queries of the split without any evidence span are dropped from span-mode evaluation; how many is
  reported by :class:`Relevance` (``dropped``).
- "doc": the document qrels are kept, and the chunk run is aggregated to documents before evaluation
  (:func:`aggregate_to_docs`, best chunk score per document).

The package: :mod:`lab.text.chunking.chunks` (chunks and their ids), :mod:`lab.text.chunking.units` (token,
word and char offsets), :mod:`lab.text.chunking.structure` (paragraphs, sentences, headings),
:mod:`lab.text.chunking.spans` (the chunkers over one document), :mod:`lab.text.chunking.chunker` (one call over a
corpus) and :mod:`lab.text.chunking.relevance` (relevance at the chunk level).
"""
from lab.text.chunking.chunker import Chunker, chunk_corpus, chunk_to_doc, chunks_to_corpus, describe_chunking
from lab.text.chunking.chunks import (
    CHUNKERS,
    RELEVANCE_MODES,
    SIZE_UNITS,
    Chunk,
    chunk_id,
    doc_id_of,
    parse_chunk_id,
)
from lab.text.chunking.relevance import Relevance, aggregate_to_docs, relevance_for, span_qrels
from lab.text.chunking.structure import markdown_headings, paragraphs, sentences, strip_span
from lab.text.chunking.units import unit_offsets

__all__ = ["CHUNKERS", "RELEVANCE_MODES", "SIZE_UNITS", "Chunk", "Chunker", "Relevance", "aggregate_to_docs",
           "chunk_corpus", "chunk_id", "chunk_to_doc", "chunks_to_corpus", "describe_chunking", "doc_id_of",
           "markdown_headings", "paragraphs", "parse_chunk_id", "relevance_for", "sentences", "span_qrels",
           "strip_span", "unit_offsets"]
