"""IR metrics (ranking.py), bootstrap CIs and paired tests (stats.py), latency summaries (latency.py).

Conventions (trec_eval / ranx, ties by score then doc id descending) are stated in lab.metrics.ranking.
"""
from lab.metrics.latency import latency_summary
from lab.metrics.ranking import (
    DEFAULT_CUTOFFS,
    DEFAULT_METRICS,
    DEFAULT_TIER_WEIGHTS,
    Evaluation,
    MetricSpec,
    evaluate,
    parse_metric,
)
from lab.metrics.stats import bootstrap_ci, compare, paired_test

__all__ = [
    "DEFAULT_CUTOFFS",
    "DEFAULT_METRICS",
    "DEFAULT_TIER_WEIGHTS",
    "Evaluation",
    "MetricSpec",
    "bootstrap_ci",
    "compare",
    "evaluate",
    "latency_summary",
    "paired_test",
    "parse_metric",
]
