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
# # 04 · Embedding comparison
#
# Embedding models on **the same chunks** with the dense strategy: quality (with 95% CIs and a paired test against
# the best), encode time of the corpus (`index_seconds`) and per-query latency (query encoding + search).
#
# Models: `all-MiniLM-L6-v2` (fast), `all-mpnet-base-v2`, `multilingual-e5-small` (English and Chinese), or any
# sentence-transformers name or local folder. On 2 CPU cores, SciFact takes a few minutes with MiniLM and about half
# an hour with each of the two larger models. Embeddings are cached (`LAB_CACHE_DIR`, default `.cache`): a rerun
# reads them, so `index_seconds` is the encode time only on a model's first run over these chunks.
#
# Fine-tuned models sit beside the base ones: each entry of `finetuned` runs the `dense_ft` strategy, which fine-tunes
# its `train.base_model` on `train_dataset`'s `train_split` (in-batch negatives; `lab train-embedder` does the same
# from the shell), or reuses the saved model when the same training was done before (models/, by content key). The
# training run is in MLflow (experiment `training`) and the evaluation run names it (`retriever.trained.mlflow_run_id`).
#
# - Interactively: every name in `models` and every entry of `finetuned`, one MLflow run each.
# - As a sweep: `lab sweep params/embedding_comparison.yaml` injects one `strategy` and its `params` per execution.

# %% tags=["parameters"]
dataset = "data/scifact"    # BEIR folder; repo-relative
strategy = "dense"
params = {}                 # dense params; params["model"] (injected by `lab sweep`) runs that one model
models = ["all-MiniLM-L6-v2", "all-mpnet-base-v2", "multilingual-e5-small"]   # compared when params has no model
# label -> dense_ft params ({} for none). doc_overlap "allow": SciFact's train and test claims cite some of the same
# abstracts (other queries over one corpus: the BEIR setting); "drop" trains without those pairs.
finetuned = {"all-MiniLM-L6-v2 fine-tuned": {"train_dataset": "data/scifact", "train_split": "train",
                                             "train": {"base_model": "all-MiniLM-L6-v2", "doc_overlap": "allow"}}}
chunking = {"chunker": "recursive", "size": 256, "overlap": 32, "size_unit": "tokens"}   # None: whole documents
relevance = "doc"           # "doc": best chunk per document (comparable to BEIR numbers); "span" needs evidence
split = "test"
k = 100
metric = "ndcg@10"
report_metrics = ["recall@10", "recall@100"]
max_queries = None
seed = 0
progress = True
tracking_root = "mlruns"
experiment = "embedding_comparison"
mlflow_run_id = None        # set by `lab sweep`: log into this run

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
# ## Encode and search with each model

# %%
if strategy != "dense" or params.get("model"):      # one point, as a sweep injects it
    todo = {params.get("model") or strategy: (strategy, params)}
else:
    todo = {m: ("dense", {**params, "model": m}) for m in models}
    todo.update({label: ("dense_ft", p) for label, p in finetuned.items()})
if mlflow_run_id and len(todo) > 1:
    raise ValueError("mlflow_run_id is set (a sweep run): give one strategy and model in params, not a list")
results, run_ids = {}, []
for label, (strat, p) in todo.items():
    res = run_experiment(ds, strat, p, split=split, k=k, chunking=chunking, relevance=relevance,
                         max_queries=max_queries, ctx=ctx)
    run_ids.append(log_result(res, run_id=mlflow_run_id, experiment=experiment, tracking_root=tracking_root, seed=seed))
    results[label] = res
    print(f"{label:>28}: {metric} {res.evaluation.means[metric]:.4f}  index {res.index_seconds:.1f} s for "
          f"{res.info['n_units']:,} chunks  P50 {res.latency['latency_p50_ms']:.2f} ms  run {run_ids[-1]}")

# %% [markdown]
# ## Fine-tuned models against their base model (paired test)

# %%
import pandas as pd
from lab import compare

rows = []
for label, (strat, p) in todo.items():
    base = p.get("train", {}).get("base_model", "all-MiniLM-L6-v2") if strat == "dense_ft" else None
    if base in results:
        for m in [metric, *report_metrics]:
            rows.append({"model": label, "base": base, **compare(results[label].evaluation, results[base].evaluation,
                                                                  m, seed=seed)})
display(pd.DataFrame(rows) if rows else "no fine-tuned model beside its base in this run")

# %% [markdown]
# ## Leaderboard

# %%
board = results_leaderboard(results, metric, report_metrics, seed=seed)
display(board[["label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "diff", "p_value", "significant",
               *report_metrics, "index_seconds", "latency_p50_ms", "n_units", "n_queries"]])

# %% [markdown]
# ## Plots

# %%
figures = {
    "leaderboard": plots.leaderboard_bars(board, metric, label="label", highlight=board["significant"],
                                          title=f"{ds.name}/{split}: {metric} by embedding model"),
    "quality_vs_encode_time": plots.quality_vs_latency(board, metric, latency="index_seconds", label="label",
                                                       title="quality vs corpus encode time"),
    "quality_vs_latency": plots.quality_vs_latency(board, metric, latency="latency_p50_ms", label="label",
                                                   title="quality vs per-query latency"),
}
for _name, _fig in figures.items():
    display(_fig)
    for _run_id in run_ids:
        log_figure(_fig, _name, _run_id, tracking_root=tracking_root)
