"""Small-to-big retrieval ("parent"): match small child chunks, return their parent unit or a window of neighbours.

The common answer to the chunk-size dilemma (LlamaIndex's auto-merging / sentence-window retrievers, LangChain's
ParentDocumentRetriever): small chunks match a question sharply, big units carry the context an answer needs.

How it works
- ``index(units)``: every unit it is given (a whole document, or a chunk made by ``run_experiment``'s chunking,
  whose metadata holds ``doc_id``, ``start``, ``end``) is cut into child chunks by :class:`lab.text.chunking.Chunker`
  ("recursive", ``child_size`` units of ``child_unit``, ``child_overlap``); a child's indexed text is the unit's
  prefix (title / heading path) followed by the child's body. The ``base`` strategy (any registered one, built
  through the registry with ``base_params``) indexes the children.
- ``search``: the base retrieves ``depth`` children (at least ``4 * k``); each hit is mapped to what is returned,
  in rank order of the best child, deduplicated:
  - ``mode="parent"``: the parent unit, under its own id (the document, or the chunk of the outer chunking: a
    "section" is the unit of a large outer chunk size), scored by its best child;
  - ``mode="window"``: the child with ``window`` neighbours on each side within the same unit, returned as a span
    id ``doc@start-end`` (document offsets, :func:`lab.text.chunking.chunk_id`), scored by the child. A hit whose child
    is already inside a returned window is skipped (its text is already there), so windows never repeat a centre;
    neighbouring windows may still share text.
- Evaluation: at document level the returned ids map to their document (window spans are parsed), so both modes
  rank documents by their best child; at chunk level ("span" relevance) a returned unit or window is relevant when
  it overlaps an evidence span (:meth:`lab.text.chunking.Relevance.judge`): a bigger unit overlaps evidence more easily,
  so read span-level scores with ``mean_returned_chars`` (mean length of the top 10 returned, the context a
  reader pays for), reported in describe().
- Latency: the base's per-query latency plus the mapping.
"""
from __future__ import annotations

import time

from lab.core.errors import ConfigError
from lab.data.types import Corpus, Document, Queries, Run
from lab.retrievers.base import BaseRetriever, Context, build, register
from lab.retrievers.params import COUNT, at_least, one_of
from lab.text.chunking import SIZE_UNITS, Chunker, chunk_id

MODES = ("parent", "window")


class ParentRetriever(BaseRetriever):
    """Small children searched, parents or windows returned; see the module docstring."""

    name = "parent"

    def __init__(self, ctx: Context | None = None, *, base: str = "bm25", base_params: dict | None = None,
                 mode: str = "parent", window: int = 1, child_size: int = 64, child_overlap: int = 0,
                 child_unit: str = "tokens", depth: int = 200):
        if base == "parent":
            raise ConfigError("parent: base='parent' would nest small-to-big in itself; name a strategy such as bm25")
        super().__init__(ctx, base=base, mode=mode, window=int(window), child_size=int(child_size),
                         child_overlap=int(child_overlap), child_unit=child_unit, depth=int(depth))
        self.mode, self.window, self.depth = mode, int(window), int(depth)
        self.chunker = Chunker("recursive", int(child_size), int(child_overlap), child_unit, None, False, False)
        self.base = build(base, dict(base_params or {}), self.ctx)
        self.base_name = base
        self.n_units: int | None = None  # set by index()
        self.n_children: int | None = None
        # child id -> (unit id, position in its unit); per unit: doc id, [(abs start, abs end)] of its children
        self._child: dict[str, tuple[str, int]] = {}
        self._unit_doc: dict[str, str] = {}
        self._unit_spans: dict[str, list[tuple[int, int]]] = {}
        self._doc_text: dict[str, tuple[int, str]] = {}  # unit id -> (offset of its body in the doc, body)
        self._returned_chars: list[int] = []

    def index(self, corpus: Corpus) -> None:
        units, prefixes, offsets = [], {}, {}
        for unit in corpus:
            meta = unit.metadata or {}
            if {"doc_id", "start", "end"} <= set(meta):
                start, end = int(meta["start"]), int(meta["end"])
                body = unit.text[len(unit.text) - (end - start):] if end > start else ""
                prefix = unit.text[: len(unit.text) - len(body)]
                doc_id = str(meta["doc_id"])
            else:
                start, body, doc_id = 0, unit.text, unit.id
                prefix = unit.title.strip() + "\n" if unit.title.strip() else ""
            units.append(Document(unit.id, body, ""))
            prefixes[unit.id], offsets[unit.id] = prefix, start
            self._unit_doc[unit.id] = doc_id
            self._doc_text[unit.id] = (start, body)
        children = {}
        for c in self.chunker.chunk_documents(units):
            spans = self._unit_spans.setdefault(c.doc_id, [])
            cid = f"{len(self._child)}#{c.doc_id}"
            self._child[cid] = (c.doc_id, len(spans))
            spans.append((offsets[c.doc_id] + c.start, offsets[c.doc_id] + c.end))
            children[cid] = Document(cid, prefixes[c.doc_id] + c.body, "")
        self.n_units, self.n_children = len(units), len(children)
        self.base.index(Corpus(children, name=f"{corpus.name}/children"))

    def _lift(self, hits: list[tuple[str, float]], k: int) -> dict[str, float]:
        out: dict[str, float] = {}
        covered: dict[str, list[tuple[int, int]]] = {}
        for cid, score in hits:
            unit, pos = self._child[cid]
            if self.mode == "parent":
                if unit not in out:
                    out[unit] = float(score)
                    if len(out) <= 10:
                        self._returned_chars.append(len(self._doc_text[unit][1]))
            else:
                spans = self._unit_spans[unit]
                s, e = spans[pos]
                if any(a <= s and e <= b for a, b in covered.get(unit, ())):
                    continue
                lo, hi = spans[max(0, pos - self.window)][0], spans[min(len(spans) - 1, pos + self.window)][1]
                wid = chunk_id(self._unit_doc[unit], lo, hi)
                if wid in out:
                    continue
                out[wid] = float(score)
                covered.setdefault(unit, []).append((lo, hi))
                if len(out) <= 10:
                    self._returned_chars.append(hi - lo)
            if len(out) >= k:
                break
        return out

    def search(self, queries: Queries, k: int = 100) -> Run:
        """The base's children run (timed per query by the base), each query's hits lifted to parents/windows."""
        depth = max(self.depth, 4 * k)
        children = self.base.search(queries, depth)
        scores, latency = {}, {}
        for qid in queries:
            t0 = time.perf_counter()
            scores[qid] = self._lift(children.ranked(qid), k)
            latency[qid] = children.latency.get(qid, 0.0) + time.perf_counter() - t0
        return Run(scores, name=self.name, latency=latency)

    def search_one(self, text: str, k: int) -> list[tuple[str, float]]:
        return self.search(Queries({"q": text}), k).ranked("q")

    def describe(self) -> dict:
        out = {"strategy": self.name, "mode": self.mode, "child_size": self.chunker.size,
               "child_overlap": self.chunker.overlap, "child_unit": self.chunker.size_unit, "depth": self.depth,
               "base": self.base.describe()}
        if self.mode == "window":
            out["window"] = self.window
        if self.n_children is not None:
            out.update({"n_units": self.n_units, "n_children": self.n_children})
        if self._returned_chars:
            out["mean_returned_chars"] = round(sum(self._returned_chars) / len(self._returned_chars), 1)
        return out


@register("parent", params_from=ParentRetriever, rules={
    "mode": one_of(*MODES), "window": at_least(0), "child_size": COUNT, "child_overlap": at_least(0),
    "child_unit": one_of(*SIZE_UNITS), "depth": COUNT}, nested={"base_params": "base"})
def _parent(ctx: Context, **params) -> ParentRetriever:
    return ParentRetriever(ctx, **params)

