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

import hashlib
import json
import math
import re
import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from lab.core.errors import ConfigError, DataError, LabError
from lab.core.paths import existing_or_repo_path, public_paths_in
from lab.core.progress import progress as bar
from lab.data.beir import qrels_files
from lab.data.fingerprint import fingerprint
from lab.data.labels import MIN_KAPPA  # the floor on the judge card's kappa (known relevant vs grade >= 2); one home
from lab.data.types import Qrels
from lab.experiment.run import load, run_experiment, split_queries
from lab.metrics import evaluate
from lab.metrics.agreement import cohen_kappa, kappa_interval
from lab.metrics.stats import wilson_interval
from lab.models.breaker import EndpointDown, FailureBreaker
from lab.models.estimate import EstimatePolicy, StepEstimate, estimate_step
from lab.models.llm import LLMError, default_llm_hint, load_llm
from lab.retrievers import available
from lab.retrievers.base import Context
from lab.testset.annotate import pool_runs, read_annotation
from lab.testset.io import PROVENANCE, now_utc, read_provenance, unit_text
from lab.testset.judgecheck import (
    RELEVANT_GRADE,
    CheckConfig,
    JudgeBelowFloor,
    below_floor,
    build_pairs,
    card_figures,
    known_labels,
    negative_runs,
    query_order,
    summary,
    write_atomic,
    write_check,
)
from lab.testset.track import log_testset_run

PROMPT_VERSION = "umbrela-v1"
GRADES = (0, 1, 2, 3)
SOURCES = ("generated", "human", "judged")
GRAMMAR_MODES = ("fallback", "always", "never")
#: GBNF grammar for constrained answers (llama.cpp): the answer is ``##final score: N`` with N in 0-3.
SCORE_GRAMMAR = 'root ::= "##final score: " [0-3]'
REPORT = "judge_report.json"
#: Token budget of a grammar-constrained answer (``##final score: N`` takes 7-10 SmolLM2 tokens in context).
GRAMMAR_TOKENS = 16

PROMPT = """Given a query and a passage, you must provide a score on an integer scale of 0 to 3 with the following meanings:
0 = represent that the passage has nothing to do with the query,
1 = represents that the passage seems related to the query but does not answer it,
2 = represents that the passage has some answer for the query, but the answer may be a bit unclear, or hidden amongst extraneous information and
3 = represents that the passage is dedicated to the query and contains the exact answer.

Important Instruction: Assign category 1 if the passage is somewhat related to the topic but not completely, category 2 if passage presents something very important related to the entire topic but also has some extra information and category 3 if the passage only and entirely refers to the topic. If none of the above satisfies give it category 0.

Query: {query}
Passage: {passage}

Split this problem into steps:
Consider the underlying intent of the search.
Measure how well the content matches a likely intent of the query (M).
Measure how trustworthy the passage is (T).
Consider the aspects above and the relative importance of each, and decide on a final score (O). Final score must be an integer value only.
Do not provide any code in result. Provide each score in the format of: ##final score: score without providing any reasoning."""  # noqa: E501 (the published prompt, verbatim)

_FINAL_RE = re.compile(r"final\s*score\s*[:=]?\s*\**\s*([0-3])\b", re.IGNORECASE)
_LONE_RE = re.compile(r"^\W*([0-3])\W*$")


def prompt_sha256() -> str:
    """sha256 (hex) of the prompt template."""
    return hashlib.sha256(PROMPT.encode("utf-8")).hexdigest()


def make_prompt(query: str, passage: str) -> str:
    return PROMPT.format(query=query.strip(), passage=passage.strip())


def parse_grade(text: str | None) -> int | None:
    """The grade in an answer (see the module docstring), or None when there is none."""
    if not text:
        return None
    m = _FINAL_RE.search(text)
    if m:
        return int(m.group(1))
    m = _LONE_RE.match(text.strip())
    return int(m.group(1)) if m else None


def label_sources(folder: str | Path, split: str, qrels: dict[str, dict[str, int]]) -> dict[tuple[str, str], str]:
    """(qid, doc id) -> "generated" | "human" | "judged" for the labels a set already has (module docstring)."""
    folder = Path(folder)
    out: dict[tuple[str, str], str] = {}
    side = sidecar_path(folder, split)
    if side.is_file():
        for line, rec in enumerate(side.read_text(encoding="utf-8").splitlines(), 1):
            if not rec.strip():
                continue
            try:
                obj = json.loads(rec)
                out[str(obj["query_id"]), str(obj["doc_id"])] = str(obj["source"])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise DataError(side, f"not a provenance record ({e})", line=line, field="source",
                                hint="each line is {query_id, doc_id, grade, source}; delete the file to start over"
                                ) from None
    default = "generated" if read_provenance(folder).get("kind") in ("generated", "logs") else "human"
    return {(q, d): out.get((q, d), default) for q, docs in qrels.items() for d in docs}


def sidecar_path(folder: str | Path, split: str) -> Path:
    return Path(folder) / "qrels" / f"{split}.provenance.jsonl"


@dataclass
class JudgeConfig:
    strategies: Sequence[str] = ("bm25", "dense", "hybrid")
    depth: int = 10
    split: str = "test"
    max_queries: int | None = None
    max_passage_chars: int = 2000
    max_tokens: int = 32
    grammar: str = "fallback"
    seed: int = 0
    check_pairs: int = 20
    min_kappa: float = MIN_KAPPA
    extra: dict = field(default_factory=dict)

    def check(self) -> None:
        if self.depth < 1:
            raise ConfigError(f"--depth {self.depth}: must be >= 1 (documents per strategy and query in the pool)")
        if not self.strategies:
            raise ConfigError("--strategies: name at least one strategy, e.g. bm25,dense,hybrid")
        known = set(available())
        bad = [s for s in self.strategies if s not in known]
        if bad:
            raise ConfigError(f"--strategies: unknown {', '.join(bad)}; known: {', '.join(sorted(known))}")
        if self.grammar not in GRAMMAR_MODES:
            raise ConfigError(f"--grammar {self.grammar!r}: choose one of {', '.join(GRAMMAR_MODES)}")
        if self.max_passage_chars < 100 or self.max_tokens < 8:
            raise ConfigError("--max-passage-chars must be >= 100 and --max-tokens >= 8")
        if self.max_queries is not None and self.max_queries < 1:
            raise ConfigError(f"--max-queries {self.max_queries}: must be >= 1")
        if self.check_pairs < 0:
            raise ConfigError(f"--check-pairs {self.check_pairs}: must be >= 0 (0 skips the judge check)")
        if not -1.0 <= self.min_kappa <= 1.0:
            raise ConfigError(f"--min-kappa {self.min_kappa}: a kappa lies in [-1, 1]")


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
        if breaker is not None and breaker.tripped:
            breaker.skip()
            return None, "skipped: the endpoint failed too many calls in a row"
        try:
            text = llm.complete(prompt, **{**gen, **over}).text
        except LLMError as e:
            if breaker is not None:
                breaker.failure(f"{type(e).__name__}: {e}")
            return None, str(e)
        if breaker is not None:
            breaker.success()
        return text, None

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
    folder = _write_set(src, out, ds, cfg, new, sources, judged, judge.identity)
    meta = {"kind": "judge", "created": now_utc(), "dataset": str(src), "folder": str(folder), "split": cfg.split,
            "strategies": list(runs), "depth": cfg.depth, "max_queries": cfg.max_queries, "judge": judge.identity,
            "judge_settings": judge.describe(), "prompt_version": PROMPT_VERSION, "prompt_sha256": prompt_sha256(),
            "grammar": cfg.grammar, "max_tokens": cfg.max_tokens, "max_passage_chars": cfg.max_passage_chars,
            "seed": cfg.seed, "annotation": str(annotation) if annotation else None,
            "seconds": round(time.perf_counter() - t0, 1), "judge_seconds": round(graded.seconds, 1),
            "llm_usage": graded.usage, "report": report, "min_kappa": cfg.min_kappa, "forced": bool(force),
            "judge_card": card}
    write_judge_provenance(folder, judge.identity, card)
    _write_report(folder, meta)
    if tracking_root is not None:
        meta["mlflow_run_id"] = _log_judge_run(meta, ds, src, folder, cfg, in_place, force, tracking_root, experiment)
        _write_report(folder, meta)
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


def _write_set(src: Path, out, ds, cfg: JudgeConfig, new: dict, sources: dict, judged: dict, identity: str) -> Path:
    """Write the judged set: a copy of the dataset folder at ``out`` (replaced) or the folder itself, with the
    split's qrels (every label, old and new) and their sidecar; returns the folder."""
    folder = Path(out) if out is not None else src
    if out is not None:
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(src, folder, ignore=shutil.ignore_patterns(".*"))
    full = {q: dict(d) for q, d in ds.qrels[cfg.split].qrels.items()}
    for q, docs in new.items():
        full.setdefault(q, {}).update({d: g for d, g in docs.items() if d not in full.get(q, {})})
    _write_qrels(folder, cfg.split, full, {**label_sources(src, cfg.split, full), **sources}, judged, identity)
    return folder


def _write_report(folder: Path, meta: dict) -> None:
    """The judge report, its absolute paths (source dataset, folder, annotation file) made public."""
    text = json.dumps(public_paths_in(meta), indent=1, ensure_ascii=False, default=str) + "\n"
    (folder / REPORT).write_text(text, encoding="utf-8")


def _log_judge_run(meta: dict, ds, src: Path, folder: Path, cfg: JudgeConfig, in_place: bool, force: bool,
                   tracking_root, experiment: str) -> str:
    """The MLflow run of a judging (lab.testset.track.log_testset_run): settings as params, the report's figures,
    the card's and each strategy's score changes as metrics, the report, qrels and sidecar as artifacts."""
    report, usage, runs = meta["report"], meta["llm_usage"], meta["strategies"]
    flat = {k2: v for k2, v in report.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    flat.update({f"judge_grade_{g}": n for g, n in report["judge_grades"].items()})
    flat.update({f"{s}.{m}": v for s, row in report["strategies"].items() for m, v in row.items()})
    flat.update({f"agreement.{m}": v for m, v in (report.get("human_agreement") or {}).items()
                 if isinstance(v, (int, float)) and v is not None and not (isinstance(v, float) and math.isnan(v))})
    flat.update({"seconds": meta["seconds"], "judge_seconds": meta["judge_seconds"],
                 **{f"llm_{k2}": v for k2, v in usage.items()}})
    flat.update(card_metrics(meta["judge_card"]))
    return log_testset_run(
        "judge", f"judge {ds.name} ({'+'.join(runs)}, depth {cfg.depth})",
        {"dataset": ds.name, "split": cfg.split, "strategies": list(runs), "depth": cfg.depth,
         "max_queries": cfg.max_queries, "judge": meta["judge"], "prompt_version": PROMPT_VERSION,
         "prompt_sha256": prompt_sha256(), "grammar": cfg.grammar, "max_tokens": cfg.max_tokens,
         "max_passage_chars": cfg.max_passage_chars, "seed": cfg.seed, "in_place": bool(in_place),
         "check_pairs": cfg.check_pairs, "min_kappa": cfg.min_kappa, "force": bool(force)}, flat,
        {"dataset": ds.name, "dataset_fingerprint": fingerprint(src)},
        [folder / REPORT, folder / "qrels" / f"{cfg.split}.tsv", sidecar_path(folder, cfg.split)],
        root=tracking_root, experiment=experiment)


def check_judge(ds, llm, runs: dict, check, cfg: JudgeConfig, *, sources: dict | None = None,
                concurrency: int | None = None, progress: bool = True, breaker=None) -> tuple[dict, list]:
    """(card, pairs): the pairs of :func:`lab.testset.judgecheck.build_pairs` (``check``: its CheckConfig) graded
    by ``llm`` with ``cfg``'s prompt settings, and the card's figures (:func:`lab.testset.judgecheck.card_figures`)
    with the judge's identity, the prompt version, what drew the pairs and the seconds it took."""
    t0, usage0 = time.perf_counter(), llm.usage()
    pairs = build_pairs(ds, runs, check, sources)
    prompts = pair_prompts(ds, pairs)
    answers, grades, counts, first_error = grade_prompts(llm, prompts, cfg, concurrency or llm.concurrency, progress,
                                                         breaker)
    if pairs and counts.get("llm_errors", 0) == len(pairs):
        raise LabError(f"judge check: every judgement failed, nothing was written; first error: {first_error}")
    for p, a, g in zip(pairs, answers, grades, strict=True):
        p.grade, p.answer = g, a
    card = {**card_figures([p.record() for p in pairs], check.resamples, check.seed),
            "judge": llm.identity, "prompt_version": PROMPT_VERSION, "relevant_grade": RELEVANT_GRADE,
            "split": check.split, "negatives_from": list(runs), "depth": check.depth, "seed": check.seed,
            "pairs_requested": check.pairs, "parse_failures": counts.get("first_parse_failures", 0),
            "llm_errors": counts.get("llm_errors", 0), "seconds": round(time.perf_counter() - t0, 1),
            "llm_usage": {k: round(v - usage0.get(k, 0), 3) for k, v in llm.usage().items()
                          if k in ("calls", "cache_hits", "generated", "seconds", "cold_seconds")}}
    card["summary"] = summary(card)
    return card, pairs


def judge_check(dataset, *, out: str | Path | None = None, config=None, llm="local", concurrency: int | None = None,
                cache_dir: str | Path = ".cache", progress: bool = True,
                estimate: EstimatePolicy | None = None) -> dict:
    """`lab testset judge-check`: check ``llm`` on ``dataset``'s known labels (``config``: a
    :class:`lab.testset.judgecheck.CheckConfig`), write ``pairs.jsonl`` and the card (``judge_check.json``) to
    ``out`` (default ``results/judge-check/<dataset folder name>``); returns the card plus ``folder``.
    ``estimate``: as for :func:`judge_dataset` (the estimate of grading the card's pairs)."""
    check = config or CheckConfig()
    check.check()
    cfg = JudgeConfig(strategies=list(check.strategies), depth=check.depth, split=check.split,
                      max_passage_chars=check.max_passage_chars, max_tokens=check.max_tokens, grammar=check.grammar,
                      seed=check.seed)
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
    _, qrels = split_queries(ds, check.split)
    qrels = {q: dict(qrels[q]) for q in qrels}
    sources = label_sources(src, check.split, qrels)
    order = query_order(known_labels(ds, check.split, qrels, sources), check.seed)
    if not order:
        raise ConfigError(f"--dataset {dataset}: no known positive (a label >= 1 not written by a judge) in split "
                          f"{check.split}; judge-check needs some")
    t0 = time.perf_counter()
    judge = load_llm(llm, cache_dir=cache_dir, progress=progress, seed=check.seed,
                     **({"concurrency": concurrency} if concurrency else {}))
    runs = negative_runs(ds, check, order[: check.pairs], Context(cache_dir=Path(cache_dir), progress=progress,
                                                                    seed=check.seed))
    policy = estimate or EstimatePolicy()
    est = estimate_card(ds, judge, runs, check, cfg, sources, concurrency, policy)
    if policy.dry_run:
        return dry_run_result(judge, est)
    card, pairs = check_judge(ds, judge, runs, check, cfg, sources=sources, concurrency=concurrency,
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
    check = card_check_config(cfg, runs)
    card, _ = check_judge(ds, judge, runs, check, cfg, sources=sources, concurrency=concurrency, progress=progress,
                          breaker=breaker)
    if below_floor(card, cfg.min_kappa) and not force:
        raise JudgeBelowFloor(f"the judge {judge.identity} is below the --min-kappa {cfg.min_kappa:g} floor on the "
                              f"set's known labels: {card['summary']}; nothing was written: use a stronger --llm, "
                              f"or --force to merge its labels anyway{default_llm_hint(judge.identity)}")
    return card


def card_check_config(cfg: JudgeConfig, runs: dict):
    """The :class:`lab.testset.judgecheck.CheckConfig` of the card ``lab testset judge`` draws first."""
    return CheckConfig(pairs=cfg.check_pairs, split=cfg.split, strategies=list(runs), depth=cfg.depth,
                       max_passage_chars=cfg.max_passage_chars, max_tokens=cfg.max_tokens, grammar=cfg.grammar,
                       seed=cfg.seed)


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
    card = (pair_prompts(ds, build_pairs(ds, runs, card_check_config(cfg, runs), sources)) if cfg.check_pairs
            else [])
    est = estimate_step(judge, "judge: card and pool", card + pool_prompts(ds, runs, queries, cfg),
                        concurrency=concurrency, **judge_generation(cfg))
    policy.show(est)
    return est


def estimate_card(ds, judge, runs: dict, check, cfg: JudgeConfig, sources: dict, concurrency: int | None,
                  policy: EstimatePolicy) -> StepEstimate:
    """The estimate of ``lab testset judge-check``'s LLM work (grading the card's pairs), given to ``policy``."""
    est = estimate_step(judge, "judge-check", pair_prompts(ds, build_pairs(ds, runs, check, sources)),
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


def card_metrics(card: dict | None) -> dict:
    """The card's figures as flat MLflow metrics (``card.kappa``, ``card.recall_of_positives``, ...)."""
    if not card:
        return {}
    rows = {"kappa": card["kappa"], "weighted_kappa": card["weighted_kappa"],
            "recall_of_positives": card["recall_of_positives"], "false_positive_rate": card["false_positive_rate"],
            "consistency": card["consistency"],
            **{f"{k}_false_positive_rate": v["false_positive_rate"] for k, v in card["stress"].items()}}
    return {f"card.{name}": fig["value"] for name, fig in rows.items() if fig["value"] is not None}


def write_judge_provenance(folder: Path, identity: str, card: dict | None) -> None:
    """Add ``"judge": {identity, prompt_version[, card, summary]}`` to the set's ``provenance.json`` (written
    atomically; the file's other keys are kept)."""
    prov = read_provenance(folder)
    entry = {"identity": identity, "prompt_version": PROMPT_VERSION}
    if card is not None:
        entry.update(card=card, summary=card["summary"])
    prov["judge"] = entry
    write_atomic(Path(folder) / PROVENANCE, json.dumps(prov, indent=1, ensure_ascii=False, default=str) + "\n")


def _write_qrels(folder: Path, split: str, qrels: dict[str, dict[str, int]], sources: dict, judged: dict,
                 identity: str) -> None:
    """``qrels/<split>.tsv`` (BEIR tsv, header) and its provenance sidecar, rows in the same order."""
    qdir = folder / "qrels"
    qdir.mkdir(parents=True, exist_ok=True)
    try:
        existing = qrels_files(folder).get(split)
    except LabError:
        existing = None
    path = qdir / f"{split}.tsv"
    if existing is not None and existing != path:
        existing.unlink()  # a TREC-format qrels file of the split is replaced by the BEIR tsv
    with open(path, "w", encoding="utf-8", newline="\n") as fh, \
            open(sidecar_path(folder, split), "w", encoding="utf-8", newline="\n") as side:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q, docs in qrels.items():
            for d, g in docs.items():
                fh.write(f"{q}\t{d}\t{int(g)}\n")
                rec = {"query_id": q, "doc_id": d, "grade": int(g), "source": sources.get((q, d), "human")}
                if (q, d) in judged:
                    rec.update({"judge_grade": judged[q, d], "judge": identity, "prompt_version": PROMPT_VERSION})
                side.write(json.dumps(rec, ensure_ascii=False) + "\n")


def human_agreement(rows: list[dict], judged: dict[tuple[str, str], int]) -> dict:
    """Cohen's kappa of the judge against the graded rows of an annotation sheet, on the pairs both graded."""
    both = [(r["grade"], judged[r["qid"], r["unit_id"]]) for r in rows
            if r["grade"] is not None and (r["qid"], r["unit_id"]) in judged]
    h = [a for a, _ in both]
    j = [b for _, b in both]
    out = {"pairs": len(both), "sheet_graded": sum(r["grade"] is not None for r in rows)}
    if not both:
        out["note"] = "no pair of the sheet was both graded by people and judged; export the sheet from the same pool"
        return out
    out["exact_agreement"] = sum(a == b for a, b in both) / len(both)
    out["exact_agreement_ci"] = list(wilson_interval(sum(a == b for a, b in both), len(both)))
    out["kappa"] = cohen_kappa(h, j, labels=GRADES)
    lo, hi = kappa_interval(h, j, labels=GRADES)
    out["kappa_ci"] = None if math.isnan(lo) else [lo, hi]
    out["kappa_linear"] = cohen_kappa(h, j, labels=GRADES, weights="linear")
    out["kappa_quadratic"] = cohen_kappa(h, j, labels=GRADES, weights="quadratic")
    out["kappa_binary"] = cohen_kappa([a >= 1 for a in h], [b >= 1 for b in j], labels=[False, True])
    return out


def format_report(meta: dict) -> str:
    """The report in words, for the terminal."""
    r = meta["report"]
    lines = [f"judged the pool of {r['queries']} queries ({', '.join(meta['strategies'])}, depth {meta['depth']}): "
             f"{r['pool_pairs']} pairs, {r['graded']} graded by {meta['judge']} (prompt {meta['prompt_version']}) "
             f"in {meta['judge_seconds']:.0f} s",
             f"  answers without a readable grade: {r['parse_failures']} at first"
             + (f", {r['ungraded']} after asking again under a grammar" if r["grammar_fallback_calls"] else
                f", {r['ungraded']} left ungraded")
             + (f"; LLM errors {r['llm_errors']} (first: {r.get('first_llm_error')})" if r["llm_errors"] else ""),
             f"  judge grades 0/1/2/3: {'/'.join(str(r['judge_grades'][str(g)]) for g in GRADES)}",
             f"  labels added: {r['labels_added']} ({r['labels_added_relevant']} relevant)",
             "  in the pool: known positives graded >= 1 "
             + (f"{r['recall_known_positives']:.2f} [{r['recall_known_positives_ci'][0]:.2f}, "
                f"{r['recall_known_positives_ci'][1]:.2f}] (n={r['known_positives_graded']}, Wilson 95%)"
                if r["recall_known_positives"] is not None else "n/a (no known positive in the pool)")
             + f"; known negatives graded >= 1: {r['known_negatives_judged_relevant']} of "
               f"{r['known_negatives_graded']}"
             + (f" [{r['known_negatives_judged_relevant_ci'][0]:.2f}, {r['known_negatives_judged_relevant_ci'][1]:.2f}]"
                if r.get("known_negatives_judged_relevant_ci") else "")]
    card = meta.get("judge_card")
    if card:
        note = (f"; below the --min-kappa {meta['min_kappa']:g} floor, merged with --force"
                if meta.get("forced") and below_floor(card, meta["min_kappa"]) else "")
        lines.insert(1, f"  judge card (known labels, relevant = grade >= 2): {card['summary']}{note}")
    else:
        lines.insert(1, "  judge card: none (--check-pairs 0): the judge was not checked on known labels")
    agree = r.get("human_agreement")
    if agree:
        if agree.get("pairs"):
            ci = agree.get("kappa_ci")
            lines.append(f"  agreement with people ({agree['pairs']} pairs): kappa {agree['kappa']:.3f}"
                         + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " [CI undefined]")
                         + f", quadratic-weighted {agree['kappa_quadratic']:.3f}, relevant/not "
                         f"{agree['kappa_binary']:.3f}, exact {agree['exact_agreement']:.2f} "
                         f"[{agree['exact_agreement_ci'][0]:.2f}, {agree['exact_agreement_ci'][1]:.2f}]")
        else:
            lines.append(f"  agreement with people: {agree['note']}")
    k = meta["depth"]
    lines.append(f"  {'strategy':<14} nDCG@{k} before -> after (condensed)   Judged@{k} before -> after")
    for name, row in r["strategies"].items():
        def g(key, row=row):
            v = row.get(key)
            return "  n/a " if v is None else f"{v:.4f}"
        lines.append(f"  {name:<14} {g(f'ndcg@{k}_before')} -> {g(f'ndcg@{k}_after')} "
                     f"({g(f'ndcg@{k}_before_condensed')} -> {g(f'ndcg@{k}_after_condensed')})   "
                     f"{g(f'judged@{k}_before')} -> {g(f'judged@{k}_after')}")
    lines.append(f"written to {meta['folder']} (qrels/{meta['split']}.tsv, qrels/{meta['split']}.provenance.jsonl, "
                 f"{REPORT})" + (f"; MLflow run {meta['mlflow_run_id']}" if meta.get("mlflow_run_id") else ""))
    return "\n".join(lines)
