"""Latency summary of per-query retrieval timings.

Convention: timings come in seconds (Run.latency: query id -> seconds, each query timed alone) and are
reported in milliseconds. Percentiles use numpy's default "linear" method (type 7 of Hyndman & Fan, the
one of R and Excel's PERCENTILE.INC): the p-th percentile of n sorted values x_0..x_{n-1} is read at
position h = (n - 1) p / 100 and interpolated linearly between x_floor(h) and x_ceil(h).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

KEYS = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "latency_mean_ms", "latency_max_ms")


def latency_summary(seconds: Mapping[str, float] | np.ndarray | list[float]) -> dict[str, float]:
    """{"latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "latency_mean_ms", "latency_max_ms"}.

    seconds: per-query timings in seconds, a dict (query id -> seconds) or an array. With no timings every
    value is NaN (nothing was measured: never 0). A negative, NaN or infinite timing raises ValueError.
    """
    if isinstance(seconds, Mapping):
        x = np.fromiter(seconds.values(), dtype=np.float64, count=len(seconds))
    else:
        x = np.asarray(seconds, dtype=np.float64).ravel()
    if x.size == 0:
        return {k: float("nan") for k in KEYS}
    if not np.isfinite(x).all() or (x < 0).any():
        bad = np.flatnonzero(~np.isfinite(x) | (x < 0))[0]
        where = list(seconds)[bad] if isinstance(seconds, Mapping) else f"index {bad}"
        raise ValueError(f"latency_summary: timing of {where!r} is {x[bad]!r}; timings must be finite seconds >= 0")
    ms = x * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99], method="linear")
    return {
        "latency_p50_ms": float(p50),
        "latency_p95_ms": float(p95),
        "latency_p99_ms": float(p99),
        "latency_mean_ms": float(ms.mean()),
        "latency_max_ms": float(ms.max()),
    }
