"""The robustness table: each strategy on the clean set and on each perturbed variant (lab.testset.perturb).

Conventions
- Every run goes through :func:`lab.experiment.run.run_experiment` (same split, k, params and Context), so the
  dense corpus vectors come from the embedding cache and only the queries are encoded again.
- Pairing: a variant is compared with the clean set on the queries both evaluated (the same query ids; for the
  unanswerable variant, the answerable queries that were kept). ``delta`` = variant mean - clean mean over those
  queries (negative = a drop), with the percentile bootstrap CI of the mean per-query difference and two-sided
  p-values of :func:`lab.metrics.stats.paired_test` (``p`` is the sign-flip randomisation test, ``p_bootstrap``
  the paired bootstrap). ``rel_delta`` = delta / clean mean. ``delta_changed`` is the mean difference over
  the queries the variant actually changed (coverage below 100 % dilutes ``delta``).
- Unanswerable queries (variant "unanswerable": the documents relevant to them were removed from the corpus):
  a strategy "answers" a query when its top-1 score is at least a threshold tau, set on the clean run of the
  same strategy so that it answers ``answer_rate`` (default 95 %) of the answerable queries there (tau = the
  1 - answer_rate quantile of their top-1 scores). Reported per strategy:
  ``confident_rate`` = share of unanswerable queries still answered at tau (false answers; lower is better),
  with a bootstrap CI; ``answer_rate_answerable`` = share of the kept answerable queries answered at tau in the
  variant run; ``auroc`` = P(top-1 of an answerable query > top-1 of an unanswerable one) in the variant run
  (ties count 1/2; 0.5 = the score cannot tell them apart, 1.0 = a threshold separates them perfectly);
  median top-1 scores of both groups, and ``top1_drop`` = mean over the unanswerable queries of (top-1 in the
  variant - top-1 in the clean run, where their documents were still there; queries without a hit in either
  run are left out). Scores are on each strategy's own
  scale (BM25 unbounded, dense cosine, hybrid RRF sums), so compare rates and AUROC across strategies, never
  thresholds. A query with no hit has no top-1 score: it counts as not answered.
- MLflow (experiment "robustness"): one run per strategy x variant (:func:`lab.tracking.results.log_result` plus tags
  ``variant``, ``variant_seed``, params ``variant.*`` and the delta metrics), nested under one summary run that
  holds the table (``robustness.csv``, ``robustness.md``), the unanswerable table and the figures.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from lab.analysis.plots import COLORS, new_figure
from lab.core.errors import ConfigError
from lab.data.beir import load_dataset
from lab.data.fingerprint import fingerprint
from lab.experiment.run import load, run_experiment
from lab.metrics import bootstrap_ci, paired_test
from lab.metrics.stats import N_RESAMPLES
from lab.retrievers.base import Context
from lab.testset.perturb import CHANGES_FILE, PROVENANCE_FILE, VARIANTS, load_variant, perturb_dataset, read_provenance
from lab.tracking.lifecycle import tracked_run
from lab.tracking.results import log_result
from lab.tracking.store import log_metrics, log_params, set_tags

if TYPE_CHECKING:  # matplotlib is imported where a figure is made (lab.analysis.plots.new_figure)
    from matplotlib.figure import Figure

STRATEGIES = ("bm25", "dense", "hybrid")
TABLE_METRICS = ("ndcg@10", "recall@10")
CLEAN = "clean"
DEFAULT_EXPERIMENT = "robustness"


@dataclass
class Variant:
    """A loaded variant: its name, folder, Dataset and provenance (PERTURBATION.json)."""

    name: str
    path: Path
    dataset: object
    provenance: dict

    @property
    def changed_ids(self) -> set[str]:
        """Ids of the queries this variant changed (held-out ids for "unanswerable")."""
        out = set()
        for line in (self.path / CHANGES_FILE).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("changed") or row.get("unanswerable"):
                out.add(str(row["_id"]))
        return out

    @property
    def unanswerable(self) -> list[str]:
        return list(self.provenance.get("unanswerable", {}).get("query_ids", []))


def _variant_rank(name: str | None) -> int:
    return VARIANTS.index(name) if name in VARIANTS else len(VARIANTS)


def find_variants(variants) -> list[Path]:
    """Variant folders from a folder of variants (sub-folders holding PERTURBATION.json, in the order of
    lab.testset.perturb.VARIANTS), a folder that is one variant, or a list of folders (order kept)."""
    if isinstance(variants, (str, os.PathLike)):
        root = Path(variants)
        if (root / PROVENANCE_FILE).is_file():
            return [root]
        found = [p for p in root.iterdir() if (p / PROVENANCE_FILE).is_file()] if root.is_dir() else []
        found.sort(key=lambda p: (_variant_rank(read_provenance(p).get("variant")), p.name))
        if not found:
            raise ConfigError(f"{root}: no perturbed variants found (folders with PERTURBATION.json); make them "
                              "with `lab testset perturb SET --out DIR`")
        return found
    return [Path(v) for v in variants]


def make_variants(dataset, folder, variants: Iterable[str], split: str = "test", seed: int = 0,
                  progress: bool = True) -> list[Path]:
    """Variant folders ``folder/<dataset name>-<variant>`` of ``dataset``, one per name in ``variants`` (order kept);
    those not there yet (no PERTURBATION.json) are made by :func:`lab.testset.perturb.perturb_dataset` with
    ``seed``, the unanswerable variant holding out queries of ``split``. Folders already there are used as they
    are, so a second call only reads."""
    folder, names = Path(folder), list(variants)
    name = load_dataset(dataset, progress=False).name
    todo = [v for v in names if not (folder / f"{name}-{v}" / PROVENANCE_FILE).is_file()]
    if todo:
        perturb_dataset(dataset, todo, folder, seed=seed, progress=progress,
                        params={v: {"split": split} for v in todo if v == "unanswerable"})
    return [folder / f"{name}-{v}" for v in names]


def load_variants(paths: Iterable[Path], clean_fingerprint: str | None = None, progress: bool = False
                  ) -> list[Variant]:
    """Load variant folders; with ``clean_fingerprint``, refuse a variant made from another dataset."""
    out = []
    for p in paths:
        prov = read_provenance(p)
        src = prov.get("source", {}).get("fingerprint")
        if clean_fingerprint and src != clean_fingerprint:
            raise ConfigError(f"{p}: made from a dataset with fingerprint {src}, not the clean set's "
                              f"{clean_fingerprint}; perturb the same dataset again or pass check_source=False")
        out.append(Variant(prov["variant"], Path(p), load_variant(p, progress=progress), prov))
    names = [v.name for v in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"two variants of the same kind: {names}; compare one of each per table")
    return out


# ------------------------------------------------------------------------------------------------ statistics
def paired_deltas(clean_pq: pd.DataFrame, variant_pq: pd.DataFrame, metrics: Sequence[str],
                  changed: set[str] | None = None, n_resamples: int = N_RESAMPLES, seed: int = 0,
                  confidence: float = 0.95) -> dict:
    """Means, deltas, CIs and p-values of ``metrics`` over the queries both tables scored (see module docs)."""
    common = [q for q in clean_pq.index if q in set(variant_pq.index)]
    if not common:
        raise ValueError("paired_deltas: the clean and variant evaluations share no query")
    out: dict = {"n_queries": len(common)}
    changed_common = [q for q in common if changed is not None and q in changed]
    out["n_changed"] = len(changed_common) if changed is not None else float("nan")
    for m in metrics:
        a = variant_pq.loc[common, m].to_numpy(dtype=float)
        b = clean_pq.loc[common, m].to_numpy(dtype=float)
        t = paired_test(a, b, n_resamples=n_resamples, seed=seed, confidence=confidence)
        clean_mean = float(b.mean())
        out.update({m: float(a.mean()), f"{m}_clean": clean_mean, f"{m}_delta": t["diff"],
                    f"{m}_delta_ci_low": t["ci_low"], f"{m}_delta_ci_high": t["ci_high"],
                    f"{m}_p": t["p_permutation"], f"{m}_p_bootstrap": t["p_bootstrap"],
                    f"{m}_rel_delta": t["diff"] / clean_mean if clean_mean else float("nan")})
        if changed_common:
            d = variant_pq.loc[changed_common, m].to_numpy(float) - clean_pq.loc[changed_common, m].to_numpy(float)
            out[f"{m}_delta_changed"] = float(d.mean())
        else:
            out[f"{m}_delta_changed"] = float("nan")
    return out


def top1_scores(run, qids: Iterable[str]) -> pd.Series:
    """Top-1 score of each query (NaN when the run holds no hit for it), indexed by query id."""
    vals = {}
    for q in qids:
        hits = run.ranked(q, 1)
        vals[q] = float(hits[0][1]) if hits else float("nan")
    return pd.Series(vals, dtype=float)


def auroc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(a positive score > a negative score), ties 1/2 (Mann-Whitney U / (n_pos * n_neg)); NaN scores are
    treated as the lowest possible score. NaN when either group is empty."""
    from scipy.stats import rankdata

    pos = np.nan_to_num(np.asarray(positive, dtype=float), nan=-np.inf)
    neg = np.nan_to_num(np.asarray(negative, dtype=float), nan=-np.inf)
    if not len(pos) or not len(neg):
        return float("nan")
    ranks = rankdata(np.concatenate([pos, neg]))
    u = ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def abstention(clean_top1: pd.Series, answerable_top1: pd.Series, unanswerable_top1: pd.Series,
               unanswerable_clean_top1: pd.Series | None = None, answer_rate: float = 0.95,
               n_resamples: int = N_RESAMPLES, seed: int = 0, confidence: float = 0.95) -> dict:
    """How often a strategy still answers unanswerable queries (see the module conventions).

    clean_top1: top-1 scores of the answerable queries of the clean run (sets tau); answerable_top1 /
    unanswerable_top1: top-1 scores in the variant run; unanswerable_clean_top1: the unanswerable queries' top-1
    in the clean run (for ``top1_drop``)."""
    if not 0.0 < answer_rate < 1.0:
        raise ConfigError(f"answer_rate={answer_rate}: must lie strictly between 0 and 1, e.g. 0.95")
    ref = clean_top1.dropna().to_numpy()
    if not len(ref) or not len(unanswerable_top1):
        raise ValueError("abstention: need answerable clean scores and unanswerable queries")
    tau = float(np.quantile(ref, 1.0 - answer_rate))
    confident = (unanswerable_top1.fillna(-np.inf) >= tau).astype(float)
    ci = bootstrap_ci(confident.to_numpy(), n_resamples=n_resamples, seed=seed, confidence=confidence).iloc[0]
    out = {"n_unanswerable": int(len(unanswerable_top1)), "n_answerable": int(len(answerable_top1)),
           "answer_rate_target": answer_rate, "tau": tau,
           "confident_rate": float(confident.mean()), "confident_rate_ci_low": float(ci["ci_low"]),
           "confident_rate_ci_high": float(ci["ci_high"]),
           "answer_rate_answerable": float((answerable_top1.fillna(-np.inf) >= tau).mean()),
           "auroc": auroc(answerable_top1.to_numpy(), unanswerable_top1.to_numpy()),
           "top1_median_answerable": float(answerable_top1.median()),
           "top1_median_unanswerable": float(unanswerable_top1.median())}
    if unanswerable_clean_top1 is not None:
        both = unanswerable_top1.index.intersection(unanswerable_clean_top1.index)
        out["top1_drop"] = float((unanswerable_top1[both] - unanswerable_clean_top1[both]).mean())
    return out


# ------------------------------------------------------------------------------------------------ result
@dataclass
class Robustness:
    """What :func:`run_robustness` made: the table, the unanswerable table, the Results and MLflow run ids."""

    table: pd.DataFrame
    unanswerable: pd.DataFrame
    results: dict = field(default_factory=dict)  # (strategy, variant) -> lab.experiment.run.Result
    top1: pd.DataFrame | None = None  # strategy, query_id, group ("answerable"/"unanswerable"), top1
    run_ids: dict = field(default_factory=dict)  # (strategy, variant) -> MLflow run id
    summary_run_id: str | None = None
    metrics: tuple = TABLE_METRICS

    def format(self, digits: int = 4) -> str:
        """The table as Markdown (see :func:`format_table`)."""
        return format_table(self.table, self.metrics, digits) + (
            "\n\n" + format_unanswerable(self.unanswerable, digits) if len(self.unanswerable) else "")


def _row(strategy: str, variant: str, prov: dict | None, stats: dict) -> dict:
    prov = prov or {}
    return {"strategy": strategy, "variant": variant, "share_changed": float(prov.get("share_changed", 0.0)),
            **stats}


def run_robustness(dataset, variants, strategies: Sequence[str] = STRATEGIES,  # noqa: PLR0913 - the public signature, one keyword per `lab robust` option
                   params: Mapping[str, Mapping] | None = None, *, split: str = "test", k: int = 100,
                   metrics: Sequence[str] = TABLE_METRICS, ctx=None, max_queries: int | None = None,
                   n_resamples: int = N_RESAMPLES, seed: int = 0, confidence: float = 0.95, answer_rate: float = 0.95,
                   log_to_mlflow: bool = True, tracking_root: str | Path = "mlruns",
                   experiment: str = DEFAULT_EXPERIMENT,
                   check_source: bool = True) -> Robustness:
    """Run ``strategies`` on the clean ``dataset`` (folder or Dataset) and on each variant (a folder of variant
    folders, one variant folder, or a list of them); build the table; log everything to MLflow when ``log_to_mlflow``.

    params: strategy -> params for run_experiment. Query-side variants are evaluated on ``split``; the
    unanswerable variant on its own split (it must be ``split``).
    """
    ctx = ctx or Context()
    clean = load(dataset, progress=ctx.progress)
    loaded = load_variants(find_variants(variants), fingerprint(clean.path) if check_source else None,
                           progress=ctx.progress)
    for v in loaded:
        if split not in v.dataset.qrels:
            raise ConfigError(f"{v.path}: no qrels for split {split!r} (it has {sorted(v.dataset.qrels)})")
    metrics = tuple(metrics)
    rows, un_rows, top_rows, results = [], [], [], {}
    for strategy in strategies:
        sp = dict((params or {}).get(strategy) or {})
        base = run_experiment(clean, strategy, sp, split=split, k=k, ctx=ctx, max_queries=max_queries)
        results[(strategy, CLEAN)] = base
        pq = base.evaluation.per_query
        ci = bootstrap_ci(pq[list(metrics)], n_resamples=min(n_resamples, 2000), seed=seed).set_index("metric")
        clean_stats = {"n_queries": len(pq), "n_changed": 0}
        for m in metrics:
            mean = float(pq[m].mean())
            clean_stats.update({m: mean, f"{m}_clean": mean, f"{m}_delta": 0.0, f"{m}_delta_ci_low": 0.0,
                                f"{m}_delta_ci_high": 0.0, f"{m}_p": 1.0, f"{m}_p_bootstrap": 1.0,
                                f"{m}_rel_delta": 0.0, f"{m}_delta_changed": float("nan"),
                                f"{m}_ci_low": float(ci.loc[m, "ci_low"]),
                                f"{m}_ci_high": float(ci.loc[m, "ci_high"])})
        rows.append(_row(strategy, CLEAN, None, clean_stats))
        clean_top1 = top1_scores(base.run, list(pq.index))
        for v in loaded:
            res = run_experiment(v.dataset, strategy, sp, split=split, k=k, ctx=ctx, max_queries=max_queries)
            results[(strategy, v.name)] = res
            vpq = res.evaluation.per_query
            stats = paired_deltas(pq, vpq, metrics, v.changed_ids, n_resamples, seed, confidence)
            vci = bootstrap_ci(vpq.loc[[q for q in pq.index if q in set(vpq.index)], list(metrics)],
                               n_resamples=min(n_resamples, 2000), seed=seed).set_index("metric")
            for m in metrics:
                stats[f"{m}_ci_low"] = float(vci.loc[m, "ci_low"])
                stats[f"{m}_ci_high"] = float(vci.loc[m, "ci_high"])
            rows.append(_row(strategy, v.name, v.provenance, stats))
            if v.unanswerable:
                held = [q for q in v.unanswerable if q in res.run and q in base.run]  # searched in both runs
                ans = list(vpq.index)
                a_top, u_top = top1_scores(res.run, ans), top1_scores(res.run, held)
                un = abstention(clean_top1, a_top, u_top, top1_scores(base.run, held), answer_rate, n_resamples,
                                seed, confidence)
                un_rows.append({"strategy": strategy, "variant": v.name, **un})
                top_rows += [{"strategy": strategy, "query_id": q, "group": "answerable", "top1": s}
                             for q, s in a_top.items()]
                top_rows += [{"strategy": strategy, "query_id": q, "group": "unanswerable", "top1": s}
                             for q, s in u_top.items()]
    table = pd.DataFrame(rows)
    out = Robustness(table, pd.DataFrame(un_rows), results, pd.DataFrame(top_rows), metrics=metrics)
    if log_to_mlflow:
        log_robustness(out, loaded, tracking_root=tracking_root, experiment=experiment, seed=seed,
                       n_resamples=n_resamples,
                       config={"dataset": clean.name, "split": split, "k": k, "strategies": list(strategies),
                               "params": dict(params or {}), "max_queries": max_queries,
                               "answer_rate": answer_rate, "confidence": confidence})
    return out


# ------------------------------------------------------------------------------------------------ presentation
def _fmt(x: float, digits: int, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _p(p: float) -> str:
    return "-" if p is None or math.isnan(p) else ("<0.001" if p < 0.001 else f"{p:.3f}")


def format_table(table: pd.DataFrame, metrics: Sequence[str] = TABLE_METRICS, digits: int = 4) -> str:
    """Markdown: one row per strategy x variant; per metric the mean and the delta from clean [CI] (p)."""
    head = ["strategy", "variant", "changed", "n"]
    for m in metrics:
        head += [m, f"delta {m} [95% CI]", "p"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.to_dict("records"):
        cells = [r["strategy"], r["variant"], f"{r['share_changed']:.0%}", str(int(r["n_queries"]))]
        for m in metrics:
            if r["variant"] == CLEAN:
                cells += [_fmt(r[m], digits), "", ""]
            else:
                lo, hi = _fmt(r[f"{m}_delta_ci_low"], digits, True), _fmt(r[f"{m}_delta_ci_high"], digits, True)
                cells += [_fmt(r[m], digits), f"{_fmt(r[f'{m}_delta'], digits, True)} [{lo}, {hi}]", _p(r[f"{m}_p"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_unanswerable(df: pd.DataFrame, digits: int = 3) -> str:
    """Markdown of the unanswerable measures, one row per strategy."""
    head = ["strategy", "n unans.", "tau", "confident rate [95% CI]", "answered (answerable)", "AUROC",
            "median top-1 ans.", "median top-1 unans.", "top-1 drop"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in df.to_dict("records"):
        lines.append("| " + " | ".join([
            r["strategy"], str(r["n_unanswerable"]), _fmt(r["tau"], digits),
            f"{r['confident_rate']:.1%} [{r['confident_rate_ci_low']:.1%}, {r['confident_rate_ci_high']:.1%}]",
            f"{r['answer_rate_answerable']:.1%}", _fmt(r["auroc"], digits), _fmt(r["top1_median_answerable"], digits),
            _fmt(r["top1_median_unanswerable"], digits), _fmt(r.get("top1_drop", float("nan")), digits, True)]) + " |")
    return "\n".join(lines)


def plot_robustness(table: pd.DataFrame, metrics: Sequence[str] = TABLE_METRICS, title: str = "") -> Figure:
    """One panel per metric: delta from clean per variant (groups) and strategy (bars), with CI error bars.

    Built without pyplot (see lab.analysis.plots conventions)."""
    df = table[table["variant"] != CLEAN]
    variants = list(dict.fromkeys(df["variant"]))
    strategies = list(dict.fromkeys(df["strategy"]))
    fig = new_figure(figsize=(4.2 * len(metrics) + 1, 3.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    width = 0.8 / max(1, len(strategies))
    x = np.arange(len(variants))
    for ax, m in zip(axes, metrics, strict=True):
        for i, s in enumerate(strategies):
            sub = df[df["strategy"] == s].set_index("variant").reindex(variants)
            y = sub[f"{m}_delta"].to_numpy(float)
            lo, hi = sub[f"{m}_delta_ci_low"].to_numpy(float), sub[f"{m}_delta_ci_high"].to_numpy(float)
            err = np.vstack([y - lo, hi - y])
            ax.bar(x + (i - (len(strategies) - 1) / 2) * width, y, width, yerr=np.clip(err, 0, None), capsize=3,
                   color=COLORS[i % len(COLORS)], label=s)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(x, variants)
        ax.set_ylabel(f"{m}: variant - clean")
        ax.set_title(m)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def plot_top1(top1: pd.DataFrame, taus: Mapping[str, float] | None = None, title: str = "") -> Figure:
    """Top-1 score distributions of answerable vs unanswerable queries, one panel per strategy (own scale);
    ``taus`` (strategy -> threshold) draws each strategy's answer threshold as a dashed line."""
    strategies = list(dict.fromkeys(top1["strategy"]))
    fig = new_figure(figsize=(3.4 * max(1, len(strategies)) + 0.5, 3.4), layout="constrained")
    axes = fig.subplots(1, max(1, len(strategies)), squeeze=False)[0]
    for ax, s in zip(axes, strategies, strict=False):
        sub = top1[top1["strategy"] == s]
        data = [sub.loc[sub["group"] == g, "top1"].dropna().to_numpy() for g in ("answerable", "unanswerable")]
        ax.boxplot(data, tick_labels=["answerable", "unanswerable"], showfliers=True)
        if taus and s in taus:
            ax.axhline(taus[s], color="#d62728", linestyle="--", linewidth=1, label=f"tau {taus[s]:.3g}")
            ax.legend(fontsize=8, loc="upper right")
        ax.set_title(s)
        ax.set_ylabel("top-1 score")
    if title:
        fig.suptitle(title)
    return fig


# ------------------------------------------------------------------------------------------------ MLflow
def log_robustness(rob: Robustness, variants: Sequence[Variant], tracking_root: str | Path = "mlruns",
                   experiment: str = DEFAULT_EXPERIMENT, seed: int = 0, n_resamples: int = N_RESAMPLES,
                   config: Mapping | None = None) -> str:
    """Log the summary run and one nested run per strategy x variant; returns the summary run id."""
    config = dict(config or {})
    prov = {v.name: v.provenance for v in variants}
    # a step that raises ends the runs it is inside FAILED (tag error) and propagates
    with tracked_run(experiment, run_name=f"robustness on {config.get('dataset', '')}".strip(),
                     tracking_root=tracking_root,
                     tags={"kind": "robustness-summary"}) as summary_run:
        cl, parent = summary_run.cl, summary_run.run_id
        log_params(parent, {**{k: v for k, v in config.items() if k != "params"},
                            "variants": ",".join(prov), "seed": seed, "n_resamples": n_resamples,
                            **{f"strategy_params.{s}": p for s, p in (config.get("params") or {}).items()}}, cl=cl)
        for (strategy, variant), res in rob.results.items():
            with tracked_run(experiment_id=summary_run.experiment_id, run_name=f"{strategy} on {variant}",
                             parent_run_id=parent, cl=cl) as child:
                run = child.run_id
                log_result(res, run_id=run, tracking_root=tracking_root, seed=seed)
                p = prov.get(variant, {})
                tags = {"variant": variant, "variant_seed": p.get("seed"), "clean_dataset": config.get("dataset"),
                        "kind": "robustness-run"}
                set_tags(run, tags, cl=cl)
                if p:
                    log_params(run, {f"variant.{k}": v for k, v in p.get("params", {}).items()}, cl=cl)
                row = rob.table[(rob.table.strategy == strategy) & (rob.table.variant == variant)].iloc[0]
                keep = [c for c in row.index if any(c.startswith(f"{m}_") for m in rob.metrics) or c == "share_changed"]
                log_metrics(run, {f"robustness.{c}": row[c] for c in keep}, cl=cl)
            rob.run_ids[(strategy, variant)] = run
        summary = {}
        for r in rob.table.to_dict("records"):
            for m in rob.metrics:
                summary[f"{r['strategy']}.{r['variant']}.{m}"] = r[m]
                if r["variant"] != CLEAN:
                    summary[f"{r['strategy']}.{r['variant']}.{m}_delta"] = r[f"{m}_delta"]
        for r in rob.unanswerable.to_dict("records"):
            for key in ("confident_rate", "auroc", "answer_rate_answerable"):
                summary[f"{r['strategy']}.{r['variant']}.{key}"] = r[key]
        log_metrics(parent, summary, cl=cl)
        with tempfile.TemporaryDirectory(prefix="lab-robustness-") as tmp:
            for f in write_outputs(rob, Path(tmp), title=f"robustness on {config.get('dataset', '')}"):
                cl.log_artifact(parent, str(f), "figures" if f.suffix == ".png" else None)
        cl.set_tag(parent, "provenance", json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "unanswerable"}
                                                     for k, v in prov.items()}, default=str)[:7900])
    rob.summary_run_id = parent
    return parent


def write_outputs(rob: Robustness, folder: Path | str, title: str = "") -> list[Path]:
    """robustness.csv, robustness.md, unanswerable.csv, top1.csv, robustness.png and unanswerable_top1.png
    (the last three when there is an unanswerable variant) in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = [folder / "robustness.csv", folder / "robustness.md"]
    rob.table.to_csv(out[0], index=False)
    out[1].write_text(rob.format() + "\n", encoding="utf-8")
    if len(rob.unanswerable):
        out.append(folder / "unanswerable.csv")
        rob.unanswerable.to_csv(out[-1], index=False)
    if rob.top1 is not None and len(rob.top1):
        out.append(folder / "top1.csv")
        rob.top1.to_csv(out[-1], index=False)
        out.append(folder / "unanswerable_top1.png")
        taus = dict(zip(rob.unanswerable["strategy"], rob.unanswerable["tau"],
                        strict=True)) if len(rob.unanswerable) else None
        plot_top1(rob.top1, taus, title="top-1 scores: answerable vs unanswerable queries").savefig(out[-1], dpi=110)
    out.append(folder / "robustness.png")
    plot_robustness(rob.table, rob.metrics, title=title).savefig(out[-1], dpi=110)
    return out
