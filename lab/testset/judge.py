"""Pooled LLM relevance judgements: grade each query's pooled candidates 0-3 and add the labels to the qrels.

Pooling (TREC practice; Sparck Jones & van Rijsbergen 1975): every strategy named runs on the split through
:func:`lab.experiment.run.run_experiment` and keeps its top ``depth`` documents per query; the pool of a query is the
union (:func:`lab.testset.annotate.pool_runs`). Every (query, document) pair of the pool is judged, also those the
qrels already hold (that is how the judge is checked against them).

Prompt: UMBRELA (Upadhyay et al. 2024, "UMBRELA: UMbrela is the (Open-Source Reproduction of the) Bing RELevance
Assessor", arXiv:2406.06519), itself a reproduction of Thomas et al. 2024, "Large language models can accurately
predict searcher preferences": a 0-3 scale (0 nothing to do with the query, 1 related but does not answer,
2 some answer, unclear or hidden among other text, 3 dedicated to the query with the exact answer), a
step-by-step instruction, and the answer as ``##final score: N``. :data:`PROMPT_VERSION` names the text and
:func:`prompt_sha256` hashes it, so an edit without a version bump shows in the logs. The passage is the unit's
title line and text, cut at ``max_passage_chars`` (the cut is counted).

Parsing: the first ``final score: N`` (N in 0-3, case and ``#`` free); else a lone digit 0-3 as the whole
answer; anything else is a parse failure. With ``grammar="fallback"`` (default) a llama.cpp (gguf) judge is asked
again under a GBNF grammar that only allows ``##final score: [0-3]`` (the model's own choice among the four);
``"always"`` constrains every call (one call each; any llama.cpp-based server); ``"never"`` sends the prompt
alone. Parse failures of the first answer and pairs left without a grade are counted; a pair left without a
grade is not judged (no label is added for it). Calls go through the LLM layer (lab.models.llm) and its
response cache, so a rerun costs nothing but loading.

Labels and provenance: the qrels of the split keep every label they had; a pool pair they lack gets the judge's
grade. ``qrels/<split>.tsv`` stays a BEIR tsv every reader knows; beside it ``qrels/<split>.provenance.jsonl``
(one JSON object per qrels row: query_id, doc_id, grade, source = "generated" | "human" | "judged", and for
judged pairs judge_grade, judge, prompt_version) says where each label came from. The source of the labels the
set already had: from an earlier sidecar when there is one, else "generated" for a set made by
``lab testset generate`` or ``import-logs`` (provenance.json kind "generated" or "logs": machine-made links),
else "human" (annotation imports and the dataset's own qrels). The report (``judge_report.json``) is written beside it.

Judge card first (:mod:`lab.testset.judgecheck`): before the pool is graded, the judge is checked on the set's
own known labels (``check_pairs`` known positives, a generated set's evidence spans included, as many highly
ranked negatives from the pooled runs, stress pairs and repeats). The card goes into ``judge_report.json`` and
into the judged set's ``provenance.json`` under ``"judge"``: ``{identity, prompt_version, card, summary}``
(``card`` and ``summary`` only when a check ran; ``check_pairs=0`` skips it). A card whose kappa is below
``min_kappa`` (default :data:`MIN_KAPPA`) or undefined stops the run before the pool is graded, nothing written,
unless ``force``.

Trust report: recall of the known positives (pairs of the pool whose existing, not judged, label is >= 1 that the
judge grades >= 1); the judge's grades on known negatives; Cohen's kappa (unweighted, linear and quadratic
weighted on 0-3, and on relevant / not relevant) against the human grades of an annotation sheet
(lab.testset.annotate format) for the pairs both graded; and, per strategy, nDCG@depth and Judged@depth before
and after the new labels, on full and on condensed lists (unjudged documents removed, trec_eval -J).
"""
from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from lab.core.errors import ConfigError, LabError
from lab.core.paths import existing_or_repo_path
from lab.core.progress import progress as bar
from lab.data.types import Qrels
from lab.experiment.run import load, run_experiment, split_queries
from lab.metrics import evaluate
from lab.metrics.stats import wilson_interval
from lab.models.breaker import EndpointDown, FailureBreaker, guarded_call
from lab.models.estimate import EstimatePolicy, StepEstimate, estimate_step
from lab.models.llm import default_llm_hint, load_llm
from lab.retrievers.base import Context
from lab.testset.annotate import pool_runs, read_annotation
from lab.testset.io import now_utc, unit_text
from lab.testset.judge_config import JudgeConfig
from lab.testset.judgecheck import (
    RELEVANT_GRADE,
    JudgeBelowFloor,
    below_floor,
    build_pairs,
    card_figures,
    known_labels,
    negative_runs,
    query_order,
    summary,
    write_check,
)
from lab.testset.judged_set import (
    REPORT,
    human_agreement,
    label_sources,
    log_judge_run,
    write_judge_provenance,
    write_judged_set,
    write_report,
)
from lab.testset.umbrela import GRADES, PROMPT_VERSION, SCORE_GRAMMAR, make_prompt, parse_grade, prompt_sha256

SOURCES = ("generated", "human", "judged")
#: Token budget of a grammar-constrained answer (``##final score: N`` takes 7-10 SmolLM2 tokens in context).
GRAMMAR_TOKENS = 16


def judge_generation(cfg: JudgeConfig) -> dict:
    """The generation params of every first judgement (the grammar fallback asks again with its own)."""
    gen: dict = {"max_tokens": cfg.max_tokens, "temperature": 0.0}
    if cfg.grammar == "always":
        gen.update(grammar=SCORE_GRAMMAR, max_tokens=max(cfg.max_tokens, GRAMMAR_TOKENS))
    return gen


def grade_prompts(llm, prompts: list[str], cfg: JudgeConfig, concurrency: int, progress: bool, breaker=None):
    """(first answers, final grades, counters) for ``prompts``; an LLM error on one pair leaves it ungraded.
    With a :class:`lab.models.breaker.FailureBreaker`, calls that failed for good are counted; once it trips,
    pairs not yet sent are skipped and :class:`lab.models.breaker.EndpointDown` is raised."""
    is_gguf = getattr(llm, "backend", "") == "gguf"
    gen = judge_generation(cfg)

    def one(prompt: str, **over):
        text, error = guarded_call(breaker, lambda: llm.complete(prompt, **{**gen, **over}).text,
                                   describe=lambda e: f"{type(e).__name__}: {e}")
        return text, None if error is None else str(error)

    def run(items, desc, **extra):
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="judge") as pool:
            fn = (lambda p: one(p, temperature=0.0, **extra)) if extra else one
            out = list(bar(pool.map(fn, items), desc=desc, total=len(items), enabled=progress and len(items) > 1))
        if breaker is not None:
            breaker.check()
        return out

    answers = run(prompts, "judging pool")
    grades = [parse_grade(t) for t, _ in answers]
    counts = Counter(first_parse_failures=sum(g is None for g in grades), llm_errors=sum(e is not None for _,
                                                                                         e in answers))
    retry = [i for i, g in enumerate(grades) if g is None]
    if retry and cfg.grammar == "fallback" and is_gguf:
        again = run([prompts[i] for i in retry], "judging again (grammar)", grammar=SCORE_GRAMMAR,
                    max_tokens=GRAMMAR_TOKENS)
        for i, (t, _) in zip(retry, again, strict=True):
            grades[i] = parse_grade(t)
        counts["grammar_fallback_calls"] = len(retry)
    counts["ungraded"] = sum(g is None for g in grades)
    first_error = next((e for _, e in answers if e), None)
    return [t for t, _ in answers], grades, dict(counts), first_error


def judge_dataset(dataset, *, out: str | Path | None = None, in_place: bool = False, config: JudgeConfig | None = None,  # noqa: PLR0913 - the public keyword signature of `lab testset judge`
                  llm="local", concurrency: int | None = None, annotation: str | Path | None = None,
                  cache_dir: str | Path = ".cache", progress: bool = True, tracking_root: str | Path | None = "mlruns",
                  experiment: str = "testset", max_consecutive_failures: int = 3, force: bool = False,
                  estimate: EstimatePolicy | None = None) -> dict:
    """Judge the pool of ``dataset``'s split and write the set with the new labels to ``out`` (a copy of the
    dataset folder) or, with ``in_place``, into the dataset folder; returns the report (module docstring).
    The judge is checked first; below ``config.min_kappa`` it raises JudgeBelowFloor unless ``force``.
    ``estimate``: where the estimate of the judging (card and pool, :func:`estimate_judging`) goes (default: stderr
    when it will take more than a minute); with ``dry_run`` nothing is judged or written and the result is
    :func:`dry_run_result`'s."""
    cfg = config or JudgeConfig()
    cfg.check()
    src = _check_args(dataset, out, in_place, annotation, concurrency)
    t0 = time.perf_counter()
    ds = load(src, progress=progress)
    queries, qrels = split_queries(ds, cfg.split, cfg.max_queries)
    human = read_annotation(annotation, ds.corpus, ds.queries) if annotation is not None else []
    sources = label_sources(src, cfg.split, {q: dict(qrels[q]) for q in qrels})
    judge = load_llm(llm, cache_dir=cache_dir, progress=progress, seed=cfg.seed,
                     **({"concurrency": concurrency} if concurrency else {}))
    runs = _strategy_runs(ds, cfg, cache_dir, progress)
    policy = estimate or EstimatePolicy()
    est = estimate_judging(ds, judge, runs, queries, cfg, sources, concurrency, policy)
    if policy.dry_run:
        return dry_run_result(judge, est)
    breaker = FailureBreaker(max_consecutive_failures, what="judging")
    card = _checked_card(ds, judge, runs, cfg, sources, concurrency, progress, force, breaker, cache_dir)
    pairs, prompts, cut = _pool_prompts(ds, runs, queries, cfg)
    graded = _grade_pool(judge, prompts, cfg, concurrency, progress, breaker, cache_dir)
    judged = {(q, d): g for (q, d), g in zip(pairs, graded.grades, strict=True) if g is not None}
    new, added = _merge_labels(qrels, judged, sources)
    report = _pool_report(pairs, judged, qrels, sources, added, graded, cut)
    if annotation is not None:
        report["human_agreement"] = human_agreement(human, judged)
    report["strategies"] = _score_changes(runs, qrels, Qrels(new, name=qrels.name), cfg.depth)
    folder = write_judged_set(src, out, ds, cfg, new, sources, judged, judge.identity)
    meta = {"kind": "judge", "created": now_utc(), "dataset": str(src), "folder": str(folder), "split": cfg.split,
            "strategies": list(runs), "depth": cfg.depth, "max_queries": cfg.max_queries, "judge": judge.identity,
            "judge_settings": judge.describe(), "prompt_version": PROMPT_VERSION, "prompt_sha256": prompt_sha256(),
            "grammar": cfg.grammar, "max_tokens": cfg.max_tokens, "max_passage_chars": cfg.max_passage_chars,
            "seed": cfg.seed, "annotation": str(annotation) if annotation else None,
            "seconds": round(time.perf_counter() - t0, 1), "judge_seconds": round(graded.seconds, 1),
            "llm_usage": graded.usage, "report": report, "min_kappa": cfg.min_kappa, "forced": bool(force),
            "judge_card": card}
    write_judge_provenance(folder, judge.identity, card)
    write_report(folder, meta)
    if tracking_root is not None:
        meta["mlflow_run_id"] = log_judge_run(meta, ds, src, folder, cfg, in_place, force, tracking_root, experiment)
        write_report(folder, meta)
    judge_close = getattr(judge, "close", None)
    if judge_close:
        judge_close()
    return {**meta, "answers_sample": graded.answers[:5]}


@dataclass
class _Graded:
    """The judge's answers on the pool: first answers, final grades (None: ungraded), counters, the first LLM
    error, the seconds and the LLM usage it took."""

    answers: list
    grades: list[int | None]
    counts: dict
    first_error: str | None
    seconds: float
    usage: dict


def _check_args(dataset, out, in_place: bool, annotation, concurrency: int | None) -> Path:
    """The dataset folder, after checking the arguments that name files and folders (ConfigError, one line)."""
    if bool(out) == bool(in_place):
        raise ConfigError("lab testset judge: give --out DIR (write a judged copy of the set) or --in-place "
                          "(add the labels to the set itself), one of the two")
    src = Path(existing_or_repo_path(dataset))
    if not src.is_dir():
        raise ConfigError(f"--dataset {dataset}: no such folder (a BEIR folder: corpus.jsonl, queries.jsonl, qrels/)")
    if out is not None and Path(out).resolve() == src.resolve():
        raise ConfigError(f"--out {out} is the dataset folder itself; use --in-place to update it")
    if out is not None and Path(out).is_dir() and any(Path(out).iterdir()) and not (Path(out) / REPORT).is_file():
        raise ConfigError(f"--out {out}: the folder exists and is not a judged set (no {REPORT}); it would be "
                          "replaced: choose a new folder, or use --in-place on a set")
    if annotation is not None and not Path(annotation).is_file():
        raise ConfigError(f"--annotation {annotation}: no such file (a sheet of `lab testset export-annotation` "
                          "with the grade column filled)")
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"--concurrency {concurrency}: must be >= 1")
    return src


def _strategy_runs(ds, cfg: JudgeConfig, cache_dir, progress: bool) -> dict:
    """Each strategy's run (top ``depth``) on the split: what the pool is made of."""
    ctx = Context(cache_dir=Path(cache_dir), progress=progress, seed=cfg.seed)
    return {name: run_experiment(ds, name, {}, split=cfg.split, k=cfg.depth, ctx=ctx,
                                 max_queries=cfg.max_queries).run for name in dict.fromkeys(cfg.strategies)}


def _checked_card(ds, judge, runs: dict, cfg: JudgeConfig, sources: dict, concurrency: int | None, progress: bool,
                  force: bool, breaker, cache_dir) -> dict | None:
    """:func:`check_card`, an endpoint that went down saying that nothing was written."""
    try:
        return check_card(ds, judge, runs, cfg, sources, concurrency, progress, force, breaker)
    except EndpointDown as exc:
        raise EndpointDown(f"{exc} (while checking the judge on known labels); nothing was written: the grades "
                           f"finished so far are kept in the LLM cache ({cache_dir})") from None


def _pool_prompts(ds, runs: dict, queries, cfg: JudgeConfig) -> tuple[list[tuple[str, str]], list[str], int]:
    """The pool's (query, doc) pairs in order, their prompts and how many passages were cut to
    ``max_passage_chars``."""
    pool = pool_runs(runs, cfg.depth)
    pairs = [(q, d) for q in sorted(pool) if q in queries for d in sorted(pool[q])]
    cut = 0
    prompts = []
    for q, d in pairs:
        text = unit_text(ds.corpus[d])
        if len(text) > cfg.max_passage_chars:
            text, cut = text[:cfg.max_passage_chars], cut + 1
        prompts.append(make_prompt(queries[q], text))
    return pairs, prompts, cut


def _grade_pool(judge, prompts: list[str], cfg: JudgeConfig, concurrency: int | None, progress: bool, breaker,
                cache_dir) -> _Graded:
    """:func:`grade_prompts` on the pool, timed and with the LLM usage it took; LabError when every judgement
    failed, EndpointDown (nothing written) when the endpoint went down."""
    t_judge = time.perf_counter()
    usage0 = judge.usage()
    try:
        answers, grades, counts, first_error = grade_prompts(judge, prompts, cfg, concurrency or judge.concurrency,
                                                             progress, breaker)
    except EndpointDown as exc:
        raise EndpointDown(f"{exc}; nothing was written: the grades finished so far are kept in the LLM cache "
                           f"({cache_dir}), so a rerun pays only for the rest") from None
    seconds = time.perf_counter() - t_judge
    if prompts and counts.get("llm_errors", 0) == len(prompts):
        raise LabError(f"every judgement failed, nothing was written; first error: {first_error}")
    usage = {k: judge.usage()[k] - usage0.get(k, 0) for k in judge.usage()}
    return _Graded(answers, grades, counts, first_error, seconds, usage)


def _merge_labels(qrels, judged: dict, sources: dict) -> tuple[dict[str, dict[str, int]], Counter]:
    """The split's labels with the judge's added where a pair had none (marked "judged" in ``sources``), and the
    count of added labels by grade."""
    new = {q: dict(qrels[q]) for q in qrels}
    added: Counter = Counter()
    for (q, d), g in judged.items():
        if d not in new.get(q, {}):
            new.setdefault(q, {})[d] = g
            sources[q, d] = "judged"
            added[g] += 1
    return new, added


def _pool_report(pairs: list, judged: dict, qrels, sources: dict, added: Counter, graded: _Graded, cut: int) -> dict:
    """The report's figures: pool size, grades, labels added and the trust figures on the known positives and
    negatives in the pool (labelled before, not by an earlier judge run)."""
    old = {q: dict(qrels[q]) for q in qrels}
    counts = graded.counts
    known = [(q, d) for (q, d) in judged if d in old.get(q, {}) and sources.get((q, d)) != "judged"]
    pos = [(q, d) for q, d in known if old[q][d] >= 1]
    neg = [(q, d) for q, d in known if old[q][d] < 1]
    known_pos_in_pool = [(q, d) for q, d in pairs if d in old.get(q, {}) and old[q][d] >= 1
                         and sources.get((q, d)) != "judged"]
    report: dict = {
        "queries": len({q for q, _ in pairs}), "pool_pairs": len(pairs),
        "pool_mean": len(pairs) / max(1, len({q for q, _ in pairs})),
        "graded": len(judged), "parse_failures": counts.get("first_parse_failures", 0),
        "grammar_fallback_calls": counts.get("grammar_fallback_calls", 0), "ungraded": counts.get("ungraded", 0),
        "llm_errors": counts.get("llm_errors", 0), "passages_cut": cut,
        "judge_grades": {str(g): sum(1 for v in judged.values() if v == g) for g in GRADES},
        "labels_added": sum(added.values()), "labels_added_relevant": sum(n for g, n in added.items() if g >= 1),
        "labels_added_by_grade": {str(g): added.get(g, 0) for g in GRADES},
        "known_positives_in_pool": len(known_pos_in_pool), "known_positives_graded": len(pos),
        "recall_known_positives": (sum(judged[p] >= 1 for p in pos) / len(pos)) if pos else None,
        "recall_known_positives_ci": list(wilson_interval(sum(judged[p] >= 1 for p in pos), len(pos))) if pos else None,
        "known_negatives_graded": len(neg),
        "known_negatives_judged_relevant": sum(judged[p] >= 1 for p in neg),
        "known_negatives_judged_relevant_ci": list(wilson_interval(sum(judged[p] >= 1 for p in neg), len(neg)))
        if neg else None,
    }
    if graded.first_error:
        report["first_llm_error"] = graded.first_error
    return report


def _score_changes(runs: dict, before, after, k: int) -> dict:
    """How the new labels change each strategy's nDCG@k and judged@k, on full and condensed lists."""
    names = [f"ndcg@{k}", f"judged@{k}"]
    scores = {}
    for name, run in runs.items():
        row = {}
        for tag, qq in (("before", before), ("after", after)):
            for cond in (False, True):
                try:
                    m = evaluate(qq, run, names, condensed=cond).means
                except ValueError:
                    continue
                for metric in names:
                    row[f"{metric}_{tag}" + ("_condensed" if cond else "")] = m[metric]
        scores[name] = row
    return scores


def check_judge(ds, llm, runs: dict, cfg: JudgeConfig, *, sources: dict | None = None,
                concurrency: int | None = None, progress: bool = True, breaker=None) -> tuple[dict, list]:
    """(card, pairs): the pairs of :func:`lab.testset.judgecheck.build_pairs` (``cfg.check_pairs`` of them) graded
    by ``llm`` with ``cfg``'s prompt settings, and the card's figures (:func:`lab.testset.judgecheck.card_figures`)
    with the judge's identity, the prompt version, what drew the pairs and the seconds it took."""
    t0, usage0 = time.perf_counter(), llm.usage()
    pairs = build_pairs(ds, runs, cfg, sources)
    prompts = pair_prompts(ds, pairs)
    answers, grades, counts, first_error = grade_prompts(llm, prompts, cfg, concurrency or llm.concurrency, progress,
                                                         breaker)
    if pairs and counts.get("llm_errors", 0) == len(pairs):
        raise LabError(f"judge check: every judgement failed, nothing was written; first error: {first_error}")
    for p, a, g in zip(pairs, answers, grades, strict=True):
        p.grade, p.answer = g, a
    card = {**card_figures([p.record() for p in pairs], cfg.resamples, cfg.seed),
            "judge": llm.identity, "prompt_version": PROMPT_VERSION, "relevant_grade": RELEVANT_GRADE,
            "split": cfg.split, "negatives_from": list(runs), "depth": cfg.depth, "seed": cfg.seed,
            "pairs_requested": cfg.check_pairs, "parse_failures": counts.get("first_parse_failures", 0),
            "llm_errors": counts.get("llm_errors", 0), "seconds": round(time.perf_counter() - t0, 1),
            "llm_usage": {k: round(v - usage0.get(k, 0), 3) for k, v in llm.usage().items()
                          if k in ("calls", "cache_hits", "generated", "seconds", "cold_seconds")}}
    card["summary"] = summary(card)
    return card, pairs


def judge_check(dataset, *, out: str | Path | None = None, config=None, llm="local", concurrency: int | None = None,
                cache_dir: str | Path = ".cache", progress: bool = True,
                estimate: EstimatePolicy | None = None) -> dict:
    """`lab testset judge-check`: check ``llm`` on ``dataset``'s known labels (``config``: a :class:`JudgeConfig`;
    its ``check_pairs`` known positives and as many negatives, ranked by its ``strategies``), write ``pairs.jsonl``
    and the card (``judge_check.json``) to
    ``out`` (default ``results/judge-check/<dataset folder name>``); returns the card plus ``folder``.
    ``estimate``: as for :func:`judge_dataset` (the estimate of grading the card's pairs)."""
    cfg = config or JudgeConfig(strategies=("bm25", "dense"))
    if cfg.check_pairs < 1:
        raise ConfigError(f"--pairs {cfg.check_pairs}: must be >= 1 (known positives, and as many negatives)")
    cfg.check()
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"--concurrency {concurrency}: must be >= 1")
    src = Path(existing_or_repo_path(dataset))
    if not src.is_dir():
        raise ConfigError(f"--dataset {dataset}: no such folder (a BEIR folder: corpus.jsonl, queries.jsonl, qrels/)")
    if not (src / "qrels").is_dir():
        raise ConfigError(f"--dataset {dataset}: no qrels/ folder; judge-check measures a judge against known "
                          "labels (qrels/<split>.tsv), so it needs a set that has some")
    ds = load(src, progress=progress)
    _, qrels = split_queries(ds, cfg.split)
    qrels = {q: dict(qrels[q]) for q in qrels}
    sources = label_sources(src, cfg.split, qrels)
    order = query_order(known_labels(ds, cfg.split, qrels, sources), cfg.seed)
    if not order:
        raise ConfigError(f"--dataset {dataset}: no known positive (a label >= 1 not written by a judge) in split "
                          f"{cfg.split}; judge-check needs some")
    t0 = time.perf_counter()
    judge = load_llm(llm, cache_dir=cache_dir, progress=progress, seed=cfg.seed,
                     **({"concurrency": concurrency} if concurrency else {}))
    runs = negative_runs(ds, cfg, order[: cfg.check_pairs], Context(cache_dir=Path(cache_dir), progress=progress,
                                                                    seed=cfg.seed))
    policy = estimate or EstimatePolicy()
    est = estimate_card(ds, judge, runs, cfg, sources, concurrency, policy)
    if policy.dry_run:
        return dry_run_result(judge, est)
    card, pairs = check_judge(ds, judge, runs, cfg, sources=sources, concurrency=concurrency,
                              progress=progress)
    card.update(dataset=ds.name or src.name, seconds=round(time.perf_counter() - t0, 1))
    folder = Path(out) if out is not None else Path("results") / "judge-check" / src.name
    write_check(folder, card, pairs)
    judge_close = getattr(judge, "close", None)
    if judge_close:
        judge_close()
    return {**card, "folder": str(folder)}


def check_card(ds, judge, runs: dict, cfg: JudgeConfig, sources: dict, concurrency: int | None, progress: bool,
               force: bool, breaker=None) -> dict | None:
    """The judge's card on ``ds``'s known labels (None with ``cfg.check_pairs`` 0); raises JudgeBelowFloor when
    its kappa is under ``cfg.min_kappa`` or undefined, unless ``force``."""
    if not cfg.check_pairs:
        return None
    card, _ = check_judge(ds, judge, runs, replace(cfg, strategies=list(runs)), sources=sources,
                          concurrency=concurrency, progress=progress, breaker=breaker)
    if below_floor(card, cfg.min_kappa) and not force:
        raise JudgeBelowFloor(f"the judge {judge.identity} is below the --min-kappa {cfg.min_kappa:g} floor on the "
                              f"set's known labels: {card['summary']}; nothing was written: use a stronger --llm, "
                              f"or --force to merge its labels anyway{default_llm_hint(judge.identity)}")
    return card


def pair_prompts(ds, pairs: Sequence) -> list[str]:
    """The judge's prompt for each drawn pair (:class:`lab.testset.judgecheck.Pair`)."""
    return [make_prompt(ds.queries[p.query_id], p.passage) for p in pairs]


def pool_prompts(ds, runs: dict, queries, cfg: JudgeConfig) -> list[str]:
    """The judge's prompt for each (query, document) pair of the pool, passages cut at ``max_passage_chars``, in
    the order :func:`judge_dataset` grades them."""
    return _pool_prompts(ds, runs, queries, cfg)[1]


def estimate_judging(ds, judge, runs: dict, queries, cfg: JudgeConfig, sources: dict, concurrency: int | None,
                     policy: EstimatePolicy) -> StepEstimate:
    """The estimate of ``lab testset judge``'s LLM work (the card's pairs, then the pool), given to ``policy``;
    its timed sample stays in the LLM cache for the run (lab.models.estimate)."""
    card = (pair_prompts(ds, build_pairs(ds, runs, replace(cfg, strategies=list(runs)), sources)) if cfg.check_pairs
            else [])
    est = estimate_step(judge, "judge: card and pool", card + pool_prompts(ds, runs, queries, cfg),
                        concurrency=concurrency, **judge_generation(cfg))
    policy.show(est)
    return est


def estimate_card(ds, judge, runs: dict, cfg: JudgeConfig, sources: dict, concurrency: int | None,
                  policy: EstimatePolicy) -> StepEstimate:
    """The estimate of ``lab testset judge-check``'s LLM work (grading the card's pairs), given to ``policy``."""
    est = estimate_step(judge, "judge-check", pair_prompts(ds, build_pairs(ds, runs, cfg, sources)),
                        concurrency=concurrency, **judge_generation(cfg))
    policy.show(est)
    return est


def dry_run_result(judge, est: StepEstimate) -> dict:
    """What a dry run returns, after closing the judge: ``{"dry_run": True, "estimate": {...}, "estimate_line":
    "estimate (...): ..."}``."""
    judge_close = getattr(judge, "close", None)
    if judge_close:
        judge_close()
    return {"dry_run": True, "estimate": est.to_dict(), "estimate_line": est.line()}


