"""Test sets: generated questions (an LLM with quality gates), FAQ import (FAQ / ticket logs), annotation sheets
(people grade pooled candidates), and a spot check by people (export / import a review).

Each of them writes a BEIR-layout folder that :func:`lab.data.beir.load_dataset` reads unchanged, plus a
``provenance.json`` saying what made it (see :mod:`lab.testset.io`). The ``lab testset`` command wraps them.
"""
from lab.core.lazy import lazy_exports

#: Public name -> the module that defines it (loaded on first use).
_PUBLIC = {
    "generate_testset": "lab.testset.generate",
    "GenerationConfig": "lab.testset.generation_config",
    "judge_dataset": "lab.testset.judge",
    "JudgeConfig": "lab.testset.judge_config",
    "import_logs": "lab.testset.logs",
    "export_annotation": "lab.testset.annotate",
    "import_annotation": "lab.testset.annotate",
    "export_review": "lab.testset.spotcheck",
    "import_review": "lab.testset.spotcheck",
    "perturb_dataset": "lab.testset.perturb",
}
__all__ = list(_PUBLIC)
__getattr__, __dir__ = lazy_exports(globals(), _PUBLIC)
