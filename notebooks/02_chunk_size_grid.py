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
# # 02 · Chunk size grid
#
# How chunk size, overlap and chunker change retrieval, scored **at the chunk level** against evidence spans
# (`relevance = "span"`: a chunk counts as relevant when it overlaps a passage that holds the answer; queries
# without an evidence span are left out, the table says how many were scored). Defaults: SciFact (its rationale
# sentences are the spans), BM25, sizes 64..1024 tokens of the all-MiniLM-L6-v2 tokenizer.
#
# - Interactively: the grid below (`chunkers` x `overlaps` x `chunk_sizes`), one MLflow run per config.
# - As a sweep: `lab sweep params/chunk_size_grid.yaml` injects one `chunking` config per execution.
# - Small-to-big beside plain sizes: for each chunk size in `parent_sizes` (overlap 0), the `parent` strategy
#   searches small children (`small_to_big`: e.g. 64 tokens) of those chunks and returns the whole chunk
#   (`mode: parent`) or the child with its neighbours (`mode: window`); the `retrieval` column tells the rows apart.
#   As a sweep into the same experiment: `lab sweep params/small_to_big.yaml`.
#
# Shaded bands are 95% percentile-bootstrap intervals over queries. Read span-level recall with the chunk size in
# mind: a bigger chunk overlaps the evidence more easily, so recall rises with size partly by construction, while
# the reader downstream gets more text to wade through (about `size x k` tokens for the top k). The token-level
# metrics say that directly (span relevance only; Smith & Troynikov 2024, "Evaluating Chunking Strategies for
# Retrieval"): token recall is the share of evidence tokens inside the top k chunks, token precision the share of
# the retrieved tokens that are evidence, token IoU the two together, all counted in `size_unit`.

# %% tags=["parameters"]
dataset = "data/scifact"    # BEIR folder with evidence spans (evidence.jsonl, or raw/ SQuAD answers); repo-relative
strategy = "bm25"           # any registered strategy (`lab strategies`)
params = {}                 # strategy params, e.g. {"k1": 0.9, "b": 0.4}
chunking = None             # one chunking config (injected by `lab sweep`); None: the grid below
chunkers = ["recursive", "fixed"]
chunk_sizes = [64, 128, 256, 512, 1024]
overlaps = [0, 32]          # units shared by neighbouring chunks (skipped unless below the size)
size_unit = "tokens"        # "tokens", "words" or "chars"
small_to_big = [{"mode": "parent", "child_size": 64}, {"mode": "window", "window": 1, "child_size": 64}]
parent_sizes = [512, 1024]  # chunk sizes (overlap 0) that also get the small_to_big rows; [] for none
relevance = "span"          # "span" (chunk overlaps evidence) or "doc" (best chunk per document)
condensed = False           # True: unjudged units removed before scoring (trec_eval -J); judged@k shows coverage
split = "test"
k = 100                     # hits retrieved per query
plot_metrics = ["recall@10", "recall@100", "ndcg@10"]
token_metrics = ["token_recall@10", "token_precision@10", "token_iou@10"]   # span relevance only
max_queries = None          # first N queries only, for a quick look
seed = 0
progress = True
tracking_root = "mlruns"
experiment = "chunk_size_grid"
mlflow_run_id = None        # set by `lab sweep`: log into this run

# %%
# Setup (lab.workbench.notebook.setup): offline model libraries, inline figures, pandas display, one Context
# (cache, seed) for every run, the dataset loaded and summarised.
from IPython.display import display

from lab import log_result, run_experiment
from lab.analysis import plots
from lab.tracking.store import log_figure
from lab.workbench.notebook import setup

ctx, ds = setup(dataset, seed=seed, progress=progress, tracking_root=tracking_root, experiment=experiment)

# %% [markdown]
# ## Run the grid

# %%
grid = [chunking] if chunking else [
    {"chunker": c, "size": s, "overlap": o, "size_unit": size_unit}
    for c in chunkers for o in overlaps for s in chunk_sizes if o < s]
if mlflow_run_id and len(grid) > 1:
    raise ValueError("mlflow_run_id is set (a sweep run): give one `chunking` config, not a grid")
# (strategy, params, retrieval label) per config: the plain strategy, plus small-to-big over the parent sizes
# (not in a sweep run: one config per execution there; params/small_to_big.yaml sweeps them)
runs_to_do = []
for cfg in grid:
    if strategy == "parent":
        label = f"{params.get('mode', 'parent')} of {params.get('child_size', 64)}"
        runs_to_do.append((cfg, strategy, params, label))
        continue
    runs_to_do.append((cfg, strategy, params, "plain"))
    if not mlflow_run_id and cfg.get("size") in parent_sizes and cfg.get("overlap", 32) == 0:
        for s2b in small_to_big:
            label = f"{s2b.get('mode', 'parent')} of {s2b.get('child_size', 64)}"
            runs_to_do.append((cfg, "parent", {"base": strategy, "base_params": params, **s2b}, label))
rows, run_ids = [], []
for cfg, strat, p, retrieval in runs_to_do:
    res = run_experiment(ds, strat, p, split=split, k=k, chunking=cfg, relevance=relevance,
                         max_queries=max_queries, ctx=ctx, condensed=condensed)
    run_ids.append(log_result(res, run_id=mlflow_run_id, experiment=experiment, tracking_root=tracking_root, seed=seed))
    info = res.info["chunking"]
    rows.append(({"chunker": info["chunker"], "size": info["chunk_size"], "overlap": info["chunk_overlap"],
                  "retrieval": retrieval, "n_chunks": info["n_chunks"],
                  "mean_returned_chars": res.info["retriever"].get("mean_returned_chars")}, res))
    print(f"{info['chunker']:>9} size {info['chunk_size']:>5} overlap {info['chunk_overlap']:>3} {retrieval:>14}: "
          f"{info['n_chunks']:>7,} chunks  " + "  ".join(f"{m} {res.evaluation.means[m]:.4f}" for m in plot_metrics)
          + f"  ({res.evaluation.n_queries} queries, relevance={res.info['relevance_mode']})")
shown_tokens = [m for m in token_metrics if all(m in r.evaluation.per_query for _, r in rows)]
judged_cols = [m for m in ("judged@10",) if all(m in r.evaluation.per_query for _, r in rows)]
table = plots.results_table(rows, [*plot_metrics, *shown_tokens, *judged_cols], seed=seed)
display(table[["chunker", "size", "overlap", "retrieval", "n_chunks", "mean_returned_chars",
               *[c for m in plot_metrics for c in (m, f"{m}_ci_low", f"{m}_ci_high")], *shown_tokens, *judged_cols,
               "index_seconds", "latency_p50_ms", "n_queries", "relevance_mode"]])

# %% [markdown]
# ## Metrics against chunk size

# %%
figures = {
    "metrics_vs_chunk_size": plots.metric_vs_param(table, "size", plot_metrics, hue=["chunker", "overlap", "retrieval"],
                                                   title=f"{strategy} on {ds.name}/{split}, relevance={relevance}"),
    "per_query": plots.per_query_distribution({f"{f['chunker']} {f['size']}/{f['overlap']} {f['retrieval']}":
                                               res.evaluation.per_query
                                               for f, res in rows}, plot_metrics[-1]),
}
if shown_tokens:  # token recall / precision / IoU of the top k chunks against chunk size (span relevance)
    figures["token_metrics_vs_chunk_size"] = plots.metric_vs_param(
        table, "size", shown_tokens, hue=["chunker", "overlap", "retrieval"],
        title=f"{strategy} on {ds.name}/{split}: evidence tokens in the top chunks")
for _name, _fig in figures.items():
    display(_fig)
    for _run_id in run_ids:
        log_figure(_fig, _name, _run_id, tracking_root=tracking_root)
