"""raglab: measure and improve the retrieval half of RAG systems.

The public face, what a notebook or a script needs (``from lab import run_experiment, leaderboard``):

- :func:`load_dataset`: a BEIR-layout folder -> :class:`Dataset` (corpus, queries, qrels, evidence).
- :func:`evaluate`: a run against qrels -> :class:`Evaluation` (per-query table and means).
- :func:`run_experiment`: one dataset x one strategy -> a :class:`Result` (run, evaluation, timings, config).
- :func:`run_sweep`: a sweep spec (params/*.yaml) -> one notebook execution and MLflow run per config.
- :func:`leaderboard`: the one leaderboard (per-query scores -> rows with CIs and paired tests); its adapters
  :func:`results_leaderboard` ({label: Result}, in a notebook) and :func:`experiment_leaderboard` (the runs of
  an MLflow experiment, as ``lab compare`` prints them).
- :func:`build` / :func:`available`: the strategy registry; :func:`log_result`: a Result into MLflow.

Names are loaded on first use (module ``__getattr__``), so ``import lab`` stays cheap: the CLI and the
layers import only what they use.
"""
from __future__ import annotations

from lab.core.lazy import lazy_exports

__version__ = "0.1.0"

#: Version of the metric definitions. Bump on any change of convention (cut-offs, tie rule,
#: relevance threshold, gain function) so numbers from different versions are never compared silently.
#: 2: token_precision@k and token_iou@k count every retrieved chunk in the chunking's units (version 1 counted the
#: chunks of documents without evidence in characters, which deflated both under size_unit tokens or words).
METRICS_VERSION = "2"

#: Public name -> the module that defines it.
_PUBLIC = {
    "load_dataset": "lab.data.beir",
    "Dataset": "lab.data.types",
    "Corpus": "lab.data.types",
    "Queries": "lab.data.types",
    "Qrels": "lab.data.types",
    "Run": "lab.data.types",
    "evaluate": "lab.metrics.ranking",
    "Evaluation": "lab.metrics.ranking",
    "compare": "lab.metrics.stats",
    "Context": "lab.retrievers.base",
    "build": "lab.retrievers.base",
    "available": "lab.retrievers.base",
    "run_experiment": "lab.experiment.run",
    "Result": "lab.experiment.run",
    "log_result": "lab.tracking.results",
    "leaderboard": "lab.analysis.leaderboard",
    "results_leaderboard": "lab.analysis.plots",
    "experiment_leaderboard": "lab.analysis.compare",
    "run_sweep": "lab.workbench.sweep",
}

__all__ = ["METRICS_VERSION", "__version__", *_PUBLIC]

__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
