"""lab.metrics.latency: percentiles by numpy's linear interpolation, in milliseconds."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lab.data.types import Run
from lab.metrics import latency_summary
from lab.metrics.latency import KEYS


def test_hand_computed_linear_interpolation():
    # sorted ms 100, 200, 300, 400; p-th percentile at position h = 3 p / 100:
    # p50 h=1.5 -> 250; p95 h=2.85 -> 300 + 0.85 * 100 = 385; p99 h=2.97 -> 397
    out = latency_summary({"q4": 0.4, "q1": 0.1, "q3": 0.3, "q2": 0.2})
    assert list(out) == list(KEYS)
    assert out == pytest.approx({"latency_p50_ms": 250.0, "latency_p95_ms": 385.0, "latency_p99_ms": 397.0,
                                 "latency_mean_ms": 250.0, "latency_max_ms": 400.0})
    assert all(type(v) is float for v in out.values())


def test_array_and_dict_agree_with_numpy():
    x = np.random.default_rng(0).lognormal(-4, 1, size=1001)
    a = latency_summary(x)
    assert a == latency_summary({str(i): v for i, v in enumerate(x)}) == latency_summary(list(x))
    assert a["latency_p99_ms"] == pytest.approx(np.percentile(x, 99) * 1000)
    assert a["latency_p50_ms"] <= a["latency_p95_ms"] <= a["latency_p99_ms"] <= a["latency_max_ms"]


def test_run_latency_and_single_value():
    run = Run({"q": {"d": 1.0}}, latency={"q": 0.0123})
    assert latency_summary(run.latency) == pytest.approx(dict.fromkeys(KEYS, 12.3))


def test_nothing_measured_is_nan_not_zero():
    assert all(math.isnan(v) for v in latency_summary({}).values())
    assert all(math.isnan(v) for v in latency_summary(np.array([])).values())


def test_bad_timings_name_the_query():
    with pytest.raises(ValueError, match="'q2'"):
        latency_summary({"q1": 0.1, "q2": -0.5})
    with pytest.raises(ValueError, match="index 1"):
        latency_summary([0.1, float("nan")])
    with pytest.raises(ValueError, match="finite"):
        latency_summary([math.inf])
