"""The order passages are visited in: windows of each document, stratified by section (or document) and shuffled
with the seed, so a run and its resume see the same sequence."""
from __future__ import annotations

import random
import re

from lab.data.types import Corpus, Document
from lab.testset.passages import NOT_PROSE, Passage, not_prose, passage_windows

_HEADING = re.compile(r"^\s*#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def stratum_of(doc: Document, stratify: str) -> str:
    """The stratum of a unit (see module conventions)."""
    meta = doc.metadata or {}
    document = str(meta.get("doc_id", doc.id))
    if stratify == "doc":
        return document
    if stratify == "none":
        return ""
    for key in ("source", "section"):
        if isinstance(meta.get(key), str) and meta[key].strip():
            return meta[key].strip()
    m = _HEADING.search(doc.text)
    return m.group(1) if m else document


def sample_order(corpus: Corpus, seed: int = 0, stratify: str = "section", min_passage_words: int = 0,
                 max_passage_chars: int = 1000, prose_only: bool = False
                 ) -> tuple[list[Passage], int, dict[str, str], dict[str, int]]:
    """(passages in visiting order, windows skipped as too short, passage key -> stratum, windows skipped as not
    prose by reason: lab.testset.passages.not_prose, only with ``prose_only``); see module conventions."""
    rng = random.Random(seed)
    strata: dict[str, list[Passage]] = {}
    skipped = 0
    not_prose_counts = dict.fromkeys(NOT_PROSE, 0) if prose_only else {}
    of: dict[str, str] = {}
    for d in corpus:
        got, dropped = passage_windows(d, max_passage_chars, min_passage_words)
        skipped += dropped
        s = stratum_of(d, stratify)
        for p in got:
            reason = not_prose(p.text) if prose_only else None
            if reason is not None:
                not_prose_counts[reason] += 1
                continue
            of[p.key] = s
            strata.setdefault(s, []).append(p)
    names = sorted(strata)
    rng.shuffle(names)
    for s in names:
        rng.shuffle(strata[s])
    order, depth = [], 0
    while len(order) < len(of):
        for s in names:
            if depth < len(strata[s]):
                order.append(strata[s][depth])
        depth += 1
    return order, skipped, of, not_prose_counts
