"""lab.models.llm.cores: llama.cpp threads from $LAB_LLM_THREADS or the idle cores."""
from __future__ import annotations

import os

import pytest

from lab.core.errors import ConfigError
from lab.models.llm import LocalLLM
from lab.models.llm.cores import default_threads, idle_cores


@pytest.mark.parametrize(("cores", "idle", "threads"), [(2, 1.9, 2), (2, 1.4, 1), (2, 0.3, 1), (2, 0.0, 1),
                                                         (16, 12.0, 8), (4, 2.6, 3), (1, 1.0, 1)])
def test_default_threads_are_the_idle_cores(monkeypatch, cores, idle, threads):
    """llama.cpp threads spin-wait on each other, so a thread without a free core stalls the rest: the default is
    the cores this process may use that are idle now, at least 1, at most 8."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr("lab.models.llm.cores.idle_cores", lambda n: idle)
    assert default_threads() == threads


def test_idle_cores_reads_the_machine_now():
    """Measured over a short interval from /proc/stat: between 0 and the cores this process may use; a busy loop
    on one of them is seen within the interval."""
    import threading

    n = len(os.sched_getaffinity(0))
    assert 0.0 <= idle_cores(n) <= n
    stop = threading.Event()
    spin = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)], daemon=True)
    spin.start()
    try:
        busy = idle_cores(n, seconds=0.3)
    finally:
        stop.set()
        spin.join()
    assert busy <= n - 0.5


def test_llm_threads_from_the_environment(monkeypatch):
    """$LAB_LLM_THREADS fixes the default (a parallel sweep sets it in each worker to its share of the cores)."""
    monkeypatch.setattr("lab.models.llm.cores.idle_cores", lambda n: pytest.fail("measured despite LAB_LLM_THREADS"))
    monkeypatch.setenv("LAB_LLM_THREADS", "3")
    assert default_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("LAB_LLM_THREADS", bad)
        with pytest.raises(ConfigError, match="LAB_LLM_THREADS=.*integer >= 1"):
            default_threads()
        with pytest.raises(ConfigError, match="LAB_LLM_THREADS="):  # refused when the object is made, before work
            LocalLLM(None, cache_dir=None)
