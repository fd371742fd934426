"""Tracking: the MLflow store, one run lifecycle, and logging a Result."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "log_result": "lab.tracking.results",
    "result_metrics": "lab.tracking.results",
    "save_unlogged": "lab.tracking.results",
    "client": "lab.tracking.store",
    "tracking_uri": "lab.tracking.store",
    "log_figure": "lab.tracking.store",
    "load_per_query": "lab.tracking.store",
    "get_or_create_experiment": "lab.tracking.store",
    "tracked_run": "lab.tracking.lifecycle",
    "TrackedRun": "lab.tracking.lifecycle",
    "ui_command": "lab.tracking.ui",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
