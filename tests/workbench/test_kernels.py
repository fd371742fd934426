"""lab.workbench.kernels: which imports are preloaded, and that a prewarmed kernel runs a notebook through Papermill
exactly as a fresh one does (same outputs), with the imports already done, and falls back (None) when warming fails."""
from __future__ import annotations

import json
import time

import nbformat
import pytest

from lab.workbench.kernels import WarmKernels, notebook_imports, preload_code, shutdown
from lab.workbench.sweep import default_kernel


def _notebook(path, cells: list[str]) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    first = nbformat.v4.new_code_cell(cells[0])
    first.metadata["tags"] = ["parameters"]
    nb.cells = [first] + [nbformat.v4.new_code_cell(c) for c in cells[1:]]
    nbformat.write(nb, str(path))
    return str(path)


def test_notebook_imports_takes_top_level_imports_only(tmp_path):
    nb = _notebook(tmp_path / "a.ipynb", [
        "x = 1",
        "from __future__ import annotations\nimport os\n%matplotlib inline\nimport json as js\n"
        "from pathlib import Path",
        "def f():\n    import csv\nif x:\n    import email\nimport os",
        "this is not python (",
    ])
    assert notebook_imports(nb) == "import os\nimport json as js\nfrom pathlib import Path"
    code = preload_code(nb)
    assert code.startswith("import os\nos.environ.setdefault('HF_HUB_OFFLINE', '1')")
    compile(code, "<preload>", "exec")


def test_prewarmed_kernel_runs_the_notebook_like_a_fresh_one(tmp_path):
    import papermill as pm

    nb = _notebook(tmp_path / "b.ipynb", [
        "x = 2",
        "import sys\nimport csv",
        "print('csv' in sys.modules, x * 21)",
    ])
    kernel = default_kernel()
    cold = tmp_path / "cold.ipynb"
    pm.execute_notebook(nb, str(cold), parameters={"x": 3}, kernel_name=kernel, progress_bar=False, log_output=False)
    with WarmKernels(kernel, nb) as pool:
        km = pool.take(more=False)
        assert km is not None and km.has_kernel and not pool.failures
        warm = tmp_path / "warm.ipynb"
        try:
            pm.execute_notebook(nb, str(warm), parameters={"x": 3}, kernel_name=kernel, progress_bar=False,
                                log_output=False, km=km)
        finally:
            shutdown(km)
        assert not km.has_kernel
        assert pool.take() is None  # nothing warming after more=False; closed pools give nothing either

    def outputs(p):
        return [c.get("outputs") for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code"][-1]

    assert outputs(cold) == outputs(warm) == [{"name": "stdout", "output_type": "stream", "text": ["True 63\n"]}]


def test_failed_warmup_gives_none_and_says_why(tmp_path):
    nb = _notebook(tmp_path / "c.ipynb", ["x = 1", "import a_module_that_does_not_exist_here"])
    with WarmKernels(default_kernel(), nb, timeout=60) as pool:
        t0 = time.perf_counter()
        assert pool.take(more=False) is None
        assert time.perf_counter() - t0 < 60
        assert pool.failures and "a_module_that_does_not_exist_here" in pool.failures[0]


@pytest.mark.parametrize("more", [True, False])
def test_close_shuts_down_a_kernel_nobody_took(tmp_path, more):
    nb = _notebook(tmp_path / "d.ipynb", ["x = 1", "import json"])
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    pool = WarmKernels(default_kernel(), nb)
    km = pool.take(more=more)
    shutdown(km)
    pool.close()
    assert pool.take() is None
    deadline = time.time() + 10
    while time.time() < deadline:  # every kernel this pool started is gone (the warmed-ahead one included)
        left = {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE} - before
        if not left:
            break
        time.sleep(0.2)
    assert not left
