"""Every script of benchmarks/ runs at its tiny ``--smoke`` size, so a change that breaks one fails CI.

One case per script, found by listing the folder: a new script must accept ``--smoke`` (tiny sizes, real code paths,
figures that mean nothing) or this test fails for it. Each runs in its own process from the repository root, as a
user runs it, with this checkout's ``lab`` first on the path; stdout must not be empty and the exit status 0.
The selected scripts start together, two at a time (:data:`AT_ONCE`), when the first case runs; each case waits
for its own script. Most of a smoke run is one core starting Python, importing and compiling, so two at a time
took about half the suite's time off these cases on 2 cores; a smoke run's figures mean nothing anyway.
"""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))
TIMEOUT_S = 900  # a script's smoke run takes seconds to a minute on 2 free cores; the margin is for loaded machines
AT_ONCE = 2


def test_the_benchmarks_folder_has_scripts():
    assert len(SCRIPTS) >= 10, SCRIPTS


def _smoke(script: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path,
           "LAB_NO_PROGRESS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--smoke"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def smoke_runs(request):
    """{script: its smoke run}, the selected scripts started together, :data:`AT_ONCE` at a time."""
    selected = [item.callspec.params["script"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_benchmark_runs_at_smoke_size"]
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        runs: dict[str, Future] = {s: pool.submit(_smoke, s) for s in selected}
        yield runs
        for f in runs.values():
            f.cancel()


@pytest.mark.bench_smoke
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_at_smoke_size(script, smoke_runs):
    proc = smoke_runs[script].result() if script in smoke_runs else _smoke(script)
    tail = (proc.stdout[-2000:] + "\n" + proc.stderr[-3000:]).strip()
    assert proc.returncode == 0, f"benchmarks/{script} --smoke exited {proc.returncode}:\n{tail}"
    assert proc.stdout.strip(), f"benchmarks/{script} --smoke printed nothing:\n{tail}"
