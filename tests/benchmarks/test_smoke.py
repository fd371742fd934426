"""Every script of benchmarks/ runs at its tiny ``--smoke`` size, so a change that breaks one fails CI.

One case per script, found by listing the folder: a new script must accept ``--smoke`` (tiny sizes, real code paths,
figures that mean nothing) or this test fails for it. Each runs in its own process from the repository root, as a
user runs it, with this checkout's ``lab`` first on the path; stdout must not be empty and the exit status 0.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))
TIMEOUT_S = 900  # a script's smoke run takes seconds to a minute on 2 free cores; the margin is for loaded machines


def test_the_benchmarks_folder_has_scripts():
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.bench_smoke
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_at_smoke_size(script):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "LAB_NO_PROGRESS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--smoke"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    tail = (proc.stdout[-2000:] + "\n" + proc.stderr[-3000:]).strip()
    assert proc.returncode == 0, f"benchmarks/{script} --smoke exited {proc.returncode}:\n{tail}"
    assert proc.stdout.strip(), f"benchmarks/{script} --smoke printed nothing:\n{tail}"
