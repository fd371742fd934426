"""`lab answers`: RAGAS-style answer metrics of a strategy's top-k contexts, or, with ``--check-judge-agreement``,
the answer judge's agreement with the hand-labelled answer-metrics fixture; a thin command over
lab.analysis.answer_metrics."""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import yaml

from lab.analysis.answer_metrics import (
    METRICS,
    Judge,
    log_answer_metrics,
    run_answer_metrics,
    write_artifacts,
)
from lab.analysis.judge_agreement import judge_agreement, load_fixture
from lab.cli.options import add_max_consecutive_failures, add_tracking_root, non_negative_int, positive_int, write_table
from lab.core.errors import ConfigError
from lab.core.flat import nan_to_none
from lab.core.paths import resolve_repo_path, results_dir
from lab.core.settings import parse_settings
from lab.core.yamlsafe import load_yaml
from lab.models.breaker import FailureBreaker
from lab.models.embedders import load_embedder
from lab.models.llm import load_llm
from lab.retrievers.base import Context

DEFAULT_FIXTURE = "tests/fixtures/answers"


def llm_spec(value: str | None):
    """A --llm / --judge value: None, a spec string ("local", a .gguf path, "openai:MODEL"), or a JSON/YAML
    mapping written inline (``{backend: openai, model: m, base_url: ...}``)."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("{"):
        try:
            spec = load_yaml(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"LLM spec {value!r}: not a JSON/YAML mapping ({e})") from None
        if not isinstance(spec, dict):
            raise ConfigError(f"LLM spec {value!r}: expected a mapping like {{backend: openai, model: NAME}}")
        return spec
    return text


def _fmt(v: float) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"


def cmd_answers(args) -> int:
    if args.check_judge_agreement:
        return cmd_check_judge_agreement(args)
    missing = [flag for flag, value in (("--dataset", args.dataset), ("--strategy", args.strategy)) if not value]
    if missing:
        raise ConfigError(f"lab answers: {' and '.join(missing)} required (or --check-judge-agreement, which measures "
                          "the judge on the hand-labelled fixture instead)")
    params = parse_settings(args.set)
    chunking = params.pop("chunking", None)
    ctx = Context(cache_dir=Path(args.cache_dir), progress=not args.no_progress and not args.json, seed=args.seed)
    report = run_answer_metrics(args.dataset, args.strategy, params, split=args.split, k=args.k, chunking=chunking,
                                llm=llm_spec(args.llm), judge=llm_spec(args.judge), ctx=ctx,
                                max_queries=args.max_queries, answer_tokens=args.answer_tokens,
                                context_tokens=args.context_tokens, n_questions=args.n_questions,
                                max_claims=args.max_claims or None, embedder=args.embedder, grammar=args.grammar,
                                fallback=args.fallback, max_consecutive_failures=args.max_consecutive_failures)
    run_id = None if args.no_log else log_answer_metrics(report, experiment=args.experiment,
                                                         tracking_root=args.tracking_root)
    if args.per_query:
        write_table(report.evaluation.per_query, args.per_query)
    if report.evaluation.stopped:  # the endpoint went down: say so, and where the finished queries are
        return _stopped(report, run_id, args)
    summary = report.summary()
    if args.json:
        out = {k: nan_to_none(v) for k, v in summary.items()}  # NaN: null
        out["_meta"] = {"config": report.config, "mlflow_run_id": run_id, "experiment": args.experiment}
        print(json.dumps(out, indent=2, default=str))
        return 0
    cfg = report.config
    print(f"answer metrics: {cfg['strategy']} top-{cfg['k']} on {cfg['dataset']}/{cfg['split']}, "
          f"{int(summary['n_queries'])} queries; answers by {cfg['llm']}, judged by {cfg['judge']}")
    print(f"  {'metric':<18} {'mean':>7}  {'95% CI':<17} scored failed skipped")
    for m in METRICS:
        ci = (f"[{_fmt(summary.get(m + '_ci_low'))}, {_fmt(summary.get(m + '_ci_high'))}]"
              if m + "_ci_low" in summary else "")
        print(f"  {m:<18} {_fmt(summary[m]):>7}  {ci:<17} {int(summary['n_scored_' + m]):>6} "
              f"{int(summary['n_failed_' + m]):>6} {int(summary['n_skipped_' + m]):>7}")
    print(f"  answer LLM: {int(summary['answer_calls'])} calls ({int(summary['answer_cache_hits'])} cached), "
          f"{int(summary['answer_prompt_tokens'] + summary['answer_completion_tokens'])} tokens paid, "
          f"{summary['answer_seconds']:.1f} s (cold {summary['answer_gen_seconds']:.1f} s)")
    print(f"  judge LLM:  {int(summary['judge_calls'])} calls ({int(summary['judge_cache_hits'])} cached), "
          f"{int(summary['judge_prompt_tokens'] + summary['judge_completion_tokens'])} tokens paid, "
          f"{summary['judge_seconds']:.1f} s (cold {summary['judge_gen_seconds']:.1f} s)")
    print(f"  wall time: {summary['wall_seconds']:.1f} s")
    if run_id:
        print(f"  logged to MLflow experiment {args.experiment!r}, run {run_id}")
    return 0


def _stopped(report, run_id, args) -> int:
    """Write what was finished before answering / judging stopped, print one error line naming it; exit 1."""
    folder = results_dir("answers", f"stopped-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    write_artifacts(report, folder)
    where = f"{folder}" + (f" and MLflow run {run_id}" if run_id else "") + (
        f" and {args.per_query}" if args.per_query else "")
    print(f"error: {report.evaluation.stopped}; they are written to {where}", file=sys.stderr)
    return 1


def cmd_check_judge_agreement(args) -> int:
    """The judge (``--judge``, else ``--llm``) against the hand-labelled answer-metrics fixture: verdict agreement
    and whether answer relevancy ranks the on-topic answer first."""
    fixture = Path(args.fixture)
    if not fixture.exists() and not fixture.is_absolute():  # the default, run from outside the repository

        try:
            fixture = resolve_repo_path(fixture)
        except ConfigError:
            pass
    verdicts, relevancy = load_fixture(fixture)
    llm = load_llm(llm_spec(args.judge or args.llm), cache_dir=args.cache_dir, progress=False, seed=args.seed)
    emb = load_embedder(args.embedder, cache_dir=args.cache_dir, progress=False)

    judge = Judge(llm, emb, grammar=args.grammar, seed=args.seed,
                  breaker=FailureBreaker(args.max_consecutive_failures, "judge check"))
    res = judge_agreement(judge, verdicts, relevancy,
                          progress=not args.json)
    rows = res.pop("rows")
    if args.json:
        print(json.dumps({**res, "judge": llm.identity, "cases": rows.to_dict(orient="records")}, indent=2,
                         default=str))
        return 0
    verdict_rows = rows[rows.kind != "relevancy"]
    print(f"judge {llm.identity} on {args.fixture}: agreement {res['agreement']:.3f} "
          f"({int(verdict_rows.agree.sum())}/{len(verdict_rows)} "
          f"verdicts; majority-label baseline {res['chance']:.3f}), support {res['agreement_support']:.3f}, "
          f"useful {res['agreement_useful']:.3f}, failed {res['n_failed']}; answer relevancy ranks on-topic "
          f"first in {res['relevancy_ranked']}/{res['n_relevancy']}")
    for r in rows.itertuples(index=False):
        print(f"  {r.id:<5} {r.kind:<9} expected {'yes' if r.expected else 'no ':<3}  "
              f"{'ok ' if r.agree else 'BAD'}  {str(r.raw).strip()[:60]!r}")
    return 0


def add_parsers(sub) -> None:
    """Add `answers` to an argparse subparsers object."""
    cache = os.environ.get("LAB_CACHE_DIR", ".cache")
    a = sub.add_parser("answers", help="RAGAS-style answer metrics (faithfulness, answer relevancy, context "
                                       "precision/recall) of answers generated from a strategy's top-k contexts")
    a.add_argument("--dataset", help="a BEIR-layout folder whose queries carry reference answers "
                                      "(metadata.answer), e.g. data/ord-qa (required unless --check-judge-agreement)")
    a.add_argument("--strategy", help="a registered strategy (see `lab strategies`; required unless "
                                      "--check-judge-agreement)")
    a.add_argument("--set", action="append", metavar="KEY=VALUE", help="strategy param (repeatable); chunking.* "
                                                                        "keys set chunking")
    a.add_argument("--split", default="test")
    a.add_argument("--k", type=positive_int, default=5, help="contexts per answer (top-k hits)")
    a.add_argument("--llm", default="local", help="answer LLM spec: local (SmolLM2-135M), qwen2.5-coder-0.5b or "
                                                  "gemma3-270m (opt-in: make setup-llms), a .gguf path, "
                                                  "openai:MODEL, or an inline mapping")
    a.add_argument("--judge", help="judge LLM spec (default: the answer LLM, sharing one model)")
    a.add_argument("--check-judge-agreement", action="store_true",
                   help="answer nothing: measure the judge (--judge, else --llm) against the hand-labelled "
                        "answer-metrics fixture (--fixture): verdict agreement, and whether answer relevancy ranks "
                        "the on-topic answer first")
    a.add_argument("--fixture", default=DEFAULT_FIXTURE,
                   help="with --check-judge-agreement: folder with verdicts.jsonl and relevancy.jsonl")
    a.add_argument("--embedder", default="all-MiniLM-L6-v2", help="embedder of answer relevancy")
    a.add_argument("--max-queries", type=positive_int, help="only the first N queries (by id)")
    a.add_argument("--answer-tokens", type=positive_int, default=128, help="max tokens of an answer")
    a.add_argument("--context-tokens", type=positive_int,
                   help="context budget in tokens (default 1024, capped by n_ctx)")
    a.add_argument("--n-questions", type=positive_int, default=3,
                   help="questions generated per answer (answer relevancy)")
    a.add_argument("--max-claims", type=non_negative_int, default=8,
                   help="claims judged per answer / reference (0: all)")
    a.add_argument("--grammar", action="store_true", help="constrain verdicts to Yes/No (llama.cpp backends only)")
    a.add_argument("--fallback", default="auto", choices=["auto", "grammar", "none"],
                   help="ask an unreadable verdict again under the Yes/No grammar (auto: llama.cpp judges only)")
    a.add_argument("--experiment", default="answer_metrics", help="MLflow experiment")
    add_tracking_root(a)
    a.add_argument("--no-log", action="store_true", help="do not log to MLflow")
    a.add_argument("--per-query", metavar="FILE", help="write the per-query table (.csv, .tsv, .parquet, .json)")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    a.add_argument("--cache-dir", default=cache)
    a.add_argument("--seed", type=int, default=0)
    add_max_consecutive_failures(a)
    a.add_argument("--no-progress", action="store_true")
    a.set_defaults(func=cmd_answers)
