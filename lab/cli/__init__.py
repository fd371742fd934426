"""The `lab` command: one module per command group (main.py wires them); nothing imports this package."""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {"main": "lab.cli.main"}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
