"""Text structure: paragraphs, sentences, word boundaries and markdown headings, memoised per text
(:data:`STRUCTURE`)."""
from __future__ import annotations

import bisect
import re
from typing import Any, Iterable

import numpy as np

from lab.core.cache import Memo

_WORD = re.compile(r"\S+")
_NEWLINE = re.compile(r"\n")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
# Sentence ends: Chinese 。！？； (no space needed), or English . ! ? followed by whitespace; closing quotes kept.
_SENTENCE_END = re.compile(r"[。！？；]+[”’」』）)\"']*"
                           r"|(?P<mark>[.!?])[.!?]*[\"'”’)\]]*(?=\s+(?P<next>\S)|\s+$)")
_WORD_BEFORE = re.compile(r"[\w.]*$")
_ABBREVIATIONS = frozenset("""e.g i.e al fig figs eq eqs ref refs vs cf ca approx dr mr mrs ms prof no nos vol pp st
                           jr sr inc ltd co corp dept univ resp etc""".split())
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF \
        or 0x20000 <= o <= 0x2FFFF


def inside_word(text: str, pos: int) -> bool:
    """True when a cut at ``pos`` would split a word (two letters or digits of a non-CJK script touch)."""
    if pos <= 0 or pos >= len(text):
        return False
    a, b = text[pos - 1], text[pos]
    return a.isalnum() and b.isalnum() and not is_cjk(a) and not is_cjk(b)


_ASCII_CLASSES = np.array([[chr(i).isalnum(), chr(i).isspace()] for i in range(128)], dtype=bool)


def char_classes(text: str) -> np.ndarray:
    """An (len(text), 2) bool array: column 0, the char is a letter or digit of a non-CJK script (what
    :func:`inside_word` asks of both sides of a cut); column 1, the char is whitespace (``str.isspace``).
    Memoised per text in :data:`STRUCTURE` (it does not depend on the chunking)."""
    key = ("char_classes", text)
    found = STRUCTURE.get_many([key])[0]
    if found is not None:
        return found  # type: ignore[no-any-return]
    if text.isascii():
        out = _ASCII_CLASSES[np.frombuffer(text.encode("ascii"), dtype=np.uint8)]
    else:
        cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        out = np.zeros((len(cp), 2), dtype=bool)
        small = cp < 128
        out[small] = _ASCII_CLASSES[cp[small]]
        big = np.flatnonzero(~small)
        if len(big):
            uniq, inv = np.unique(cp[big], return_inverse=True)
            chars = [chr(c) for c in uniq.tolist()]
            out[big] = np.array([[ch.isalnum() and not is_cjk(ch), ch.isspace()] for ch in chars], dtype=bool)[inv]
    out.flags.writeable = False
    STRUCTURE.put_many([key], [out])
    return out


def strip_span(text: str, s: int, e: int) -> tuple[int, int]:
    """``[s, e)`` without leading and trailing whitespace (empty spans collapse to ``(s, s)``)."""
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def split_at(text: str, s: int, e: int, ends: Iterable[int]) -> list[tuple[int, int]]:
    """``[s, e)`` cut at the positions ``ends``, each piece stripped, empty pieces dropped."""
    out, prev = [], s
    for cut in list(ends) + [e]:
        a, b = strip_span(text, prev, cut)
        if b > a:
            out.append((a, b))
        prev = cut
    return out


def paragraphs(text: str, s: int = 0, e: int | None = None) -> list[tuple[int, int]]:
    """Paragraph spans of ``text[s:e]``: separated by blank lines."""
    e = len(text) if e is None else e
    return split_at(text, s, e, (m.start() for m in _PARAGRAPH_BREAK.finditer(text, s, e)))


def sentences(text: str, s: int = 0, e: int | None = None) -> list[tuple[int, int]]:
    """Sentence spans of ``text[s:e]``.

    A sentence ends after 。！？； (Chinese), or after . ! ? followed by whitespace (English), closing quotes and
    brackets included. An English end is ignored after a known abbreviation (e.g., et al., Fig., vs.), after a
    single letter (initials), or when the next sentence would start with a lower-case letter.
    """
    e = len(text) if e is None else e
    cuts = []
    for m in _SENTENCE_END.finditer(text, s, e):
        mark = m.group("mark")
        if mark:
            nxt = m.group("next")
            if nxt and nxt.islower():
                continue
            if mark == ".":
                before = _WORD_BEFORE.search(text, max(s, m.start() - 12), m.start())
                word = before.group() if before else ""  # the pattern matches the empty string too
                if word.lower().rstrip(".") in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                    continue
        cuts.append(m.end())
    return split_at(text, s, e, cuts)


def markdown_headings(text: str) -> list[tuple[int, int, str]]:
    """(position, level, title) of each markdown ATX heading (``# ...``) outside fenced code blocks."""
    fences = [m.start() for m in _FENCE.finditer(text)]
    out = []
    for m in _HEADING.finditer(text):
        if bisect.bisect_left(fences, m.start()) % 2 == 1:  # an odd number of fences before: inside code
            continue
        out.append((m.start(), len(m.group(1)), m.group(2).strip()))
    return out


def heading_paths(headings: list[tuple[int, int, str]], starts: list[int]) -> list[list[str]]:
    """For each start position (ascending), the heading path in force just before it."""
    paths: list[list[str]] = []
    stack: list[tuple[int, str]] = []
    h = 0
    for pos in starts:
        while h < len(headings) and headings[h][0] < pos:
            _, level, title = headings[h]
            stack = [x for x in stack if x[0] < level] + [(level, title)]
            h += 1
        paths.append([t for _, t in stack])
    return paths


#: Paragraph and sentence spans of the texts :func:`recursive_spans` has cut in this process, keyed by (function
#: name, text, start, end), and where a line may be cut into words (keyed by the text, the line and its units'
#: starts): none depends on the size, so the configs of a chunk-size grid find them once.
STRUCTURE = Memo(max_items=200_000)


def structure_of(fn: Any, text: str, s: int, e: int) -> list[tuple[int, int]]:
    """``fn(text, s, e)`` (:func:`paragraphs` or :func:`sentences`), memoised in :data:`STRUCTURE`."""
    key = (fn.__name__, text, s, e)
    found = STRUCTURE.get_many([key])[0]
    if found is None:
        found = tuple(fn(text, s, e))
        STRUCTURE.put_many([key], [found])
    return list(found)
