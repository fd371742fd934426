"""Token-level chunk metrics: how much of the evidence the top k chunks hold, and how much else they bring.

As in Chroma's chunking evaluation (Smith & Troynikov 2024, "Evaluating Chunking Strategies for Retrieval",
research.trychroma.com/evaluating-chunking), for one query with evidence tokens E (the union of its evidence
spans) and the top k retrieved chunks C_1..C_k:

    token_recall@k    = |E ∩ (C_1 ∪ ... ∪ C_k)| / |E|
    token_precision@k = |E ∩ (C_1 ∪ ... ∪ C_k)| / (|C_1| + ... + |C_k|)
    token_iou@k       = |E ∩ (C_1 ∪ ... ∪ C_k)| / (|C_1| + ... + |C_k| + |E| - |E ∩ (C_1 ∪ ... ∪ C_k)|)

The numerator counts each evidence token once; the chunk sizes in the denominators are summed, so a token that
overlapping chunks both hold counts once per chunk (Chroma's reference code does the same: redundant text sent
to the reader is a cost). Chroma's code takes as many chunks as there are chunks touching the evidence; we use a
fixed cut-off k like every ranking metric.

Conventions
- Spans are character spans ``[start, end)`` of a document's text (chunk spans from the chunk ids
  ``doc@start-end``, evidence from ``evidence.jsonl``); evidence spans of a query that overlap are merged first.
- Tokens: the units of the chunking (``size_unit``: the tokenizer's tokens, words, or characters); a unit is
  counted in a span when it starts inside it (the chunkers' rule).
- A query without evidence spans is not scored (it is out of span-level evaluation). A query with nothing
  retrieved scores 0 on all three; a chunk id without a span (a whole-document unit) counts as the whole document.
"""
from __future__ import annotations

import bisect
import itertools
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from lab.text.chunking import parse_chunk_id, unit_offsets

TOKEN_METRICS = ("token_recall", "token_precision", "token_iou")


def merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping union of half-open spans (touching spans are joined; empty ones dropped)."""
    out: list[list[int]] = []
    for s, e in sorted((s, e) for s, e in spans if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def intersect(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Intersection of two merged span lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


class UnitCounter:
    """Counts units (tokens, words or chars) in character spans of documents, from their unit start offsets."""

    def __init__(self, starts: Mapping[str, Sequence[int] | np.ndarray] | None = None,
                 text_of: Callable[[str], str | None] | None = None, size_unit: str = "chars", tokenizer: Any = None):
        self._given = dict(starts or {})
        self._starts: dict[str, list[int]] = {}  # a document's starts as a list, made when it is first counted
        self._text_of = text_of if size_unit != "chars" else None
        self._unit, self._tokenizer = size_unit, tokenizer

    def __call__(self, doc_id: str, start: int, end: int) -> int:
        st = self._starts.get(doc_id)
        if st is None:
            given = self._given.get(doc_id)
            if given is None and self._text_of is not None:
                text = self._text_of(doc_id)
                if text is not None:
                    given = unit_offsets([text], self._unit, self._tokenizer)[0][:, 0]
            if given is None:  # characters
                return max(0, end - start)
            st = self._starts[doc_id] = np.asarray(given, dtype=np.int64).tolist()
        return bisect.bisect_left(st, end) - bisect.bisect_left(st, start)

    @classmethod
    def for_docs(cls, texts: Mapping[str, str], size_unit: str = "chars", tokenizer: Any = None) -> "UnitCounter":
        """Unit starts of ``texts`` ({doc id: text}) in ``size_unit`` (lab.text.chunking units); chars need nothing."""
        if size_unit == "chars" or not texts:
            return cls()

        ids = list(texts)
        offsets = unit_offsets([texts[d] for d in ids], size_unit, tokenizer)
        return cls({d: off[:, 0] for d, off in zip(ids, offsets, strict=True)})

    @classmethod
    def lazy(cls, text_of: Callable[[str], str | None], size_unit: str = "chars",
             tokenizer: Any = None) -> "UnitCounter":
        """Unit starts of a document found when it is first counted, from its text ``text_of(doc id)`` (None: not a
        document; its spans are counted in characters). Token offsets come from :func:`unit_offsets`, which
        tokenises a text once per process (a chunked corpus already is)."""
        return cls(text_of=text_of, size_unit=size_unit, tokenizer=tokenizer)


def chunk_span(cid: str, doc_lengths: Mapping[str, int] | None = None) -> tuple[str, int, int]:
    """(doc id, start, end) of a chunk id ``doc@start-end``; a plain document id spans the whole document."""
    parsed = parse_chunk_id(cid)
    return parsed if parsed is not None else (cid, 0, int((doc_lengths or {}).get(cid, 0)))


def token_scores(ranked: Sequence[str], evidence: Iterable[tuple[str, int, int]], k: int,
                 count: Callable[[str, int, int], int] | None = None,
                 doc_lengths: Mapping[str, int] | None = None) -> dict[str, float] | None:
    """token_recall / token_precision / token_iou of one query's ranked chunk ids at cut-off ``k``;
    None when the query has no evidence (see the module docstring)."""
    return token_scores_at(ranked, evidence, [k], count, doc_lengths)[0]


def token_scores_at(ranked: Sequence[str], evidence: Iterable[tuple[str, int, int]], ks: Sequence[int],
                    count: Callable[[str, int, int], int] | None = None,
                    doc_lengths: Mapping[str, int] | None = None,
                    seen: dict[str, tuple[tuple[str, int, int], int]] | None = None) -> list[dict[str, float] | None]:
    """:func:`token_scores` at each cut-off of ``ks`` (in that order), the evidence merged and the ranked ids parsed
    once for all of them; every entry None when the query has no evidence. ``seen``: chunk id -> (its span, its
    size), filled and reused across the queries of one run (the same ``count`` and ``doc_lengths``)."""
    count = count or (lambda d, s, e: max(0, e - s))
    ev: dict[str, list[tuple[int, int]]] = {}
    for d, s, e in evidence:
        ev.setdefault(d, []).append((s, e))
    ev = {d: merge(v) for d, v in ev.items()}
    total_e = sum(count(d, s, e) for d, spans in ev.items() for s, e in spans)
    if total_e == 0:
        return [None] * len(ks)
    seen = {} if seen is None else seen
    parsed = []
    for c in ranked[:max(ks, default=0)]:
        got = seen.get(c)
        if got is None:
            span = chunk_span(c, doc_lengths)
            got = seen[c] = (span, count(*span))
        parsed.append(got)
    retrieved_at = [0, *itertools.accumulate(size for _, size in parsed)]  # the sizes of the first k, summed in order
    in_ev = [(i, span) for i, (span, _) in enumerate(parsed) if span[0] in ev]  # chunks of evidence docs, by rank
    out: list[dict[str, float] | None] = []
    for k in ks:
        retrieved = retrieved_at[min(max(k, 0), len(parsed))]
        covered: dict[str, list[tuple[int, int]]] = {}
        for i, (d, s, e) in in_ev:
            if i >= k:
                break
            covered.setdefault(d, []).append((s, e))
        hit = sum(count(d, s, e) for d, spans in covered.items() for s, e in intersect(merge(spans), ev[d]))
        out.append({"token_recall": hit / total_e, "token_precision": hit / retrieved if retrieved else 0.0,
                    "token_iou": hit / (retrieved + total_e - hit) if retrieved + total_e - hit else 0.0})
    return out


def token_metrics(run: Any, evidence: Mapping[str, Iterable[tuple[str, int, int]]], cutoffs: Iterable[int],
                  query_ids: Sequence[str] | None = None, count: Callable[[str, int, int], int] | None = None,
                  doc_lengths: Mapping[str, int] | None = None) -> pd.DataFrame:
    """Per-query token metrics of a chunk run (lab.data.types.Run) at every cut-off, as a DataFrame indexed by
    query id with columns ``token_recall@k``, ``token_precision@k``, ``token_iou@k``; queries without evidence
    are left out. ``evidence``: {qid: [(doc id, start, end), ...]}; ``query_ids`` default: those of ``evidence``."""
    ks = sorted({int(k) for k in cutoffs})
    cols = [f"{m}@{k}" for m in TOKEN_METRICS for k in ks]
    qids = list(evidence) if query_ids is None else list(query_ids)
    rows, index = [], []
    depth = max(ks, default=0)
    seen: dict[str, tuple[tuple[str, int, int], int]] = {}  # chunk id -> (span, size), shared by the queries
    for q in qids:
        spans = list(evidence.get(q, ()))
        ranked = [d for d, _ in run.ranked(q, depth)] if q in run else []
        row = {}
        for k, sc in zip(ks, token_scores_at(ranked, spans, ks, count, doc_lengths, seen), strict=True):
            if sc is None:
                break
            row.update({f"{m}@{k}": sc[m] for m in TOKEN_METRICS})
        if row:
            rows.append(row)
            index.append(q)
    return pd.DataFrame(rows, index=pd.Index(index, name="query_id"), columns=cols, dtype=np.float64)
