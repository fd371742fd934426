"""Winners confirmed on held-out queries: the ``holdout`` of a sweep spec (or ``lab sweep --holdout``).

Flow (:func:`lab.workbench.sweep.run_sweep` and :func:`lab.workbench.halving.run_halving_sweep` call these)
1. Before any work, :func:`check_holdout`: the fraction lies in (0, 0.9) and leaves at least 5 queries on each side
   of every dataset split the configs name (its qrels file read, ``max_queries`` applied), else one ConfigError line.
2. The split is :func:`lab.data.holdout.holdout_split` seeded by the spec's ``seed`` (0 when it has none); it is
   recorded on the parent run (params ``holdout.fraction``, ``holdout.seed``) and on each child run (tags
   :data:`lab.tracking.results.TAG_HOLDOUT`, ``TAG_HOLDOUT_SEED``), so the child's ``log_result`` logs metrics
   of the dev queries and keeps the held-out queries' per-query table aside. A finished run of the same config
   without the same holdout tags is not reused (:func:`holdout_decisions`).
3. After the configs ran, :func:`record_selection`: the leaderboard of the sweep's runs ranks them on the dev
   queries; the winner's held-out table gives its held-out score and CI (lab.analysis.trust.selection_record),
   recorded on the parent as tag :data:`lab.tracking.results.TAG_SELECTION` (JSON), metrics
   ``holdout.dev_score``, ``holdout.holdout_score``, ``holdout.optimism`` and the artifact ``selection.json``.
"""
from __future__ import annotations

import json
import tempfile
import warnings

import pandas as pd

from lab.analysis.compare import CompareWarning, experiment_leaderboard
from lab.analysis.trust import selection_record
from lab.core.errors import ConfigError
from lab.core.paths import existing_or_repo_path
from lab.data.beir import qrels_files
from lab.data.holdout import holdout_problem
from lab.tracking.results import (
    HOLDOUT_ARTIFACT,
    TAG_HOLDOUT,
    TAG_HOLDOUT_SEED,
    TAG_SELECTION,
)
from lab.tracking.store import artifact_file, load_per_query, log_metrics, set_tags
from lab.workbench.resume import Decision

SELECTION_ARTIFACT = "selection.json"


def split_query_ids(dataset: str, split: str = "test", max_queries: int | None = None) -> list[str]:
    """Query ids of a dataset split from its qrels file (no corpus read), cut to the first ``max_queries`` in
    sorted order as lab.experiment.run.split_queries cuts them."""
    folder = existing_or_repo_path(dataset)
    files = qrels_files(folder)
    if split not in files:
        raise ConfigError(f"{dataset}: no qrels for split {split!r}; available: {sorted(files)}")
    ids: list[str] = []
    seen = set()
    for n, line in enumerate(files[split].read_text(encoding="utf-8").splitlines()):
        q = line.split("\t", 1)[0].strip()
        if not q or (n == 0 and q.lower() in ("query-id", "query_id", "qid")) or q in seen:
            continue
        seen.add(q)
        ids.append(q)
    return sorted(ids)[:max_queries] if max_queries else ids


def check_holdout(fraction, configs: list[dict], seed: int = 0, where: str = "holdout") -> None:
    """ConfigError (one line) when ``fraction`` is not a usable holdout for the configs (module docstring, step 1)."""
    problem = holdout_problem(fraction, where=where)
    if problem:
        raise ConfigError(problem)
    seen = set()
    for c in configs:
        key = (str(c.get("dataset") or ""), str(c.get("split", "test")), c.get("max_queries") or None)
        if key in seen or not key[0]:
            continue
        seen.add(key)
        problem = holdout_problem(fraction, split_query_ids(*key), seed, where=where)
        if problem:
            raise ConfigError(f"{problem} (dataset {key[0]}, split {key[1]})")


def holdout_tags(fraction: float, seed: int) -> dict[str, str]:
    """The child-run tags that make log_result split the queries (module docstring, step 2)."""
    return {TAG_HOLDOUT: repr(float(fraction)), TAG_HOLDOUT_SEED: str(int(seed))}


def holdout_decisions(cl, decisions: list, fraction: float | None, seed: int) -> list:
    """``decisions`` (lab.workbench.resume.Decision) with the reused runs whose holdout tags differ from this
    sweep's (fraction None: runs scored with a holdout) turned into runs to do, with the reason."""
    want = holdout_tags(fraction, seed) if fraction is not None else {}
    out = []
    for d in decisions:
        if d.run_id is not None:
            tags = cl.get_run(d.run_id).data.tags
            had = (tags.get(TAG_HOLDOUT), tags.get(TAG_HOLDOUT_SEED))
            if had != (want.get(TAG_HOLDOUT), want.get(TAG_HOLDOUT_SEED)):
                was = f"holdout {had[0]} (seed {had[1]})" if had[0] else "without a holdout"
                now = f"holdout {fraction:g} (seed {seed})" if fraction is not None else "no holdout"
                d = Decision(None, d.run_id, f"run {d.run_id[:8]} was scored {was}; this sweep has {now}")
        out.append(d)
    return out


def record_selection(cl, parent_run_id: str, experiment: str, run_ids: list[str], metric: str, tracking_root,
                     fraction: float, seed: int) -> dict:
    """Rank the runs on their dev queries, score the winner on its held-out queries and record it on the parent
    (module docstring, step 3). Returns the selection dict."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompareWarning)
        df = experiment_leaderboard(experiment, metric=metric, tracking_root=tracking_root, run_ids=run_ids,
                                    n_resamples=1000)
    if df.empty:
        raise ConfigError(f"holdout: no finished run with {metric} to choose a winner from")
    winner = str(df["run_id"].iloc[0])
    dev = load_per_query(winner, tracking_root, cl)[metric]
    with tempfile.TemporaryDirectory(prefix="lab-holdout-") as tmp:
        held = pd.read_parquet(artifact_file(winner, HOLDOUT_ARTIFACT, tmp, tracking_root, cl))[metric]
    ci = (float(df[f"{metric}_ci_low"].iloc[0]), float(df[f"{metric}_ci_high"].iloc[0]))
    sel = selection_record(metric, winner, dev, held, fraction, seed, dev_ci=ci)
    log_selection(cl, parent_run_id, sel)
    return sel


def log_selection(cl, run_id: str, sel: dict) -> None:
    """Record a selection on a run: tag :data:`TAG_SELECTION`, metrics ``holdout.*``, artifact selection.json."""
    set_tags(run_id, {TAG_SELECTION: json.dumps(sel, sort_keys=True)}, cl=cl)
    log_metrics(run_id, {"holdout.dev_score": sel["dev_score"], "holdout.holdout_score": sel["holdout_score"],
                         "holdout.optimism": sel["optimism"], "holdout.dev_queries": sel["dev_queries"],
                         "holdout.holdout_queries": sel["holdout_queries"]}, cl=cl)
    cl.log_dict(run_id, sel, SELECTION_ARTIFACT)


def selection_line(sel: dict) -> str:
    """One line: the winner's dev and held-out scores and the optimism."""
    lo, hi = sel["holdout_ci"]
    who = sel["winner_run"]
    who = f"run {who[:8]}" if len(who) == 32 else who
    return (f"held-out check: winner {who} {sel['metric']} dev {sel['dev_score']:.4f} "
            f"({sel['dev_queries']} queries), held-out {sel['holdout_score']:.4f} [{lo:.4f}, {hi:.4f}] "
            f"({sel['holdout_queries']} queries); optimism {sel['optimism']:+.4f}")
