"""Workbench: sweep specs, sweeps (Papermill, local pool, Ray), halving, schedules, monitoring, the demo."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "run_sweep": "lab.workbench.sweep",
    "SweepReport": "lab.workbench.sweep",
    "load_spec": "lab.workbench.config",
    "SweepSpec": "lab.workbench.config",
    "validate_sweep": "lab.workbench.sweep_check",
    "run_halving_sweep": "lab.workbench.halving",
    "run_scheduled": "lab.workbench.schedule",
    "run_demo": "lab.workbench.demo",
    "setup": "lab.workbench.notebook",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
