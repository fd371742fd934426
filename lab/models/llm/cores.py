"""How many llama.cpp threads a local model gets: ``$LAB_LLM_THREADS`` when set, else the cores this process may
use that are idle now (per-CPU idle time from ``/proc/stat``)."""
from __future__ import annotations

import os
import time

from lab.core.errors import ConfigError

#: Environment variable that fixes llama.cpp's thread count for every LocalLLM without ``threads`` (an integer
#: >= 1); a parallel sweep sets it in its workers to their share of the cores.
THREADS_ENV = "LAB_LLM_THREADS"


def usable_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; elsewhere ``os.cpu_count()``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads_from_env() -> int | None:
    """``$LAB_LLM_THREADS`` as an integer >= 1, None when unset; a ConfigError names any other value."""
    fixed = os.environ.get(THREADS_ENV, "").strip()
    if not fixed:
        return None
    if not fixed.isdigit() or int(fixed) < 1:
        raise ConfigError(f"{THREADS_ENV}={fixed!r}: must be an integer >= 1 (llama.cpp threads), or unset to use "
                          f"the idle cores")
    return int(fixed)


def default_threads(max_threads: int = 8) -> int:
    """llama.cpp threads when none are given: ``$LAB_LLM_THREADS`` when set, else the cores this process may use
    (``os.sched_getaffinity``) that are idle now (:func:`idle_cores`), at least 1, at most ``max_threads``.
    llama.cpp's threads spin-wait on each other, so a thread without a core of its own stalls the rest: on a 2-core
    machine shared with other jobs, 2 threads were 10-30x slower than 1; on the same machine idle, 2 threads wrote
    1.7-2x the candidates per minute of 1 (the packaged SmolLM2, docs/results.md). Greedy answers were the same at
    1 and 2 threads, and the thread count is not in the LLM cache's key."""
    fixed = threads_from_env()
    if fixed is not None:
        return fixed
    cores = usable_cores()
    return max(1, min(max_threads, cores, round(idle_cores(cores))))


def idle_cores(cores: int, seconds: float = 0.2) -> float:
    """How many of the cores this process may use are idle now: their idle time over ``seconds``, from the per-CPU
    lines of ``/proc/stat`` (Linux; the CPUs of ``os.sched_getaffinity``, so a container pinned to some CPUs reads
    those); elsewhere ``cores`` less the 1-minute load average. The load average lags by a minute (a command that
    just finished still counts), so the instant reading is preferred."""
    mine = {f"cpu{i}" for i in (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(cores))}

    def sample() -> tuple[int, int] | None:
        idle = total = 0
        try:
            with open("/proc/stat", encoding="ascii") as f:
                for line in f:
                    name, *values = line.split()
                    if name in mine and len(values) >= 4:
                        fields = [int(x) for x in values]
                        idle += fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
                        total += sum(fields[:8])  # user .. steal (guest time is already in user)
        except (OSError, ValueError):
            return None
        return (idle, total) if total else None

    first = sample()
    time.sleep(seconds)
    second = sample()
    if first is None or second is None or second[1] <= first[1]:
        return max(0.0, cores - (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0))
    return len(mine) * (second[0] - first[0]) / (second[1] - first[1])
