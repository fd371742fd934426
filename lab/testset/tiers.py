"""Difficulty tiers of generated questions: the BM25 rank of each question's source unit (BM25 built once per
generation, :func:`bm25_run`) and how much of the question the evidence holds."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lab.data.types import Corpus, Queries, Run
from lab.retrievers.base import Context, build
from lab.testset.gates import (
    term_coverage,
)

if TYPE_CHECKING:  # the candidate type only; generation imports this module
    from lab.testset.candidates import Candidate



#: Difficulty tiers of a generated question, easiest first (see :func:`difficulty`).
DIFFICULTY = ("easy", "medium", "hard")


def difficulty(bm25_rank: int | None, evidence_overlap: float) -> str:
    """The tier of a question: "hard" when BM25 (the question against every unit) does not rank its source unit
    in the top 10; "easy" when it ranks it in the top 3 and half or more of the question's content terms occur
    in its evidence span; "medium" otherwise."""
    if bm25_rank is None or bm25_rank > 10:
        return "hard"
    return "easy" if bm25_rank <= 3 and evidence_overlap >= 0.5 else "medium"


#: How deep BM25's ranking of a question is read for its tier (a source unit past it has no rank).
TIER_DEPTH = 100


def bm25_run(corpus: Corpus, accepted: list[Candidate], depth: int, cache_dir, seed: int) -> Run | None:
    """BM25's top ``depth`` units for each accepted question (None when none was accepted): built once per
    generation for the tiers and the second pass."""
    if not accepted:
        return None
    bm25 = build("bm25", {}, Context(cache_dir=Path(cache_dir), progress=False, seed=seed))
    bm25.index(corpus)
    return bm25.search_batch(Queries({c.qid: c.qa["question"] for c in accepted}), depth)


def difficulty_tiers(corpus: Corpus, accepted: list[Candidate], tokenizer, cache_dir=".cache", seed: int = 0, *,
                     run: Run | None = None) -> dict[str, dict]:
    """qid -> {"difficulty", "bm25_rank" (1-based, None past :data:`TIER_DEPTH`), "evidence_overlap"} of each
    accepted question; ``run``: BM25's ranking of the questions when the caller has it (:func:`bm25_run`)."""
    if not accepted:
        return {}
    run = run if run is not None else bm25_run(corpus, accepted, TIER_DEPTH, cache_dir, seed)
    assert run is not None  # bm25_run gives a run whenever a question was accepted
    out = {}
    for c in accepted:
        # an accepted candidate has its query id and (gates run with the corpus) its evidence span
        assert c.qid is not None and c.support is not None
        ranked = [did for did, _ in run.ranked(c.qid, TIER_DEPTH)]
        rank = ranked.index(c.unit_id) + 1 if c.unit_id in ranked else None
        text = corpus[c.unit_id].text[c.support.start:c.support.end]
        overlap = term_coverage(c.qa["question"], set(tokenizer(text)), tokenizer)
        out[c.qid] = {"difficulty": difficulty(rank, overlap), "bm25_rank": rank,
                      "evidence_overlap": round(overlap, 4)}
    return out
