"""Experiment: one dataset x one strategy -> a Result (per-query table + config)."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "Result": "lab.experiment.run",
    "run_experiment": "lab.experiment.run",
    "prepare_experiment": "lab.experiment.run",
    "IndexedExperiment": "lab.experiment.run",
    "load": "lab.experiment.run",
    "split_queries": "lab.experiment.run",
    "trec_result": "lab.experiment.trec",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
