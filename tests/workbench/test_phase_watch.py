"""lab.workbench.phase_watch: a sweep that says what it is doing. A real local-pool sweep (a worker process, a
Papermill kernel) of a dense config on ORD-QA; its output is not a terminal, so each phase the config's kernel
reports is one line."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from conftest import blank_store

from lab.core import phases
from lab.workbench.sweep import run_sweep

NOTEBOOK = Path(__file__).parents[1] / "fixtures" / "notebooks" / "tiny_experiment.ipynb"

SPEC = """\
notebook: {notebook}
dataset: {dataset}
experiment: phases
fixed: {{strategy: dense, k: 10, max_queries: 10}}
"""


def test_a_pool_sweep_prints_each_phase_of_its_configs(tmp_path, pytestconfig):
    nb = tmp_path / "nb" / NOTEBOOK.name  # its own folder: the kernel's .cache starts empty, so dense encodes
    nb.parent.mkdir()
    shutil.copy(NOTEBOOK, nb)
    spec = tmp_path / "phases.yaml"
    spec.write_text(SPEC.format(notebook=nb, dataset=Path(__file__).parents[2] / "data" / "ord-qa"))
    lines: list[str] = []
    rep = run_sweep(spec, tracking_root=blank_store(tmp_path, pytestconfig), output_dir=tmp_path / "out", jobs=2,
                    progress=True, echo=lines.append)
    assert rep.ok, rep.table()
    # ORD-QA's 290 documents (288 distinct texts), encoded in the config's kernel, reported through the worker's
    # channel file; one line for the phase, not one per batch
    encoding = [x for x in lines if re.fullmatch(r"config 0 \(.+\): dense · encoding 288 passages", x)]
    assert len(encoding) == 1, lines
    assert any(x.endswith("dense · read corpus.jsonl 290 items") for x in lines), lines
    assert phases.ENV not in os.environ  # the sweep restored the environment
