"""Passages for question generation: windows over the whole text of each unit, by section when it has headings.

Conventions
- A passage is a character span ``[start, end)`` of a unit's ``text`` (Python code-point offsets, end exclusive,
  the convention of evidence spans); the text the LLM sees is exactly ``text[start:end]`` (:attr:`Passage.text`),
  and the review sheet shows that same string.
- Sections: from ``metadata.headings`` when the unit carries them (what ``lab ingest`` writes: a list of
  headings with their character offsets; each item a mapping with an offset under ``start`` / ``offset`` /
  ``char`` / ``pos`` and a title under ``title`` / ``text``, or a sequence ``[offset, level, title]``), else
  from markdown ATX headings in the text (``# ...`` outside code fences), else the whole text is one section.
  A section runs from its heading to the next heading. Text before the first heading is a section of its own.
- Windows: a section longer than ``max_chars`` is cut into consecutive windows of at most ``max_chars``
  characters, at paragraph breaks when one falls in the window's last half, else at sentence ends, else at a
  space, so no window starts or ends inside a word (CJK text: anywhere). Windows do not overlap and together
  cover the section. A window with fewer than ``min_words`` words (Han characters count one each) is dropped,
  and counted.
- A unit that is a chunk of a larger document (``metadata.start`` set by lab.testset.io.load_units) ignores
  ``metadata.headings`` (its offsets index the document, not the chunk) and uses the markdown headings of its
  own text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from lab.text.chunking import strip_span
from lab.data.types import Document

_OFFSET_KEYS = ("start", "offset", "char", "pos", "position", "char_start")
_TITLE_KEYS = ("title", "text", "heading", "name")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？；]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Passage:
    """A window ``[start, end)`` of unit ``unit_id``'s text, in section ``section`` ("" when it has none)."""

    unit_id: str
    start: int
    end: int
    section: str
    text: str

    @property
    def key(self) -> str:
        return f"{self.unit_id}@{self.start}-{self.end}"


def _heading_item(item: Any) -> tuple[int, str] | None:
    if isinstance(item, Mapping):
        off = next((item[k] for k in _OFFSET_KEYS
                    if isinstance(item.get(k), int) and not isinstance(item.get(k), bool)), None)
        title = next((item[k] for k in _TITLE_KEYS if isinstance(item.get(k), str)), "")
        return (off, title.strip()) if off is not None else None
    if isinstance(item, (list, tuple)) and item and isinstance(item[0], int):
        title = next((x for x in item[1:] if isinstance(x, str)), "")
        return item[0], title.strip()
    return None


def headings(doc: Document) -> list[tuple[int, str]]:
    """(offset, title) of the unit's headings, ascending, within its text (see module conventions)."""
    meta = doc.metadata or {}
    found: list[tuple[int, str]] = []
    raw = meta.get("headings")
    if isinstance(raw, list) and raw and "start" not in meta:
        found = [h for h in map(_heading_item, raw) if h is not None]
    if not found:
        from lab.text.chunking import markdown_headings

        found = [(pos, title) for pos, _, title in markdown_headings(doc.text)]
    n = len(doc.text)
    return sorted({(o, t) for o, t in found if 0 <= o < n})


def sections(doc: Document) -> list[tuple[int, int, str]]:
    """(start, end, heading title) of each section of the unit's text; one section ("") when it has no heading."""
    n = len(doc.text)
    heads = headings(doc)
    if not heads:
        return [(0, n, "")] if n else []
    out = []
    if heads[0][0] > 0:
        out.append((0, heads[0][0], ""))
    for i, (pos, title) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else n
        if end > pos:
            out.append((pos, end, title))
    return out


def _words(text: str) -> int:
    return len(_HAN.findall(text)) + len(re.findall(r"\w+", _HAN.sub(" ", text)))


def _cut(text: str, start: int, limit: int) -> int:
    """End of a window starting at ``start`` that ends at or before ``limit`` (see module conventions)."""
    if limit >= len(text):
        return len(text)
    half = start + (limit - start) // 2
    window = text[half:limit]
    for pattern in (_PARAGRAPH_BREAK, _SENTENCE_END):
        ends = [m.end() for m in pattern.finditer(window)]
        if ends:
            return half + ends[-1]
    space = window.rfind(" ")
    if space >= 0:
        return half + space + 1
    return limit


def passage_windows(doc: Document, max_chars: int = 1000, min_words: int = 0) -> tuple[list[Passage], int]:
    """(the passages of one unit, how many windows were dropped as too short); see module conventions."""
    text = doc.text
    out: list[Passage] = []
    dropped = 0
    for s0, e0, title in sections(doc):
        pos = s0
        while pos < e0:
            end = _cut(text, pos, min(e0, pos + max_chars)) if e0 - pos > max_chars else e0
            if end <= pos:
                end = min(e0, pos + max_chars)
            a, b = strip_span(text, pos, end)
            if b > a:
                if _words(text[a:b]) >= min_words:
                    out.append(Passage(doc.id, a, b, title, text[a:b]))
                else:
                    dropped += 1
            pos = end
    return out, dropped


def corpus_passages(docs: Iterable[Document], max_chars: int = 1000, min_words: int = 0) -> tuple[list[Passage], int]:
    """The passages of every unit, in corpus order, and the number of windows dropped as too short."""
    out, dropped = [], 0
    for d in docs:
        got, n = passage_windows(d, max_chars, min_words)
        out += got
        dropped += n
    return out, dropped
