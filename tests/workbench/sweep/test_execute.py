"""lab.workbench.sweep.execute: the kernel a config runs on, and which kernel failures are started again."""
from __future__ import annotations

import os
import sys

from jupyter_client.kernelspec import KernelSpecManager

from lab.workbench.sweep import KERNEL_START_RETRIES, default_kernel, is_kernel_start_failure


def test_default_kernel_runs_this_interpreter():
    name = default_kernel()
    argv0 = KernelSpecManager().get_kernel_spec(name).argv[0]
    # "raglab" (make setup) points at the venv's python; a bare "python" is replaced by sys.executable
    assert os.path.abspath(argv0) == os.path.abspath(sys.executable) or argv0 in ("python", "python3")


def test_kernel_start_failures_are_told_from_notebook_errors():
    """Only a kernel that never started is started again (no cell ran); any other failure is recorded as it is."""
    assert KERNEL_START_RETRIES >= 1
    assert is_kernel_start_failure(RuntimeError("Kernel died before replying to kernel_info"))
    assert is_kernel_start_failure(RuntimeError("Kernel didn't respond in 180 seconds"))
    assert not is_kernel_start_failure(RuntimeError("Kernel died"))  # mid-execution (e.g. out of memory)
    assert not is_kernel_start_failure(ValueError("Kernel died before replying to kernel_info"))
