"""The local executor: configs one after another in this process (each next kernel warmed while the current config
runs), or in a pool of spawned worker processes that die with the sweep."""
from __future__ import annotations

import atexit
import ctypes
import multiprocessing as mp
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import Iterator

from lab.core import phases
from lab.models.llm import THREADS_ENV, usable_cores
from lab.workbench.kernels import WarmKernels
from lab.workbench.sweep.execute import KERNEL_ARGUMENTS, default_kernel, execute_config
from lab.workbench.sweep.outcome import ConfigOutcome, SweepTask


def init_worker(llm_threads: int) -> None:
    """Pool-worker initializer: die with the sweep (:func:`die_with_parent`), and give a local LLM made in this
    worker (or its notebook kernel) its share of the cores, ``$LAB_LLM_THREADS`` (unless the user set it): each
    worker measuring the idle cores at once would see them all free and take them all, and llama.cpp's spinning
    threads slow 10-30x without a core of their own."""
    die_with_parent()
    os.environ.setdefault(THREADS_ENV, str(llm_threads))


def die_with_parent() -> None:
    """Pool-worker initializer: end this process when the sweep process dies (kill -9 included)."""
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True, name="lab-parent-watch").start()


def run_local(tasks: list[SweepTask], jobs: int, warm_kernels: bool = True) -> Iterator[ConfigOutcome]:
    if jobs <= 1:
        if not warm_kernels or len(tasks) < 2 or len({(t.notebook, t.kernel_name) for t in tasks}) > 1:
            for t in tasks:
                yield execute_config(t)
            return
        name = tasks[0].kernel_name or default_kernel()
        with WarmKernels(name, tasks[0].notebook, extra_arguments=KERNEL_ARGUMENTS) as kernels:
            for i, t in enumerate(tasks):
                yield execute_config(t, kernels=kernels, more=i + 1 < len(tasks))
        return
    ctx = mp.get_context("spawn")
    run = execute_warm if warm_kernels else execute_config
    share = max(1, usable_cores() // jobs)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=init_worker, initargs=(share,)) as pool:
        futures = {pool.submit(run, t): t for t in mark_last(tasks, jobs)}
        for f in as_completed(futures):
            yield future_result(f, futures[f])


#: This worker process's :class:`lab.workbench.kernels.WarmKernels` per (kernel name, notebook), with whether it is
#: warming a next kernel, for pool and Ray workers (see :func:`execute_warm`); closed when the process exits.
_WORKER_KERNELS: dict = {}


def mark_last(tasks: list[SweepTask], jobs: int) -> list[SweepTask]:
    """The tasks with ``warm_next``: False for the last ``jobs`` of them (handed out in this order, each is the last
    its worker gets, so warming a kernel after it would be wasted work at the end of the sweep)."""
    return [replace(t, warm_next=i < len(tasks) - max(jobs, 1)) for i, t in enumerate(tasks)]


def execute_warm(task: SweepTask) -> ConfigOutcome:
    """:func:`execute_config` in a pool or Ray worker, with a kernel this worker warmed while its previous config
    ran (the first config of a worker waits for its own). The worker warms one more unless the task says it is
    among the last (``warm_next``, :func:`_mark_last`); a kernel warmed for nothing is shut down when the worker
    exits, and a config that finds none runs on a cold kernel (tag ``sweep.kernel=cold``)."""
    key = (task.kernel_name or default_kernel(), task.notebook)
    phases.bind(task.phase_dir)  # before a kernel starts here: it inherits where to report
    if not _WORKER_KERNELS:
        atexit.register(lambda: [k.close() for k, _ in _WORKER_KERNELS.values()])
    kernels, warming = _WORKER_KERNELS.get(key, (None, False))
    if not warming:  # first config here, or the one before was marked last: start one now
        if kernels is not None:
            kernels.close()
        kernels = WarmKernels(key[0], task.notebook, extra_arguments=KERNEL_ARGUMENTS)
    _WORKER_KERNELS[key] = (kernels, task.warm_next)
    return execute_config(task, kernels=kernels, more=task.warm_next)


def future_result(future, task: SweepTask) -> ConfigOutcome:
    """A worker's outcome, or a FAILED outcome when the worker itself died (the run stays for the next resume)."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - a worker that died: recorded as FAILED, the sweep goes on
        return task.outcome("FAILED", error=f"{type(exc).__name__}: {exc}")


#: Tags a Ray task adds to its run: the Ray node it ran on (id and IP address) and where its notebook and dataset
