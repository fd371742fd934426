"""How far to trust a leaderboard: where its labels came from, what its query set can detect, and whether its
winner held up on queries it was not chosen on. ``lab compare`` (JSON key ``trust``, and lines above the table),
``lab report``, notebook 03 and ``lab demo`` show the same object, built by :func:`trust_block`.

Keys of the trust object
- ``n_queries``: every query the ranked runs were scored on (the union of their per-query tables), plus the
  held-out queries when a holdout was set (``selection``).
- ``labels``: ``{source, generator, judge, judge_check}`` (lab.data.labels), plus ``graders`` (two graders'
  agreement, "2 graders, kappa 0.71 [0.62, 0.79] on 180 pairs") when the labels have it: one provenance when
  every run logged the same, else source "mixed" and a warning. Runs logged before labels were recorded get the
  provenance read from their dataset folder now (``labels_note`` says so), or source "unknown" when that folder is gone.
- ``min_detectable_diff``: the smallest true paired difference in the ranked metric the query set detects with
  power 0.8 at alpha 0.05 (lab.metrics.stats.min_detectable_diff; ``method`` names the formula), sd(d) being the
  median, over the runs tested against the best, of the standard deviation of their per-query differences
  against the best; None with fewer than two comparable runs.
- ``queries_needed``: queries a paired test needs to detect the observed gap between the top two
  (lab.metrics.stats.queries_to_detect, same spread); None when the two already differ significantly, when
  their means are equal, or when there is no second run (``queries_needed_note`` says which).
- ``judged_at_10``: mean judged@10 over the ranked runs (None when none logged it).
- ``warnings``: plain sentences (:func:`trust_warnings`): labels written or judged by a model whose card is missing
  or below the floor (lab.data.labels.MIN_KAPPA); fewer queries than the top gap needs; judged@10 under
  :data:`MIN_JUDGED` on judged labels; a winner whose held-out score fell outside its dev CI (below: its lead was
  partly chosen by the dev queries; above: the two query sets differ); runs on labels of
  different provenance.
- ``selection``: None, or the held-out confirmation of a sweep's winner (:func:`selection_record`): ``{metric,
  dev_queries, holdout_queries, winner_run, dev_score, dev_ci, holdout_score, holdout_ci, optimism, fraction,
  seed}``, optimism = dev score minus held-out score.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lab.analysis.leaderboard import leaderboard
from lab.data.labels import MIN_KAPPA, LabelProvenance
from lab.metrics.stats import (
    POWER_METHOD,
    bootstrap_ci,
    min_detectable_diff,
    queries_to_detect,
)
from lab.models.llm import default_llm_hint

#: judged@10 below this on judged labels is warned about: most of the top 10 was never judged.
MIN_JUDGED = 0.5
ALPHA = 0.05
POWER = 0.8
_WORDS = {2: "two", 3: "three", 4: "four", 5: "five"}


def combine_labels(provenances: Sequence[LabelProvenance | None]) -> tuple[dict, list[str]]:
    """(trust ``labels`` dict, warnings) for the runs' label provenances (None: unknown)."""
    known = [p for p in provenances if p is not None]
    if not known:
        return {"source": "unknown", "generator": None, "judge": None, "judge_check": None}, []
    distinct = list(dict.fromkeys(known))
    if len(distinct) == 1:
        return {**distinct[0].short(), **({"graders": distinct[0].graders} if distinct[0].graders else {})}, []

    def join(field):
        vals = sorted({str(getattr(p, field)) for p in distinct if getattr(p, field)})
        return "; ".join(vals) or None

    sources = sorted({p.source for p in distinct})
    labels = {"source": "mixed", "generator": join("generator"), "judge": join("judge"),
              "judge_check": join("judge_check")}
    return labels, [f"the runs were scored on labels of different provenance ({', '.join(sources)}): their scores "
                    "are not comparable"]


def label_warnings(provs: Sequence[LabelProvenance]) -> list[str]:
    """Sentences about labels made by a model: generated labels (no card measures a generator against people),
    judged labels whose judge has no card or a kappa below :data:`lab.data.labels.MIN_KAPPA`."""
    out = []
    for p in dict.fromkeys(provs):
        if p.generator == "query logs":
            out.append("labels come from query logs (what users clicked), not relevance judgements: unclicked "
                       "relevant passages count as misses")
        elif p.generator:
            review = f"; {p.reviewed}" if p.reviewed else "; no person reviewed them"
            out.append(f"questions and labels were written by a model ({p.generator}), and no card measures it "
                       f"against people{review}: read the ranking as indicative{default_llm_hint(p.generator)}")
        if p.judge and p.judge_check is None:
            out.append(f"labels judged by {p.judge} with no judge card: the judge was never checked on known labels "
                       "(run `lab testset judge-check`)")
        elif p.judge and p.judge_kappa is not None and p.judge_kappa < MIN_KAPPA:
            out.append(f"labels judged by {p.judge}, whose card is below the floor (kappa {MIN_KAPPA}): "
                       f"{p.judge_check}{default_llm_hint(p.judge)}")
    return out


def power_figures(df: pd.DataFrame, scores: Mapping[str, pd.Series | None], metric: str, alpha: float = ALPHA,
                  power: float = POWER) -> tuple[float | None, int | None]:
    """(min_detectable_diff, queries_needed) of a leaderboard (module docstring); ``scores``: run id -> per-query
    values of ``metric``."""
    if len(df) < 2:
        return None, None
    best = scores.get(df["run_id"].iloc[0])
    if best is None or len(best) < 2:
        return None, None
    diffs = {}
    for rid in df["run_id"].iloc[1:]:
        s = scores.get(rid)
        if s is not None and set(s.index) == set(best.index):
            diffs[rid] = (s.loc[best.index] - best).to_numpy(dtype=np.float64)
    if not diffs:
        return None, None
    # the same n for every run: the median of the runs' figures is the figure of the median sd(d)
    mdd = float(np.median([min_detectable_diff(d, alpha, power) for d in diffs.values()]))
    runner = df["run_id"].iloc[1]
    needed = None
    if runner in diffs and not bool(df["significant"].iloc[1]):
        needed = queries_to_detect(diffs[runner], float(np.mean(diffs[runner])), alpha, power)
    return mdd, needed


def selection_record(metric: str, winner_run: str, dev_values: pd.Series, holdout_values: pd.Series,
                     fraction: float, seed: int, dev_ci: tuple[float, float] | None = None,
                     n_resamples: int = 1000) -> dict:
    """``trust.selection`` for a winner chosen on ``dev_values`` and scored on ``holdout_values`` (per-query values
    of ``metric``): scores are means, CIs lab.metrics.stats.bootstrap_ci (seeded by ``seed``); optimism = dev
    minus held-out."""
    dev = pd.to_numeric(pd.Series(dev_values), errors="coerce").dropna()
    held = pd.to_numeric(pd.Series(holdout_values), errors="coerce").dropna()
    if dev_ci is None:
        ci = bootstrap_ci(dev, n_resamples=n_resamples, seed=seed).iloc[0]
        dev_ci = (float(ci.ci_low), float(ci.ci_high))
    hci = bootstrap_ci(held, n_resamples=n_resamples, seed=seed).iloc[0]
    dev_score, hold_score = float(dev.mean()), float(held.mean())
    return {"metric": metric, "dev_queries": len(dev), "holdout_queries": len(held),
            "winner_run": winner_run, "dev_score": dev_score, "dev_ci": [float(dev_ci[0]), float(dev_ci[1])],
            "holdout_score": hold_score, "holdout_ci": [float(hci.ci_low), float(hci.ci_high)],
            "optimism": dev_score - hold_score, "fraction": float(fraction), "seed": int(seed)}


def trust_warnings(trust: Mapping, df: pd.DataFrame, provs: Sequence[LabelProvenance]) -> list[str]:
    """The plain sentences of ``trust.warnings`` (module docstring), label warnings first."""
    out = label_warnings(provs)
    n = trust.get("n_queries")
    if len(df) >= 2 and "significant" in df:
        tested = df["p_value"].notna().to_numpy()
        same = 1 + int(np.count_nonzero(tested[1:] & ~df["significant"].to_numpy(dtype=bool)[1:]))
        if same >= 2 and not bool(df["significant"].iloc[1]):
            top = f"the top {_WORDS.get(same, same)}"
            need = trust.get("queries_needed")
            tail = (f"; about {need} would separate the first two" if need else
                    "; the first two have the same mean, so no number of queries separates them")
            out.append(f"{top} are indistinguishable with {n} queries{tail}")
    j = trust.get("judged_at_10")
    if j is not None and j < MIN_JUDGED and any(p.judge for p in provs):
        out.append(f"judged@10 is {j:.2f} on judged labels: most of the top 10 was never judged, so the scores "
                   "lean on what the judge happened to see")
    sel = trust.get("selection")
    if sel and sel.get("dev_ci"):
        lo, hi = sel["dev_ci"]
        h = sel["holdout_score"]
        if not lo <= h <= hi:
            why = ("its lead was partly chosen by the dev queries" if h < lo else
                   "the held-out queries are easier for it than the dev ones, so the dev ranking may not carry over")
            out.append(f"the winner (run {str(sel['winner_run'])[:8]}) scored {h:.4f} on {sel['holdout_queries']} "
                       f"held-out queries, {'below' if h < lo else 'above'} its dev CI [{lo:.4f}, {hi:.4f}] "
                       f"(dev {sel['dev_score']:.4f}): {why}")
    return out


def trust_block(df: pd.DataFrame, scores: Mapping[str, pd.Series | None], provenances: Sequence[LabelProvenance | None],
                judged_at_10: Sequence[float] = (), selection: Mapping | None = None, alpha: float = ALPHA,
                power: float = POWER, labels_note: str | None = None) -> dict:
    """The trust object of a leaderboard ``df`` (lab.analysis.leaderboard columns, best first, with run_id);
    ``scores``: run id -> per-query values of the ranked metric; ``provenances``: one per ranked run (None:
    unknown); ``judged_at_10``: one per run (NaN: not logged); ``selection``: :func:`selection_record` or None."""
    labels, label_notes = combine_labels(provenances)
    qids: set[str] = set()
    for s in scores.values():
        if s is not None:
            qids.update(map(str, s.index))
    n = len(qids) + (int(selection["holdout_queries"]) if selection else 0)
    mdd, needed = power_figures(df, scores, df.attrs.get("metric") or df.columns[1], alpha, power)
    j = [float(v) for v in judged_at_10 if v is not None and not math.isnan(float(v))]
    why = None
    if needed is None and mdd is not None:
        why = ("the top two already differ significantly" if bool(df["significant"].iloc[1])
               else "the top two cannot be separated (the same mean, or scored on other queries)")
    trust = {"n_queries": n, "labels": labels, "min_detectable_diff": mdd,
             "method": f"{POWER_METHOD}; alpha {alpha:g}, power {power:g}, sd(d) the median over runs of the "
                       "per-query differences against the best",
             "queries_needed": needed, "queries_needed_note": why, "judged_at_10": float(np.mean(j)) if j else None,
             "selection": dict(selection) if selection else None}
    if labels_note:
        trust["labels_note"] = labels_note
    known = [p for p in provenances if p is not None]
    trust["warnings"] = label_notes + trust_warnings(trust, df, known)
    return trust


def trust_lines(trust: Mapping, metric: str = "") -> list[str]:
    """The trust object as the lines printed above a leaderboard (warnings last, each "warning: ...")."""
    lab = trust.get("labels") or {}
    src = lab.get("source", "unknown")
    who = [f"generator {lab['generator']}" if lab.get("generator") else "",
           f"judge {lab['judge']}" if lab.get("judge") else "",
           f"judge check: {lab['judge_check']}" if lab.get("judge_check") else
           ("judge check: none" if lab.get("judge") else "")]
    lines = [f"trust: {trust.get('n_queries')} queries; labels {src}"
             + (f": {lab['graders']}" if lab.get("graders") else "")
             + "".join(f"; {w}" for w in who if w) + (f" ({trust['labels_note']})" if trust.get("labels_note") else "")]
    mdd = trust.get("min_detectable_diff")
    if mdd is not None:
        need = trust.get("queries_needed")
        lines.append(f"smallest detectable difference{' in ' + metric if metric else ''}: {mdd:.4f} (power 0.8, "
                     f"alpha 0.05); queries to separate the top two: "
                     + (f"about {need}" if need else f"none ({trust.get('queries_needed_note') or 'not computed'})"))
    if trust.get("judged_at_10") is not None:
        lines.append(f"judged@10, mean over the runs: {trust['judged_at_10']:.3f}")
    sel = trust.get("selection")
    if sel:
        lo, hi = sel["holdout_ci"]
        lines.append(f"held-out check of the winner (run {str(sel['winner_run'])[:8]}, {sel['metric']}): dev "
                     f"{sel['dev_score']:.4f} on {sel['dev_queries']} queries, held-out {sel['holdout_score']:.4f} "
                     f"[{lo:.4f}, {hi:.4f}] on {sel['holdout_queries']}; optimism {sel['optimism']:+.4f}")
    lines += [f"warning: {w}" for w in trust.get("warnings") or []]
    return lines


def results_trust(results: Mapping[str, object], metric: str = "ndcg@10", alpha: float = ALPHA, seed: int = 0,
                  n_resamples: int = 2000) -> dict:
    """The trust object of in-memory results (name -> lab.experiment.run.Result, as notebook 03 holds them): the
    leaderboard of their per-query ``metric``, label provenance from ``result.info["labels"]`` (what runs log),
    judged@10 from their means."""
    names = list(results)
    scores = {n: results[n].evaluation.per_query[metric].rename(index=str) for n in names}
    df = leaderboard(list(scores.values()), metric, labels=names, extra=[{"run_id": n} for n in names], alpha=alpha,
                     n_resamples=n_resamples, seed=seed)
    ranked = [results[n] for n in df["run_id"]]
    provs = [LabelProvenance(**(r.info or {})["labels"]) if (r.info or {}).get("labels") else None for r in ranked]
    judged = [r.evaluation.means.get("judged@10", math.nan) for r in ranked]
    return trust_block(df, scores, provs, judged, alpha=alpha)

