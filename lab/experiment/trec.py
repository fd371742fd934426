"""Runs made elsewhere, as TREC run files (trec_eval's format: ``qid Q0 docid rank score tag``), evaluated like
our own strategies: :func:`trec_result`, behind ``lab run --from-trec RUN.trec``.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

from lab.core.errors import DataError
from lab.data.fingerprint import fingerprint
from lab.data.trec import read_trec_run
from lab.data.types import Run
from lab.experiment.run import Result, load, split_queries
from lab.metrics import DEFAULT_METRICS, evaluate, latency_summary


def trec_result(dataset, run_path, *, split: str = "test", k: int = 100, name: str | None = None, metrics=None,
                max_queries: int | None = None, progress: bool = True, condensed: bool = False):
    """A :class:`lab.experiment.run.Result` for a TREC run made elsewhere (Pyserini, Elasticsearch, a vendor),
    evaluated like our own strategies so it is logged, compared and reported beside them.

    Conventions: strategy name ``name`` or ``trec:<file stem>``; only the split's queries are kept (the first
    ``max_queries`` by id when given), each cut to its top ``k`` hits in the Run tie order; a split query the
    run lacks scores 0. Latency, index and search seconds are NaN (not measured here). ``info["retriever"]``
    records the file, its sha256, its tag, the run's queries outside the split and hit ids that match no
    document (first few shown). Bad files raise DataError naming file, line and field (read_trec_run); a run
    sharing no query with the split raises DataError too."""
    path = Path(run_path)
    ds = load(dataset, progress=progress)
    queries, qrels = split_queries(ds, split, max_queries)
    raw = read_trec_run(path)
    strategy = name or f"trec:{path.name.split('.')[0]}"
    scores = {q: dict(raw.ranked(q, k)) for q in queries if q in raw}
    if not scores:
        some = ", ".join(list(raw)[:3])
        raise DataError(path, f"none of its {len(raw)} queries (e.g. {some}) is in split {split!r} of {ds.name}",
                        field="qid", hint="check --dataset and --split; query ids must be those of queries.jsonl")
    unknown = [d for hits in scores.values() for d in hits if d not in ds.corpus]
    run = Run(scores, name=strategy)
    evaluation = evaluate(qrels, run, metrics or DEFAULT_METRICS, condensed=condensed)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    describe = {
        "strategy": strategy, "source": "trec", "run_file": str(path), "run_sha256": digest, "run_tag": raw.name,
        "run_queries": len(raw), "run_queries_outside_split": sum(q not in queries for q in raw),
        "split_queries_without_hits": len(queries) - len(scores), "unknown_ids": len(unknown),
        "unknown_examples": ",".join(list(dict.fromkeys(unknown))[:5]),
    }
    info = {"dataset": ds.name, "dataset_path": str(ds.path), "dataset_fingerprint": fingerprint(ds.path),
            "split": split, "n_queries": len(queries), "n_units": len(ds.corpus), "relevance_mode": "doc",
            "chunking": {"chunker": "none"}, "retriever": describe}
    config = {"dataset": ds.name, "strategy": strategy, "split": split, "k": k,
              "params": {"run_file": path.name}, "chunking": {"chunker": "none"},
              "relevance": "doc", **({"condensed": True} if condensed else {})}
    return Result(config, run, evaluation, latency_summary({}), math.nan, math.nan, info, run)
