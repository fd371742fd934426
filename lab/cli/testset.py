"""`lab testset ...`: generate (generated questions), export-review / import-review (spot check), import-logs
(FAQ import), export-annotation / import-annotation (annotation sheet), judge (pooled LLM judgements),
judge-check (the judge's card on known labels), perturb (robustness variants); thin commands over lab.testset."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lab.cli.grade import add_grade_parser, cmd_import_graded
from lab.cli.options import (
    add_max_consecutive_failures,
    add_tracking_root,
    non_negative_int,
    positive_int,
    unit_float,
)
from lab.core.errors import ConfigError
from lab.core.settings import parse_settings
from lab.models.estimate import EstimatePolicy
from lab.models.llm import default_llm_hint, is_default_llm
from lab.testset.annotate import export_annotation, import_annotation
from lab.testset.gates import GateConfig
from lab.testset.generate import GenerationConfig, format_estimate, generate_testset
from lab.testset.human_sample import Pilot
from lab.testset.judge import judge_check, judge_dataset
from lab.testset.judge_config import MIN_KAPPA, JudgeConfig
from lab.testset.judgecheck import format_card
from lab.testset.judged_set import format_report as format_judge_report
from lab.testset.logs import format_report as format_logs_report
from lab.testset.logs import import_logs
from lab.testset.logs import to_json as logs_to_json
from lab.testset.perturb import VARIANTS, Resources, perturb_dataset
from lab.testset.spotcheck import export_review, format_report, import_review, to_json


def _common(p, mlflow: bool = True) -> None:
    p.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    if mlflow:
        add_tracking_root(p)
        p.add_argument("--experiment", default="testset")
        p.add_argument("--no-mlflow", action="store_true", help="log nothing to MLflow")


def _root(args):
    return None if getattr(args, "no_mlflow", False) else args.tracking_root


def _progress(args) -> bool:
    return not args.no_progress and not args.json


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def cmd_generate(args) -> int:
    gates = GateConfig(max_overlap=args.max_overlap, min_answer_support=args.min_answer_support,
                       min_similarity=args.min_similarity, duplicate_threshold=args.duplicate_threshold,
                       answerability=args.answerability, topic_model=args.topic_model)
    cfg = GenerationConfig(n=args.n, seed=args.seed, stratify=args.stratify, grade=args.grade,
                           max_attempts=args.max_attempts, rounds=args.rounds, retries=args.retries,
                           retry_on=args.retry_on,
                           json_mode=args.json_mode, write_first=args.write_first, max_tokens=args.max_tokens,
                           max_passage_chars=args.max_passage_chars, min_passage_words=args.min_passage_words,
                           extra_relevant=args.extra_relevant, extra_candidates=args.extra_candidates, gates=gates,
                           max_consecutive_failures=args.max_consecutive_failures)
    res = generate_testset(args.dataset, args.out, llm=args.llm, config=cfg, chunking=args.chunking,
                           llm_options={"concurrency": args.concurrency} if args.concurrency else None,
                           cache_dir=args.cache_dir, progress=_progress(args), tracking_root=_root(args),
                           experiment=args.experiment, force=args.force, resume=args.resume,
                           dry_run=args.dry_run, echo=None if args.dry_run else _to_stderr)
    if args.dry_run:
        print(json.dumps(res.report.extra["estimate"], indent=1) if args.json else format_estimate(
            res.report.extra["estimate"]))
        return 0
    if args.json:
        print(json.dumps({"folder": str(res.folder), "run_id": res.run_id, "report": res.report.to_dict()}, indent=1))
    else:
        print(res.report.table())
        print(f"{res.report.accepted} questions written to {res.folder}"
              + (f"; MLflow run {res.run_id}" if res.run_id else ""))
        if is_default_llm(args.llm):
            print("warning: written by the default SmolLM2-135M, whose questions were graded mostly bad by hand "
                  "(docs/results.md); review them before trusting a leaderboard" + default_llm_hint(args.llm))
        if res.report.accepted < cfg.n:
            print(f"warning: only {res.report.accepted} of {cfg.n} questions passed within "
                  f"{res.report.candidates} candidates; raise --max-attempts or --rounds, or use a stronger --llm"
                  + default_llm_hint(args.llm))
    return 0 if res.report.accepted else 1


def cmd_export_review(args) -> int:
    out = export_review(args.set, args.out, sample=args.sample, seed=args.seed, split=args.split)
    print(json.dumps(out, indent=1) if args.json else
          f"{out['rows']} of {out['of']} questions (seed {out['seed']}) written to {out['path']}: fill verdict "
          "(keep / fix / drop), fixed_question for fix, grade 0-3; then `lab testset import-review`")
    return 0


def cmd_import_review(args) -> int:
    rep = import_review(args.set, args.review, out=args.out, split=args.split,
                        ci_strategy=None if args.ci_strategy == "none" else args.ci_strategy, seed=args.seed,
                        cache_dir=args.cache_dir, progress=_progress(args), tracking_root=_root(args),
                        experiment=args.experiment, target_half_width=args.target_half_width)
    print(to_json(rep) if args.json else format_report(rep))
    return 0


def cmd_import_logs(args) -> int:
    rep = import_logs(args.file, args.dataset, args.out, link_threshold=args.link_threshold, chunking=args.chunking,
                      grade=args.grade, cache_dir=args.cache_dir, progress=_progress(args),
                      tracking_root=_root(args), experiment=args.experiment)
    print(logs_to_json(rep) if args.json else format_logs_report(rep) + f"\nwritten to {rep['folder']}")
    return 0


def queries_count(text: str) -> int | str:
    """``--queries``: a positive number of queries, or "auto" (sized from a pilot)."""
    return "auto" if text.strip().lower() == "auto" else positive_int(text)


def cmd_export_annotation(args) -> int:
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    auto = args.queries == "auto"
    if auto != bool(args.pilot):
        raise ConfigError("--queries auto and --pilot FILE go together: the pilot's human grades size the sample"
                          if auto else "--pilot FILE: only with --queries auto")
    if not args.target_halfwidth > 0:
        raise ConfigError(f"--target-halfwidth {args.target_halfwidth}: must be > 0, e.g. 0.02")
    out = export_annotation(args.dataset, args.out, strategies=names, depth=args.depth, split=args.split,
                            seed=args.seed, chunking=args.chunking, max_queries=None if auto else args.queries,
                            cache_dir=args.cache_dir, progress=_progress(args), tracking_root=_root(args),
                            experiment=args.experiment,
                            pilot=Pilot(args.pilot, args.target_halfwidth) if auto else None)
    if out.get("pilot") and not args.json:
        p = out["pilot"]
        need = f"about {p['needed']}" if p["needed"] else f"more than the set's {p['n_total']}"
        print(f"the pilot's {p['n_pilot']} human-graded queries: the top two ({' vs '.join(p['top_two'])}) need "
              f"{need} in all for a half-width of {args.target_halfwidth:g}; drawing {out['queries']} new queries")
    print(json.dumps(out, indent=1) if args.json else
          f"{out['rows']} rows for {out['queries']} queries (pool {out['pool_mean']:.1f} units per query on "
          f"average, {out['found_by_several_share']:.0%} found by several strategies) written to {out['path']}; "
          f"pool provenance in {out['meta']} (keep it away from annotators)")
    return 0


def cmd_import_annotation(args) -> int:
    if args.graders:
        if args.record_in:
            raise ConfigError("--record-in: not with --graders; import the agreed grades first, then record them "
                              "from the single sheet")
        return cmd_import_graded(args)
    rep = import_annotation(args.sheet, args.out, dataset=args.dataset, chunking=args.chunking, split=args.split,
                            tracking_root=_root(args), experiment=args.experiment, progress=_progress(args),
                            record_in=args.record_in)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        print(f"{rep['judged']} judged rows ({rep['unjudged']} left empty) for {rep['queries']} queries; grades "
              f"{rep['grades']}; tiers {rep['tiers']}; written to {rep['folder']} (qrels/{args.split}.tsv, "
              "tiers.json)")
    return 0


def _estimate_policy(args) -> EstimatePolicy:
    """The estimate on stderr before a long LLM step; with --dry-run it is the result, printed on stdout."""
    return EstimatePolicy(echo=None if args.dry_run else _to_stderr, dry_run=args.dry_run)


def _print_estimate(args, result: dict) -> int:
    """--dry-run: the estimate alone (JSON with --json)."""
    print(json.dumps(result["estimate"], indent=1) if args.json else result["estimate_line"])
    return 0


def _add_dry_run(p, what: str) -> None:
    """``--dry-run`` of the LLM steps other than generate: the estimate only."""
    p.add_argument("--dry-run", action="store_true",
                   help=f"print the estimate of {what}: LLM calls (cached ones apart), tokens and time, from a short "
                        "timed sample (its answers kept in the LLM cache for the real run); judge and write nothing")


def cmd_judge(args) -> int:
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    cfg = JudgeConfig(strategies=names, depth=args.depth, split=args.split, max_queries=args.max_queries,
                      max_passage_chars=args.max_passage_chars, max_tokens=args.max_tokens, grammar=args.grammar,
                      seed=args.seed, check_pairs=args.check_pairs, min_kappa=args.min_kappa)
    meta = judge_dataset(args.dataset, out=args.out, in_place=args.in_place, config=cfg, llm=args.llm,
                         concurrency=args.concurrency, annotation=args.annotation, cache_dir=args.cache_dir,
                         max_consecutive_failures=args.max_consecutive_failures, force=args.force,
                         progress=_progress(args), tracking_root=_root(args), experiment=args.experiment,
                         estimate=_estimate_policy(args))
    if args.dry_run:
        return _print_estimate(args, meta)
    print(json.dumps({k: v for k, v in meta.items() if k != "answers_sample"}, indent=1, default=str)
          if args.json else format_judge_report(meta))
    return 0


def cmd_judge_check(args) -> int:
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    cfg = JudgeConfig(check_pairs=args.pairs, split=args.split, strategies=names, depth=args.depth,
                      max_passage_chars=args.max_passage_chars, max_tokens=args.max_tokens, grammar=args.grammar,
                      seed=args.seed)
    card = judge_check(args.dataset, out=args.out, config=cfg, llm=args.llm, concurrency=args.concurrency,
                       cache_dir=args.cache_dir, progress=_progress(args), estimate=_estimate_policy(args))
    if args.dry_run:
        return _print_estimate(args, card)
    print(json.dumps(card, indent=1, ensure_ascii=False) if args.json else format_card(card))
    return 0


def add_parsers(sub) -> None:
    t = sub.add_parser("testset", help="build test sets: generate, review, import logs, annotate")
    tsub = t.add_subparsers(dest="testset_command", required=True)

    g = tsub.add_parser("generate", help="generated questions: an LLM writes them from passages, quality gates "
                                         "filter them -> BEIR set with evidence spans")
    g.add_argument("--dataset", required=True,
                   help="folder with corpus.jsonl (queries and qrels optional), e.g. one `lab ingest` wrote")
    g.add_argument("--out", required=True, help="folder for the generated set (refused when it holds one, unless "
                                                "--force or --resume)")
    again = g.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="replace the set --out holds")
    again.add_argument("--resume", action="store_true",
                       help="continue the set --out holds (same settings; answers already made come from the cache), "
                            "e.g. after an interruption or with a larger --n")
    g.add_argument("--n", type=positive_int, default=100, help="questions wanted (default 100)")
    g.add_argument("--llm", default="local", help="LLM spec: local (packaged SmolLM2-135M), "
                   "qwen2.5-coder-0.5b or gemma3-270m (opt-in: make setup-llms), a .gguf path, openai:MODEL")
    g.add_argument("--concurrency", type=positive_int,
                   help="LLM requests in flight (local GGUF: parallel llama.cpp slots decoded in one batch). Default "
                        "1: the same seed then gives the same set even without the cache. For the packaged SmolLM2, 8 "
                        "was 10%% faster on a loaded 2-core machine and 0.94x on an idle one (docs/results.md); a "
                        "batch's arithmetic depends on what shares it, so a rerun without the cache can write "
                        "another set")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--stratify", default="section", choices=["doc", "section", "none"])
    g.add_argument("--grade", type=non_negative_int, default=1, help="grade of the source unit in the qrels (0-3)")
    g.add_argument("--chunking", default="none",
                   help="units: none (the documents) or e.g. recursive,size=256,overlap=32")
    g.add_argument("--max-attempts", type=positive_int, help="candidates checked at most (default 10 x n)")
    g.add_argument("--rounds", type=positive_int, default=3, help="passes over the units (round > 0 samples at T=0.7)")
    g.add_argument("--retries", type=non_negative_int, default=3,
                   help="new generations of a candidate whose answer did not parse or (see --retry-on) failed a "
                        "text gate; a retry of the same prompt skips its prompt evaluation on a local model")
    g.add_argument("--retry-on", default="text_gates", choices=["parse", "text_gates"],
                   help="what --retries are spent on: text_gates (default) also retries an answer that failed a gate "
                        "needing no model (cheap, before any embedding); parse only an unparseable one")
    g.add_argument("--json-mode", default="schema", choices=["schema", "prompt"],
                   help="schema: send a JSON schema (constrained decoding); prompt: the prompt alone")
    g.add_argument("--write-first", default="question", choices=["question", "answer"],
                   help="the field the schema has the model write first: question (default; an instruction-tuned "
                        "model such as qwen2.5-coder-0.5b otherwise writes its question into the answer, and "
                        "SmolLM2-135M is 3x faster) or answer (SmolLM2-135M's answers are supported a little "
                        "more often, at a third of the speed)")
    g.add_argument("--max-tokens", type=positive_int, default=200)
    g.add_argument("--max-passage-chars", type=positive_int, default=1000,
                   help="passages are windows of at most this many characters over each document, by section")
    g.add_argument("--min-passage-words", type=non_negative_int, default=25, help="shorter passages are skipped")
    g.add_argument("--max-overlap", type=unit_float, default=0.8, help="gate: share of question terms in the passage")
    g.add_argument("--min-answer-support", type=unit_float, default=0.5,
                   help="gate: share of answer terms in the passage")
    g.add_argument("--min-similarity", type=unit_float, default=0.83,
                   help="gate: cosine question-passage with --topic-model (0.83 is set for multilingual-e5-small)")
    g.add_argument("--duplicate-threshold", type=unit_float, default=0.95,
                   help="gate: cosine between questions (and with the dataset's own queries) with --topic-model")
    g.add_argument("--topic-model", default="multilingual-e5-small",
                   help="embedding model of the on-topic and duplicate gates (default: the packaged "
                        "multilingual-e5-small, not the default dense retriever)")
    g.add_argument("--answerability", default="lexical", choices=["lexical", "llm"])
    g.add_argument("--extra-relevant", action="store_true",
                   help="second pass: the LLM judges BM25's top candidates as extra relevant units")
    g.add_argument("--extra-candidates", type=non_negative_int, default=5)
    g.add_argument("--dry-run", action="store_true",
                   help="generate and check the first batch only (a timed sample, cached for the real run) and "
                        "print the estimate of the whole run: candidates, LLM calls, tokens, time; write nothing")
    add_max_consecutive_failures(g)
    _common(g)
    g.set_defaults(func=cmd_generate)

    e = tsub.add_parser("export-review", help="spot check: a seeded sample as a CSV sheet for people")
    e.add_argument("set", help="a test set folder (BEIR layout)")
    e.add_argument("--sample", type=positive_int, default=50)
    e.add_argument("--out", required=True, help="review.csv to write (UTF-8 with BOM, opens in Excel)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--split", default="test")
    _common(e, mlflow=False)
    e.set_defaults(func=cmd_export_review)

    i = tsub.add_parser("import-review", help="spot check: apply a filled review sheet, report acceptance and CI")
    i.add_argument("set")
    i.add_argument("review", help="the filled review.csv")
    i.add_argument("--out", help="write the reviewed set here (default: update SET in place)")
    i.add_argument("--split", default="test")
    i.add_argument("--ci-strategy", default="bm25", help="strategy run for the recall@10 CI (none: skip)")
    i.add_argument("--target-half-width", type=float, default=0.02,
                   help="report how many questions give a recall@10 CI this narrow (default 0.02)")
    i.add_argument("--seed", type=int, default=0)
    _common(i)
    i.set_defaults(func=cmd_import_review)

    lg = tsub.add_parser("import-logs", help="FAQ import: FAQ / ticket logs linked to passages -> BEIR set")
    lg.add_argument("file", help="CSV (header: question[, answer][, reference]) or JSON Lines")
    lg.add_argument("--dataset", required=True)
    lg.add_argument("--out", required=True)
    lg.add_argument("--link-threshold", type=float, default=0.5,
                    help="MiniLM cosine the best fused match needs to be linked (default 0.5)")
    lg.add_argument("--chunking", default="none")
    lg.add_argument("--grade", type=non_negative_int, default=1)
    _common(lg)
    lg.set_defaults(func=cmd_import_logs)

    ea = tsub.add_parser("export-annotation", help="annotation sheet: pooled candidates of several strategies")
    ea.add_argument("--dataset", required=True)
    ea.add_argument("--strategies", default="bm25,dense", help="comma-separated strategy names")
    ea.add_argument("--depth", type=positive_int, default=10)
    ea.add_argument("--out", required=True, help="sheet.csv to write (+ sheet.csv.meta.json)")
    ea.add_argument("--split", default="test")
    ea.add_argument("--seed", type=int, default=0)
    ea.add_argument("--chunking", default="none")
    ea.add_argument("--queries", "--max-queries", dest="queries", type=queries_count, metavar="N|auto",
                    help="grade a uniform random sample of N queries of the split (seeded by --seed), or with "
                         "`auto --pilot F` as many new ones as the pilot says the top two strategies need")
    ea.add_argument("--pilot", metavar="FILE",
                    help="with --queries auto: people's grades on at least 10 queries (BEIR tsv or TREC qrels)")
    ea.add_argument("--target-halfwidth", type=float, default=0.02, metavar="H",
                    help="with --queries auto: the CI half-width the top-two difference should reach (default 0.02)")
    _common(ea)
    ea.set_defaults(func=cmd_export_annotation)

    ia = tsub.add_parser("import-annotation", help="annotation sheet: graded judgements and tiers back as qrels")
    ia.add_argument("sheet")
    ia.add_argument("--out", required=True)
    ia.add_argument("--dataset", help="default: from the sheet's .meta.json")
    ia.add_argument("--chunking", help="default: from the sheet's .meta.json")
    ia.add_argument("--split", default="test")
    ia.add_argument("--graders", metavar="A,B",
                    help="two graders of the sheet (`lab testset grade SHEET --grader NAME`; or two filled sheet "
                         "files): report their agreement, then write qrels from the grades they agree on plus the "
                         "arbiter's (`--arbitrate`)")
    ia.add_argument("--record-in", metavar="DIR",
                    help="also keep people's grades in this judged set (DIR/human-qrels/<split>.tsv, named in its "
                         "provenance.json), so `lab compare --dataset DIR` corrects its leaderboard by them without "
                         "--human-qrels")
    _common(ia)
    ia.set_defaults(func=cmd_import_annotation)

    jd = tsub.add_parser("judge", help="pooled LLM relevance judgements (0-3, UMBRELA prompt) added to the qrels")
    jd.add_argument("--dataset", required=True, help="BEIR folder whose split is judged, e.g. data/ord-qa")
    jd.add_argument("--strategies", default="bm25,dense,hybrid", help="comma-separated strategies pooled")
    jd.add_argument("--depth", type=positive_int, default=10,
                    help="top documents of each strategy in the pool (default 10)")
    jd.add_argument("--split", default="test")
    where = jd.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", help="write a judged copy of the set to this new folder "
                                     "(an earlier judged copy there is replaced)")
    where.add_argument("--in-place", action="store_true", help="add the labels to the set itself")
    jd.add_argument("--llm", "--judge", dest="llm", default="local",
                    help="judge LLM: local (packaged SmolLM2-135M), "
                   "qwen2.5-coder-0.5b or gemma3-270m (opt-in: make setup-llms), a .gguf path, openai:MODEL")
    jd.add_argument("--concurrency", type=positive_int,
                    help="LLM requests in flight (local GGUF: parallel llama.cpp slots decoded in one batch)")
    jd.add_argument("--annotation", help="a filled annotation sheet (export-annotation): Cohen's kappa with people")
    jd.add_argument("--max-queries", type=positive_int, help="judge only the first N queries (by id), for a quick look")
    jd.add_argument("--max-passage-chars", type=positive_int, default=2000, help="passage cut (counted in the report)")
    jd.add_argument("--max-tokens", type=positive_int, default=32)
    jd.add_argument("--grammar", default="fallback", choices=["fallback", "always", "never"],
                    help="fallback: a local GGUF judge is asked again under a grammar when its answer has no grade; "
                         "always: every answer constrained; never: the prompt alone")
    jd.add_argument("--seed", type=int, default=0)
    jd.add_argument("--check-pairs", type=non_negative_int, default=20,
                    help="judge check first: known positives drawn (and as many negatives, stress pairs, repeats) "
                         "to measure the judge on the set's own labels (default 20; 0 skips it: no card)")
    jd.add_argument("--min-kappa", type=float, default=MIN_KAPPA,
                    help=f"refuse to merge labels when the check's kappa is below this or undefined (default "
                         f"{MIN_KAPPA}, the lower edge of moderate agreement)")
    jd.add_argument("--force", action="store_true", help="merge the labels even when the judge is below --min-kappa")
    add_max_consecutive_failures(jd)
    _add_dry_run(jd, "the judging (the card's pairs and the pool)")
    _common(jd)
    jd.set_defaults(func=cmd_judge)

    _add_judge_check(tsub)
    _add_perturb(tsub)
    add_grade_parser(tsub)


def _add_judge_check(tsub) -> None:
    """``lab testset judge-check``."""
    jc = tsub.add_parser("judge-check", help="measure a relevance judge on the set's known labels: kappa, recall, "
                                             "false positives, stress pairs, consistency (the judge's card)")
    jc.add_argument("--dataset", required=True, help="BEIR folder with qrels, e.g. data/scifact or data/ord-qa")
    jc.add_argument("--pairs", type=positive_int, default=20,
                    help="known positives drawn, and as many negatives (default 20); stress pairs and repeats add "
                         "as many again each")
    jc.add_argument("--llm", "--judge", dest="llm", default="local",
                    help="judge LLM: local (packaged SmolLM2-135M), "
                   "qwen2.5-coder-0.5b or gemma3-270m (opt-in: make setup-llms), a .gguf path, openai:MODEL")
    jc.add_argument("--out", help="folder for pairs.jsonl and judge_check.json "
                                  "(default results/judge-check/<dataset folder name>)")
    jc.add_argument("--strategies", default="bm25,dense", help="strategies whose top passages give the negatives")
    jc.add_argument("--depth", type=positive_int, default=10, help="ranks searched for negatives (default 10)")
    jc.add_argument("--split", default="test")
    jc.add_argument("--concurrency", type=positive_int, help="LLM requests in flight")
    jc.add_argument("--max-passage-chars", type=positive_int, default=2000)
    jc.add_argument("--max-tokens", type=positive_int, default=32)
    jc.add_argument("--grammar", default="fallback", choices=["fallback", "always", "never"])
    jc.add_argument("--seed", type=int, default=0)
    _add_dry_run(jc, "grading the card's pairs")
    _common(jc, mlflow=False)
    jc.set_defaults(func=cmd_judge_check)


def _variants(text: str) -> list[str]:
    """``--variants``: a comma-separated subset of lab.testset.perturb.VARIANTS."""
    names = [v.strip() for v in text.replace(" ", ",").split(",") if v.strip()]
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise ConfigError(f"--variants {text!r}: use a comma-separated subset of {','.join(VARIANTS)}")
    return names


def cmd_perturb(args) -> int:
    variants = _variants(args.variants)
    params = parse_settings(args.set)
    for key, value in params.items():
        if not isinstance(value, dict):
            raise ConfigError(f"--set {key}={value}: name the variant, e.g. --set typo.rate=0.3")
    res = Resources(cache_dir=Path(args.cache_dir))
    out = perturb_dataset(args.dataset, variants, args.out, seed=args.seed, params=params,
                          splits=args.split or None, link_corpus=not args.copy_corpus, res=res,
                          progress=not args.no_progress and not args.json)
    if args.json:
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return 0
    for v, prov in out.items():
        name = f"{prov['source']['name']}-{v}"
        extra = ""
        if v == "unanswerable":
            u = prov["unanswerable"]
            extra = (f", {u['n_queries']} unanswerable / {u['n_answerable']} answerable, "
                     f"{prov['corpus']['n_removed']} docs removed")
        print(f"{Path(args.out) / name}: {prov['n_changed']}/{prov['n_queries']} queries changed "
              f"({prov['share_changed']:.1%}){extra}")
    return 0


def _add_perturb(tsub) -> None:
    """``lab testset perturb``."""
    p = tsub.add_parser("perturb", help="seeded robustness variants of a BEIR test set",
                        description="Write typo / synonym / distractor / unanswerable variants of a BEIR dataset, "
                                    "one BEIR folder each (OUT/<set>-<variant>) with PERTURBATION.json provenance.")
    p.add_argument("dataset", help="BEIR dataset folder")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    p.add_argument("--out", required=True, help="folder that receives one sub-folder per variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", action="append", help="qrels split(s) to perturb (repeatable; default: all); "
                                                    "unanswerable uses --set unanswerable.split=NAME")
    p.add_argument("--set", action="append", metavar="VARIANT.KEY=VALUE",
                   help="variant params, e.g. typo.rate=0.3 synonym.top=1 distractor.source=templates "
                        "unanswerable.rate=0.2")
    p.add_argument("--copy-corpus", action="store_true", help="copy the corpus instead of linking it")
    p.add_argument("--cache-dir", default=os.environ.get("LAB_CACHE_DIR", ".cache"))
    p.add_argument("--json", action="store_true", help="print the provenance of each variant as JSON")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_perturb)
