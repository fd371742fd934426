"""Analysis: the one leaderboard and its adapters, compare, report, diagnosis, gate, plots, robustness."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "leaderboard": "lab.analysis.leaderboard",
    "results_leaderboard": "lab.analysis.plots",
    "results_table": "lab.analysis.plots",
    "experiment_leaderboard": "lab.analysis.compare",
    "format_leaderboard": "lab.analysis.compare",
    "report_leaderboard": "lab.analysis.report",
    "build_report": "lab.analysis.report",
    "diagnose": "lab.analysis.diagnosis",
    "run_gate": "lab.analysis.gate",
    "run_robustness": "lab.analysis.robustness",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
