"""One experiment: dataset -> (chunks) -> index -> search -> relevance at the right level -> metrics.

A result is a value (:class:`Result`): the run, the per-query evaluation, latency and the config that
made it. Logging, comparing, reporting and gating read that value; none recomputes it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.core.errors import ConfigError
from lab.data.beir import load_dataset
from lab.data.fingerprint import fingerprint
from lab.data.labels import label_provenance
from lab.data.types import Dataset, Qrels, Queries, Run
from lab.metrics import DEFAULT_METRICS, evaluate, latency_summary
from lab.metrics.ranking import parse_metric
from lab.metrics.tokens import UnitCounter, token_metrics
from lab.retrievers.base import Context, build, check_params
from lab.retrievers.params import COUNT, Param, at_least, check_value, one_of, signature_params
from lab.text.chunking import (
    CHUNKERS,
    SIZE_UNITS,
    aggregate_to_docs,
    chunk_corpus,
    chunks_to_corpus,
    describe_chunking,
    relevance_for,
)


@dataclass
class Result:
    config: dict
    run: Run
    evaluation: "object"  # lab.metrics.Evaluation
    latency: dict
    index_seconds: float
    search_seconds: float
    info: dict = field(default_factory=dict)
    eval_run: Run | None = None  # the run the metrics were computed on (doc-level after aggregation)
    cost: dict = field(default_factory=dict)  # llm_index_* / llm_query_* counters (see cost_summary)

    def summary(self) -> dict:
        """Flat dict: metric means (ndcg@10, ...), latency figures, index and search seconds, LLM cost."""
        out = {k: float(v) for k, v in self.evaluation.means.items()}
        out.update({k: float(v) for k, v in self.latency.items()})
        out["index_seconds"] = float(self.index_seconds)
        out["search_seconds"] = float(self.search_seconds)
        out.update({k: float(v) for k, v in self.cost.items()})
        return out


#: ``seconds``: generation time paid by this run (0 when every answer came from the cache); ``cold_seconds``: what
#: the same answers took when they were generated (cache hits included), i.e. the cost of a cold run. Faults:
#: ``retries`` (attempts made again), ``errors`` (calls that failed for good) and ``retry_wait_seconds`` (backoff
#: sleeps before retries); ``seconds`` and the latencies exclude those sleeps (see lab.models.llm).
COST_KEYS = ("calls", "cache_hits", "generated", "prompt_tokens", "completion_tokens", "seconds", "cold_seconds",
             "retries", "errors", "retry_wait_seconds")


def cost_summary(before: dict, after: dict, phase: str) -> dict[str, float]:
    """The cost of one phase ("index" or "query") from two usage snapshots: ``llm_<phase>_<counter>`` for the
    counters of :data:`COST_KEYS`, plus ``llm_<phase>_tokens`` (prompt + completion tokens of generated answers:
    what was paid; cached answers cost nothing). Empty when the strategy used no LLM."""
    if not after:
        return {}
    diff = {key: float(after.get(key, 0)) - float(before.get(key, 0)) for key in COST_KEYS}
    out = {f"llm_{phase}_{key}": value for key, value in diff.items()}
    out[f"llm_{phase}_tokens"] = diff["prompt_tokens"] + diff["completion_tokens"]
    return out


def check_run_args(strategy: str, params: dict | None = None, *, k=100, max_queries=None, metrics=None,
                   relevance: str = "auto", chunking: dict | None = None) -> None:
    """Check the arguments of :func:`run_experiment` before any work (no dataset read, nothing indexed); raises
    ConfigError with one line naming the argument and what it accepts. Strategy params are checked against the
    strategy's declared params (:func:`lab.retrievers.base.param_problems`); counts must be integers >= 1."""
    for name, value, optional in (("k", k, False), ("max_queries", max_queries, True)):
        if optional and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r}: expected an integer >= 1" + (" (or none: all queries)" if optional
                                                                                else ""))
    if relevance not in ("auto", "doc", "span"):
        raise ConfigError(f"relevance={relevance!r}: expected one of 'auto', 'doc', 'span'")
    problems = chunking_problems(chunking)
    if problems:
        raise ConfigError(problems[0])
    for m in metrics or []:
        try:
            parse_metric(m)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    check_params(strategy, params)


def chunking_problems(chunking) -> list[str]:
    """One line per problem of a ``chunking`` mapping: keys must be params of :func:`lab.text.chunking.chunk_corpus`
    (chunker, size, overlap, size_unit, title_prefix) or ``depth_factor``, values of their types; sizes >= 1,
    overlap >= 0. None (no chunking) has none."""
    if chunking is None:
        return []
    if not isinstance(chunking, dict):
        return [f"chunking={chunking!r}: expected a mapping, e.g. {{chunker: recursive, size: 256}}"]
    declared = signature_params(chunk_corpus, {"chunker": one_of(*CHUNKERS), "size": COUNT, "overlap": at_least(0),
                                                "size_unit": one_of(*SIZE_UNITS)},
                                exclude=("corpus", "tokenizer", "progress"))
    declared["depth_factor"] = Param("depth_factor", int, 3, COUNT)
    out = []
    for key, value in chunking.items():
        if key not in declared:
            out.append(f"chunking: unknown key {key!r}; chunking accepts: {', '.join(sorted(declared))}")
            continue
        expected = check_value(declared[key], value)
        if expected is not None:
            out.append(f"chunking: {key}={value!r} is not valid; {key} takes {expected} "
                       f"(default {declared[key].default!r})")
    return out


def load(dataset: str | Path | Dataset, progress: bool = True) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset

    return load_dataset(dataset, progress=progress)


def split_queries(ds: Dataset, split: str, max_queries: int | None = None) -> tuple[Queries, Qrels]:
    """The queries and qrels of split ``split`` of ``ds``, cut to the first ``max_queries`` query ids in sorted
    order when given (None or 0: all of them). A split the dataset lacks is a ConfigError naming those it has."""
    try:
        queries, qrels = ds.split(split)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    if max_queries:
        keep = sorted(queries)[:max_queries]
        queries, qrels = queries.subset(keep), type(qrels)({q: qrels[q] for q in keep}, name=qrels.name)
    return queries, qrels


def run_experiment(
    dataset: str | Path | Dataset,
    strategy: str,
    params: dict | None = None,
    *,
    split: str = "test",
    k: int = 100,
    chunking: dict | None = None,
    relevance: str = "auto",
    metrics=None,
    ctx: Context | None = None,
    max_queries: int | None = None,
    condensed: bool = False,
) -> Result:
    """Run one strategy on one dataset split and evaluate it.

    chunking: None (index whole documents) or kwargs for :func:`lab.text.chunking.chunk_corpus`
    (chunker, size, overlap, size_unit, title_prefix). relevance: "doc" (chunk hits aggregated to their
    document, best score), "span" (a chunk is relevant when it overlaps an evidence span) or "auto"
    (span when chunking and the dataset has evidence spans, else doc). condensed: score the condensed lists
    (unjudged documents removed first, trec_eval -J; in span mode a chunk counts as judged when it overlaps the
    evidence or its document is in the query's document qrels).

    Span mode adds token-level chunk metrics (lab.metrics.tokens: token_recall@k, token_precision@k,
    token_iou@k, in the chunking's size units) at the cut-offs of the requested metrics, as columns of the
    evaluation beside the ranking metrics.

    The same as ``prepare_experiment(...).result()``.
    """
    return prepare_experiment(dataset, strategy, params, split=split, k=k, chunking=chunking, relevance=relevance,
                              metrics=metrics, ctx=ctx, max_queries=max_queries, condensed=condensed).result()


def prepare_experiment(
    dataset: str | Path | Dataset,
    strategy: str,
    params: dict | None = None,
    *,
    split: str = "test",
    k: int = 100,
    chunking: dict | None = None,
    relevance: str = "auto",
    metrics=None,
    ctx: Context | None = None,
    max_queries: int | None = None,
    condensed: bool = False,
) -> "IndexedExperiment":
    """Chunk, build and index one strategy on one dataset split (the arguments of :func:`run_experiment`);
    :meth:`IndexedExperiment.result` then searches and evaluates all the split's queries or any subset of them."""
    check_run_args(strategy, params, k=k, max_queries=max_queries, metrics=metrics, relevance=relevance,
                   chunking=chunking)
    ctx = ctx or Context()
    ds = load(dataset, progress=ctx.progress)
    queries, qrels = split_queries(ds, split, max_queries)

    units, mode, chunk_info, relevance_info, rel = ds.corpus, "doc", {"chunker": "none"}, {}, None
    search_k = k
    if chunking and chunking.get("chunker", "recursive") != "none":
        chunk_args = {kk: v for kk, v in chunking.items() if kk != "depth_factor"}
        chunks = chunk_corpus(ds.corpus, progress=ctx.progress, **chunk_args)
        units = chunks_to_corpus(chunks, source=ds.corpus)
        chunk_info = {**describe_chunking(**chunk_args), "n_chunks": len(chunks)}
        if relevance == "auto":
            mode = "span" if ds.evidence else "doc"
        else:
            mode = relevance
        rel = relevance_for(ds, chunks, split, mode)
        if mode == "span":
            # only queries with evidence can be judged at chunk level; the rest are reported as dropped
            queries = queries.subset([q for q in queries if q in rel.qrels])
            qrels = Qrels({q: rel.qrels[q] for q in queries}, name=qrels.name)
        else:
            # chunk hits are aggregated to documents: search deeper so k documents remain after aggregation
            search_k = k * int(chunking.get("depth_factor", 3))
        relevance_info = {**rel.describe(), "queries_evaluated": len(queries)}
    elif relevance == "span":
        raise ConfigError("relevance='span' needs chunking (e.g. --set chunking.chunker=recursive)")

    retriever = build(strategy, dict(params or {}), ctx)
    # strategies that tune on judgments (hybrid's weights="tuned") get them with the level they judge at;
    # they must score each query out of fold (see lab.retrievers.fusion_cv); the others ignore them
    retriever.use_qrels(qrels, (lambda r: rel.prepare(r, k=k)) if rel is not None and mode == "doc" else None)
    usage = retriever.usage
    u0 = usage()
    t0 = time.perf_counter()
    retriever.index(units)
    index_seconds = time.perf_counter() - t0
    u1 = usage()
    config = {
        "dataset": ds.name,
        "strategy": strategy,
        "split": split,
        "k": k,
        "params": dict(params or {}),
        "chunking": dict(chunking or {"chunker": "none"}),
        "relevance": mode,
        **({"condensed": True} if condensed else {}),
    }
    return IndexedExperiment(config, ds, split, queries, qrels, units, mode, rel, chunking or {}, chunk_info,
                      relevance_info, retriever, search_k, metrics, condensed, index_seconds,
                      cost_summary(u0, u1, "index"), u1)


@dataclass
class IndexedExperiment:
    """One strategy indexed on one dataset split (:func:`prepare_experiment`), searched on demand.

    :meth:`result` searches the requested queries it has not searched yet (earlier answers are kept), then evaluates
    exactly the requested queries, so nested query slices (successive halving's rungs) pay for one index and for each
    query once. A strategy that fuses a whole query set at once (``weights="tuned"``: cross-validation over the
    queries searched together) searches every requested query again instead, so its result is the one
    ``run_experiment`` gives for those queries. ``search_seconds`` and the query cost count every search made so far.
    ``index_seconds`` counts the index built by :func:`prepare_experiment` plus the work a lazy index (bm25) did
    later for the queries searched so far (see :meth:`_warm`): the index work these queries needed.
    """

    config: dict
    dataset: Dataset
    split: str
    queries: Queries
    qrels: Qrels
    units: object
    mode: str
    rel: object
    chunking: dict
    chunk_info: dict
    relevance_info: dict
    retriever: object
    search_k: int
    metrics: object
    condensed: bool
    index_seconds: float
    index_cost: dict
    usage_after_index: dict
    search_seconds: float = 0.0
    scores: dict = field(default_factory=dict)
    latency: dict = field(default_factory=dict)
    run_name: str = ""
    dataset_fingerprint: str = ""  # computed by the first result(), then reused (see _fingerprint)

    def search(self, query_ids) -> Run:
        """The run over ``query_ids`` (ids of :attr:`queries`), searching those not searched yet."""
        wanted = list(query_ids)
        unknown = [q for q in wanted if q not in self.queries]
        if unknown:
            raise ConfigError(f"{len(unknown)} query ids are not in split {self.split!r} of {self.dataset.name} "
                              f"(first: {unknown[0]!r})")
        set_wise = bool(getattr(self.retriever, "tuned", False))
        todo = wanted if set_wise else [q for q in wanted if q not in self.scores]
        if todo:
            self._warm(todo)
            t0 = time.perf_counter()
            run = self.retriever.search(self.queries.subset(todo), self.search_k)
            self.search_seconds += time.perf_counter() - t0
            self.run_name = run.name
            self.scores.update(run.scores)
            self.latency.update(run.latency)
        return Run({q: self.scores[q] for q in wanted if q in self.scores}, name=self.run_name,
                   latency={q: self.latency[q] for q in wanted if q in self.latency})

    def _warm(self, query_ids: list[str]) -> None:
        """Let a lazily built index (bm25's default backend) compute what these queries will read, before the
        searches are timed; that work is indexing done late, so it is added to :attr:`index_seconds` (the
        retriever's ``lazy_seconds``), not to the search time or the per-query latency."""
        warm = getattr(self.retriever, "warm", None)
        if warm is None:
            return
        before = float(getattr(self.retriever, "lazy_seconds", 0.0))
        warm(self.queries.subset(query_ids))
        self.index_seconds += float(getattr(self.retriever, "lazy_seconds", 0.0)) - before

    def _fingerprint(self) -> str:
        """The dataset's content hash, computed once per loaded dataset: every result of it comes from the dataset
        loaded at :func:`prepare_experiment`, and hashing its files again for each query slice (halving's rungs),
        or for each config of a sweep sharing the loaded dataset, cost more than scoring a slice."""
        if not self.dataset_fingerprint:
            if not self.dataset.fingerprint:
                self.dataset.fingerprint = fingerprint(self.dataset.path)
            self.dataset_fingerprint = self.dataset.fingerprint
        return self.dataset_fingerprint

    def result(self, query_ids=None) -> Result:
        """Search (see :meth:`search`) and evaluate ``query_ids`` (default: all the split's queries)."""
        wanted = None if query_ids is None else set(query_ids)
        qids = [q for q in self.queries if wanted is None or q in wanted]
        run = self.search(qids)
        queries = self.queries.subset(qids)
        qrels = Qrels({q: self.qrels[q] for q in qids if q in self.qrels}, name=self.qrels.name)
        usage = getattr(self.retriever, "usage", dict)
        cost = {**self.index_cost, **cost_summary(self.usage_after_index, usage(), "query")}
        rel, mode, k = self.rel, self.mode, self.config["k"]

        eval_run, eval_qrels = run, qrels
        if rel is not None and mode == "doc":
            eval_run = rel.prepare(run, k=k)
        elif rel is not None:
            eval_qrels = rel.judge(run, qrels)  # spans the strategy returned beyond the chunks (windows) are judged too
        elif any(d not in self.units for q in run for d in run.scores[q]):
            # a strategy over whole documents that returns spans of them (parent's windows): judged as their documents
            eval_run = aggregate_to_docs(run, {d: d for d in self.units.ids}, k=k)

        judged = None
        if rel is not None and mode == "span":
            judged = _span_judged(rel, self.dataset.split(self.split)[1], queries)
        evaluation = evaluate(eval_qrels, eval_run, self.metrics or DEFAULT_METRICS, condensed=self.condensed,
                              judged=judged)
        if rel is not None and mode == "span":
            _add_token_metrics(evaluation, self.dataset, eval_run, queries, self.chunking)
        ds = self.dataset
        relevance_info = dict(self.relevance_info)
        if relevance_info:
            relevance_info["queries_evaluated"] = len(queries)
        info = {
            "dataset": ds.name,
            "dataset_path": str(ds.path),
            "dataset_fingerprint": self._fingerprint(),
            "split": self.split,
            "labels": label_provenance(ds.path, self.split).as_dict(),  # where the labels came from (lab.data.labels)
            "n_queries": len(queries),
            "n_units": len(self.units),
            "relevance_mode": mode,
            "chunking": self.chunk_info,
            **relevance_info,
            "retriever": self.retriever.describe(),
        }
        return Result(dict(self.config), run, evaluation, latency_summary(run.latency), self.index_seconds,
                      self.search_seconds, info, eval_run, cost)


def _span_judged(rel, doc_qrels: Qrels, queries) -> dict[str, set[str]]:
    """Chunks that count as judged per query in span mode: those of documents in the query's document qrels."""
    wanted = {d for q in queries if q in doc_qrels for d in doc_qrels[q]}
    by_doc: dict[str, list[str]] = {}
    for cid, doc in rel.chunk_to_doc.items():
        if doc in wanted:
            by_doc.setdefault(doc, []).append(cid)
    return {q: {c for d in doc_qrels[q] for c in by_doc.get(d, ())} for q in queries if q in doc_qrels}


def _add_token_metrics(evaluation, ds: Dataset, run: Run, queries, chunking: dict) -> None:
    """Token recall / precision / IoU (lab.metrics.tokens) as columns of ``evaluation`` (per query and means)."""
    cutoffs = sorted({parse_metric(m).k for m in evaluation.metrics if parse_metric(m).k})
    if not cutoffs:
        return
    qids = list(evaluation.per_query.index)
    keep = set(qids)
    evidence: dict[str, list[tuple[str, int, int]]] = {}
    for sp in ds.evidence:
        if sp.query_id in keep and sp.doc_id in ds.corpus:
            evidence.setdefault(sp.query_id, []).append((sp.doc_id, sp.start, sp.end))
    # every span is counted in the chunking's units, the evidence's and those of every retrieved chunk
    count = UnitCounter.lazy(lambda d: ds.corpus[d].text if d in ds.corpus else None,
                             chunking.get("size_unit", "tokens"), chunking.get("tokenizer"))
    table = token_metrics(run, evidence, cutoffs, query_ids=qids, count=count).reindex(qids)
    for col in table.columns:
        evaluation.per_query[col] = table[col].to_numpy()
        evaluation.means[col] = float(table[col].mean())
