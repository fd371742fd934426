"""lab.text.chunking.spans: the recursive chunker's word pieces and char classes (numpy) against per-unit Python
reference rules."""
from __future__ import annotations

import random

import numpy as np
import pytest

from lab.text.chunking import strip_span, unit_offsets
from lab.text.chunking.spans import word_pieces
from lab.text.chunking.structure import char_classes, inside_word, is_cjk

ALPHABET = list("abc XYZ 123.,;!?\n\t'’-_éİΣσ中文字ﬁＡ\u0301\u00a0\u2003") + ["word", "e.g.", "  ", "\n\n"]


def _reference(text: str, units: np.ndarray, s: int, e: int, size: int) -> list[tuple[int, int]]:
    """The per-unit loop of word_pieces, the reference the vectorised version is checked against."""
    starts = units[:, 0]
    i0, i1 = int(np.searchsorted(starts, s, "left")), int(np.searchsorted(starts, e, "left"))
    found = [k - i0 for k in range(i0 + 1, i1) if not inside_word(text, int(starts[k]))]
    bounds = [i0] + [i0 + k for k in found] + [i1]
    pieces = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        for c in range(a, b, size):
            d = min(c + size, b)
            pieces.append(strip_span(text, int(units[c, 0]) if c > i0 else s, int(units[d - 1, 1]) if d < i1 else e))
    return [p for p in pieces if p[1] > p[0]]


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 300))) for _ in range(n)]


def test_char_classes_match_the_char_rules():
    for text in _texts(200) + ["plain ascii text.", "\ud800 lone surrogate"]:
        classes = char_classes(text)
        want = [[ch.isalnum() and not is_cjk(ch), ch.isspace()] for ch in text]
        assert classes.tolist() == want


@pytest.mark.parametrize("unit", ["tokens", "words", "chars"])
def test_word_pieces_match_the_per_unit_rules(unit):
    texts = _texts(150, seed=1)
    checked = 0
    for text, units in zip(texts, unit_offsets(texts, unit), strict=True):
        for size in (1, 2, 3, 8, 64):
            for s, e in [(0, len(text)), strip_span(text, len(text) // 3, len(text))]:
                assert word_pieces(text, units, s, e, size) == _reference(text, units, s, e, size)
                checked += 1
    assert checked == 150 * 5 * 2
