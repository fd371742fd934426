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
- Prose only (:func:`not_prose`, cheap checks before any LLM call): a window is split into blocks (blank lines;
  code fences are one block) and each block's words are counted as code (a fenced block, or half its lines
  code-like: indented 4+, ending in ``;`` ``{`` ``}``, a prompt ``$`` / ``>>>``, or dense in ``{}();=<>[]``),
  heading (one line of at most 12 words without a sentence end, or a markdown heading), prose (8+ words, a
  sentence end or 15+ Han characters, 4+ words a line on average: a table of contents or a menu has fewer, and,
  unless it has 15+ Han characters, at least half its tokens plain words: letters only, so a syntax page's
  "Used by: create-trigger-stmt sql-stmt / See also: lang_insert.html" list is not prose) or other (markdown
  link targets are dropped first). A window is skipped as "ids" when 30%+ of its words are ids
  (:func:`looks_like_id`), else when less than a third of its words are prose (it is mostly something else), as
  the largest of "code", "headings" and "boilerplate" (other).
- A unit that is a chunk of a larger document (``metadata.start`` set by lab.testset.io.load_units) ignores
  ``metadata.headings`` (its offsets index the document, not the chunk) and uses the markdown headings of its
  own text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from lab.data.types import Document
from lab.text.chunking import markdown_headings, strip_span

_OFFSET_KEYS = ("start", "offset", "char", "pos", "position", "char_start")
_TITLE_KEYS = ("title", "text", "heading", "name")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？；]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


#: Why a window is not prose (see module conventions).
NOT_PROSE = ("ids", "code", "headings", "boilerplate")
#: An id rather than a word: a requirement or ticket id ("R-04042-24825", "4c86b126f2"), a long number, a hash.
_ID = re.compile(r"(?i)^(?:[a-z]{1,4}-\d{2,}(?:-\d+)*[a-z0-9-]*|(?=[a-f]*\d)[0-9a-f]{8,}|\d{5,}|"
                 r"[0-9a-f]{4,}(?:-[0-9a-f]{4,}){2,})$")
_TOKEN = re.compile(r"[^\s\[\](){}<>,;\"'`]+")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_LINE = re.compile(r"^(?: {4}|\t)|[;{}]\s*$|^\s*(?:\$ |>>> |#include|def |class |import |from \S+ import )")
_SYMBOLS = re.compile(r"[{}();=<>\[\]]")
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")  # a markdown link's target is not code
_ATX = re.compile(r"^\s*#{1,6}\s")
_SENTENCE = re.compile(r"[.!?:](?:\s|$)|[。！？；]")
_PLAIN_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
_EDGE_PUNCT = ".,:;!?\"'`*/|-–—→►▼"


def _plain_share(block: str) -> float:
    """Share of ``block``'s tokens that are plain words (letters only, one apostrophe allowed).

    Identifiers (``sql-stmt``, ``lang_insert.html``, ``sqlite3_open``), numbers and ids are not plain words; a
    "Used by: create-trigger-stmt sql-stmt" line is a list of names, however it is punctuated.
    """
    tokens = [t for t in (tok.strip(_EDGE_PUNCT) for tok in _TOKEN.findall(block)) if t]
    return sum(1 for t in tokens if _PLAIN_WORD.fullmatch(t)) / len(tokens) if tokens else 0.0


def looks_like_id(token: str) -> bool:
    """True for an id, not a word (see :data:`_ID`); surrounding punctuation is ignored."""
    return bool(_ID.match(token.strip(".:;!?#")))


def _blocks(text: str) -> list[tuple[str, bool]]:
    """(block text, inside a code fence) of ``text``: blank-line separated blocks, a fenced block kept whole."""
    out, cur, fenced = [], [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            if cur:
                out.append(("\n".join(cur), fenced))
            cur, fenced = [], not fenced
            continue
        if not line.strip() and not fenced:
            if cur:
                out.append(("\n".join(cur), False))
            cur = []
            continue
        cur.append(line)
    if cur:
        out.append(("\n".join(cur), fenced))
    return out


def _block_kind(block: str, fenced: bool) -> str:
    """code, heading, prose or other (see module conventions)."""
    lines = [ln for ln in block.split("\n") if ln.strip()]
    code_lines = sum(1 for ln in (_LINK_TARGET.sub("]", ln) for ln in lines) if _CODE_LINE.search(ln)
                     or len(_SYMBOLS.findall(ln)) > 0.08 * len(ln))
    if fenced or 2 * code_lines >= len(lines) > 0:
        return "code"
    n = _words(block)
    ends = _SENTENCE.search(block.strip()) is not None
    if len(lines) == 1 and (_ATX.match(lines[0]) or (n <= 12 and not ends)):
        return "heading"
    han = len(_HAN.findall(block))
    if n >= 8 and (ends or han >= 15) and n / len(lines) >= 4 and (han >= 15 or _plain_share(block) >= 0.5):
        return "prose"
    return "other"


def not_prose(text: str) -> str | None:
    """Why the window ``text`` is not prose (one of :data:`NOT_PROSE`), or None when it is (module conventions)."""
    tokens = _TOKEN.findall(_HAN.sub(" ", text))
    if tokens and sum(map(looks_like_id, tokens)) >= 0.3 * len(tokens):
        return "ids"
    words = {"code": 0, "heading": 0, "prose": 0, "other": 0}
    for block, fenced in _blocks(text):
        words[_block_kind(block, fenced)] += _words(block)
    total = sum(words.values())
    if not total or 3 * words["prose"] >= total:
        return None
    kind = max(("code", "heading", "other"), key=lambda k: words[k])
    return {"code": "code", "heading": "headings", "other": "boilerplate"}[kind]


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
