"""Write the four workbench notebooks from the cell sources below: ``python scripts/make_notebooks.py [--check]``.

The notebooks in notebooks/ are generated so they stay consistent (same setup cell, same parameter
conventions) and reviewable (this file is the diff to read). Edit here, run the script, commit both.
``--check`` writes nothing and exits 1 when a notebook differs from what this script would write.

Conventions shared by every notebook
- Exactly one cell tagged ``parameters`` (Papermill), holding only assignments with working defaults. Relative
  paths are relative to the repo root (lab.core.paths). ``tracking_root``, ``experiment`` and ``mlflow_run_id``
  are injected by ``lab sweep``; with ``mlflow_run_id`` set, the notebook runs one config and logs into that
  run; without it, it runs its own list of configs, one MLflow run each.
- Every figure a notebook draws is displayed and logged (lab.tracking.store.log_figure) into each run it made.
- Outputs are stripped (execution_count None, outputs []); cell ids are fixed so regeneration is stable.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNELSPEC = {"name": "raglab", "display_name": "raglab (.venv)", "language": "python"}

SETUP = '''\
# Setup: offline models, paths from the repo root, one Context (cache, seed) for every run.
import os

for _key, _value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
                     "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)
%matplotlib inline

import pandas as pd
from IPython.display import display

from lab.analysis import plots
from lab.experiment.run import load, run_experiment
from lab.core.paths import repo_root, resolve_repo_path
from lab.retrievers.base import Context
from lab.tracking.store import log_figure, log_result, tracking_uri

pd.options.display.float_format = "{:.4f}".format
pd.options.display.max_columns = 40
pd.options.display.width = 250
ctx = Context(cache_dir=resolve_repo_path(os.environ.get("LAB_CACHE_DIR", ".cache")), seed=seed, progress=progress)
ds = load(resolve_repo_path(dataset), progress=progress)
print(f"repo:    {repo_root()}\\ndataset: {ds.name} ({len(ds.corpus):,} documents; splits {sorted(ds.qrels)})\\n"
      f"MLflow:  {tracking_uri(tracking_root)}, experiment {experiment!r}")'''

#: Notebook 01's setup: the dataset is loaded by its own "Source" cell (a folder may be ingested first, and
#: generating needs only a corpus).
SETUP_01 = SETUP.split("\nds = load(")[0]

LOG_FIGURES = '''\
for _name, _fig in figures.items():
    display(_fig)
    for _run_id in run_ids:
        log_figure(_fig, _name, _run_id, root=tracking_root)'''


def params_cell(source: str):
    return new_code_cell(source, metadata={"tags": ["parameters"]})


def testset_generation() -> list:
    return [
        new_markdown_cell("""\
# 01 · Test set

The test set every other notebook scores against: queries, their relevance judgements (qrels), grades and, where
the dataset has them, evidence spans (the passages that hold the answer, for chunk-level relevance).

Four sources (`source`):
- `"beir"`: **import** a BEIR-layout folder as it is and show what it holds.
- `"llm"`: **generated questions** from the folder's corpus (`corpus.jsonl` is enough): passages sampled from
  anywhere in each document (windows by section), an LLM writes a question in the passage's language, quality
  gates (valid JSON, is a question, same language as the passage, length, no repetition, no copied markup, key
  words not copied, answerable from the passage, on topic, no near-duplicates) filter them; written as a new
  BEIR set with the evidence span of every question (`evidence.jsonl`, for chunk-level span relevance in
  notebook 02) and `provenance.json`. The gate funnel is shown and logged. Same as `lab testset generate`.
- `"folder"`: **your own documents**: a folder of md / rst / txt / html / pdf / docx files is ingested
  (`lab ingest FOLDER --out DIR`), then questions are generated from it as for `"llm"`.
- `"logs"`: **FAQ import**: a FAQ / ticket log (CSV or JSONL: question, optional answer and document reference),
  each row linked to a passage by its reference or by BM25 + dense match above a threshold; the rows left
  unlinked are listed. Same as `lab testset import-logs`.

The packaged 135M model makes this run offline anywhere, but it is a pipeline check, not a question writer:
for a set you report on, use `llm = "openai:MODEL"` (any OpenAI-compatible endpoint).

Then a spot check by people: `lab testset export-review SET review.csv` (keep / fix / drop, grade), fill it,
`lab testset import-review SET review.csv` (acceptance rate, and the CI half-width the set gives Recall@10).

Run it as it is, or as a sweep over the bundled datasets: `lab sweep params/testset.yaml`."""),
        params_cell('''\
dataset = "data/scifact"    # BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv); repo-relative
split = "test"
source = "beir"             # "beir": the folder as it is; "llm": generate questions from its corpus; "folder": ingest
                            # a folder of documents, then generate; "logs": link a FAQ log
folder = None               # folder: the documents (md, rst, txt, html, pdf, docx), read recursively
ingest_out = None           # folder: where the ingested corpus goes (default data/<folder name>)
out = None                  # llm / folder / logs: folder for the new set (default data/<name>-generated, -logs)
n = 100                     # llm: questions wanted (candidates are generated until n pass the gates)
llm = "local"               # llm: "local" (packaged SmolLM2-135M, offline), a .gguf path, or "openai:MODEL"
concurrency = 4             # llm: requests in flight (local: llama.cpp slots decoded in one batch)
logs = None                 # logs: the CSV / JSONL file
link_threshold = 0.5        # logs: dense cosine a best match needs to be linked
seed = 0
progress = True
tracking_root = "mlruns"    # MLflow store: folder (repo-relative) or URI
experiment = "testset"
mlflow_run_id = None        # set by `lab sweep`: log into this run instead of starting one'''),
        new_code_cell(SETUP_01),
        new_markdown_cell("""\
## Source
A BEIR folder, or (`source = "folder"`) your own documents, ingested first into a corpus (`lab ingest`): the
summary counts files per format and lists the files that could not be read, with the reason."""),
        new_code_cell('''\
from lab.testset.io import load_source

source_metrics, source_figures = {}, {}
if source == "folder":
    from lab.data.ingest import ingest

    if not folder:
        raise ValueError("source='folder' needs folder = 'path/to/your/documents' (md, rst, txt, html, pdf, docx)")
    _src = resolve_repo_path(folder)
    dataset = str(resolve_repo_path(ingest_out or f"data/{_src.name}"))
    ingested = ingest(_src, dataset, progress=progress)
    print(ingested.summary())
    source_metrics = {"ingest_documents": ingested.documents, "ingest_skipped": len(ingested.skipped),
                      "ingest_seconds": ingested.seconds}
# generating or linking needs only the corpus; "beir" needs queries and qrels
ds = load(resolve_repo_path(dataset), progress=progress) if source == "beir" else load_source(dataset, progress=progress)
print(f"repo:    {repo_root()}\\ndataset: {ds.name} ({len(ds.corpus):,} documents; splits {sorted(ds.qrels)})\\n"
      f"MLflow:  {tracking_uri(tracking_root)}, experiment {experiment!r}")'''),
        new_markdown_cell("## Queries and judgements"),
        new_code_cell('''\
if source in ("llm", "folder"):
    from lab.testset.generate import GenerationConfig, generate_testset

    generated = generate_testset(ds, resolve_repo_path(out or f"data/{ds.name}-generated"), llm=llm,
                                 config=GenerationConfig(n=n, seed=seed), cache_dir=ctx.cache_dir, progress=progress,
                                 tracking_root=None, llm_options={"concurrency": concurrency})
    print(generated.report.table())
    if not generated.report.accepted:
        raise RuntimeError(f"no candidate passed the gates (see {generated.folder}/candidates.jsonl): raise n's "
                           "attempts with `lab testset generate --max-attempts`, loosen a gate, or use a stronger llm")
    source_metrics.update({f"gen_{k}": v for k, v in generated.report.metrics().items()})
    source_figures["gate_funnel"] = plots.gate_funnel(generated.report)
    ds, split = load(generated.folder, progress=progress), "test"
    # Optional step, next: pooled LLM relevance judgements of the generated set (`lab testset judge`) go here,
    # adding judged labels to its qrels before the statistics below.
elif source == "logs":
    from lab.testset.logs import format_report, import_logs

    if not logs:
        raise ValueError("source='logs' needs logs = 'path/to/faq.csv' (or .jsonl)")
    imported = import_logs(resolve_repo_path(logs), ds, resolve_repo_path(out or f"data/{ds.name}-logs"),
                           link_threshold=link_threshold, cache_dir=ctx.cache_dir, progress=progress,
                           tracking_root=None, seed=seed)
    print(format_report(imported))
    if not imported["counts"]["linked"]:
        raise RuntimeError(f"no row of {logs} was linked: lower link_threshold or give references")
    source_metrics.update({f"logs_{k}": v for k, v in imported["counts"].items()})
    ds, split = load(imported["folder"], progress=progress), "test"
elif source != "beir":
    raise ValueError(f"source={source!r}: use 'beir' (import a BEIR folder), 'llm' (generate from its corpus), "
                     "'folder' (ingest a folder of documents, then generate) or 'logs' (import a FAQ log)")
from lab.text.tokenize import detect_language

queries, qrels = ds.split(split)
per_query = pd.DataFrame({
    "judged": [len(qrels[q]) for q in qrels],
    "relevant": [len(qrels.relevant(q)) for q in qrels],
    "words": [len(queries[q].split()) for q in qrels],
    "chars": [len(queries[q]) for q in qrels],
}, index=pd.Index(list(qrels), name="query_id"))
grades = pd.Series([g for q in qrels for g in qrels[q].values()], name="grade")
evidence = [e for e in ds.evidence if e.query_id in qrels]
language = pd.Series([detect_language(queries[q]) for q in qrels]).mode().iloc[0]
stats = {
    "documents": len(ds.corpus),
    "queries": len(qrels),
    "qrels": len(grades),
    "qrels_per_query_mean": per_query["judged"].mean(),
    "qrels_per_query_max": per_query["judged"].max(),
    "queries_without_relevant": int((per_query["relevant"] == 0).sum()),
    "query_words_mean": per_query["words"].mean(),
    "query_chars_mean": per_query["chars"].mean(),
    "evidence_spans": len(evidence),
    "queries_with_evidence": len({e.query_id for e in evidence}),
}
display(pd.Series({k: round(float(v), 2) if isinstance(v, float) else int(v) for k, v in stats.items()},
                  name=f"{ds.name}/{split}", dtype=object).to_frame())
display(per_query.describe().T)
display(pd.DataFrame({"query": [queries[q] for q in list(qrels)[:5]],
                      "relevant docs": [sorted(qrels.relevant(q)) for q in list(qrels)[:5]]},
                     index=list(qrels)[:5]))'''),
        new_markdown_cell("""\
## Distributions
Judgements per query, grades, and query length (in words; in characters for Chinese, which has no spaces).
Many queries with a single judged document make recall@k coarse (0 or 1 per query), so confidence intervals
over queries matter."""),
        new_code_cell('''\
length_unit = "chars" if language == "zh" else "words"
figures = {
    "qrels_per_query": plots.histogram(per_query["judged"], "judged documents per query", discrete=True,
                                       title=f"{ds.name}/{split}: qrels per query"),
    "grades": plots.histogram(grades, "relevance grade", discrete=True, title=f"{ds.name}/{split}: grades"),
    "query_length": plots.histogram(per_query[length_unit], f"query length ({length_unit})", bins=30,
                                    title=f"{ds.name}/{split}: query length"),
}
figures.update(source_figures)
if evidence:
    figures["evidence_span_length"] = plots.histogram([e.end - e.start for e in evidence], "evidence span (chars)",
                                                      bins=30, title=f"{ds.name}/{split}: evidence spans")'''),
        new_markdown_cell("## Record in MLflow"),
        new_code_cell('''\
from lab.data.fingerprint import fingerprint
from lab.tracking.store import client, environment_tags, get_or_create_experiment, log_metrics, log_params, set_tags

cl = client(tracking_root)
run_id = mlflow_run_id or cl.create_run(get_or_create_experiment(experiment, tracking_root, cl),
                                        run_name=f"testset {ds.name}/{split}").info.run_id
run_ids = [run_id]
log_params(run_id, {"dataset": ds.name, "split": split, "source": source,
                    **({"n": n, "llm": llm, "concurrency": concurrency} if source in ("llm", "folder") else {}),
                    **({"folder": folder} if source == "folder" else {}),
                    **({"logs": logs, "link_threshold": link_threshold} if source == "logs" else {})}, cl=cl)
log_metrics(run_id, {**stats, **source_metrics}, cl=cl)
set_tags(run_id, {"dataset": ds.name, "dataset_fingerprint": fingerprint(ds.path), "seed": seed,
                  **environment_tags()}, cl=cl)
''' + LOG_FIGURES + '''
if mlflow_run_id is None:
    cl.set_terminated(run_id, "FINISHED")
print(f"logged to run {run_id}")'''),
    ]


def chunk_size_grid() -> list:
    return [
        new_markdown_cell("""\
# 02 · Chunk size grid

How chunk size, overlap and chunker change retrieval, scored **at the chunk level** against evidence spans
(`relevance = "span"`: a chunk counts as relevant when it overlaps a passage that holds the answer; queries
without an evidence span are left out, the table says how many were scored). Defaults: SciFact (its rationale
sentences are the spans), BM25, sizes 64..1024 tokens of the all-MiniLM-L6-v2 tokenizer.

- Interactively: the grid below (`chunkers` x `overlaps` x `chunk_sizes`), one MLflow run per config.
- As a sweep: `lab sweep params/chunk_size_grid.yaml` injects one `chunking` config per execution.
- Small-to-big beside plain sizes: for each chunk size in `parent_sizes` (overlap 0), the `parent` strategy
  searches small children (`small_to_big`: e.g. 64 tokens) of those chunks and returns the whole chunk
  (`mode: parent`) or the child with its neighbours (`mode: window`); the `retrieval` column tells the rows apart.
  As a sweep into the same experiment: `lab sweep params/small_to_big.yaml`.

Shaded bands are 95% percentile-bootstrap intervals over queries. Read span-level recall with the chunk size in
mind: a bigger chunk overlaps the evidence more easily, so recall rises with size partly by construction, while
the reader downstream gets more text to wade through (about `size x k` tokens for the top k). The token-level
metrics say that directly (span relevance only; Smith & Troynikov 2024, "Evaluating Chunking Strategies for
Retrieval"): token recall is the share of evidence tokens inside the top k chunks, token precision the share of
the retrieved tokens that are evidence, token IoU the two together, all counted in `size_unit`."""),
        params_cell('''\
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
mlflow_run_id = None        # set by `lab sweep`: log into this run'''),
        new_code_cell(SETUP),
        new_markdown_cell("## Run the grid"),
        new_code_cell('''\
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
    run_ids.append(log_result(res, run_id=mlflow_run_id, experiment=experiment, root=tracking_root, seed=seed))
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
               "index_seconds", "latency_p50_ms", "n_queries", "relevance_mode"]])'''),
        new_markdown_cell("## Metrics against chunk size"),
        new_code_cell('''\
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
''' + LOG_FIGURES),
    ]


def strategy_comparison() -> list:
    return [
        new_markdown_cell("""\
# 03 · Strategy comparison

Retrieval strategies on one dataset: a leaderboard with 95% confidence intervals, a paired significance test of
every strategy against the best (`diff` = strategy minus best; `p_value`: two-sided sign-flip randomisation test
over queries; `significant`: p < 0.05), and quality against per-query latency with the Pareto front marked
(the strategies nothing else beats on both).

- Interactively: every name in `strategies`, one MLflow run each.
- As a sweep: `lab sweep params/strategy_comparison.yaml` (or `make demo`) injects one `strategy` per execution;
  the cross-run leaderboard is then `lab compare --experiment strategy_comparison`."""),
        params_cell('''\
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
mlflow_run_id = None        # set by `lab sweep`: log into this run'''),
        new_code_cell(SETUP),
        new_markdown_cell("## Run each strategy"),
        new_code_cell('''\
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
          f"index {res.index_seconds:.1f} s  ({res.evaluation.n_queries} queries)  run {run_ids[-1]}")'''),
        new_markdown_cell("## Leaderboard"),
        new_code_cell('''\
board = plots.leaderboard_table(results, metric, report_metrics, seed=seed)
cost = [c for c in ("llm_index_calls", "llm_index_tokens", "llm_index_seconds", "llm_index_cold_seconds",
                    "llm_query_calls", "llm_query_tokens")
        if c in board]      # LLM strategies: calls, tokens generated, seconds paid now and on a cold run
display(board[["label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "diff", "diff_ci_low", "diff_ci_high",
               "p_value", "significant", *report_metrics, "latency_p50_ms", "latency_p95_ms", "index_seconds",
               *cost, "n_queries"]])'''),
        new_markdown_cell("## Plots"),
        new_code_cell('''\
figures = {
    "leaderboard": plots.leaderboard_bars(board, metric, label="label", highlight=board["significant"],
                                          title=f"{ds.name}/{split}: {metric}"),
    "quality_vs_latency": plots.quality_vs_latency(board, metric, latency="latency_p50_ms", label="label",
                                                   title=f"{ds.name}/{split}: quality vs latency"),
    "per_query": plots.per_query_distribution({n: r.evaluation.per_query for n, r in results.items()}, metric),
}
''' + LOG_FIGURES),
        new_markdown_cell("""\
## Trends over scheduled sweeps

`lab sweep SPEC --scheduled` (a cron line or the CI schedule, see the README) records every scheduled sweep of the
experiment. Each config's metric over them, with its 95% CI; a triangle marks a sweep where the dataset changed
since that config's previous one, a square one where a model changed."""),
        new_code_cell('''\
from lab.analysis.trends import schedule_history

history = schedule_history(experiment, root=tracking_root, metric=metric)
if len(history):
    display(plots.trend_lines(history, metric, title=f"{experiment}: {metric} over the scheduled sweeps"))
    display(history[["sequence", "label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "reused",
                     "dataset_changed", "model_changed", "reason"]])
else:
    print(f"no scheduled sweep in experiment {experiment!r} yet (lab sweep params/<spec>.yaml --scheduled)")'''),
    ]


def embedding_comparison() -> list:
    return [
        new_markdown_cell("""\
# 04 · Embedding comparison

Embedding models on **the same chunks** with the dense strategy: quality (with 95% CIs and a paired test against
the best), encode time of the corpus (`index_seconds`) and per-query latency (query encoding + search).

Models: `all-MiniLM-L6-v2` (fast), `all-mpnet-base-v2`, `multilingual-e5-small` (English and Chinese), or any
sentence-transformers name or local folder. On 2 CPU cores, SciFact takes a few minutes with MiniLM and about half
an hour with each of the two larger models. Embeddings are cached (`LAB_CACHE_DIR`, default `.cache`): a rerun
reads them, so `index_seconds` is the encode time only on a model's first run over these chunks.

Fine-tuned models sit beside the base ones: each entry of `finetuned` runs the `dense_ft` strategy, which fine-tunes
its `train.base_model` on `train_dataset`'s `train_split` (in-batch negatives; `lab train-embedder` does the same
from the shell), or reuses the saved model when the same training was done before (models/, by content key). The
training run is in MLflow (experiment `training`) and the evaluation run names it (`retriever.trained.mlflow_run_id`).

- Interactively: every name in `models` and every entry of `finetuned`, one MLflow run each.
- As a sweep: `lab sweep params/embedding_comparison.yaml` injects one `strategy` and its `params` per execution."""),
        params_cell('''\
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
mlflow_run_id = None        # set by `lab sweep`: log into this run'''),
        new_code_cell(SETUP),
        new_markdown_cell("## Encode and search with each model"),
        new_code_cell('''\
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
    run_ids.append(log_result(res, run_id=mlflow_run_id, experiment=experiment, root=tracking_root, seed=seed))
    results[label] = res
    print(f"{label:>28}: {metric} {res.evaluation.means[metric]:.4f}  index {res.index_seconds:.1f} s for "
          f"{res.info['n_units']:,} chunks  P50 {res.latency['latency_p50_ms']:.2f} ms  run {run_ids[-1]}")'''),
        new_markdown_cell("## Fine-tuned models against their base model (paired test)"),
        new_code_cell('''\
import pandas as pd
from lab.metrics import compare

rows = []
for label, (strat, p) in todo.items():
    base = p.get("train", {}).get("base_model", "all-MiniLM-L6-v2") if strat == "dense_ft" else None
    if base in results:
        for m in [metric, *report_metrics]:
            rows.append({"model": label, "base": base, **compare(results[label].evaluation, results[base].evaluation,
                                                                  m, seed=seed)})
display(pd.DataFrame(rows) if rows else "no fine-tuned model beside its base in this run")'''),
        new_markdown_cell("## Leaderboard"),
        new_code_cell('''\
board = plots.leaderboard_table(results, metric, report_metrics, seed=seed)
display(board[["label", metric, f"{metric}_ci_low", f"{metric}_ci_high", "diff", "p_value", "significant",
               *report_metrics, "index_seconds", "latency_p50_ms", "n_units", "n_queries"]])'''),
        new_markdown_cell("## Plots"),
        new_code_cell('''\
figures = {
    "leaderboard": plots.leaderboard_bars(board, metric, label="label", highlight=board["significant"],
                                          title=f"{ds.name}/{split}: {metric} by embedding model"),
    "quality_vs_encode_time": plots.quality_vs_latency(board, metric, latency="index_seconds", label="label",
                                                       title="quality vs corpus encode time"),
    "quality_vs_latency": plots.quality_vs_latency(board, metric, latency="latency_p50_ms", label="label",
                                                   title="quality vs per-query latency"),
}
''' + LOG_FIGURES),
    ]


BUILDERS = {
    "01_testset_generation.ipynb": testset_generation,
    "02_chunk_size_grid.ipynb": chunk_size_grid,
    "03_strategy_comparison.ipynb": strategy_comparison,
    "04_embedding_comparison.ipynb": embedding_comparison,
}


def build(name: str):
    """The notebook ``name`` (a key of BUILDERS) as an nbformat node, stripped, with stable cell ids."""
    nb = new_notebook(cells=BUILDERS[name](),
                      metadata={"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    stem = name.split("_", 1)[0]
    for i, cell in enumerate(nb.cells):
        cell.id = f"nb{stem}-{i:02d}"
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook is out of date")
    ap.add_argument("--out", type=Path, default=NOTEBOOKS)
    args = ap.parse_args(argv)
    stale = []
    for name in BUILDERS:
        path = args.out / name
        text = render(name)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    for path in stale:
        print(f"{path}: differs from scripts/make_notebooks.py; run: python scripts/make_notebooks.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
