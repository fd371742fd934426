"""What an ingested corpus looks like, measured the same way for any corpus.jsonl (before and after a change).

Printed for a folder holding corpus.jsonl: documents; distinct titles and the most shared ones; documents that
still hold a block (paragraph) found in at least 20% of the documents, and the most frequent such blocks
(boilerplate left in); documents under 50 words; near-duplicate pairs by lab.data.cleanup's rule (a document's
sampled word 5-shingles at least 80% inside another's); ids holding whitespace.

Run: .venv/bin/python benchmarks/ingest_site.py DIR [DIR ...]
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from lab.data import cleanup


def stats(folder: Path) -> dict:
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    titles = Counter(d["title"] for d in docs)
    blocks = Counter()
    for d in docs:
        blocks.update({b for b in d["text"].split("\n\n") if b.strip()})
    common = {b: c for b, c in blocks.items() if c >= max(5, 0.2 * len(docs))}
    return {"documents": len(docs), "distinct_titles": len(titles), "most_shared_titles": titles.most_common(3),
            "documents_with_common_blocks": sum(1 for d in docs if common.keys() & set(d["text"].split("\n\n"))),
            "common_blocks": sorted(common.items(), key=lambda kv: -kv[1])[:3],
            "under_50_words": sum(1 for d in docs if cleanup.word_count(d["text"]) < cleanup.SHORT_WORDS),
            "near_duplicate_pairs": len(cleanup.near_duplicates(docs)),
            "ids_with_whitespace": sum(1 for d in docs if any(ch.isspace() for ch in d["_id"]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path, metavar="DIR")
    ap.add_argument("--smoke", action="store_true", help="the shipped ingested folder data/asymptote (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.dirs = [Path(__file__).resolve().parents[1] / "data" / "asymptote"]
    if not args.dirs:
        ap.error("give one or more ingested folders (DIR), or --smoke")
    for folder in args.dirs:
        print(folder.name)
        for key, value in stats(folder).items():
            print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
