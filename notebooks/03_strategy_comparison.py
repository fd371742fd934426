# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: raglab (.venv)
#     language: python
#     name: raglab
# ---

# %% [markdown]
# # 03 · Strategy comparison
#
# Retrieval strategies on one dataset: a leaderboard with 95% confidence intervals, a paired significance test of
# every strategy against the best (`diff` = strategy minus best; `p_value`: two-sided sign-flip randomisation test
# over queries; `significant`: p < 0.05), and quality against per-query latency with the Pareto front marked
# (the strategies nothing else beats on both).
#
# - Interactively: every name in `strategies`, one MLflow run each.
# - As a sweep: `lab sweep params/strategy_comparison.yaml` (or `make demo`) injects one `strategy` per execution;
#   the cross-run leaderboard is then `lab compare --experiment strategy_comparison`.

# %% tags=["parameters"]
dataset = "data/scifact"    # BEIR folder; repo-relative
strategy = None             # one strategy (injected by `lab sweep`); None: compare `strategies`
strategies = ["bm25", "dense", "hybrid"]   # see `lab strategies`
params = {}                 # params of `strategy`
strategy_params = {}        # params per name in `strategies`, e.g. {"dense": {"model": "all-mpnet-base-v2"}}
chunking = None             # None: index whole documents; or e.g. {"chunker": "recursive", "size": 256, "overlap": 32}
relevance = "auto"          # "doc", "span" or "auto" (span when chunking and the dataset has evidence)
condensed = False           # True: unjudged documents removed before scoring (trec_eval -J), for pooled qrels
split = "test"
k = 100                     # hits retrieved per query
metric = "ndcg@10"          # ranks the leaderboard
report_metrics = ["recall@10", "recall@100", "mrr@10", "judged@10"]   # judged@10: share of the top 10 judged
max_queries = None          # first N queries only, for a quick look
seed = 0
progress = True
tracking_root = "mlruns"
experiment = "strategy_comparison"
mlflow_run_id = None        # set by `lab sweep`: log into this run
human_qrels = None          # people's grades on a random sample of the queries (qrels file or an imported set): PPI

# %%
# Setup (lab.workbench.notebook.setup): offline model libraries, inline figures, pandas display, one Context
# (cache, seed) for every run, the dataset loaded and summarised.
from IPython.display import display

from lab import log_result, results_leaderboard, run_experiment
from lab.analysis import plots
from lab.tracking.store import log_figure
from lab.workbench.notebook import setup

ctx, ds = setup(dataset, seed=seed, progress=progress, tracking_root=tracking_root, experiment=experiment)

# %% [markdown]
# ## Run each strategy

# %%
todo = {strategy: params} if strategy else {name: strategy_params.get(name, {}) for name in strategies}
if mlflow_run_id and len(todo) > 1:
    raise ValueError("mlflow_run_id is set (a sweep run): give one `strategy`, not a list")
results, run_ids = {}, []
for name, p in todo.items():
    res = run_experiment(ds, name, p, split=split, k=k, chunking=chunking, relevance=relevance,
                         max_queries=max_queries, ctx=ctx, condensed=condensed)
    run_ids.append(log_result(res, run_id=mlflow_run_id, experiment=experiment, root=tracking_root, seed=seed))
    results[name] = res
    print(f"{name:>14}: {metric} {res.evaluation.means[metric]:.4f}  P50 {res.latency['latency_p50_ms']:.2f} ms  "
          f"index {res.index_seconds:.1f} s  ({res.evaluation.n_queries} queries)  run {run_ids[-1]}")

# %% [markdown]
# ## Leaderboard

# %%
board = results_leaderboard(results, metric, report_metrics, seed=seed)
cost = [c for c in ("llm_index_calls", "llm_index_tokens", "llm_index_seconds", "llm_index_cold_seconds",
                    "llm_query_calls", "llm_query_tokens")
        if c in board]      # LLM strategies: calls, tokens generated, seconds paid now and on a cold run
display(board[["label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "diff", "diff_ci_low", "diff_ci_high",
               "p_value", "significant", *report_metrics, "latency_p50_ms", "latency_p95_ms", "index_seconds",
               *cost, "n_queries"]])

# %% [markdown]
# ## How far to trust it
#
# Where the labels came from (people, a model that wrote the questions, a judge and its card), the smallest
# difference in the metric these queries can detect (power 0.8, alpha 0.05), the queries needed to separate the top
# two, judged@10, and warnings in plain sentences (lab.analysis.trust; `lab compare` prints the same lines).

# %%
from lab.analysis.trust import results_trust, trust_lines

trust = results_trust(results, metric, seed=seed)
print("\n".join(trust_lines(trust, metric)))

# %% [markdown]
# With `human_qrels` (people's grades on a uniform random sample of the queries, e.g. from
# `lab testset export-annotation --queries 30 --seed 7` and `import-annotation`): the judge's numbers corrected by
# those grades, prediction-powered inference (docs/ppi.md; `lab compare --human-qrels` prints the same lines).

# %%
if human_qrels:
    from lab.analysis.ppi import ppi_lines, results_ppi

    labels = trust.get("labels") or {}
    ppi = results_ppi(results, ds.split(split)[1].qrels, human_qrels, metric, split,
                      judge=labels.get("judge") or labels.get("generator"))
    print("\n".join(ppi_lines(ppi) + [f"warning: {w}" for w in ppi["warnings"]]))

# %% [markdown]
# Where the strategies differ without any label: rank-biased overlap (p = 0.9, Webber et al. 2010; 1 = the same
# ranking, the top ranks weigh most) and top-10 Jaccard per pair, mean over the queries (lab.metrics.overlap).
# Two strategies that retrieve nearly the same lists cannot differ much whatever the labels say.

# %%
from lab.metrics.overlap import overlap_table

if len(results) > 1:
    display(overlap_table({name: r.run for name, r in results.items()}))
# ## Per difficulty tier
# A set from `lab testset generate` records each question's difficulty tier (easy / medium / hard, from the BM25
# rank of its source and its word overlap with its evidence; docs/testset.md). The metric per tier shows where a
# strategy gains: a dense or hybrid retriever should matter most on the hard questions. Same as
# `lab compare --by tier`.

# %%
from lab.analysis.compare import format_leaderboard_by, group_means

tiers = {q: str(m["difficulty"]) for q, m in ds.queries.metadata.items() if isinstance(m, dict) and m.get("difficulty")}
if tiers:
    by_tier = group_means({n: r.evaluation.per_query[metric] for n, r in results.items()}, tiers, "tier", metric)
    print(format_leaderboard_by(by_tier))
else:
    print(f"{ds.name}: its queries carry no difficulty tier (sets from `lab testset generate` do)")

# %% [markdown]
# ## Plots

# %%
figures = {
    "leaderboard": plots.leaderboard_bars(board, metric, label="label", highlight=board["significant"],
                                          title=f"{ds.name}/{split}: {metric}"),
    "quality_vs_latency": plots.quality_vs_latency(board, metric, latency="latency_p50_ms", label="label",
                                                   title=f"{ds.name}/{split}: quality vs latency"),
    "per_query": plots.per_query_distribution({n: r.evaluation.per_query for n, r in results.items()}, metric),
}
for _name, _fig in figures.items():
    display(_fig)
    for _run_id in run_ids:
        log_figure(_fig, _name, _run_id, root=tracking_root)

# %% [markdown]
# ## Trends over scheduled sweeps
#
# `lab sweep SPEC --scheduled` (a cron line or the CI schedule, see the README) records every scheduled sweep of the
# experiment. Each config's metric over them, with its 95% CI; a triangle marks a sweep where the dataset changed
# since that config's previous one, a square one where a model changed.

# %%
from lab.analysis.trends import schedule_history

history = schedule_history(experiment, root=tracking_root, metric=metric)
if len(history):
    display(plots.trend_lines(history, metric, title=f"{experiment}: {metric} over the scheduled sweeps"))
    display(history[["sequence", "label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "reused",
                     "dataset_changed", "model_changed", "reason"]])
else:
    print(f"no scheduled sweep in experiment {experiment!r} yet (lab sweep params/<spec>.yaml --scheduled)")
