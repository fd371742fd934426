"""Prediction-powered leaderboards: a judge's labels on every query, corrected by people's grades on a random subset.

A set may carry judged or generated labels on every query (the qrels the runs were scored on) and human grades
on a uniform random sample of its queries (``lab testset export-annotation --queries N --seed S``, then
``import-annotation``). For each run, each query's metric is recomputed from the run's logged ranked list
(``run.trec``) under both label sets (:func:`lab.metrics.ppi.per_query_under`), and :mod:`lab.metrics.ppi`
estimates the people's mean over every query (PPI++), with its interval.

The object (``lab compare --json`` key ``trust.ppi``), built by :func:`ppi_block`:
``{metric, method, n_human, n_judged, runs: [{run, label, judge_only: {mean}, human_only: {mean, ci},
ppi: {mean, ci, lambda}, judge_bias: {mean, ci}, effective_human_queries}], diffs: [{run, reference,
ppi: {mean, ci, p_value, p_adjusted}}], effective_human_queries, human_queries_needed, target_halfwidth,
human_labels, human_source, warnings}``. Runs are ordered by their PPI mean, best first; ``diffs`` are each run
minus the best by PPI, p-values adjusted by Holm over the comparisons (none with one comparison). ``judge_bias``:
judge minus people on the human-graded queries (mean and its t interval). ``effective_human_queries`` (top level): the
best run's, how many human-graded queries alone would give its PPI interval width. ``human_queries_needed``:
human-graded queries (in all) for a ``target_halfwidth`` on the difference of the top two, by PPI++ and by
people alone (:func:`lab.metrics.ppi.human_queries_needed`). Every ``ci`` is [low, high] at 1 - alpha (95 %).

Human labels come from a qrels file (BEIR tsv or TREC; every query in it counts as graded by people) or from a
set written by ``lab testset import-annotation`` (its provenance names the queries people graded in full), both
given with ``--human-qrels`` (``"human_source": "file"``), or, without it, from the judged set itself when
``import-annotation --record-in`` kept people's grades there (lab.testset.human_sample.record_human_grades;
``"human_source": "provenance"``).
"""
from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab.analysis.labels import short_labels, table_labels
from lab.core.errors import ConfigError
from lab.core.paths import resolve_repo_path
from lab.data.beir import qrels_files
from lab.data.trec import read_qrels, read_trec_run
from lab.data.types import Run
from lab.metrics.ppi import (
    MIN_HUMAN_QUERIES,
    PPI_METHOD,
    effective_human_queries,
    human_mean,
    human_queries_needed,
    judge_mean,
    per_query_under,
    ppi_mean,
    ppi_paired_difference,
)
from lab.metrics.stats import adjust_pvalues
from lab.testset.human_sample import HUMAN_GRADES_KEY, check_grades, recorded_human_grades
from lab.tracking.store import RESULT_ARTIFACT, RUN_ARTIFACT, artifact_file, client

#: Default half-width the top-two difference should reach (``--target-halfwidth``).
TARGET_HALFWIDTH = 0.02


@dataclass(frozen=True)
class HumanLabels:
    """People's grades on a subset of queries: ``qrels`` (qid -> {doc: grade}), where they came from, and how the
    subset was drawn ("uniform" when a seeded uniform sample recorded it, else "unknown"). ``origin``: "file" when
    given with ``--human-qrels``, "provenance" when read from the judged set's own record."""

    qrels: dict[str, dict[str, int]]
    source: str
    sample: str = "unknown"
    seed: int | None = None
    origin: str = "file"


def read_human_labels(path: str | Path, split: str = "test") -> HumanLabels:
    """People's grades from a qrels FILE (BEIR tsv or TREC: every query in it counts as graded) or from a set
    FOLDER written by ``lab testset import-annotation`` (only the queries its provenance lists as graded in full).
    Grades outside 0-3 are a DataError naming file, line and field."""
    p = Path(path)
    if p.is_dir() and (kept := recorded_human_grades(p, split)) is not None:  # a judged set keeping people's grades
        return HumanLabels(kept[0], str(p), str(kept[1].get("sample", "unknown")), kept[1].get("sample_seed"))
    if p.is_dir():
        prov_path = p / "provenance.json"
        prov = json.loads(prov_path.read_text(encoding="utf-8")) if prov_path.is_file() else {}
        info = prov.get(HUMAN_GRADES_KEY)
        if not info:
            raise ConfigError(f"--human-qrels {path}: the folder's provenance.json names no human-graded queries "
                              "(sets from `lab testset import-annotation` do); pass the qrels file instead")
        files = qrels_files(p)
        if split not in files:
            raise ConfigError(f"--human-qrels {path}: no qrels for split {split!r}")
        check_grades(files[split])
        qrels = read_qrels(files[split]).qrels
        graded = [str(q) for q in info.get("graded_queries", [])]
        return HumanLabels({q: dict(qrels[q]) if q in qrels else {} for q in graded}, str(p),
                           str(info.get("sample", "unknown")), info.get("sample_seed"))
    if not p.is_file():
        raise ConfigError(f"--human-qrels {path}: no such file; pass a qrels file (BEIR tsv or TREC) of people's "
                          "grades, or a set written by `lab testset import-annotation`")
    check_grades(p)
    qrels = read_qrels(p).qrels
    return HumanLabels({q: dict(d) for q, d in qrels.items()}, str(p))


def provenance_human_labels(folder: str | Path, split: str = "test") -> HumanLabels | None:
    """People's grades the judged set ``folder`` keeps itself (``import-annotation --record-in``), or None."""
    kept = recorded_human_grades(folder, split)
    if kept is None:
        return None
    return HumanLabels(kept[0], str(folder), str(kept[1].get("sample", "unknown")), kept[1].get("sample_seed"),
                       origin="provenance")


def precheck_human_labels(path: str | Path, split: str = "test") -> HumanLabels:
    """:func:`read_human_labels` plus the count check, before any leaderboard work (the check that each query is
    one of the set's waits for the runs' dataset)."""
    human = read_human_labels(path, split)
    if len(human.qrels) < MIN_HUMAN_QUERIES:
        check_human_subset(human, list(human.qrels))
    return human


def check_human_subset(human: HumanLabels, set_queries: Sequence[str], dataset: str = "the set") -> list[str]:
    """The human-graded query ids in the set's order; ConfigError when fewer than
    :data:`lab.metrics.ppi.MIN_HUMAN_QUERIES`, or when one is not a query of the set."""
    known = set(set_queries)
    for q in human.qrels:
        if q not in known:
            raise ConfigError(f"--human-qrels {human.source}: query {q!r} is not a query of {dataset} "
                              f"({len(known)} queries); grade queries of the set the runs were scored on")
    if len(human.qrels) < MIN_HUMAN_QUERIES:
        raise ConfigError(f"--human-qrels {human.source}: {len(human.qrels)} human-graded queries; at least "
                          f"{MIN_HUMAN_QUERIES} are needed (draw them with `lab testset export-annotation --queries N "
                          "--seed S`)")
    return [q for q in set_queries if q in human.qrels]


def _ci(ci: tuple[float, float]) -> list[float]:
    return [float(ci[0]), float(ci[1])]


def ppi_block(runs: Sequence[tuple[str, str, Run]], judge_qrels: Mapping[str, Mapping[str, int]],
              human: HumanLabels, metric: str = "ndcg@10", alpha: float = 0.05,
              target_halfwidth: float = TARGET_HALFWIDTH, judge: str | None = None,
              set_queries: Sequence[str] | None = None) -> dict:
    """The ``trust.ppi`` object (module docstring) of ``runs`` ((run id, label, ranked lists)) scored on a set
    whose every query carries ``judge_qrels`` and whose queries in ``human`` carry people's grades. ``judge``
    names who made the judge labels (in the warnings)."""
    qids = list(set_queries) if set_queries is not None else list(judge_qrels)
    graded = check_human_subset(human, qids)
    hset = set(graded)
    rest = [q for q in qids if q not in hset]
    if not rest:
        raise ConfigError("--human-qrels: people graded every query of the set; the plain leaderboard is the "
                          "people's, nothing to correct")
    per_run = []
    for rid, label, run in runs:
        y_h = per_query_under(run, human.qrels, metric, graded)
        yhat_h = per_query_under(run, judge_qrels, metric, graded)
        yhat_u = per_query_under(run, judge_qrels, metric, rest)
        per_run.append((rid, label, y_h, yhat_h, yhat_u))
    rows = []
    for rid, label, y_h, yhat_h, yhat_u in per_run:
        est = ppi_mean(y_h, yhat_h, yhat_u, alpha=alpha)
        h = human_mean(y_h, alpha=alpha)
        bias = human_mean(yhat_h - y_h, alpha=alpha)
        rows.append({"run": rid, "label": label,
                     "judge_only": {"mean": judge_mean(np.concatenate([yhat_h, yhat_u]), alpha=alpha).mean},
                     "human_only": {"mean": h.mean, "ci": _ci(h.ci)},
                     "ppi": {"mean": est.mean, "ci": _ci(est.ci), "lambda": est.lam},
                     "judge_bias": {"mean": bias.mean, "ci": _ci(bias.ci)},
                     "effective_human_queries": effective_human_queries(est, y_h, alpha=alpha)})
    order = sorted(range(len(rows)), key=lambda i: -rows[i]["ppi"]["mean"])
    rows = [rows[i] for i in order]
    per_run = [per_run[i] for i in order]
    diffs, pvals = [], []
    best = per_run[0]
    for rid, _, y_h, yhat_h, yhat_u in per_run[1:]:
        est, p = ppi_paired_difference(y_h, best[2], yhat_h, best[3], yhat_u, best[4], alpha=alpha)
        diffs.append({"run": rid, "reference": best[0],
                      "ppi": {"mean": est.mean, "ci": _ci(est.ci), "p_value": p, "p_adjusted": p}})
        pvals.append(p)
    if len(pvals) > 1:
        for d, adj in zip(diffs, adjust_pvalues(pvals, "holm"), strict=True):
            d["ppi"]["p_adjusted"] = float(adj)
    needed = None
    if len(per_run) >= 2:
        second = per_run[1]
        needed = human_queries_needed(best[2] - second[2], best[3] - second[3], best[4] - second[4],
                                      target_halfwidth, alpha=alpha)
    block = {"metric": metric, "method": PPI_METHOD + f"; {100 * (1 - alpha):g}% intervals",
             "n_human": len(graded), "n_judged": len(rest), "runs": rows, "diffs": diffs,
             "effective_human_queries": rows[0]["effective_human_queries"],
             "human_queries_needed": needed, "target_halfwidth": float(target_halfwidth),
             "human_labels": {"source": Path(human.source).name, "sample": human.sample, "seed": human.seed},
             "human_source": human.origin,
             "correction": "holm" if len(pvals) > 1 else "none"}
    block["warnings"] = ppi_warnings(block, judge)
    return block


def ppi_warnings(block: Mapping, judge: str | None = None) -> list[str]:
    """Sentences for the trust warnings: the judge's bias where its interval excludes 0 (the largest named), a
    ranking PPI reverses against the judge's alone, and a human subset not known to be a uniform sample."""
    out = []
    who = judge or "the judge"
    short = dict(zip([r["run"] for r in block["runs"]], short_labels([str(r["label"]) for r in block["runs"]]),
                     strict=True))
    metric = block["metric"]
    biased = [r for r in block["runs"] if r["judge_bias"]["ci"][0] > 0 or r["judge_bias"]["ci"][1] < 0]
    if biased:
        worst = max(biased, key=lambda r: abs(r["judge_bias"]["mean"]))
        lo, hi = worst["judge_bias"]["ci"]
        out.append(f"{who} is biased on {metric}: judge minus people {worst['judge_bias']['mean']:+.4f} "
                   f"[{lo:+.4f}, {hi:+.4f}] on {block['n_human']} human-graded queries for {short[worst['run']]} "
                   f"({len(biased)} of {len(block['runs'])} runs have a bias interval that excludes 0): read the "
                   "PPI column, not the judge's")
    runs = block["runs"]
    flips = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
             if a["judge_only"]["mean"] < b["judge_only"]["mean"]]
    if flips:
        shown = "; ".join(f"{short[a['run']]} ahead of {short[b['run']]}" for a, b in flips[:3])
        out.append(f"PPI reverses the judge-only ranking of {len(flips)} pair(s) of runs on {metric} "
                   f"({shown}{'; ...' if len(flips) > 3 else ''}): the judge's own ranking is not the people's")
    if block.get("human_labels", {}).get("sample") != "uniform":
        out.append("the human-graded queries are not recorded as a uniform random sample: PPI's interval holds only "
                   "if they are (draw them with `lab testset export-annotation --queries N --seed S`)")
    return out


def ppi_lines(block: Mapping) -> list[str]:
    """The PPI block as text lines under a leaderboard (one per run, then the differences and the sample size)."""
    m = block["metric"]
    names = dict(zip([r["run"] for r in block["runs"]], table_labels([str(r["label"]) for r in block["runs"]],
                                                                      width=40), strict=True))
    kept = " (their grades kept in the set)" if block.get("human_source") == "provenance" else ""
    lines = [f"prediction-powered {m} ({block['n_human']} queries graded by people{kept}, {block['n_judged']} judged "
             f"only; {block['method']}); every query of the set counts, one with no relevant document under a "
             "label set scoring 0 (the table above leaves those out):"]
    lines.append(f"  {'run':<40} {'judge only':>10} {'people only [95% CI]':>28} {'PPI [95% CI]':>28} "
                 f"{'judge bias':>10} {'eff. n':>7}")
    for r in block["runs"]:
        h, p = r["human_only"], r["ppi"]
        lines.append(f"  {names[r['run']]:<40} {r['judge_only']['mean']:>10.4f} "
                     f"{h['mean']:>8.4f} [{h['ci'][0]:.4f}, {h['ci'][1]:.4f}]  "
                     f"{p['mean']:>8.4f} [{p['ci'][0]:.4f}, {p['ci'][1]:.4f}]  {r['judge_bias']['mean']:>+10.4f} "
                     f"{r['effective_human_queries']:>7.0f}")
    for d in block["diffs"]:
        p = d["ppi"]
        lines.append(f"  {names[d['run']]} minus the best: {p['mean']:+.4f} [{p['ci'][0]:+.4f}, "
                     f"{p['ci'][1]:+.4f}], p {p['p_value']:.3g}, p adj {p['p_adjusted']:.3g}")
    need = block.get("human_queries_needed")
    if need:
        h = block["target_halfwidth"]
        ppi_n = f"about {need['ppi']}" if need["ppi"] else f"more than the set's {need['n_total']}"
        hum_n = f"about {need['human_only']}" if need["human_only"] else f"more than the set's {need['n_total']}"
        lines.append(f"  human-graded queries for a half-width of {h:g} on the top-two difference: {ppi_n} with PPI, "
                     f"{hum_n} by people alone ({need['n_pilot']} graded so far)")
    return lines


def _dataset_folder(run, tracking_root, cl, override: str | Path | None) -> Path:
    if override:
        return Path(override)
    try:
        with tempfile.TemporaryDirectory(prefix="lab-ppi-") as tmp:
            doc = json.loads(artifact_file(run.info.run_id, RESULT_ARTIFACT, tmp, tracking_root, cl).read_text("utf-8"))
        path = (doc.get("info") or {}).get("dataset_path")
    except Exception:  # noqa: BLE001 - no result artifact: fall back to data/<dataset>
        path = None
    for cand in [path, f"data/{run.data.params.get('dataset', '')}"]:
        if cand:  # as given from the working directory, else under the repository root
            for folder in (Path(cand).expanduser(), resolve_repo_path(cand)):
                if (folder / "qrels").is_dir():
                    return folder
    raise ConfigError(f"run {run.info.run_id[:8]}: its dataset folder is not here; pass --dataset with the set the "
                      "runs were scored on")


def experiment_ppi(df, human_qrels: str | Path | None, tracking_root="mlruns", dataset: str | Path | None = None,
                   alpha: float = 0.05, target_halfwidth: float = TARGET_HALFWIDTH, judge: str | None = None) -> dict:
    """:func:`ppi_block` of the runs of a leaderboard ``df`` (lab.analysis.compare.experiment_leaderboard): each
    run's ``run.trec`` and the qrels of its dataset folder (from its logged result, else data/<dataset>; or
    ``dataset``), people's grades from ``human_qrels`` (:func:`read_human_labels`)."""
    if df.empty:
        raise ConfigError("--human-qrels: no finished runs to correct")
    return runs_ppi(list(df["run_id"]), list(df["label"]), df.attrs.get("metric") or df.columns[1], human_qrels,
                    tracking_root, dataset, alpha, target_halfwidth, judge)


def runs_ppi(run_ids: Sequence[str], labels: Sequence[str], metric: str, human_qrels: str | Path | None,
             tracking_root="mlruns",
             dataset: str | Path | None = None, alpha: float = 0.05, target_halfwidth: float = TARGET_HALFWIDTH,
             judge: str | None = None) -> dict:
    """:func:`ppi_block` of MLflow runs (their ids and labels, best first): see :func:`experiment_ppi`. Without
    ``human_qrels``, people's grades are those the runs' set keeps (:func:`provenance_human_labels`)."""
    if not target_halfwidth > 0:
        raise ConfigError(f"--target-halfwidth {target_halfwidth}: must be > 0, e.g. 0.02")
    cl = client(tracking_root)
    first = cl.get_run(run_ids[0])
    split = first.data.params.get("split", "test")
    logged = [cl.get_run(i) for i in run_ids]
    sets = {(r.data.params.get("dataset", ""), r.data.params.get("split", "test")) for r in logged}
    prints = {r.data.tags.get("dataset_fingerprint") for r in logged} - {None, ""}
    if len(sets) > 1 or len(prints) > 1:  # runs logged before fingerprints were recorded are judged by name
        raise ConfigError(f"--human-qrels: the runs were scored on {max(len(sets), len(prints))} different sets or "
                          "splits (or versions of a set); correct "
                          "the runs of one set at a time (--parent, or an experiment per set)")
    folder = _dataset_folder(first, tracking_root, cl, dataset)
    human = read_human_labels(human_qrels, split) if human_qrels else provenance_human_labels(folder, split)
    if human is None:
        raise ConfigError(f"{folder}: its provenance keeps no human grades; pass --human-qrels FILE, or import the "
                          "annotation sheet with --record-in on this set")
    files = qrels_files(folder)
    if split not in files:
        raise ConfigError(f"{folder}: no qrels for split {split!r}, the split the runs were scored on")
    judge_qrels = {q: dict(d) for q, d in read_qrels(files[split]).qrels.items()}
    check_human_subset(human, list(judge_qrels), str(folder))
    runs = []
    for rid, label in zip(run_ids, labels, strict=True):
        with tempfile.TemporaryDirectory(prefix="lab-ppi-") as tmp:
            runs.append((str(rid), str(label), read_trec_run(artifact_file(rid, RUN_ARTIFACT, tmp, tracking_root, cl))))
    return ppi_block(runs, judge_qrels, human, metric=metric, alpha=alpha, target_halfwidth=target_halfwidth,
                     judge=judge)



def check_ppi_options(human_qrels: str | Path, target_halfwidth: float, split: str = "test") -> HumanLabels:
    """The ``--human-qrels`` / ``--target-halfwidth`` checks that need no runs (ConfigError / DataError: one line,
    exit 2, before any work)."""
    if not target_halfwidth > 0:
        raise ConfigError(f"--target-halfwidth {target_halfwidth}: must be > 0, e.g. 0.02")
    return precheck_human_labels(human_qrels, split)


def check_recorded_ppi(dataset: str | Path | None, target_halfwidth: float = TARGET_HALFWIDTH,
                       split: str = "test") -> HumanLabels | None:
    """People's grades the set ``dataset`` keeps (:func:`provenance_human_labels`), checked like ``--human-qrels``
    (at least 10 queries, the half-width) before any work; None when there is no set or it keeps none."""
    if not dataset or not Path(dataset).is_dir():
        return None
    human = provenance_human_labels(dataset, split)
    if human is not None:
        if not target_halfwidth > 0:
            raise ConfigError(f"--target-halfwidth {target_halfwidth}: must be > 0, e.g. 0.02")
        if len(human.qrels) < MIN_HUMAN_QUERIES:
            check_human_subset(human, list(human.qrels), str(dataset))
    return human


def add_ppi(df, human_qrels: str | Path | None, tracking_root="mlruns", dataset: str | Path | None = None,
            target_halfwidth: float = TARGET_HALFWIDTH) -> dict:
    """Put :func:`experiment_ppi` of the leaderboard ``df`` into its trust object (``trust.ppi``) and its warnings
    into ``trust.warnings``; returns the block."""
    if df.empty:
        raise ConfigError("--human-qrels: no finished runs to correct")
    trust = df.attrs.get("trust") or {}
    block = add_ppi_to_trust(trust, list(df["run_id"]), list(df["label"]), df.attrs.get("metric") or df.columns[1],
                             human_qrels, tracking_root, dataset, target_halfwidth,
                             float(df.attrs.get("alpha") or 0.05))
    df.attrs["trust"] = trust
    return block


def add_ppi_to_trust(trust: dict, run_ids: Sequence[str], labels: Sequence[str], metric: str,
                     human_qrels: str | Path | None, tracking_root="mlruns", dataset: str | Path | None = None,
                     target_halfwidth: float = TARGET_HALFWIDTH, alpha: float = 0.05) -> dict:
    """:func:`runs_ppi` put into a trust object (lab.analysis.trust): ``trust["ppi"]``, its warnings appended to
    ``trust["warnings"]``, the judge named from ``trust["labels"]``. Returns the block."""
    names = trust.get("labels") or {}
    block = runs_ppi(run_ids, labels, metric, human_qrels, tracking_root, dataset, alpha, target_halfwidth,
                     names.get("judge") or names.get("generator"))
    trust["ppi"] = block
    trust["warnings"] = [*(trust.get("warnings") or []), *block["warnings"]]
    return block


def results_ppi(results: Mapping[str, Any], judge_qrels: Mapping[str, Mapping[str, int]],
                human_qrels: str | Path, metric: str = "ndcg@10", split: str = "test", alpha: float = 0.05,
                target_halfwidth: float = TARGET_HALFWIDTH, judge: str | None = None) -> dict:
    """:func:`ppi_block` of in-memory results (name -> lab.experiment.run.Result, as notebook 03 holds them): each
    result's ranked lists (``result.run``) under ``judge_qrels`` (the split's qrels the results were scored on) and
    people's grades from ``human_qrels`` (:func:`read_human_labels`)."""
    human = check_ppi_options(human_qrels, target_halfwidth, split)
    runs = [(name, name, res.run) for name, res in results.items()]
    return ppi_block(runs, {q: dict(d) for q, d in judge_qrels.items()}, human, metric=metric, alpha=alpha,
                     target_halfwidth=target_halfwidth, judge=judge)
