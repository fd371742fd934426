"""Diagnosis: rules that link low retrieval metrics to their likely causes and the next thing to try.

A symptom -> root cause -> fix table, made differential: a low metric alone says little,
the pattern across metrics says where the loss happens. Recall at depth separates "never retrieved" (chunking,
embedding, vocabulary) from "retrieved but ranked low" (reranking); early recall with a good first hit points at
evidence split over chunks; latency and the confidence interval get their own rules.

Conventions
- Input of every rule: one flat mapping ``figures`` of a run: metric means under their names ("ndcg@10",
  "recall@100", ...), CI bounds (``<metric>_ci_low`` / ``_ci_high``), latency figures (``latency_p95_ms``), and
  optional context keys: ``precision@3_ceiling`` (the mean over queries of min(1, relevant documents / 3), the
  best precision@3 any ranking could reach, from the qrels: :func:`precision_ceiling`),
  ``p_value`` / ``diff`` (paired test against the reference run, run minus reference) and
  ``reference_latency_p50_ms``. NaN and absent values count as absent.
- A rule is a small pure function ``figures -> Finding | None``: None when it does not fire or when a figure it
  needs is absent (a rule never guesses a missing metric). Thresholds are the named module constants.
- Metrics are higher-is-better fractions in [0, 1]; latency is in milliseconds.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

#: recall@100 below this: the first stage never brings the evidence into the candidate list (coverage).
RECALL_AT_DEPTH_MIN = 0.85
#: recall@3 below this (the project's target: Recall@3 >= 75%): the evidence chain is not in the LLM's top 3.
RECALL_AT_3_MIN = 0.75
#: mrr@10 below this (target: MRR >= 0.65): the best evidence is not near the top.
MRR_MIN = 0.65
#: map@100 below this (target: MAP >= 0.55): further relevant chunks sit deep in the list.
MAP_MIN = 0.55
#: hit_rate@3 below this (target: Hit Rate@3 >= 95%): queries with no relevant chunk in the top 3.
HIT_RATE_AT_3_MIN = 0.95
#: ndcg@3 below this (target: nDCG@3 >= 0.70): importance and position do not match.
NDCG_AT_3_MIN = 0.70
#: precision@3 below this fraction of its ceiling (best reachable precision@3; target: 80% of it).
PRECISION_AT_3_MIN = 0.80
#: latency_p95_ms above this: too slow for interactive RAG (a cross-encoder reranker alone adds ~200 ms a query on
#: a CPU).
LATENCY_P95_MAX_MS = 200.0
#: ndcg@10 CI wider than this: too few queries to tell configurations apart (a 2-point difference should be visible).
CI_WIDTH_MAX = 0.10
#: a run not significantly below the reference (p >= ALPHA) and this many times faster (P50) is worth a look.
SPEEDUP_MIN = 5.0
#: significance level of the paired test read by :func:`cheaper_equivalent`.
ALPHA = 0.05

#: Severity order, most urgent first.
SEVERITIES = ("high", "medium", "low", "info")


@dataclass(frozen=True)
class Finding:
    """One fired rule: what was seen (``symptom``, with the numbers), why it usually happens, what to try next."""

    rule: str
    severity: str
    metric: str
    value: float
    threshold: float
    symptom: str
    cause: str
    action: str


def _get(figures: Mapping[str, float], name: str) -> float | None:
    """A finite float figure, or None when absent, None or NaN."""
    v = figures.get(name)
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def coverage_gap(figures: Mapping[str, float]) -> Finding | None:
    """recall@100 < RECALL_AT_DEPTH_MIN: the evidence never reaches the candidate list (no reranker can help)."""
    r = _get(figures, "recall@100")
    if r is None or r >= RECALL_AT_DEPTH_MIN:
        return None
    return Finding(
        "coverage_gap", "high", "recall@100", r, RECALL_AT_DEPTH_MIN,
        f"recall@100 {r:.3f} < {RECALL_AT_DEPTH_MIN}: relevant chunks are missing even from the top 100",
        "Chunking splits or dilutes the evidence, or the embedding model does not match the domain vocabulary "
        "(BM25: the query uses other words than the documents).",
        "Grid chunk size and overlap first (params/chunk_size_grid.yaml; chunk size alone can move Recall@10 by "
        "more than 10 points), then compare embedding models (params/embedding_comparison.yaml) and add BM25 through "
        "hybrid (RRF).")


def ranking_gap(figures: Mapping[str, float]) -> Finding | None:
    """recall@100 >= RECALL_AT_DEPTH_MIN but mrr@10 < MRR_MIN: retrieved, ranked too low: a reranking problem."""
    r, m = _get(figures, "recall@100"), _get(figures, "mrr@10")
    if r is None or m is None or r < RECALL_AT_DEPTH_MIN or m >= MRR_MIN:
        return None
    return Finding(
        "ranking_gap", "high", "mrr@10", m, MRR_MIN,
        f"recall@100 {r:.3f} is good but mrr@10 {m:.3f} < {MRR_MIN}: the evidence is retrieved, then ranked low",
        "The first stage finds the evidence but orders it poorly (no reranker, or a stale one).",
        "Add a reranker over the top 50 (strategy rerank or hybrid_rerank; a cross-encoder typically adds "
        "3-5 nDCG points for ~200 ms), or fuse BM25 and dense (hybrid) if only one is used.")


def early_recall_gap(figures: Mapping[str, float]) -> Finding | None:
    """recall@3 < RECALL_AT_3_MIN while mrr@10 >= MRR_MIN and recall@100 is good: the first hit is early but
    the rest of the evidence chain is not in the top 3."""
    r3, m, r = _get(figures, "recall@3"), _get(figures, "mrr@10"), _get(figures, "recall@100")
    if r3 is None or m is None or r is None:
        return None
    if r3 >= RECALL_AT_3_MIN or m < MRR_MIN or r < RECALL_AT_DEPTH_MIN:
        return None
    return Finding(
        "early_recall_gap", "medium", "recall@3", r3, RECALL_AT_3_MIN,
        f"recall@3 {r3:.3f} < {RECALL_AT_3_MIN} although the first hit is early (mrr@10 {m:.3f})",
        "The evidence is spread over several chunks (e.g. steps 1-3 cut into different chunks), so one is found "
        "and the others rank lower.",
        "Sliding-window chunks with overlap (e.g. 512 with 128 overlap) and the section title as prefix "
        "(chunking.title_prefix); or pass k >= 5 chunks to the LLM.")


def missing_key_evidence(figures: Mapping[str, float]) -> Finding | None:
    """hit_rate@3 < HIT_RATE_AT_3_MIN: some queries get no relevant chunk at all in the top 3."""
    h = _get(figures, "hit_rate@3")
    if h is None or h >= HIT_RATE_AT_3_MIN:
        return None
    return Finding(
        "missing_key_evidence", "medium", "hit_rate@3", h, HIT_RATE_AT_3_MIN,
        f"hit_rate@3 {h:.3f} < {HIT_RATE_AT_3_MIN}: {100 * (1 - h):.0f}% of queries have no relevant chunk "
        "in the top 3",
        "Synonyms the index does not know (query 'torque', document 'tightening moment'), or the key field cut "
        "off at a chunk boundary.",
        "Read the worst queries below; expand queries with a domain synonym list, add exact-term matching "
        "(hybrid), check chunk boundaries of the failing documents.")


def tail_noise(figures: Mapping[str, float]) -> Finding | None:
    """map@100 < MAP_MIN while mrr@10 >= MRR_MIN: the top is right, further relevant chunks sit deep."""
    a, m = _get(figures, "map@100"), _get(figures, "mrr@10")
    if a is None or m is None or a >= MAP_MIN or m < MRR_MIN:
        return None
    return Finding(
        "tail_noise", "low", "map@100", a, MAP_MIN,
        f"map@100 {a:.3f} < {MAP_MIN} with a good first hit (mrr@10 {m:.3f})",
        "Weakly related chunks fill the list between the relevant ones and dilute what the LLM reads.",
        "Pass fewer chunks to the LLM (cut after the top 5-10) or rerank deeper so the remaining evidence moves "
        "up.")


def order_mismatch(figures: Mapping[str, float]) -> Finding | None:
    """ndcg@3 < NDCG_AT_3_MIN while mrr@10 >= MRR_MIN: a relevant chunk is on top, but not the most useful."""
    n, m = _get(figures, "ndcg@3"), _get(figures, "mrr@10")
    if n is None or m is None or n >= NDCG_AT_3_MIN or m < MRR_MIN:
        return None
    return Finding(
        "order_mismatch", "medium", "ndcg@3", n, NDCG_AT_3_MIN,
        f"ndcg@3 {n:.3f} < {NDCG_AT_3_MIN} although mrr@10 is {m:.3f}",
        "The ranking does not follow importance: a secondary chunk is first, the key one lower.",
        "Fine-tune the reranker on graded labels (lab train-reranker) or mix its score with the first stage "
        "(alpha).")


def precision_ceiling(relevant_counts, k: int = 3) -> float:
    """The best mean precision@k any ranking could reach: mean over queries of min(1, relevant / k)."""
    counts = [int(c) for c in relevant_counts]
    if not counts:
        return math.nan
    return sum(min(1.0, c / k) for c in counts) / len(counts)


def precision_noise(figures: Mapping[str, float]) -> Finding | None:
    """precision@3 < PRECISION_AT_3_MIN x ``precision@3_ceiling`` (needs the ceiling: with one relevant document
    per query, precision@3 cannot exceed 1/3, so the raw seed threshold would always fire)."""
    p, ceiling = _get(figures, "precision@3"), _get(figures, "precision@3_ceiling")
    if p is None or ceiling is None or ceiling <= 0:
        return None
    if p >= PRECISION_AT_3_MIN * ceiling:
        return None
    return Finding(
        "precision_noise", "medium", "precision@3", p, PRECISION_AT_3_MIN * ceiling,
        f"precision@3 {p:.3f} < {PRECISION_AT_3_MIN} x its ceiling {ceiling:.3f} (the best any ranking reaches "
        "with these qrels)",
        "The top 3 hold look-alike chunks (same topic, no answer): the embedding does not separate them in "
        "this domain.",
        "Adapt the embedding to the domain (fine-tune on your queries) or expand queries with domain terms; "
        "a reranker also pushes look-alikes down.")


def slow_queries(figures: Mapping[str, float]) -> Finding | None:
    """latency_p95_ms > LATENCY_P95_MAX_MS: too slow for interactive use."""
    t = _get(figures, "latency_p95_ms")
    if t is None or t <= LATENCY_P95_MAX_MS:
        return None
    return Finding(
        "slow_queries", "medium", "latency_p95_ms", t, LATENCY_P95_MAX_MS,
        f"P95 latency {t:.0f} ms > {LATENCY_P95_MAX_MS:.0f} ms",
        "A per-query model stage (cross-encoder, LLM rewrite) over many candidates, query encoding on the CPU, "
        "or exact search over a large index.",
        "Rerank fewer candidates (top 20-50), cache repeated queries, use an ANN index (faiss IVF/HNSW) or a "
        "smaller model; pick from the quality-vs-latency Pareto front.")


def uncertain_estimate(figures: Mapping[str, float]) -> Finding | None:
    """ndcg@10 CI wider than CI_WIDTH_MAX: the test set is too small to rank configurations."""
    lo, hi = _get(figures, "ndcg@10_ci_low"), _get(figures, "ndcg@10_ci_high")
    if lo is None or hi is None or hi - lo <= CI_WIDTH_MAX:
        return None
    return Finding(
        "uncertain_estimate", "info", "ndcg@10", hi - lo, CI_WIDTH_MAX,
        f"ndcg@10 95% CI is {hi - lo:.3f} wide ([{lo:.3f}, {hi:.3f}])",
        "Too few test queries: differences between configurations below this width are noise.",
        "Grow the test set (lab testset generate; `lab testset import-review` says how many questions give "
        "+-0.02) before tuning further.")


def cheaper_equivalent(figures: Mapping[str, float]) -> Finding | None:
    """Not significantly below the reference (p_value >= ALPHA) at >= SPEEDUP_MIN times lower P50 latency."""
    p, d = _get(figures, "p_value"), _get(figures, "diff")
    t, ref = _get(figures, "latency_p50_ms"), _get(figures, "reference_latency_p50_ms")
    if None in (p, d, t, ref) or p < ALPHA or d >= 0 or t <= 0 or ref < SPEEDUP_MIN * t:
        return None
    return Finding(
        "cheaper_equivalent", "info", "latency_p50_ms", t, ref / SPEEDUP_MIN,
        f"{ref / t:.0f}x faster than the reference (P50 {t:.1f} vs {ref:.1f} ms), difference {d:+.3f} not "
        f"significant (p={p:.2g})",
        "The reference's extra stages buy no measurable quality on this test set.",
        "Prefer this configuration where latency matters; confirm with more queries before dropping the "
        "reference.")


#: The rules :func:`diagnose` applies, in order.
RULES: tuple[Callable[[Mapping[str, float]], Finding | None], ...] = (
    coverage_gap, ranking_gap, early_recall_gap, missing_key_evidence, order_mismatch, tail_noise,
    precision_noise, slow_queries, uncertain_estimate, cheaper_equivalent,
)


def diagnose(figures: Mapping[str, float], rules: Iterable[Callable] = RULES) -> list[Finding]:
    """The findings of ``rules`` on one run's ``figures``, most severe first (stable within a severity)."""
    found = [f for f in (rule(figures) for rule in rules) if f is not None]
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))


def diagnosis_table(runs: Mapping[str, Mapping[str, float]] | Sequence[tuple[str, Mapping[str, float]]],
                    rules: Iterable[Callable] = RULES) -> pd.DataFrame:
    """One row per (run, finding): columns run, then the Finding fields. Runs without findings get no row."""
    items = runs.items() if isinstance(runs, Mapping) else runs
    rules = tuple(rules)
    rows = [{"run": str(label), **asdict(f)} for label, figures in items for f in diagnose(figures, rules)]
    cols = ["run", "rule", "severity", "metric", "value", "threshold", "symptom", "cause", "action"]
    return pd.DataFrame(rows, columns=cols)
