"""Generated questions: an LLM writes a question for passages sampled from a corpus, quality gates filter them,
and the set is written in BEIR layout with the evidence span of every question.

The prompt asks in the passage's language ("给定以下文档段落，生成一个用户可能会问的、恰好需要这段信息才能回答的问题"
for Chinese passages, an English translation for the rest; :data:`PROMPTS`, :data:`PROMPT_VERSION`) for one question
that needs the passage, without its key words, of a given type: lab.text.tokenize.detect_language on the passage
picks the language, and a gate checks the question's.

Conventions
- Source: a folder with only ``corpus.jsonl`` is enough (lab.testset.io.load_units). Queries the folder holds
  are never shown to the LLM; a generated question too close to one of them is dropped (not_duplicate gate).
- Passages (lab.testset.passages): windows of at most ``max_passage_chars`` characters over the whole text of
  every unit, section by section when it has headings, not its first characters. The LLM sees exactly the
  window's text, and the set records it (``metadata.passage`` of each query; the review sheet shows it).
- Sampling (:func:`sample_order`): windows with fewer than ``min_passage_words`` words (Han characters count one
  each) are skipped, and with ``prose_only`` (default) windows that are mostly code, headings, ids or boilerplate
  (lab.testset.passages.not_prose: cheap checks, before any LLM call; counted by reason in the gate report).
  The rest are grouped into strata ("doc": the unit's document; "section": the document's
  ``metadata.source`` / ``section`` when present, else its first markdown heading, else the document),
  shuffled within each stratum and visited round-robin over the strata in a shuffled order, all from
  ``random.Random(seed)``: a prefix of the order covers the strata evenly, and any part of a document can be
  drawn.
- Candidates: the order is walked ``rounds`` times (round 0 greedy at temperature 0; round r > 0 samples at
  ``round_temperature`` with seed ``seed + r``, for a second question on the same unit), until ``n`` questions
  pass or ``max_attempts`` candidates were checked. Output the model cannot parse, even after the one lenient
  repair, and (``retry_on="text_gates"``, the default) an answer that fails a gate needing no model (question
  shape, language, length, repetition, markup, unknown identifiers, overlap, lexical answerability: under a
  millisecond), is generated again (``retries`` times, at ``retry_temperature``, seed ``seed + 1000 * try +
  round``); a retry that does not parse leaves the earlier answer. On a local model a retry of the same prompt
  reuses its evaluated prompt, so it costs only the answer's tokens. The result is the first ``n`` passing
  candidates in candidate order, whatever the batch size.
  Candidates go in batches of ``batch_size``, but at most twice the questions still missing (a 1-question set
  does not write 8 candidates first) and at least the LLM's ``concurrency``; each try sends a batch's candidates
  at once, each with its own params (round, type, language), so every llama.cpp slot is busy.
- Question types (:data:`QUESTION_MIX`, :func:`question_type`): what, how, why, when, which (compare or
  choose) and troubleshooting, in a target mix of 5 / 5 / 3 / 2 / 3 / 2 of every 20 candidates, dealt from a
  cycle shuffled by the seed. Each candidate's prompt asks for its type (:data:`TYPE_INSTRUCTIONS`), the English
  schema holds the question to the type's first word, and the type is recorded (``question_type`` of each
  candidate and query); the gate report counts asked and accepted types (``extra.question_types``).
- JSON: ``json_mode="schema"`` (default) sends the OpenAI ``response_format`` json_schema of :func:`qa_schema`
  (a local GGUF gets it as the llama.cpp grammar made from it, lab.models.llm.LocalLLM; OpenAI, vLLM and recent
  Ollama honour it); ``"prompt"`` relies on the
  prompt alone. Either way the text is parsed strictly first (:func:`parse_qa`). A generation the backend
  fails (an LLMError, or llama.cpp refusing its own output) counts as unparseable (``llm_errors``).
- Relevance: the source unit gets grade ``grade`` (qrels at unit level: the document, without chunking). The
  evidence span (the window, narrowed to the sentences that support the answer when found; lab.testset.spans)
  goes to ``evidence.jsonl``, so span relevance scores any chunking of the same documents. An optional second
  pass (``extra_relevant``) asks the LLM to judge BM25's top ``extra_candidates`` other units for each question;
  a "yes" adds it with ``extra_grade``.
- Difficulty (:func:`difficulty`): each accepted question gets a tier from the BM25 rank of its source unit
  (the question searched against every unit) and the share of its content terms found in its evidence span:
  hard when the unit is not in BM25's top 10, easy when it is in the top 3 and the share is 0.5 or more, medium
  otherwise; ``difficulty``, ``bm25_rank`` and ``evidence_overlap`` go into the query's metadata, so
  ``lab compare --by tier`` reports metrics per tier.
- Output: a BEIR folder (see lab.testset.io) whose corpus is every unit, with ``evidence.jsonl``,
  ``candidates.jsonl`` (every candidate, its passage span, raw text, gate results and measures),
  ``gate_report.json`` and ``provenance.json`` (source dataset fingerprint,
  units, passages, LLM identity and settings, prompt version and texts' sha256, gate model, params, seed, gate
  report, source units, LLM usage, MLflow run id). Every file is written atomically (temporary file, rename).
- A folder that holds a set (any of :data:`SET_FILES`) is refused before any work (ConfigError) unless ``force``
  (those files, and only those, are removed once the model is loaded) or ``resume``. ``generation.json``
  (:data:`REQUEST_FILE`, written first) holds what defines the set: the source and units fingerprints, the LLM
  identity, the prompt version and every param that can change which questions pass (all but ``n``,
  ``max_attempts``, ``batch_size``, ``max_consecutive_failures``). ``resume`` continues only a set whose request
  matches (else ConfigError naming the field): the walk starts again from the first candidate and every LLM answer
  already made comes back from the cache, so an interrupted run, or one asked for more questions, ends with the
  set an uninterrupted run would have written (its first questions unchanged).
- Reproducible: the same source, seed, params, LLM and prompt give the same set. The walk, the seeds of every
  call and the gates are deterministic, and every answer is cached under (LLM identity, prompt, generation
  params). Without the cache (another ``cache_dir``) the answers are generated again, which repeats them only
  where the backend is deterministic: a local GGUF at ``concurrency`` 1 (the default) is; ``concurrency`` > 1
  decodes several slots in one llama.cpp batch, whose arithmetic depends on what else is in the batch, so a
  greedy answer can change; an HTTP endpoint that ignores ``seed``, another llama.cpp build or another
  ``topic_model`` (its cosines decide on_topic and not_duplicate) can change the set too.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from lab.core.errors import ConfigError
from lab.core.progress import progress as bar
from lab.data.fingerprint import fingerprint
from lab.data.types import Corpus, Run
from lab.models.breaker import EndpointDown, FailureBreaker
from lab.models.embedders import DEFAULT_MODEL
from lab.models.estimate import estimate_run, format_estimate
from lab.models.llm import load_llm
from lab.testset.candidates import (
    Candidate,
    GateModels,
    check_batch,
    fails_text_gates,
    generate_batch,
    judge_answerable,
    passage_candidates,
)
from lab.testset.gates import (
    GATES,
    GateReport,
    summarize,
)
from lab.testset.generation_config import GenerationConfig
from lab.testset.io import (
    load_units,
    now_utc,
    unit_text,
    write_beir_set,
    write_jsonl,
    write_provenance,
    write_text_atomic,
)
from lab.testset.passages import Passage
from lab.testset.qa_prompt import (
    JUDGE_VERSION,
    PROMPT_VERSION,
    QUESTION_MIX,
    prompt_sha,
    shown_passage,
)
from lab.testset.sampling import sample_order
from lab.testset.set_folder import (
    check_out_folder,
    generation_request,
    plain_json,
    start_folder,
)
from lab.testset.spans import SupportSpan, evidence_record
from lab.testset.tiers import DIFFICULTY, TIER_DEPTH, bm25_run, difficulty_tiers
from lab.testset.track import log_testset_run


@dataclass
class GenerationResult:
    folder: Path
    report: GateReport
    provenance: dict
    run_id: str | None = None


# ------------------------------------------------------------------------------------------------ estimate
# ------------------------------------------------------------------------------------------------ output folder


def _duplicate_gate(c: Candidate, vec, kept_vecs: np.ndarray, guard: np.ndarray, cfg: GenerationConfig,
                    report: GateReport) -> None:
    """The not_duplicate gate of a candidate that passed every other gate: its question's embedding ``vec`` against
    the accepted questions' (``kept_vecs``) and the dataset's existing queries' (``guard``); sets its result and
    measures and counts a drop as an existing query in ``report``. Other candidates are left as they are."""
    if not (c.qa is not None and all(c.results.get(g, True) for g in GATES if g != "not_duplicate")):
        return
    sim = float((kept_vecs @ vec).max()) if len(kept_vecs) else 0.0
    leak = float((guard @ vec).max()) if len(guard) else 0.0
    c.measures["max_similarity_to_accepted"] = sim
    if len(guard):
        c.measures["max_similarity_to_existing_queries"] = leak
    c.results["not_duplicate"] = max(sim, leak) < cfg.gates.duplicate_threshold
    if leak >= cfg.gates.duplicate_threshold:
        report.extra["dropped_as_existing_query"] = report.extra.get("dropped_as_existing_query", 0) + 1


def _summarize_candidates(report: GateReport, checked: list[Candidate], accepted: list[Candidate]) -> None:
    """The question types (target mix, asked, accepted) and the distributions of the gates' measures over the
    checked candidates (the overlap also over the accepted ones), into ``report``."""
    report.extra["question_types"] = {
        "target": {t: k / sum(QUESTION_MIX.values()) for t, k in QUESTION_MIX.items()},
        "asked": {t: sum(1 for c in checked if c.qtype == t) for t in QUESTION_MIX},
        "accepted": {t: sum(1 for c in accepted if c.qtype == t) for t in QUESTION_MIX}}
    for key, name in (("overlap", "overlap"), ("answer_support", "answer_support"), ("similarity", "similarity"),
                      ("repetition", "repetition")):
        report.distributions[name] = summarize(c.measures[key] for c in checked if key in c.measures)
    report.distributions["accepted_overlap"] = summarize(c.measures["overlap"] for c in accepted)


def generate_testset(dataset, out: str | Path, *, llm=None, config: GenerationConfig | None = None,  # noqa: PLR0913 - the public signature, one keyword per `lab testset generate` option
                     chunking=None, cache_dir: str | Path = ".cache", progress: bool = True,
                     tracking_root: str | Path | None = "mlruns", experiment: str = "testset",
                     embedder=None, llm_options: Mapping | None = None, force: bool = False,
                     resume: bool = False, dry_run: bool = False, echo=None) -> GenerationResult:
    """Generate a test set from ``dataset`` (path or Dataset) into ``out``; see the module docstring.

    ``llm``: an LLM object or a spec for lab.models.llm.load_llm (None / "local": the packaged SmolLM2-135M).
    ``llm_options``: extra arguments for load_llm (e.g. ``{"concurrency": 4}``: llama.cpp then decodes four
    candidates in one batch, faster on a CPU; the cache key does not depend on it). ``tracking_root`` None:
    nothing is logged to MLflow. ``force`` / ``resume``: when ``out`` holds a set, replace it / continue it (see
    module conventions; without either, ConfigError before any work). ``echo`` (a callable taking one line):
    the estimate of the whole run (:func:`lab.models.estimate.estimate_run`) once the first batch is done, when it
    will take more than a minute; ``dry_run``: stop there, write nothing, and return a result whose ``folder`` is
    None and whose report holds the estimate (``extra["estimate"]``). Returns the folder, the gate report, the
    provenance and the MLflow run id.
    """
    cfg = config or GenerationConfig()
    resumed = check_out_folder(out, cfg, force=force, resume=resume)
    t0 = time.perf_counter()
    units = load_units(dataset, chunking, progress=progress)
    model = load_llm(llm, cache_dir=cache_dir, progress=progress, seed=cfg.seed, **dict(llm_options or {})) if (
        llm is None or isinstance(llm, (str, Mapping))) else llm
    units_described = units.describe()
    if not dry_run:
        start_folder(out, generation_request(units_described, model.identity, cfg), resumed, force)
    usage0 = model.usage()
    sample = _sample(units, cfg)
    models = GateModels(cache_dir, progress, embedder, cfg.gates.topic_model)
    topic = topic_model_note(models.embedder)
    gen = _Generation(cfg, units, model, models, _new_report(cfg, sample, topic), usage0)
    guard = _guard_vectors(gen)
    if not _generate_all(gen, sample.order, guard, progress, echo, dry_run):
        return GenerationResult(None, gen.report, {}, None)
    _summarize_candidates(gen.report, gen.checked, gen.accepted)
    qrels = {c.qid: {c.unit_id: cfg.grade} for c in gen.accepted}
    # BM25 is built once per generation: its run of the accepted questions serves the second pass and the tiers
    run = bm25_run(units.corpus, gen.accepted, max(TIER_DEPTH, cfg.extra_candidates + 1), cache_dir, cfg.seed)
    if cfg.extra_relevant and gen.accepted and gen.stopped is None:
        gen.report.extra.update(_second_pass(model, units.corpus, gen.accepted, qrels, cfg, run))
    evidence, spans = _evidence(gen)
    tiers = _difficulty(gen, spans, run)
    queries = _query_records(gen, spans, sample.strata, tiers)
    provenance = {"kind": "generated", "created": now_utc(), "units": units_described, "resumed": resumed is not None,
                  **_run_provenance(gen, sample, topic), "seconds": round(time.perf_counter() - t0, 1)}
    folder = _write_set(out, gen, queries, qrels, provenance, evidence)
    run_id = None
    if tracking_root is not None:
        run_id = provenance["mlflow_run_id"] = _log_generation(gen, folder, provenance, topic, tracking_root,
                                                               experiment)
        write_provenance(folder, provenance)
    if gen.stopped is not None:
        raise EndpointDown(f"{gen.stopped}; what was finished ({len(gen.accepted)} accepted questions of "
                           f"{len(gen.checked)} checked candidates, gate report, provenance) is written to {folder}")
    return GenerationResult(folder, gen.report, provenance, run_id)


@dataclass
class _Sample:
    """The corpus's passages in visiting order and what sampling skipped (:func:`sample_order`)."""

    order: list[Passage]
    skipped: int  # windows too short
    strata: dict[str, str]  # passage key -> stratum
    not_prose: dict[str, int]  # windows skipped as not prose, by reason


@dataclass
class _Generation:
    """One generation's working state: the LLM, the gates' models, the units, the gate report, the LLM usage at
    the start, and the candidates checked and accepted so far (``stopped``: the endpoint went down)."""

    cfg: GenerationConfig
    units: Any
    model: Any
    models: GateModels
    report: GateReport
    usage0: dict
    checked: list[Candidate] = field(default_factory=list)
    accepted: list[Candidate] = field(default_factory=list)
    stopped: EndpointDown | None = None

    def usage(self) -> dict:
        """The LLM usage since the start."""
        return {k: v - self.usage0.get(k, 0) for k, v in self.model.usage().items()}


def _sample(units, cfg: GenerationConfig) -> _Sample:
    """:func:`sample_order` on the units; ConfigError when no passage is eligible."""
    sample = _Sample(*sample_order(units.corpus, cfg.seed, cfg.stratify, cfg.min_passage_words,
                                   cfg.max_passage_chars, cfg.prose_only))
    if not sample.order:
        raise ConfigError(f"{units.dataset.path}: no passage of the corpus has {cfg.min_passage_words}+ words "
                          f"of prose ({sum(sample.not_prose.values())} skipped as not prose); "
                          "lower --min-passage-words or check the corpus")
    return sample


def _new_report(cfg: GenerationConfig, sample: _Sample, topic: dict) -> GateReport:
    """The gate report, before any candidate: the gates' settings, sampling figures and the topic model."""
    report = GateReport(config={**cfg.gates.describe()}, answerability_method=(
        "lexical: share of the answer's content terms found in the passage" if cfg.gates.answerability == "lexical"
        else "llm judge (yes/no: can the passage answer the question?) on candidates passing the text gates"))
    report.skipped_units, report.units_eligible = sample.skipped, len(sample.order)
    report.extra["skipped_not_prose"] = sample.not_prose
    report.extra["topic_model"] = topic["identity"]
    report.extra["topic_model_note"] = topic["note"]
    return report


def _guard_vectors(gen: _Generation) -> np.ndarray:
    """Vectors of the dataset's existing queries: a candidate too close to one is a duplicate."""
    existing = list(gen.units.dataset.queries.texts.values())
    guard = (gen.models.encode(existing, "query") if existing
             else np.zeros((0, gen.models.embedder.dim), dtype=np.float32))
    gen.report.extra["existing_queries_guarded"] = len(existing)
    return guard


def _generate_all(gen: _Generation, order: list[Passage], guard: np.ndarray, progress: bool, echo,
                  dry_run: bool) -> bool:
    """Batches of candidates through generation and the gates until ``n`` are accepted, the attempts cap is
    reached or the endpoint goes down (``gen.stopped``: what is finished is kept, the batch dropped); the run's
    estimate after the first batch. Returns False when a dry run stopped there."""
    cfg = gen.cfg
    stream = passage_candidates(order, cfg)
    kept_vecs = np.zeros((0, gen.models.embedder.dim), dtype=np.float32)
    cap = min(cfg.attempts_cap, len(order) * cfg.rounds)
    pbar = bar(range(cap), desc=f"generate ({gen.units.dataset.name})", total=cap, enabled=progress)
    shown = pbar if getattr(pbar, "update", None) else None
    breaker = FailureBreaker(cfg.max_consecutive_failures, "test set generation")
    done = estimated = False
    slots = int(getattr(gen.model, "concurrency", 1))
    while not done and len(gen.checked) < cap:
        size = next_batch_size(cfg, len(gen.accepted), slots)
        batch = [c for _, c in zip(range(min(size, cap - len(gen.checked))), stream, strict=False)]
        if not batch:
            break
        t_batch = time.perf_counter()
        try:
            generate_batch(gen.model, batch, cfg, gen.report, breaker, retry_if=(
                (lambda c: fails_text_gates(c, gen.models, cfg)) if cfg.retry_on == "text_gates" else None))
            gen.report.repaired += sum(1 for c in batch if c.repaired and c.qa is not None)
            check_batch(batch, gen.models, gen.model, cfg, breaker, gen.units.corpus)
        except EndpointDown as exc:  # the endpoint is down: keep what is finished, drop this batch, stop
            gen.stopped = exc
            gen.report.extra["stopped"] = str(exc)
            break
        kept_vecs, done = _gate_batch(gen, batch, kept_vecs, guard, shown)
        if not estimated:
            estimated = True
            _estimate(gen, cap, time.perf_counter() - t_batch, echo, dry_run)
            if dry_run:
                if shown is not None:
                    shown.close()
                return False
    if shown is not None:
        shown.close()
    return True


def next_batch_size(cfg: GenerationConfig, accepted: int = 0, slots: int = 1) -> int:
    """Candidates in the next batch: ``batch_size``, at most twice the questions still missing, at least ``slots``
    (every llama.cpp slot busy). The set is the same whatever the size; only the work past the n-th pass changes."""
    return max(slots, min(cfg.batch_size, 2 * (cfg.n - accepted)))


def _gate_batch(gen: _Generation, batch: list[Candidate], kept_vecs: np.ndarray, guard: np.ndarray,
                pbar) -> tuple[np.ndarray, bool]:
    """The duplicate gate and the verdict of each checked candidate of ``batch``, in order; an accepted one gets its
    query id. Returns the accepted vectors and whether ``n`` are accepted (the rest of the batch is not counted)."""
    for pos, c in enumerate(batch):
        vec = c.measures.pop("_vec", None)
        _duplicate_gate(c, vec, kept_vecs, guard, gen.cfg, gen.report)
        c.dropped_at = gen.report.add(c.results)
        if c.dropped_at is None:
            c.qid = f"gen-{len(gen.accepted) + 1:04d}"
            gen.accepted.append(c)
            kept_vecs = np.concatenate([kept_vecs, vec[None, :]])
        gen.checked.append(c)
        if pbar is not None:
            pbar.update(1)
            pbar.set_postfix(accepted=len(gen.accepted), refresh=False)
        if len(gen.accepted) >= gen.cfg.n:
            gen.report.extra["generated_unchecked"] = len(batch) - pos - 1
            return kept_vecs, True
    return kept_vecs, False


def _estimate(gen: _Generation, cap: int, batch_seconds: float, echo, dry_run: bool) -> None:
    """The estimate of the whole run from the first batch (:func:`lab.models.estimate.estimate_run`) into the report,
    printed through ``echo`` for a dry run or a run over a minute."""
    gen.report.extra["estimate"] = est = estimate_run(
        gen.cfg.n, cap, len(gen.checked), len(gen.accepted), batch_seconds, gen.usage(),
        int(getattr(gen.model, "concurrency", 1)))
    if echo is not None and (dry_run or est["seconds"] > 60):
        echo(format_estimate(est))


def _evidence(gen: _Generation) -> tuple[list[dict], dict[str, SupportSpan]]:
    """Each accepted question's evidence record and support span."""
    evidence, spans = [], {}
    for c in gen.accepted:
        sp = c.support
        # accepted: it has its query id, and its gates ran with the corpus (check_batch), which set the span
        assert c.qid is not None and sp is not None
        spans[c.qid] = sp
        evidence.append(evidence_record(c.qid, c.unit_id, sp, c.span, gen.cfg.grade))
    return evidence, spans


def _difficulty(gen: _Generation, spans: dict[str, SupportSpan], run: Run | None) -> dict[str, dict]:
    """Each accepted question's difficulty tier (:func:`difficulty_tiers`, from the generation's BM25 ``run``), with
    the tiers' and evidence counts in the report."""
    tiers = difficulty_tiers(gen.units.corpus, gen.accepted, gen.models.tokenizer, run=run)
    gen.report.extra["difficulty"] = {t: sum(1 for x in tiers.values() if x["difficulty"] == t) for t in DIFFICULTY}
    gen.report.extra["evidence_narrowed"] = sum(1 for sp in spans.values() if sp.method != "passage")
    gen.report.extra["evidence_whole_passage"] = sum(1 for sp in spans.values() if sp.method == "passage")
    return tiers


def _query_records(gen: _Generation, spans: dict[str, SupportSpan], strata: dict[str, str],
                   tiers: dict[str, dict]) -> dict:
    """qid -> (question, metadata) of each accepted question, as queries.jsonl holds them."""
    corpus = gen.units.corpus
    return {c.qid: (c.qa["question"], {
        "answer": c.qa["answer"], "source_unit": c.unit_id,
        "source_doc": str((corpus[c.unit_id].metadata or {}).get("doc_id", c.unit_id)),
        "passage": c.passage, "passage_span": list(c.span), "section": c.section,
        "evidence_span": [spans[c.qid].start, spans[c.qid].end], "evidence_method": spans[c.qid].method,
        "stratum": strata.get(f"{c.unit_id}@{c.span[0]}-{c.span[1]}", ""), "language": c.language,
        "round": c.round, "candidate": c.index, "question_type": c.qtype, **tiers[c.qid],
        "overlap": round(c.measures["overlap"], 4), "answer_support": round(c.measures["answer_support"], 4),
        "similarity": round(c.measures["similarity"], 4), "prompt_version": PROMPT_VERSION}) for c in gen.accepted}


def _run_provenance(gen: _Generation, sample: _Sample, topic: dict) -> dict:
    """The provenance of the run: passages, LLM, prompt, embedder, params, gate report, coverage and usage."""
    cfg, accepted, strata = gen.cfg, gen.accepted, sample.strata
    return {
        "passages": {"eligible": len(sample.order), "skipped_too_short": sample.skipped,
                     "skipped_not_prose": sample.not_prose,
                     "max_chars": cfg.max_passage_chars,
                     "min_words": cfg.min_passage_words,
                     "documents_covered": len({c.unit_id for c in accepted}),
                     "documents_total": len({p.unit_id for p in sample.order})},
        "llm": {"identity": gen.model.identity, **_public(plain_json(gen.model.describe()))},
        "prompt": {"version": PROMPT_VERSION, "judge_version": JUDGE_VERSION, "sha256": prompt_sha(),
                   "json_mode": cfg.json_mode, "languages": sorted({c.language for c in accepted})},
        "embedder": topic["identity"], "topic_model": topic,
        "params": cfg.describe(), "seed": cfg.seed, "gate_report": gen.report.to_dict(),
        "source_units": [c.unit_id for c in accepted],
        "strata_covered": len({strata[f"{c.unit_id}@{c.span[0]}-{c.span[1]}"] for c in accepted}),
        "strata_total": len(set(strata.values())),
        "llm_usage": gen.usage(),
    }


def _write_set(out, gen: _Generation, queries: dict, qrels: dict, provenance: dict, evidence: list[dict]) -> Path:
    """The BEIR set with its evidence (or, with no question accepted, the provenance alone, so the drops can be
    read), every checked candidate and the gate report; returns the folder."""
    if gen.accepted:
        folder = write_beir_set(out, gen.units.corpus, queries, qrels, provenance)
        write_jsonl(folder / "evidence.jsonl", evidence)
    else:  # nothing to load: keep the report and the candidates, so the drops can be read
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        write_provenance(folder, provenance)
    write_jsonl(folder / "candidates.jsonl", (c.record() for c in gen.checked))
    write_text_atomic(folder / "gate_report.json", json.dumps(gen.report.to_dict(), indent=1) + "\n")
    return folder


def _log_generation(gen: _Generation, folder: Path, provenance: dict, topic: dict, tracking_root,
                    experiment: str) -> str:
    """The MLflow run of a generation (lab.testset.track.log_testset_run): settings, gate figures, usage, the set."""
    units, model = gen.units, gen.model
    params = {"dataset": units.dataset.name, "llm": model.identity, "prompt_version": PROMPT_VERSION,
              "topic_model": topic["identity"], "chunking": units.chunking, **gen.cfg.describe()}
    metrics = {**gen.report.metrics(), "n_queries": len(gen.accepted),
               **{f"llm_{k}": v for k, v in provenance["llm_usage"].items()}, "seconds": provenance["seconds"]}
    return log_testset_run("generate", f"generate {units.dataset.name} ({len(gen.accepted)} q)", params, metrics,
                           {"dataset": units.dataset.name,
                            "dataset_fingerprint": provenance["units"]["source_fingerprint"],
                            "testset_fingerprint": fingerprint(folder), "model.llm": model.identity,
                            "seed": gen.cfg.seed}, [folder], tracking_root=tracking_root, experiment=experiment)


def topic_model_note(embedder) -> dict:
    """Which model the on-topic and duplicate gates used, and whether it is the default dense retriever (whose
    own similarity would then decide which questions exist to test it)."""
    identity = str(getattr(embedder, "identity", getattr(embedder, "name", "?")))
    name = str(getattr(embedder, "name", identity))
    same = DEFAULT_MODEL.split("/")[-1].lower() in (name.lower() + " " + identity.lower())
    note = (f"on-topic and duplicate gates use {name}, the same model as the default dense retriever: questions "
            "that retriever finds easily are favoured; compare dense results on this set with care" if same else
            f"on-topic and duplicate gates use {name}, not the default dense retriever ({DEFAULT_MODEL})")
    return {"identity": identity, "name": name, "same_as_default_dense": same, "note": note}


def _public(d: dict) -> dict:
    """``d`` with its ``path`` (a local model file, named by its identity's sha256 too) as its file name only."""
    return {**d, "path": Path(d["path"]).name} if isinstance(d.get("path"), str) else d


def _second_pass(llm, corpus: Corpus, accepted: list[Candidate], qrels: dict, cfg: GenerationConfig, run: Run) -> dict:
    """Extra relevant units: BM25's top ``extra_candidates`` other units per question (from the generation's BM25
    ``run``), judged by the LLM."""
    triples, keys = [], []
    for c in accepted:
        for did, _ in run.ranked(c.qid, cfg.extra_candidates + 1):
            if did != c.unit_id and len([k for k in keys if k[0] == c.qid]) < cfg.extra_candidates:
                keys.append((c.qid, did))
                triples.append((shown_passage(unit_text(corpus[did]), cfg.max_passage_chars), c.qa["question"],
                                c.language))
    verdicts = judge_answerable(llm, triples, cfg) if triples else []
    added = 0
    for (qid, did), v in zip(keys, verdicts, strict=True):
        if v:
            qrels[qid][did] = cfg.extra_grade
            added += 1
    return {"second_pass_judged": len(keys), "second_pass_added": added,
            "second_pass_unclear": sum(1 for v in verdicts if v is None)}
