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
# # 01 · Test set
#
# The test set every other notebook scores against: queries, their relevance judgements (qrels), grades and, where
# the dataset has them, evidence spans (the passages that hold the answer, for chunk-level relevance).
#
# Four sources (`source`):
# - `"beir"`: **import** a BEIR-layout folder as it is and show what it holds.
# - `"llm"`: **generated questions** from the folder's corpus (`corpus.jsonl` is enough): passages sampled from
#   anywhere in each document (windows by section), an LLM writes a question in the passage's language, quality
#   gates (valid JSON, is a question, same language as the passage, length, no repetition, no copied markup, key
#   words not copied, answerable from the passage, on topic, no near-duplicates) filter them; written as a new
#   BEIR set with the evidence span of every question (`evidence.jsonl`, for chunk-level span relevance in
#   notebook 02) and `provenance.json`. The gate funnel is shown and logged. Same as `lab testset generate`.
# - `"folder"`: **your own documents**: a folder of md / rst / txt / html / pdf / docx files is ingested
#   (`lab ingest FOLDER --out DIR`), then questions are generated from it as for `"llm"`.
# - `"logs"`: **FAQ import**: a FAQ / ticket log (CSV or JSONL: question, optional answer and document reference),
#   each row linked to a passage by its reference or by BM25 + dense match above a threshold; the rows left
#   unlinked are listed. Same as `lab testset import-logs`.
#
# The packaged 135M model makes this run offline anywhere, but it is a pipeline check, not a question writer:
# for a set you report on, use `llm = "openai:MODEL"` (any OpenAI-compatible endpoint).
#
# Then a spot check by people: `lab testset export-review SET review.csv` (keep / fix / drop, grade), fill it,
# `lab testset import-review SET review.csv` (acceptance rate, and the CI half-width the set gives Recall@10).
#
# Run it as it is, or as a sweep over the bundled datasets: `lab sweep params/testset.yaml`.

# %% tags=["parameters"]
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
mlflow_run_id = None        # set by `lab sweep`: log into this run instead of starting one

# %%
# Setup (lab.workbench.notebook.setup): offline model libraries, inline figures, pandas display, one Context
# (cache, seed) for every run; the dataset is loaded by the Source cell below.
import pandas as pd
from IPython.display import display

from lab.analysis import plots
from lab.core.paths import repo_root, resolve_repo_path
from lab.experiment.run import load
from lab.tracking.store import log_figure, tracking_uri
from lab.workbench.notebook import setup

ctx, _ = setup(None, seed=seed, progress=progress)

# %% [markdown]
# ## Source
# A BEIR folder, or (`source = "folder"`) your own documents, ingested first into a corpus (`lab ingest`): the
# summary counts files per format and lists the files that could not be read, with the reason.

# %%
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
print(f"repo:    {repo_root()}\ndataset: {ds.name} ({len(ds.corpus):,} documents; splits {sorted(ds.qrels)})\n"
      f"MLflow:  {tracking_uri(tracking_root)}, experiment {experiment!r}")

# %% [markdown]
# ## Queries and judgements

# %%
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
                     index=list(qrels)[:5]))

# %% [markdown]
# ## Distributions
# Judgements per query, grades, and query length (in words; in characters for Chinese, which has no spaces).
# Many queries with a single judged document make recall@k coarse (0 or 1 per query), so confidence intervals
# over queries matter.

# %%
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
                                                      bins=30, title=f"{ds.name}/{split}: evidence spans")

# %% [markdown]
# ## Record in MLflow

# %%
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
for _name, _fig in figures.items():
    display(_fig)
    for _run_id in run_ids:
        log_figure(_fig, _name, _run_id, tracking_root=tracking_root)
if mlflow_run_id is None:
    cl.set_terminated(run_id, "FINISHED")
print(f"logged to run {run_id}")
