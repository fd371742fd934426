"""Corpus-wide clean-up after extraction: site boilerplate, titles, near-duplicates and short documents.

Each step reads the whole set of extracted documents (dicts as in corpus.jsonl), because what makes a block
boilerplate or a title useless is how often it recurs across the folder, not anything in one file.

Conventions
- Blocks are a document's paragraphs: its text split at blank lines. A block's key is its text with every run of
  digits replaced by "#" ("This page last modified on 2022-01-20" and "... 2020-02-10" share one key); a
  heading's key is its exact text ("SQLite Release 3.40.1" is a page's own title, not a template).
- Boilerplate: a block whose key occurs in at least ``share`` (default 0.2) of the HTML documents of the ingest,
  and in at least 5 of them. It is dropped from every HTML document (headings too: a heading that is
  boilerplate leaves the heading list); other formats are left alone.
- Titles: a document keeps its first heading as title unless that heading is generic (a numbered section
  Overview, Introduction, Summary, Syntax, Description, Preface, Abstract, Background, Details or Executive
  Summary, as "1. Overview"; or Contents, Table of Contents, Index, Home, Untitled) or is the first heading of 3
  or more documents; then the HTML ``<title>`` is used when the page has one that no 2 other documents share.
  A document whose first heading was dropped as boilerplate takes its next heading, by the same rule, or its
  ``<title>`` when no heading is left.
- Near-duplicates: word 5-shingles (lower-cased words), hashed (blake2b, 8 bytes); the sketch of a document is
  the shingles whose hash is 0 modulo 8 (Broder's mod-m sample, the same sample in every document, so the
  overlap of two sketches estimates the overlap of the documents). Two documents are near-duplicates when the
  smaller one's sketch (at least 8 shingles) is at least 80% inside the larger one's: the same text in two
  formats, or a page that is also part of a whole manual. Sketch shingles present in more than 50 documents are
  common phrasing, not evidence, and are ignored.
- Dedupe choice: of a near-duplicate pair, the document in the less preferred format is dropped (markdown, rst,
  text, html, docx, pdf: text formats first); between equal formats, the shorter one (its text is inside the
  other), then the later id.
- Words: whitespace-separated tokens of the text; a CJK character counts as one word.
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from typing import Any

#: An ingested document record: ``{"_id", "title", "text", "metadata"}`` (lab.data.ingest).
Record = dict[str, Any]

BOILERPLATE_SHARE = 0.2
BOILERPLATE_MIN_DOCS = 5
SHARED_TITLE_DOCS = 3
SHINGLE = 5
SAMPLE_MOD = 8
MIN_SKETCH = 8
CONTAINMENT = 0.8
COMMON_SHINGLE_DOCS = 50
SHORT_WORDS = 50
FORMAT_PREFERENCE = ("markdown", "rst", "text", "html", "docx", "pdf")

_DIGITS = re.compile(r"\d+")
_GENERIC = re.compile(r"^(?:(?:\d+(?:\.\d+)*\.?|[IVX]+\.)\s+(?:overview|introduction|summary|syntax|description|preface"
                      r"|abstract|background|details|executive summary)|contents|table of contents|index|home"
                      r"|untitled)\.?$", re.I)
_WORD = re.compile(r"\w+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def block_key(block: str, heading: bool = False) -> str:
    return block.strip() if heading else _DIGITS.sub("#", block.strip())


def blocks(doc: Record) -> list[tuple[str, int, bool]]:
    """(block, start offset, is a heading) for each block of ``doc``'s text, in order."""
    starts = {h["start"] for h in doc["metadata"].get("headings") or []}
    out, start = [], 0
    for block in doc["text"].split("\n\n"):
        out.append((block, start, start in starts))
        start += len(block) + 2
    return out


def word_count(text: str) -> int:
    cjk = len(_CJK.findall(text))
    return len(_CJK.sub(" ", text).split()) + cjk


# ------------------------------------------------------------------------------------------------ boilerplate

def boilerplate(docs: list[Record], share: float = BOILERPLATE_SHARE) -> Counter[str]:
    """Block key -> number of HTML documents holding it, for the keys that are boilerplate (module conventions)."""
    html = [d for d in docs if d["metadata"].get("format") == "html"]
    if not share or share <= 0:
        return Counter()
    counts: Counter[str] = Counter()
    for d in html:
        counts.update({block_key(b, heading) for b, _, heading in blocks(d) if b.strip()})
    need = max(BOILERPLATE_MIN_DOCS, share * len(html))
    return Counter({k: c for k, c in counts.items() if c >= need})


def drop_blocks(doc: Record, keys: set[str] | Counter[str]) -> int:
    """Remove the blocks of ``doc`` whose key is in ``keys``, in place: text rebuilt with blank lines between the
    kept blocks, heading offsets moved and dropped headings removed. Returns how many blocks were dropped."""
    headings = doc["metadata"].get("headings", [])
    todo = sorted(headings, key=lambda h: h["start"])
    kept: list[str] = []
    new_headings, dropped, pos = [], 0, 0
    for block, start, heading in blocks(doc):
        end = start + len(block)
        mine = [h for h in todo if h["start"] <= end]
        todo = todo[len(mine):]
        if block.strip() and block_key(block, heading) in keys:
            dropped += 1
        else:
            new_start = pos + 2 if kept else pos
            new_headings += [dict(h, start=h["start"] - start + new_start, end=h["end"] - start + new_start)
                             for h in mine]
            kept.append(block)
            pos = new_start + len(block)
    if dropped:
        doc["text"] = "\n\n".join(kept)
        doc["metadata"]["headings"] = new_headings
    return dropped


# ----------------------------------------------------------------------------------------------------- titles

def retitle(docs: list[Record]) -> int:
    """Apply the title rule of the module conventions in place; returns how many titles changed."""
    first = {d["_id"]: _first_heading(d) for d in docs}
    heading_count = Counter(t for t in first.values() if t)
    page_count = Counter(d["metadata"].get("html_title") for d in docs if d["metadata"].get("html_title"))
    changed = 0
    for d in docs:
        heading, page = first[d["_id"]], d["metadata"].get("html_title")
        title = heading or page or d["title"]
        if heading and (_GENERIC.match(heading) or heading_count[heading] >= SHARED_TITLE_DOCS) \
                and page and page_count[page] < SHARED_TITLE_DOCS:
            title = page
        if title != d["title"]:
            d["title"] = title
            changed += 1
    return changed


def _first_heading(doc: Record) -> str | None:
    headings = doc["metadata"].get("headings") or []
    return headings[0]["title"] if headings else None


# --------------------------------------------------------------------------------------------- near-duplicates

def sketch(text: str) -> set[int]:
    """The mod-``SAMPLE_MOD`` sample of the hashed word 5-shingles of ``text`` (module conventions)."""
    words = [w.lower() for w in _WORD.findall(text)]
    out = set()
    for i in range(max(0, len(words) - SHINGLE + 1)):
        h = int.from_bytes(hashlib.blake2b(" ".join(words[i:i + SHINGLE]).encode(), digest_size=8).digest(), "big")
        if h % SAMPLE_MOD == 0:
            out.add(h)
    return out


def near_duplicates(docs: list[Record]) -> list[Record]:
    """Pairs ``{"a", "b", "containment", "jaccard"}`` (ids; ``a`` the smaller document) of near-duplicates."""
    sketches = {d["_id"]: sketch(d["text"]) for d in docs}
    postings: dict[int, list[str]] = defaultdict(list)
    for did, sk in sketches.items():
        for h in sk:
            postings[h].append(did)
    common = {h for h, ids in postings.items() if len(ids) > COMMON_SHINGLE_DOCS}
    sizes = {did: len(sk - common) for did, sk in sketches.items()}
    shared: Counter[tuple[str, str]] = Counter()
    for h, ids in postings.items():
        if h in common or len(ids) < 2:
            continue
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                shared[(a, b) if a < b else (b, a)] += 1
    pairs: list[Record] = []
    for (a, b), n in shared.items():
        small, large = (a, b) if (sizes[a], a) <= (sizes[b], b) else (b, a)
        if sizes[small] < MIN_SKETCH or n / sizes[small] < CONTAINMENT:
            continue
        pairs.append({"a": small, "b": large, "containment": round(n / sizes[small], 3),
                      "jaccard": round(n / (sizes[a] + sizes[b] - n), 3)})
    return sorted(pairs, key=lambda p: (p["a"], p["b"]))


def dedupe_choice(pairs: list[Record], docs: list[Record]) -> dict[str, str]:
    """Id of each document ``--dedupe`` drops -> the id of the near-duplicate it is dropped for."""
    by_id = {d["_id"]: d for d in docs}
    drop: dict[str, str] = {}
    for p in pairs:
        a, b = by_id[p["a"]], by_id[p["b"]]
        loser, keeper = sorted((a, b), key=_keep_order, reverse=True)
        if keeper["_id"] not in drop:
            drop.setdefault(loser["_id"], keeper["_id"])
    return drop


def _keep_order(doc: Record) -> tuple[int, int, str]:
    fmt = doc["metadata"].get("format")
    rank = FORMAT_PREFERENCE.index(fmt) if fmt in FORMAT_PREFERENCE else len(FORMAT_PREFERENCE)
    return rank, -len(doc["text"]), doc["_id"]
