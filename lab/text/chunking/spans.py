"""The chunkers over one document: :func:`fixed_spans` and :func:`recursive_spans` return the spans of its
chunks."""
from __future__ import annotations

import re

import numpy as np

from lab.text.chunking.structure import (
    STRUCTURE,
    char_classes,
    inside_word,
    paragraphs,
    sentences,
    split_at,
    strip_span,
    structure_of,
)

_LINE_BREAK = re.compile(r"\n")


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
    paras = structure_of(paragraphs, text, 0, len(text))
    for (ps, pe), n_para in zip(paras, counts(paras), strict=True):
        if n_para <= size:
            pieces.append((ps, pe))
            new_group.append(False)
            continue
        sents = structure_of(sentences, text, ps, pe)
        for (ss, se), n_sent in zip(sents, counts(sents), strict=True):
            if n_sent <= size:
                pieces.append((ss, se))
                new_group.append(False)
                continue
            sub: list[tuple[int, int]] = []  # lines, then words of a line over size
            lines = split_at(text, ss, se, (m.start() for m in _LINE_BREAK.finditer(text, ss, se)))
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
