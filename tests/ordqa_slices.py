"""Small real test sets cut from data/ord-qa, shared by the test-set tests (annotation sheets, judging)."""
from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def mini_ordqa(folder: Path, n_queries: int = 6, n_other: int = 30) -> Path:
    """The ord-qa passages relevant to its first n_queries questions plus its first n_other passages, with those
    questions and their qrels, written as a BEIR folder at ``folder``."""
    src = REPO / "data" / "ord-qa"
    rows = [r.split("\t") for r in (src / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    keep_q = list(dict.fromkeys(q for q, _, _ in rows))[:n_queries]
    relevant = {d for q, d, _ in rows if q in keep_q}
    docs = [ln for i, ln in enumerate((src / "corpus.jsonl").read_text(encoding="utf-8").splitlines())
            if json.loads(ln)["_id"] in relevant or i < n_other]
    queries = [ln for ln in (src / "queries.jsonl").read_text(encoding="utf-8").splitlines()
               if json.loads(ln)["_id"] in keep_q]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("\n".join(docs) + "\n", encoding="utf-8")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rows if q in keep_q),
        encoding="utf-8")
    return folder
