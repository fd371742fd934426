"""Successive halving over query slices: stop weak configs of a big sweep early.

Algorithm (Jamieson and Talwalkar, "Non-stochastic best arm identification and hyperparameter optimization",
AISTATS 2016; Li et al., "Hyperband", JMLR 2018), with queries as the budget:
- the split's queries are put in one seeded random order (``numpy.random.default_rng(seed).permutation`` of the
  sorted query ids); rung ``r`` uses the first ``n_r`` of that order, so each slice contains the previous one;
- rung sizes grow by ``eta`` and end at all queries: ``n_last = N``, ``n_r = max(min_queries, N / eta^(R-1-r))``
  with ``R = ceil(log_eta(configs)) + 1`` rungs, so about one config is left for the last rung;
- every surviving config is scored on the rung's slice (mean of ``metric``, higher is better) and the best
  ``ceil(survivors / eta)`` go on (ties: expansion order); the winner is the best config of the last rung.

Cost is counted in query evaluations (config x query): halving's sum over rungs against ``configs x N`` for the
full grid; wall time of both is measured by the caller. Configs run in this process through
:func:`lab.experiment.run.prepare_experiment` (what :func:`~lab.experiment.run.run_experiment`, the sweep notebooks'
call, does first): each config is chunked and indexed once, when it first runs, and kept while it survives; a rung
searches only the queries its slice adds (slices are nested) and scores the config on the whole slice. Every config
is indexed once, as in the full grid; bm25's default index is lazy (lab.retrievers.bm25: term counts at index time,
a term's score column when a query first needs it), so an early rung pays only for its queries' columns, and that
late work is counted in ``index_seconds``. What every config still pays whole, in both, is its chunking and the
tokenisation of its chunks: when those dominate (BM25 over chunks), the wall-time saving stays small.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from lab.analysis.trust import selection_record
from lab.core.cache import clear_memos
from lab.core.errors import ConfigError
from lab.core.flat import varying_keys
from lab.core.paths import resolve_repo_path
from lab.data.holdout import holdout_split
from lab.experiment.run import load, prepare_experiment
from lab.metrics.stats import bootstrap_ci
from lab.retrievers.base import Context
from lab.tracking.lifecycle import tracked_run
from lab.tracking.results import log_result, split_for_holdout
from lab.tracking.store import TAG_ROLE, client, log_metrics, log_params
from lab.workbench.config import expand, label, load_spec
from lab.workbench.selection import check_holdout, log_selection, selection_line
from lab.workbench.sweep_check import validate_sweep


@dataclass
class Rung:
    """One rung: slice size, the configs scored (indexes into the config list), their scores, who went on."""

    n_queries: int
    configs: list[int]
    scores: list[float]
    kept: list[int]
    seconds: float = 0.0


@dataclass
class HalvingReport:
    """Outcome of :func:`successive_halving`."""

    n_configs: int
    n_queries: int
    eta: int
    seed: int
    rungs: list[Rung] = field(default_factory=list)
    winner: int = -1

    @property
    def evaluations(self) -> int:
        """Query evaluations spent: sum over rungs of configs scored x slice size."""
        return sum(len(r.configs) * r.n_queries for r in self.rungs)

    @property
    def full_grid_evaluations(self) -> int:
        return self.n_configs * self.n_queries

    @property
    def saved(self) -> float:
        """Share of the full grid's query evaluations not spent (0..1)."""
        return 1 - self.evaluations / self.full_grid_evaluations

    def to_dict(self) -> dict:
        return {**asdict(self), "evaluations": self.evaluations, "full_grid_evaluations": self.full_grid_evaluations,
                "saved": self.saved}


def rung_sizes(n_queries: int, n_configs: int, eta: int = 2, min_queries: int = 20) -> list[int]:
    """Slice size of each rung (increasing, the last is ``n_queries``); see the module docstring."""
    if eta < 2:
        raise ConfigError(f"halving: eta must be an integer >= 2 (the factor the slice grows by), got {eta}")
    if min_queries < 1 or n_queries < 1 or n_configs < 1:
        raise ConfigError("halving: min_queries, the number of queries and of configs must be >= 1")
    n_rungs = math.ceil(math.log(n_configs, eta) - 1e-9) + 1 if n_configs > 1 else 1
    sizes = [max(min(min_queries, n_queries), int(n_queries / eta ** (n_rungs - 1 - r))) for r in range(n_rungs)]
    out: list[int] = []
    for s in sizes:  # min_queries can make early rungs equal: keep one
        if not out or s > out[-1]:
            out.append(s)
    return out


def query_order(query_ids: Sequence[str], seed: int = 0) -> list[str]:
    """The seeded order slices are cut from (a permutation of the sorted ids)."""
    ids = sorted(query_ids)
    return [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]


def successive_halving(n_configs: int, score: Callable[[int, list[str]], float], query_ids: Sequence[str],
                       eta: int = 2, min_queries: int = 20, seed: int = 0, echo=None) -> HalvingReport:
    """Run successive halving; ``score(config_index, query_ids) -> mean metric`` (higher is better)."""
    order = query_order(query_ids, seed)
    rep = HalvingReport(n_configs=n_configs, n_queries=len(order), eta=int(eta), seed=int(seed))
    alive = list(range(n_configs))
    sizes = rung_sizes(len(order), n_configs, eta, min_queries)
    for i, n in enumerate(sizes):
        t0 = time.perf_counter()
        scores = [float(score(c, order[:n])) for c in alive]
        last = i == len(sizes) - 1
        n_keep = 1 if last else max(1, math.ceil(len(alive) / eta))
        ranked = sorted(range(len(alive)), key=lambda j: (-scores[j], j))
        kept = [alive[j] for j in ranked[:n_keep]]
        rep.rungs.append(Rung(n, list(alive), scores, kept, time.perf_counter() - t0))
        if echo:
            echo(f"rung {i + 1}/{len(sizes)}: {len(alive)} configs on {n} queries, kept {len(kept)} "
                 f"({rep.rungs[-1].seconds:.1f} s)")
        alive = kept
        if hasattr(score, "retain"):
            score.retain(alive)
    rep.winner = alive[0]
    return rep


# ------------------------------------------------------------------------------------------------ sweep specs
class ExperimentScorer:
    """``score(i, query_ids)`` for the configs of a sweep spec: the config's dataset, strategy, params, split, k,
    chunking and relevance, prepared (chunked and indexed) once by :func:`lab.experiment.run.prepare_experiment`
    and kept while the config survives, then searched and scored on ``query_ids`` (each query searched once:
    rungs are nested slices). :meth:`retain` frees the indexes of the configs a rung dropped.
    ``index_seconds`` sums the indexing spent (a lazy index's later work for the queries scored included: see
    :class:`lab.experiment.run.IndexedExperiment`) and ``indexed`` counts the indexes built."""

    def __init__(self, configs: list[dict], metric: str = "ndcg@10", progress: bool = False):
        self.configs, self.metric, self.progress = configs, metric, progress
        self.loaded: dict[str, object] = {}
        self.prepared: dict[int, object] = {}
        self.index_seconds = 0.0
        self.indexed = 0

    def _prepare(self, i: int):
        c = self.configs[i]
        path = str(c.get("dataset") or "")
        if not path:
            raise ConfigError(f"halving: config {i} names no dataset; set `dataset:` in the spec")
        if path not in self.loaded:
            self.loaded[path] = load(resolve_repo_path(path), progress=self.progress)
        ctx = Context(cache_dir=Path(resolve_repo_path(os.environ.get("LAB_CACHE_DIR", ".cache"))),
                      seed=int(c.get("seed", 0) or 0), progress=self.progress)
        exp = prepare_experiment(self.loaded[path], c["strategy"], c.get("params") or {}, split=c.get("split", "test"),
                                 k=int(c.get("k", 100)), chunking=c.get("chunking"),
                                 relevance=c.get("relevance", "auto"), ctx=ctx)
        self.index_seconds += exp.index_seconds
        self.indexed += 1
        return exp

    def __call__(self, i: int, query_ids: list[str]) -> float:
        if i not in self.prepared:
            self.prepared[i] = self._prepare(i)
        exp = self.prepared[i]
        before = exp.index_seconds
        means = exp.result([q for q in query_ids if q in exp.queries]).evaluation.means
        self.index_seconds += exp.index_seconds - before  # a lazy index's work for these queries (bm25)
        return means[self.metric]

    def retain(self, keep: Sequence[int]) -> None:
        """Forget the prepared configs not in ``keep``."""
        for i in set(self.prepared) - set(keep):
            del self.prepared[i]


def experiment_scorer(configs: list[dict], metric: str = "ndcg@10", progress: bool = False) -> ExperimentScorer:
    """``score(i, query_ids)`` for configs of a sweep spec (see :class:`ExperimentScorer`)."""
    return ExperimentScorer(configs, metric, progress)


def run_halving_sweep(spec_path, metric: str = "ndcg@10", eta: int = 2, min_queries: int = 20,
                      compare_full: bool = False, echo=print, tracking_root: str | None = None,
                      holdout: float | None = None) -> dict:
    """Successive halving over the configs of a sweep spec (see the module docstring); with ``compare_full``,
    also the full grid (every config on every query) to say whether the winners match and what was saved.
    With ``tracking_root``, the outcome is logged to the spec's MLflow experiment (:func:`log_halving`); the run
    ids are in the report (``parent_run_id``, ``winner_run_id``). holdout (or the spec's ``holdout`` key): that
    share of the queries is held out (lab.data.holdout, seeded by the spec's seed); halving selects on the dev
    queries only, and the winner is then scored on the held-out ones: ``selection`` in the report
    (lab.analysis.trust.selection_record), recorded on the halving run as lab.workbench.selection records it."""
    echo = echo or (lambda *a, **k: None)
    spec = load_spec(spec_path)
    configs = expand(spec)
    keys = varying_keys(configs)
    labels = [label(c, keys) for c in configs]
    problems = validate_sweep(spec, configs)  # the checks `lab sweep` makes, before any work
    if problems:
        raise ConfigError("\n".join(problems + [f"halving over {spec.path} not started: {len(problems)} problem(s); "
                                                 "fix them and run again"]))
    first = configs[0]
    if not first.get("strategy"):
        raise ConfigError(f"{spec_path}: halving needs a `strategy` in every config (fixed, grid or zip)")
    fraction, seed = (spec.holdout if holdout is None else holdout), int(spec.seed or 0)
    if fraction is not None:
        check_holdout(fraction, configs, seed, "--holdout" if holdout is not None else f"{spec_path}: holdout")
    ds = load(resolve_repo_path(first["dataset"]), progress=False)
    qids = list(ds.qrels[first.get("split", "test")].qrels)
    dev_ids = qids
    if fraction is not None:
        dev_ids = list(holdout_split(qids, fraction, seed).dev)
    warmup = warm_process(configs, metric, sorted(dev_ids)[:5]) if compare_full else None
    score = experiment_scorer(configs, metric)
    t0 = time.perf_counter()
    rep = successive_halving(len(configs), score, dev_ids, eta=eta, min_queries=min_queries,
                             seed=seed, echo=echo)
    out = {"spec": str(spec_path), "metric": metric, "labels": labels, **rep.to_dict(),
           "halving_seconds": time.perf_counter() - t0, "winner_label": labels[rep.winner],
           "indexes_built": score.indexed, "index_seconds": score.index_seconds,
           **({"warmup_seconds": warmup} if warmup is not None else {})}
    echo(f"halving winner: {labels[rep.winner]}  ({rep.evaluations} of {rep.full_grid_evaluations} query "
         f"evaluations, {rep.saved:.0%} saved, {out['halving_seconds']:.1f} s, of which indexing "
         f"{score.index_seconds:.1f} s for {score.indexed} indexes)")
    winner = None
    if fraction is not None:
        winner = score.prepared[rep.winner].result(qids)  # searches the held-out queries now, once, for the winner
        dev, held = split_for_holdout(winner, (fraction, seed))
        out["selection"] = selection_record(metric, labels[rep.winner], dev.evaluation.per_query[metric],
                                            held[metric], fraction, seed)
        out["n_dev_queries"] = len(dev_ids)
        echo(selection_line(out["selection"]))
    if tracking_root is not None:
        if winner is None:  # the last rung searched every query: nothing searched again
            winner = score.prepared[rep.winner].result(qids)
        out["parent_run_id"], out["winner_run_id"] = log_halving(out, winner, spec.experiment, tracking_root,
                                                                 seed=seed, holdout=fraction)
        echo(f"logged to MLflow experiment {spec.experiment!r}: halving run {out['parent_run_id']}, the winner's "
             f"full result as its child {out['winner_run_id']}")
    if compare_full:
        clear_memos()  # the full grid starts as a fresh process would: no tokens nor offsets left by the halving
        t0 = time.perf_counter()
        fresh = experiment_scorer(configs, metric)  # nothing reused from the halving: a fair wall time
        full = [float(fresh(i, qids)) for i in range(len(configs))]
        best = max(range(len(configs)), key=lambda i: (full[i], -i))
        full_seconds = time.perf_counter() - t0
        lo, hi = best_ci(fresh, best, qids, metric, seed)
        out.update(full_scores=full, full_winner=best, full_winner_label=labels[best],
                   full_seconds=full_seconds, full_index_seconds=fresh.index_seconds,
                   winner_matches=best == rep.winner,
                   winner_gap=full[best] - full[rep.winner], full_best_ci=[lo, hi],
                   winner_within_full_ci=bool(lo <= full[rep.winner] <= hi),
                   halving_over_full=out["halving_seconds"] / full_seconds if full_seconds > 0 else None)
        echo(f"full grid winner: {labels[best]} ({metric} {full[best]:.4f}, 95% CI {lo:.4f}-{hi:.4f}; halving's "
             f"winner {full[rep.winner]:.4f}, inside the CI: {out['winner_within_full_ci']}); match: "
             f"{best == rep.winner}; full grid {full_seconds:.1f} s, halving {out['halving_over_full']:.2f}x of it")
    return json.loads(json.dumps(out))


def warm_process(configs: list[dict], metric: str, query_ids: list[str]) -> float:
    """Run every config on a few queries once, untimed, then empty the memos: what only a process's first use of a
    model or runtime pays (imports, a model's first load and compile, the dataset read from disk) is paid before
    either timed pass, so halving (timed first) and the full grid (timed second, in the same process) start alike:
    a warm process, cold memos. Every config, not only the first: a grid over two models (a bi-encoder and a static
    one) would otherwise charge the second model's first load to halving alone. Returns the seconds it took."""
    t0 = time.perf_counter()
    score = experiment_scorer(configs, metric)
    for i in range(len(configs)):
        score(i, query_ids)
    clear_memos()
    return time.perf_counter() - t0


def best_ci(scorer: ExperimentScorer, best: int, query_ids: list[str], metric: str, seed: int = 0
            ) -> tuple[float, float]:
    """The 95% percentile-bootstrap CI (lab.metrics.stats.bootstrap_ci, seeded) of config ``best``'s mean
    ``metric`` over ``query_ids`` (already searched by ``scorer``: nothing is searched again)."""
    exp = scorer.prepared[best]
    per_query = exp.result([q for q in query_ids if q in exp.queries]).evaluation.per_query[metric]
    row = bootstrap_ci(per_query, seed=seed).iloc[0]
    return float(row["ci_low"]), float(row["ci_high"])


def log_halving(report: dict, winner, experiment: str, tracking_root, seed: int = 0,
                holdout: float | None = None) -> tuple[str, str]:
    """Log a halving outcome: a run tagged ``sweep.role=halving`` (params eta, min_queries, metric, the spec;
    metrics evaluations, full_grid_evaluations, saved, halving_seconds, index_seconds; the report as
    ``halving.json``), and the winner's result on every query (a :class:`lab.experiment.run.Result`, logged as
    ``lab run`` logs one) as its child, so ``lab compare`` ranks it beside other runs. Returns both run ids.
    With ``holdout``: the child logs its dev queries' metrics and keeps the held-out table aside
    (lab.tracking.results.log_result), and the report's ``selection`` is recorded on the halving run with the
    child as ``winner_run`` (lab.workbench.selection.log_selection)."""
    cl = client(tracking_root)
    name = f"halving: {Path(report['spec']).stem}"
    with tracked_run(experiment, tracking_root=tracking_root, cl=cl, run_name=name, tags={TAG_ROLE: "halving"},
                     environment=True) as parent:
        log_params(parent.run_id, {"spec": report["spec"], "metric": report["metric"], "eta": report["eta"],
                                   "seed": report["seed"], "configs": report["n_configs"],
                                   "queries": report["n_queries"], "winner": report["winner_label"]}, cl=cl)
        log_metrics(parent.run_id, {k: float(report[k]) for k in ("evaluations", "full_grid_evaluations", "saved",
                                                                  "halving_seconds", "index_seconds",
                                                                  "indexes_built")}, cl=cl)
        cl.log_dict(parent.run_id, report, "halving.json")
        with tracked_run(tracking_root=tracking_root, cl=cl, experiment_id=parent.experiment_id,
                         parent_run_id=parent.run_id,
                         run_name=f"{report['winner_label']} (halving winner)",
                         tags={"halving.winner": "true"}) as child:
            log_result(winner, run_id=child.run_id, tracking_root=tracking_root, seed=seed,
                       holdout=(holdout, seed) if holdout is not None else None)
        if report.get("selection"):
            report["selection"]["winner_run"] = child.run_id
            log_params(parent.run_id, {"holdout.fraction": holdout, "holdout.seed": seed}, cl=cl)
            log_selection(cl, parent.run_id, report["selection"])
    return parent.run_id, child.run_id
